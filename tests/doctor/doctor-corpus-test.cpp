// Runs every case of tests/data/doctor/corpus.json through the doctor and
// checks each finding's class, framework, line and every number. Expected
// numbers are written in the corpus as the sizes the message prints ("2.26
// GiB", "6.00 GiB - 3.03 GiB - 1.24 GiB"); they are converted here by exact
// decimal arithmetic, independently of the doctor's own parser.
#include <gtest/gtest.h>
#include <algorithm>

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "doctor/doctor.h"
#include "test-util.h"

namespace headroom::doctor {
namespace {

using nlohmann::json;

const json& corpus() {
    static const json c = [] {
        std::ifstream in(test::data_path("doctor/corpus.json"));
        return json::parse(in);
    }();
    return c;
}

std::vector<std::string> case_ids() {
    std::vector<std::string> ids;
    for (const auto& c : corpus()["cases"]) ids.push_back(c["id"]);
    return ids;
}

const json& find_case(const std::string& id) {
    for (const auto& c : corpus()["cases"])
        if (c["id"] == id) return c;
    throw std::runtime_error("no case " + id);
}

// "12.50 MiB" -> 13107200, rounding half up. Units are the binary ones the
// corpus uses; a bare integer is bytes.
int64_t term_bytes(const std::string& term) {
    size_t i = 0;
    __int128 digits = 0;
    int n_fraction = 0;
    bool fraction = false;
    for (; i < term.size() && (std::isdigit(static_cast<unsigned char>(term[i])) || term[i] == '.');
         ++i) {
        if (term[i] == '.') {
            fraction = true;
            continue;
        }
        digits = digits * 10 + (term[i] - '0');
        if (fraction) ++n_fraction;
    }
    while (i < term.size() && term[i] == ' ') ++i;
    const std::string unit = term.substr(i);
    __int128 mult = 1;
    if (unit == "KiB")
        mult = __int128(1) << 10;
    else if (unit == "MiB")
        mult = __int128(1) << 20;
    else if (unit == "GiB")
        mult = __int128(1) << 30;
    else if (unit == "TiB")
        mult = __int128(1) << 40;
    else if (unit == "bytes" || unit.empty())
        mult = 1;
    else
        ADD_FAILURE() << "unit '" << unit << "' in '" << term << "'";
    __int128 den = 1;
    for (int k = 0; k < n_fraction; ++k) den *= 10;
    return static_cast<int64_t>((digits * mult + den / 2) / den);
}

// "a - b + c": each term rounded to bytes, then added.
int64_t expression_bytes(const std::string& expr) {
    int64_t total = 0;
    int sign = 1;
    size_t pos = 0;
    while (pos < expr.size()) {
        size_t next = expr.size();
        int next_sign = 1;
        for (const char* op : {" - ", " + "}) {
            const size_t at = expr.find(op, pos);
            if (at != std::string::npos && at < next) {
                next = at;
                next_sign = op[1] == '-' ? -1 : 1;
            }
        }
        total += sign * term_bytes(expr.substr(pos, next - pos));
        if (next == expr.size()) break;
        pos = next + 3;
        sign = next_sign;
    }
    return total;
}

template <class T>
void expect_field(const json& e, const char* key, const std::optional<T>& actual) {
    if (!e.contains(key)) {
        EXPECT_FALSE(actual.has_value()) << key << " should be null, is " << *actual;
        return;
    }
    ASSERT_TRUE(actual.has_value()) << key << " is null, expected " << e[key];
    if (e[key].is_string()) {
        const int64_t want = expression_bytes(e[key].get<std::string>());
        EXPECT_EQ(static_cast<int64_t>(*actual), want) << key << " = " << e[key];
    } else {
        EXPECT_EQ(static_cast<int64_t>(*actual), e[key].get<int64_t>()) << key;
    }
}

std::string joined_log(const json& c) {
    const std::string end = c.value("line_end", "\n");
    std::string log;
    const auto& lines = c["log"];
    for (size_t i = 0; i < lines.size(); ++i) {
        log += lines[i].get<std::string>();
        if (i + 1 < lines.size()) log += end;
    }
    return log;
}

// Each expected phrase (the readings' numbers as hand-converted sizes) occurs
// in one of the sentences.
void expect_phrases(const json& want, const std::vector<std::string>& sentences,
                    std::string_view what) {
    for (const auto& w : want) {
        const std::string phrase = w.get<std::string>();
        const bool found = std::any_of(sentences.begin(), sentences.end(), [&](const auto& s) {
            return s.find(phrase) != std::string::npos;
        });
        EXPECT_TRUE(found) << what << " lacks '" << phrase << "'";
    }
}

void check_report(const json& c, const Report& r) {
    if (c.contains("report_evidence")) expect_phrases(c["report_evidence"], r.evidence, "report");
    const auto& expect = c["expect"];
    ASSERT_EQ(r.findings.size(), expect.size()) << "findings";
    for (size_t i = 0; i < expect.size(); ++i) {
        SCOPED_TRACE("finding " + std::to_string(i + 1));
        const json& e = expect[i];
        const Finding& f = r.findings[i];
        EXPECT_EQ(class_name(f.oom_class), e["class"].get<std::string>()) << f.cause;
        EXPECT_EQ(framework_name(f.framework), e["framework"].get<std::string>());
        EXPECT_EQ(f.line, e["line"].get<uint64_t>());
        EXPECT_EQ(f.n_occurrences, e.value("n_occurrences", 1u));
        if (e.contains("phase")) {
            EXPECT_EQ(phase_name(f.phase), e["phase"].get<std::string>());
        }
        expect_field(e, "requested", f.requested_bytes);
        expect_field(e, "total", f.total_bytes);
        expect_field(e, "free", f.free_bytes);
        expect_field(e, "this_process", f.this_process_bytes);
        expect_field(e, "other_processes", f.other_processes_bytes);
        expect_field(e, "reserved_unallocated", f.reserved_unallocated_bytes);
        expect_field(e, "deficit", f.deficit_bytes);
        expect_field(e, "max_model_len", f.max_model_len_tokens);
        expect_field(e, "kv_cache_tokens", f.kv_cache_tokens);
        expect_field(e, "estimated_max_len", f.estimated_max_len_tokens);
        expect_field(e, "prefill_tokens", f.prefill_tokens);
        expect_field(e, "total_tokens", f.total_tokens);
        expect_field(e, "n_sequences", f.n_sequences);
        if (e.contains("contradictions")) {
            EXPECT_EQ(f.contradictions.size(), e["contradictions"].get<size_t>());
        }
        if (e.contains("evidence")) expect_phrases(e["evidence"], f.evidence, "evidence");
        EXPECT_FALSE(f.cause.empty());
        EXPECT_FALSE(f.fixes.empty()) << "no fix for " << class_name(f.oom_class);
    }
}

class Corpus : public testing::TestWithParam<std::string> {};

TEST_P(Corpus, FindsClassAndNumbers) {
    const json& c = find_case(GetParam());
    SCOPED_TRACE(c["source"].get<std::string>());
    check_report(c, diagnose(joined_log(c)));
}

// The scanner keeps its state across feed() calls: one byte at a time must
// give the same findings as the whole log at once (escape sequences and
// "\r\n" split across chunks included).
TEST_P(Corpus, SameFindingsFedByteByByte) {
    const json& c = find_case(GetParam());
    const std::string log = joined_log(c);
    LogScanner s;
    for (char ch : log) s.feed(std::string_view(&ch, 1));
    check_report(c, s.finish());
}

INSTANTIATE_TEST_SUITE_P(Doctor, Corpus, testing::ValuesIn(case_ids()),
                         [](const testing::TestParamInfo<std::string>& info) {
                             std::string name;
                             for (char ch : info.param)
                                 name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                             return name;
                         });

TEST(CorpusSize, HasAHundredAndFiftyCitedCasesThirtyOfThemNegatives) {
    size_t n_oom = 0, n_negative = 0;
    for (const auto& c : corpus()["cases"]) {
        EXPECT_TRUE(c["source"].get<std::string>().starts_with("https://github.com/")) << c["id"];
        (c["kind"] == "negative" ? n_negative : n_oom) += 1;
    }
    EXPECT_GE(n_oom + n_negative, 150u);
    EXPECT_GE(n_negative, 30u);
}

}  // namespace
}  // namespace headroom::doctor
