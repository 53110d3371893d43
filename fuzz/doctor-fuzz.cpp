// Fuzzes headroom doctor's log reader: any bytes must give a report without
// crashing, and feeding them in pieces must give the same report as feeding
// them at once (the line, escape and "\r\n" state crosses chunk boundaries).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "doctor/doctor.h"
#include "doctor/report.h"

namespace {

using headroom::doctor::Finding;
using headroom::doctor::Report;

bool same(const Finding& a, const Finding& b) {
    return a.oom_class == b.oom_class && a.framework == b.framework && a.line == b.line &&
           a.n_occurrences == b.n_occurrences && a.requested_bytes == b.requested_bytes &&
           a.total_bytes == b.total_bytes && a.free_bytes == b.free_bytes &&
           a.this_process_bytes == b.this_process_bytes &&
           a.other_processes_bytes == b.other_processes_bytes &&
           a.reserved_unallocated_bytes == b.reserved_unallocated_bytes &&
           a.deficit_bytes == b.deficit_bytes && a.cause == b.cause &&
           a.fixes.size() == b.fixes.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    headroom::doctor::Options options;
    if (size % 2) options.device_memory_bytes = 24ull << 30;
    if (size % 3 == 0) {
        headroom::doctor::ModelFacts m;
        m.name = "fuzz";
        m.n_params = 7'000'000'000;
        m.weight_bytes = 14'000'000'000;
        m.kv_bytes_per_token = 131072;
        m.weight_bytes_by_type = {{"F16", 14'000'000'000}};
        options.model = m;
    }
    const Report whole = headroom::doctor::diagnose(in, options);

    headroom::doctor::LogScanner scanner(options);
    size_t step = 1 + (size ? data[0] % 61 : 0);
    for (size_t pos = 0; pos < size; pos += step, step = step * 7 % 97 + 1)
        scanner.feed(in.substr(pos, step));
    const Report pieces = scanner.finish();

    if (whole.findings.size() != pieces.findings.size() || whole.n_lines != pieces.n_lines)
        __builtin_trap();
    for (size_t i = 0; i < whole.findings.size(); ++i)
        if (!same(whole.findings[i], pieces.findings[i])) __builtin_trap();

    (void)headroom::doctor::render_text(whole);
    (void)headroom::doctor::render_json(whole).dump(
        -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    return 0;
}
