// Reading tests/data/tokenizer/: the corpus and the goldens that
// scripts/make-golden-tokens.py wrote from llama.cpp's llama-tokenize, and
// checking a Tokenizer against them.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test-util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace headroom::test {

// The corpus escapes: \\ \n \t \r, \xHH (a raw byte), \u{H...} (a codepoint).
inline std::string unescape(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\' || i + 1 >= s.size()) {
            out.push_back(s[i]);
            continue;
        }
        const char c = s[++i];
        if (c == 'n') {
            out.push_back('\n');
        } else if (c == 't') {
            out.push_back('\t');
        } else if (c == 'r') {
            out.push_back('\r');
        } else if (c == 'x') {
            out.push_back(
                static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
            i += 2;
        } else if (c == 'u') {
            const size_t end = s.find('}', i);
            unicode::append_utf8(std::stoul(std::string(s.substr(i + 2, end - i - 2)), nullptr, 16),
                                 out);
            i = end;
        } else {
            out.push_back(c);
        }
    }
    return out;
}

inline std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> parts;
    size_t from = 0;
    for (size_t at; (at = s.find(sep, from)) != std::string::npos; from = at + 1) {
        parts.push_back(s.substr(from, at - from));
    }
    parts.push_back(s.substr(from));
    return parts;
}

inline std::vector<std::string> read_lines(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::vector<std::string> lines;
    for (std::string line; std::getline(f, line);) lines.push_back(line);
    return lines;
}

inline std::vector<std::string> read_corpus() {
    std::vector<std::string> corpus;
    for (const auto& line : read_lines(data_path("tokenizer/corpus.txt"))) {
        if (!line.starts_with("#")) corpus.push_back(unescape(line));
    }
    return corpus;
}

struct GoldenCase {
    size_t index = 0;  // into the corpus
    bool add_special = false;
    bool parse_special = false;
    std::vector<int32_t> ids;
    std::string pieces;  // llama.cpp's pieces, special tokens rendered
};

inline std::vector<GoldenCase> read_golden(const std::string& name,
                                           const std::vector<std::string>& corpus) {
    std::vector<GoldenCase> cases;
    for (const auto& line : read_lines(data_path("tokenizer/" + name + ".golden"))) {
        if (line.starts_with("#")) continue;
        const auto cols = split(line, '\t');
        if (cols.size() != 4) {
            ADD_FAILURE() << name << ".golden: malformed line: " << line;
            continue;
        }
        GoldenCase c;
        c.index = std::stoul(cols[0]);
        c.add_special = cols[1][0] == '1';
        c.parse_special = cols[1][1] == '1';
        std::istringstream ids(cols[2]);
        for (int32_t id; ids >> id;) c.ids.push_back(id);
        c.pieces = cols[3] == "=" ? corpus.at(c.index) : unescape(cols[3]);
        cases.push_back(std::move(c));
    }
    return cases;
}

inline std::string show(const std::vector<int32_t>& ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ' ';
        s += std::to_string(ids[i]);
    }
    return s + "]";
}

inline std::string sanitized(std::string_view s) {
    std::string out;
    unicode::append_sanitized_utf8(s, out);
    return out;
}

// Checks every golden case: ids equal llama.cpp's, each token's piece equals
// llama.cpp's, decode(encode(s)) == s wherever llama.cpp's pieces spell s
// back, and streaming gives the same text as decoding at once. Prints the
// counts.
inline void check_golden(const Tokenizer& tok, const std::string& name) {
    const auto corpus = read_corpus();
    const auto cases = read_golden(name, corpus);
    ASSERT_GE(cases.size(), 400u) << name;
    size_t n_ids = 0, n_pieces = 0, n_round_trips = 0, n_round_trip_cases = 0, n_stream = 0;
    size_t n_failures = 0;
    for (const GoldenCase& c : cases) {
        const std::string& text = corpus[c.index];
        const auto where = [&] {
            return name + " #" + std::to_string(c.index) + " mode " +
                   std::to_string(c.add_special) + std::to_string(c.parse_special) + " '" + text +
                   "'";
        };
        const auto ids = tok.encode(text, c.add_special, c.parse_special);
        if (ids == c.ids) {
            ++n_ids;
        } else if (++n_failures <= 20) {
            ADD_FAILURE() << where() << "\n  expected " << show(c.ids) << "\n  got      "
                          << show(ids);
        }

        std::string pieces;
        for (int32_t id : c.ids) tok.append_piece(id, true, pieces);
        if (pieces == c.pieces) {
            ++n_pieces;
        } else if (++n_failures <= 20) {
            ADD_FAILURE() << where() << ": pieces '" << pieces << "', expected '" << c.pieces
                          << "'";
        }

        // llama.cpp's detokenization: the pieces, less the first token's
        // leading space where a space prefix was added.
        std::string reference = c.pieces;
        if (tok.vocab().add_space_prefix() && reference.starts_with(" ")) reference.erase(0, 1);
        if (!c.add_special && !c.parse_special && reference == text) {
            ++n_round_trip_cases;
            const std::string decoded = tok.decode(ids);
            if (decoded == text) {
                ++n_round_trips;
            } else if (++n_failures <= 20) {
                ADD_FAILURE() << where() << ": decodes to '" << decoded << "'";
            }
        }

        StreamDecoder stream(tok);
        std::string streamed, whole;
        for (int32_t id : ids) {
            streamed += stream.push(id);
            tok.append_piece(id, false, whole);
        }
        streamed += stream.flush();
        if (streamed == sanitized(whole)) {
            ++n_stream;
        } else if (++n_failures <= 20) {
            ADD_FAILURE() << where() << ": streams '" << streamed << "'";
        }
    }
    std::printf(
        "[ golden   ] %s: %zu strings, %zu tokenizations: ids %zu/%zu identical, pieces %zu/%zu, "
        "round trips %zu/%zu, streaming %zu/%zu\n",
        name.c_str(), corpus.size(), cases.size(), n_ids, cases.size(), n_pieces, cases.size(),
        n_round_trips, n_round_trip_cases, n_stream, cases.size());
    EXPECT_EQ(n_ids, cases.size());
}

}  // namespace headroom::test
