#include "doctor/text.h"

#include <string.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <iterator>

namespace headroom::doctor {

namespace {

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
bool is_alpha(char c) {
    return c >= 'a' && c <= 'z';
}

struct Unit {
    std::string_view name;  // lower case
    uint64_t multiplier;
};

// Longest names first so "bytes" wins over "b" and "kib" over "k".
constexpr std::array kUnits = {
    Unit{"bytes", 1},
    Unit{"byte", 1},
    Unit{"kib", 1ull << 10},
    Unit{"mib", 1ull << 20},
    Unit{"gib", 1ull << 30},
    Unit{"tib", 1ull << 40},
    Unit{"kb", 1ull << 10},
    Unit{"mb", 1ull << 20},
    Unit{"gb", 1ull << 30},
    Unit{"tb", 1ull << 40},
    Unit{"b", 1},
};

size_t skip_separators(std::string_view s, size_t pos) {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == '=' || s[pos] == ':' || s[pos] == '('))
        ++pos;
    return pos;
}

// Digits with optional thousands commas and an optional fraction. Returns
// the integer made of all digits and the number of fraction digits kept.
struct Number {
    unsigned __int128 digits = 0;
    uint32_t n_fraction = 0;
    size_t end = 0;
};

std::optional<Number> number_at(std::string_view s, size_t pos) {
    if (pos >= s.size() || !is_digit(s[pos])) return std::nullopt;
    Number n;
    uint32_t n_significant = 0;
    bool in_fraction = false;
    size_t i = pos;
    for (; i < s.size(); ++i) {
        const char c = s[i];
        if (is_digit(c)) {
            // Digits past 30 significant ones would overflow; such numbers
            // are not byte counts anyway.
            if (++n_significant > 30) return std::nullopt;
            n.digits = n.digits * 10 + static_cast<unsigned>(c - '0');
            if (in_fraction) ++n.n_fraction;
        } else if (c == '.' && !in_fraction && i + 1 < s.size() && is_digit(s[i + 1])) {
            in_fraction = true;
        } else if (c == ',' && !in_fraction && i + 3 < s.size() && is_digit(s[i + 1]) &&
                   is_digit(s[i + 2]) && is_digit(s[i + 3]) &&
                   (i + 4 >= s.size() || !is_digit(s[i + 4]))) {
            continue;
        } else {
            break;
        }
    }
    n.end = i;
    return n;
}

std::optional<uint64_t> scale(const Number& n, uint64_t multiplier) {
    unsigned __int128 denominator = 1;
    for (uint32_t i = 0; i < n.n_fraction; ++i) denominator *= 10;
    const unsigned __int128 limit = static_cast<unsigned __int128>(1) << 100;
    if (n.digits > limit / multiplier) return std::nullopt;
    const unsigned __int128 scaled = n.digits * multiplier;
    // Round half up: the same rule a person uses with a calculator.
    const unsigned __int128 value = (scaled + denominator / 2) / denominator;
    if (value > static_cast<unsigned __int128>(INT64_MAX)) return std::nullopt;
    return static_cast<uint64_t>(value);
}

}  // namespace

void PairFilter::build(std::string_view lower) {
    std::fill(std::begin(bits_), std::end(bits_), 0);
    for (size_t i = 1; i < lower.size(); ++i) {
        const size_t k =
            slot(static_cast<unsigned char>(lower[i - 1]), static_cast<unsigned char>(lower[i]));
        bits_[k >> 6] |= 1ull << (k & 63);
    }
}

bool PairFilter::may_contain(std::string_view needle) const {
    for (size_t i = 1; i < needle.size(); ++i) {
        const size_t k =
            slot(static_cast<unsigned char>(needle[i - 1]), static_cast<unsigned char>(needle[i]));
        if (!(bits_[k >> 6] & (1ull << (k & 63)))) return false;
    }
    return true;
}

size_t Line::find(std::string_view needle, size_t from) const {
    if (from > lower.size() || needle.size() > lower.size() - from) return npos;
    if (pairs && !pairs->may_contain(needle)) return npos;
    const void* p = memmem(lower.data() + from, lower.size() - from, needle.data(), needle.size());
    return p ? static_cast<size_t>(static_cast<const char*>(p) - lower.data()) : npos;
}

std::optional<Quantity> quantity_at(std::string_view s, size_t pos, bool unit_optional) {
    pos = skip_separators(s, pos);
    const auto n = number_at(s, pos);
    if (!n) return std::nullopt;
    size_t u = n->end;
    while (u < s.size() && s[u] == ' ') ++u;
    for (const auto& unit : kUnits) {
        if (s.substr(u, unit.name.size()) != unit.name) continue;
        const size_t end = u + unit.name.size();
        if (end < s.size() && is_alpha(s[end])) continue;  // "bytesize", "gbps"
        const auto bytes = scale(*n, unit.multiplier);
        if (!bytes) return std::nullopt;
        return Quantity{*bytes, pos, end};
    }
    if (!unit_optional) return std::nullopt;
    if (n->end < s.size() && is_alpha(s[n->end])) return std::nullopt;
    const auto bytes = scale(*n, 1);
    if (!bytes) return std::nullopt;
    return Quantity{*bytes, pos, n->end};
}

std::optional<Quantity> quantity_before(std::string_view s, size_t pos) {
    if (pos > s.size()) return std::nullopt;
    size_t i = pos;
    while (i > 0 && s[i - 1] == ' ') --i;
    size_t n_letters = 0;
    while (i > 0 && is_alpha(s[i - 1]) && n_letters < 6) {
        --i;
        ++n_letters;
    }
    if (n_letters == 0) return std::nullopt;
    while (i > 0 && s[i - 1] == ' ') --i;
    size_t n_chars = 0;
    while (i > 0 && (is_digit(s[i - 1]) || s[i - 1] == '.' || s[i - 1] == ',') && n_chars < 40) {
        --i;
        ++n_chars;
    }
    while (i < pos && !is_digit(s[i])) ++i;  // a leading '.' or ','
    const auto q = quantity_at(s, i);
    if (!q || q->begin != i) return std::nullopt;
    size_t after = q->end;
    while (after < pos && s[after] == ' ') ++after;
    if (after != pos) return std::nullopt;
    return q;
}

std::optional<uint64_t> bytes_after(const Line& line, std::string_view anchor, size_t from,
                                    bool unit_optional) {
    const size_t at = line.find(anchor, from);
    if (at == Line::npos) return std::nullopt;
    const auto q = quantity_at(line.lower, at + anchor.size(), unit_optional);
    if (!q) return std::nullopt;
    return q->bytes;
}

std::optional<uint64_t> bytes_before(const Line& line, std::string_view anchor, size_t from) {
    const size_t at = line.find(anchor, from);
    if (at == Line::npos) return std::nullopt;
    const auto q = quantity_before(line.lower, at);
    if (!q) return std::nullopt;
    return q->bytes;
}

std::optional<uint64_t> integer_at(std::string_view s, size_t pos, size_t* end) {
    pos = skip_separators(s, pos);
    const auto n = number_at(s, pos);
    if (!n || n->n_fraction != 0 || n->digits > static_cast<unsigned __int128>(INT64_MAX))
        return std::nullopt;
    if (end) *end = n->end;
    return static_cast<uint64_t>(n->digits);
}

std::optional<uint64_t> integer_after(const Line& line, std::string_view anchor, size_t from) {
    const size_t at = line.find(anchor, from);
    if (at == Line::npos) return std::nullopt;
    return integer_at(line.lower, at + anchor.size());
}

std::optional<double> fraction_at(std::string_view s, size_t pos) {
    pos = skip_separators(s, pos);
    const auto n = number_at(s, pos);
    if (!n || n->n_fraction > 6) return std::nullopt;
    double denominator = 1;
    for (uint32_t i = 0; i < n->n_fraction; ++i) denominator *= 10;
    const double v = static_cast<double>(n->digits) / denominator;
    if (v <= 0 || v > 1) return std::nullopt;
    return v;
}

bool is_conditional(const Line& line, size_t pos) {
    const size_t from = pos > 48 ? pos - 48 : 0;
    const std::string_view before = line.lower.substr(from, pos - from);
    for (auto word : {"if ", "when ", "avoid", "prevent", "may ", "might ", "could ", "in case"})
        if (before.find(word) != std::string_view::npos) return true;
    return false;
}

std::string bytes_text(uint64_t n) {
    static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (n < 1024) return std::to_string(n) + " B";
    double v = static_cast<double>(n) / 1024;
    int unit = 0;
    while (v >= 1024 && unit < 5) {
        v /= 1024;
        ++unit;
    }
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[unit]);
    return buf;
}

std::string clip(std::string_view s, size_t n) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    if (s.size() <= n) return std::string(s);
    size_t cut = n;
    // Back up over UTF-8 continuation bytes so the text stays valid.
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    return std::string(s.substr(0, cut)) + "...";
}

}  // namespace headroom::doctor
