#include "doctor/report.h"

#include <fmt/format.h>

#include "core/units.h"
#include "doctor/text.h"

namespace headroom::doctor {

namespace {

using json = nlohmann::ordered_json;

template <class T>
json or_null(const std::optional<T>& v) {
    return v ? json(*v) : json(nullptr);
}

std::string signed_bytes(int64_t v) {
    if (v >= 0) return bytes_text(static_cast<uint64_t>(v));
    return fmt::format("-{}", bytes_text(static_cast<uint64_t>(-(v + 1)) + 1));
}

void number_row(std::string& out, std::string_view label, const std::optional<uint64_t>& v) {
    if (v) out += fmt::format("    {:<22} {}\n", label, bytes_text(*v));
}

void token_row(std::string& out, std::string_view label, const std::optional<uint64_t>& v) {
    if (v) out += fmt::format("    {:<22} {}\n", label, format_count(*v));
}

}  // namespace

std::string_view phase_name(Phase p) {
    switch (p) {
        case Phase::Weights:
            return "weights";
        case Phase::KvCache:
            return "kv_cache";
        case Phase::Compute:
            return "compute";
        case Phase::Profiling:
            return "profiling";
        case Phase::SamplerWarmup:
            return "sampler_warmup";
        case Phase::CudaGraph:
            return "cuda_graph";
        case Phase::Unknown:
            break;
    }
    return "unknown";
}

std::string render_text(const Report& report) {
    std::string out;
    const auto& fs = report.findings;
    if (fs.empty()) {
        out += fmt::format("No out-of-memory message in {} lines.\n", format_count(report.n_lines));
        if (!report.evidence.empty()) out += "\nWhat the log shows:\n";
        for (const auto& x : report.evidence) out += fmt::format("  - {}\n", x);
    }
    for (size_t i = 0; i < fs.size(); ++i) {
        const Finding& f = fs[i];
        if (i) out += "\n";
        out += fmt::format("[{}] {}\n", i + 1, f.cause);
        out += fmt::format(
            "    {} · {} · line {}{}{}\n", class_name(f.oom_class), framework_name(f.framework),
            format_count(f.line),
            f.n_occurrences > 1 ? fmt::format(" (and {} more times)", f.n_occurrences - 1) : "",
            f.phase == Phase::Unknown ? "" : fmt::format(" · phase {}", phase_name(f.phase)));
        if (!f.message.empty()) out += fmt::format("    > {}\n", f.message);
        for (const auto& c : f.contradictions)
            out += fmt::format("    numbers that cannot all be true: {}\n", c);
        for (const auto& x : f.evidence) out += fmt::format("    evidence: {}\n", x);
        std::string rows;
        number_row(rows, "requested", f.requested_bytes);
        number_row(rows, "total", f.total_bytes);
        number_row(rows, "free", f.free_bytes);
        number_row(rows, "this process", f.this_process_bytes);
        number_row(rows, "other processes", f.other_processes_bytes);
        number_row(rows, "reserved unallocated", f.reserved_unallocated_bytes);
        if (f.deficit_bytes)
            rows += fmt::format("    {:<22} {}{}\n", "deficit", signed_bytes(*f.deficit_bytes),
                                *f.deficit_bytes <= 0 ? " (the bytes were there)" : "");
        token_row(rows, "max model length", f.max_model_len_tokens);
        token_row(rows, "KV cache tokens", f.kv_cache_tokens);
        token_row(rows, "estimated max length", f.estimated_max_len_tokens);
        token_row(rows, "prefill tokens", f.prefill_tokens);
        token_row(rows, "total tokens", f.total_tokens);
        token_row(rows, "sequences", f.n_sequences);
        if (!rows.empty()) {
            out += "  numbers\n";
            out += rows;
        }
        if (!f.fixes.empty()) out += "  fixes\n";
        for (size_t k = 0; k < f.fixes.size(); ++k) {
            const Fix& x = f.fixes[k];
            out += fmt::format("    {}. {}", k + 1, x.action);
            if (!x.command.empty()) out += fmt::format(": {}", x.command);
            out += "\n";
            if (!x.effect.empty()) out += fmt::format("       {}\n", x.effect);
        }
    }
    if (report.n_long_lines)
        out += fmt::format("\n({} lines longer than {} bytes were read up to that length.)\n",
                           format_count(report.n_long_lines), format_count(kMaxLineBytes));
    if (report.n_findings_dropped)
        out +=
            fmt::format("({} more findings not shown.)\n", format_count(report.n_findings_dropped));
    return out;
}

nlohmann::ordered_json render_json(const Report& report) {
    json findings = json::array();
    for (const Finding& f : report.findings) {
        json fixes = json::array();
        for (const Fix& x : f.fixes)
            fixes.push_back({{"action", x.action}, {"command", x.command}, {"effect", x.effect}});
        findings.push_back({
            {"framework", framework_name(f.framework)},
            {"class", class_name(f.oom_class)},
            {"line", f.line},
            {"n_occurrences", f.n_occurrences},
            {"wording", f.wording},
            {"phase", phase_name(f.phase)},
            {"cause", f.cause},
            {"message", f.message},
            {"requested_bytes", or_null(f.requested_bytes)},
            {"total_bytes", or_null(f.total_bytes)},
            {"free_bytes", or_null(f.free_bytes)},
            {"this_process_bytes", or_null(f.this_process_bytes)},
            {"other_processes_bytes", or_null(f.other_processes_bytes)},
            {"reserved_unallocated_bytes", or_null(f.reserved_unallocated_bytes)},
            {"deficit_bytes", or_null(f.deficit_bytes)},
            {"max_model_len_tokens", or_null(f.max_model_len_tokens)},
            {"kv_cache_tokens", or_null(f.kv_cache_tokens)},
            {"estimated_max_len_tokens", or_null(f.estimated_max_len_tokens)},
            {"prefill_tokens", or_null(f.prefill_tokens)},
            {"total_tokens", or_null(f.total_tokens)},
            {"n_sequences", or_null(f.n_sequences)},
            {"contradictions", f.contradictions},
            {"evidence", f.evidence},
            {"fixes", fixes},
        });
    }
    return {{"findings", findings},
            {"evidence", report.evidence},
            {"n_lines", report.n_lines},
            {"n_long_lines", report.n_long_lines},
            {"n_findings_dropped", report.n_findings_dropped}};
}

}  // namespace headroom::doctor
