#include "core/units.h"
#include "core/strings.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace headroom {

namespace {

std::string lower(std::string_view s) {
    return ascii_lower(s);
}

std::optional<double> multiplier(std::string_view suffix) {
    const std::string s = lower(suffix);
    if (s.empty() || s == "b") return 1.0;
    if (s == "k" || s == "kib" || s == "ki") return 1024.0;
    if (s == "m" || s == "mib" || s == "mi") return 1024.0 * 1024;
    if (s == "g" || s == "gib" || s == "gi") return 1024.0 * 1024 * 1024;
    if (s == "t" || s == "tib" || s == "ti") return 1024.0 * 1024 * 1024 * 1024;
    if (s == "kb") return 1e3;
    if (s == "mb") return 1e6;
    if (s == "gb") return 1e9;
    if (s == "tb") return 1e12;
    return std::nullopt;
}

}  // namespace

std::optional<uint64_t> parse_bytes(std::string_view text) {
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
        text.remove_prefix(1);
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
        text.remove_suffix(1);
    if (text.empty()) return std::nullopt;
    size_t n_num = 0;
    while (n_num < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[n_num])) || text[n_num] == '.'))
        ++n_num;
    if (n_num == 0) return std::nullopt;
    double value = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + n_num, value);
    if (ec != std::errc() || ptr != text.data() + n_num) return std::nullopt;
    std::string_view suffix = text.substr(n_num);
    while (!suffix.empty() && suffix.front() == ' ') suffix.remove_prefix(1);
    const auto mult = multiplier(suffix);
    if (!mult) return std::nullopt;
    const double bytes = value * *mult;
    if (!std::isfinite(bytes) || bytes < 0 || bytes > 1.8e19) return std::nullopt;
    return static_cast<uint64_t>(std::llround(bytes));
}

uint64_t parse_bytes_or_throw(std::string_view text, std::string_view what) {
    if (auto v = parse_bytes(text)) return *v;
    fail(
        "{}: '{}' is not a byte size, expected a number with an optional unit such as "
        "512MiB, 2GiB or 24GB",
        what, text);
}

std::string format_bytes(double n_bytes) {
    static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    const bool negative = n_bytes < 0;
    double v = std::fabs(n_bytes);
    int unit = 0;
    while (v >= 1024.0 && unit < 5) {
        v /= 1024.0;
        ++unit;
    }
    const char* sign = negative ? "-" : "";
    if (unit == 0) return fmt::format("{}{:.0f} B", sign, v);
    if (v >= 100) return fmt::format("{}{:.0f} {}", sign, v, kUnits[unit]);
    if (v >= 10) return fmt::format("{}{:.1f} {}", sign, v, kUnits[unit]);
    return fmt::format("{}{:.2f} {}", sign, v, kUnits[unit]);
}

std::string format_bytes(uint64_t n_bytes) {
    return format_bytes(static_cast<double>(n_bytes));
}

std::string format_gb(uint64_t n_bytes) {
    return fmt::format("{:.1f} GB", static_cast<double>(n_bytes) / 1e9);
}

std::string format_count(uint64_t n) {
    std::string digits = std::to_string(n);
    std::string out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i != 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
        out.push_back(digits[i]);
    }
    return out;
}

}  // namespace headroom
