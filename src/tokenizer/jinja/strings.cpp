#include "tokenizer/jinja/strings.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace headroom::jinja {

std::u32string decode_utf8(std::string_view s) {
    std::u32string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const auto b0 = static_cast<unsigned char>(s[i]);
        int n = 0;
        char32_t cp = 0;
        if (b0 < 0x80) {
            out.push_back(b0);
            ++i;
            continue;
        } else if ((b0 & 0xE0) == 0xC0) {
            n = 1, cp = b0 & 0x1F;
        } else if ((b0 & 0xF0) == 0xE0) {
            n = 2, cp = b0 & 0x0F;
        } else if ((b0 & 0xF8) == 0xF0) {
            n = 3, cp = b0 & 0x07;
        }
        bool ok = n > 0 && i + n < s.size();
        if (ok) {
            for (int k = 1; k <= n; ++k) {
                const auto b = static_cast<unsigned char>(s[i + k]);
                if ((b & 0xC0) != 0x80) {
                    ok = false;
                    break;
                }
                cp = (cp << 6) | (b & 0x3F);
            }
        }
        // Overlong forms, surrogates and out-of-range values are invalid too.
        static constexpr char32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
        if (ok && (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
        if (!ok) {
            out.push_back(0xDC00 + b0);
            ++i;
            continue;
        }
        out.push_back(cp);
        i += n + 1;
    }
    return out;
}

void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp >= 0xDC80 && cp <= 0xDCFF) {
        out.push_back(static_cast<char>(cp - 0xDC00));  // an escaped invalid byte
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

std::string encode_utf8(std::u32string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t cp : s) append_utf8(out, cp);
    return out;
}

size_t utf8_length(std::string_view s) {
    bool ascii = true;
    for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
    return ascii ? s.size() : decode_utf8(s).size();
}

bool is_py_space(char32_t cp) {
    if (cp <= 0x7F) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

// Ranges where upper and lower case alternate (even upper, odd lower) or sit
// at a fixed offset; enough for the European scripts.
bool alternating_pair(char32_t cp) {
    return (cp >= 0x100 && cp <= 0x137) || (cp >= 0x14A && cp <= 0x177) ||
           (cp >= 0x460 && cp <= 0x481) || (cp >= 0x48A && cp <= 0x4BF);
}
bool odd_alternating_pair(char32_t cp) {
    return (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
}

bool is_upper_letter(char32_t cp) {
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z';
    if (cp >= 0xC0 && cp <= 0xDE) return cp != 0xD7;
    if (alternating_pair(cp)) return cp % 2 == 0;
    if (odd_alternating_pair(cp)) return cp % 2 == 1;
    if (cp >= 0x391 && cp <= 0x3AB) return cp != 0x3A2;
    if (cp >= 0x400 && cp <= 0x42F) return true;
    return false;
}

bool is_lower_letter(char32_t cp) {
    if (cp < 0x80) return cp >= 'a' && cp <= 'z';
    if (cp >= 0xDF && cp <= 0xFF) return cp != 0xF7;
    if (cp == 0xB5) return true;
    if (alternating_pair(cp)) return cp % 2 == 1;
    if (odd_alternating_pair(cp)) return cp % 2 == 0;
    if (cp >= 0x3AC && cp <= 0x3CE) return true;
    if (cp >= 0x430 && cp <= 0x45F) return true;
    return false;
}

bool is_cased(char32_t cp) {
    return is_upper_letter(cp) || is_lower_letter(cp);
}

}  // namespace

char32_t to_upper(char32_t cp) {
    if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
    if (!is_lower_letter(cp)) return cp;
    if (cp >= 0xE0 && cp <= 0xFE) return cp - 32;
    if (cp == 0xFF) return 0x178;
    if (alternating_pair(cp) || odd_alternating_pair(cp)) return cp - 1;
    if (cp >= 0x3B1 && cp <= 0x3CB) return cp == 0x3C2 ? 0x3A3 : cp - 32;
    if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
    if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
    return cp;
}

char32_t to_lower(char32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    if (!is_upper_letter(cp)) return cp;
    if (cp >= 0xC0 && cp <= 0xDE) return cp + 32;
    if (alternating_pair(cp) || odd_alternating_pair(cp)) return cp + 1;
    if (cp >= 0x391 && cp <= 0x3AB) return cp + 32;
    if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
    if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
    return cp;
}

namespace {

template <class F>
std::string map_code_points(std::string_view s, F f) {
    std::string out;
    out.reserve(s.size());
    for (char32_t cp : decode_utf8(s)) append_utf8(out, f(cp));
    return out;
}

bool in_chars(char32_t cp, const std::optional<std::u32string>& chars) {
    if (!chars) return is_py_space(cp);
    return chars->find(cp) != std::u32string::npos;
}

}  // namespace

std::string py_upper(std::string_view s) {
    return map_code_points(s, to_upper);
}

std::string py_lower(std::string_view s) {
    return map_code_points(s, to_lower);
}

std::string py_capitalize(std::string_view s) {
    bool first = true;
    return map_code_points(s, [&](char32_t cp) {
        const char32_t r = first ? to_upper(cp) : to_lower(cp);
        first = false;
        return r;
    });
}

std::string py_title(std::string_view s) {
    bool prev_cased = false;
    return map_code_points(s, [&](char32_t cp) {
        const char32_t r = prev_cased ? to_lower(cp) : to_upper(cp);
        prev_cased = is_cased(cp);
        return r;
    });
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, StripSide side) {
    std::optional<std::u32string> set;
    if (chars) set = decode_utf8(*chars);
    const std::u32string cps = decode_utf8(s);
    size_t begin = 0, end = cps.size();
    if (side != StripSide::Right)
        while (begin < end && in_chars(cps[begin], set)) ++begin;
    if (side != StripSide::Left)
        while (end > begin && in_chars(cps[end - 1], set)) --end;
    return encode_utf8(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
    std::vector<std::string> parts;
    if (sep) {
        if (!from_right) {
            size_t pos = 0;
            while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
                const size_t at = s.find(*sep, pos);
                if (at == std::string_view::npos) break;
                parts.emplace_back(s.substr(pos, at - pos));
                pos = at + sep->size();
            }
            parts.emplace_back(s.substr(pos));
        } else {
            size_t end = s.size();
            while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
                if (end < sep->size()) break;
                const size_t at = s.rfind(*sep, end - sep->size());
                if (at == std::string_view::npos) break;
                parts.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
                end = at;
            }
            parts.emplace_back(s.substr(0, end));
            std::reverse(parts.begin(), parts.end());
        }
        return parts;
    }
    // Whitespace splitting drops empty fields; with maxsplit the remainder
    // keeps its inner whitespace but loses the leading run.
    const std::u32string cps = decode_utf8(s);
    if (!from_right) {
        size_t i = 0;
        while (true) {
            while (i < cps.size() && is_py_space(cps[i])) ++i;
            if (i == cps.size()) break;
            if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
                size_t end = cps.size();
                while (end > i && is_py_space(cps[end - 1])) --end;
                parts.push_back(encode_utf8(std::u32string_view(cps).substr(i, end - i)));
                break;
            }
            size_t j = i;
            while (j < cps.size() && !is_py_space(cps[j])) ++j;
            parts.push_back(encode_utf8(std::u32string_view(cps).substr(i, j - i)));
            i = j;
        }
    } else {
        size_t end = cps.size();
        while (true) {
            while (end > 0 && is_py_space(cps[end - 1])) --end;
            if (end == 0) break;
            if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
                size_t begin = 0;
                while (begin < end && is_py_space(cps[begin])) ++begin;
                parts.push_back(encode_utf8(std::u32string_view(cps).substr(begin, end - begin)));
                break;
            }
            size_t j = end;
            while (j > 0 && !is_py_space(cps[j - 1])) --j;
            parts.push_back(encode_utf8(std::u32string_view(cps).substr(j, end - j)));
            end = j;
        }
        std::reverse(parts.begin(), parts.end());
    }
    return parts;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
    std::vector<std::string> lines;
    const std::u32string cps = decode_utf8(s);
    size_t start = 0, i = 0;
    auto is_break = [](char32_t c) {
        return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
               c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    };
    while (i < cps.size()) {
        if (!is_break(cps[i])) {
            ++i;
            continue;
        }
        size_t eol = i + 1;
        if (cps[i] == '\r' && eol < cps.size() && cps[eol] == '\n') ++eol;
        const size_t end = keepends ? eol : i;
        lines.push_back(encode_utf8(std::u32string_view(cps).substr(start, end - start)));
        start = i = eol;
    }
    if (start < cps.size()) lines.push_back(encode_utf8(std::u32string_view(cps).substr(start)));
    return lines;
}

std::optional<std::string> py_replace(std::string_view s, std::string_view old,
                                      std::string_view replacement, int64_t count,
                                      size_t max_bytes) {
    std::string out;
    auto fits = [&](size_t extra) { return out.size() + extra <= max_bytes; };
    if (old.empty()) {
        // Python inserts the replacement before every code point and at the end.
        const std::u32string cps = decode_utf8(s);
        int64_t n = 0;
        for (char32_t cp : cps) {
            if (count < 0 || n < count) {
                if (!fits(replacement.size())) return std::nullopt;
                out += replacement;
                ++n;
            }
            append_utf8(out, cp);
        }
        if (count < 0 || n < count) {
            if (!fits(replacement.size())) return std::nullopt;
            out += replacement;
        }
        return fits(0) ? std::optional<std::string>(std::move(out)) : std::nullopt;
    }
    size_t pos = 0;
    int64_t n = 0;
    while (count < 0 || n < count) {
        const size_t at = s.find(old, pos);
        if (at == std::string_view::npos) break;
        if (!fits(at - pos + replacement.size())) return std::nullopt;
        out.append(s.substr(pos, at - pos));
        out.append(replacement);
        pos = at + old.size();
        ++n;
    }
    if (!fits(s.size() - pos)) return std::nullopt;
    out.append(s.substr(pos));
    return out;
}

int64_t py_count(std::string_view s, std::string_view sub) {
    if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
    int64_t n = 0;
    for (size_t pos = s.find(sub); pos != std::string_view::npos;
         pos = s.find(sub, pos + sub.size()))
        ++n;
    return n;
}

int64_t py_find(std::string_view s, std::string_view sub, bool from_right) {
    const size_t at = from_right ? s.rfind(sub) : s.find(sub);
    if (at == std::string_view::npos) return -1;
    return static_cast<int64_t>(utf8_length(s.substr(0, at)));
}

std::optional<int64_t> parse_py_int(std::string_view s, int base) {
    const std::string t = py_strip(s, std::nullopt, StripSide::Both);
    std::string digits;
    size_t i = 0;
    bool negative = false;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) negative = t[i++] == '-';
    if (base == 0) {
        base = 10;
        if (t.size() > i + 1 && t[i] == '0') {
            const char p = static_cast<char>(t[i + 1] | 0x20);
            if (p == 'x') base = 16, i += 2;
            if (p == 'o') base = 8, i += 2;
            if (p == 'b') base = 2, i += 2;
        }
    }
    // Underscores may separate digits, never lead or trail.
    for (size_t k = i; k < t.size(); ++k) {
        if (t[k] == '_') {
            if (k == i || k + 1 == t.size() || t[k + 1] == '_') return std::nullopt;
            continue;
        }
        digits.push_back(t[k]);
    }
    if (digits.empty()) return std::nullopt;
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
    if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
}

std::optional<double> parse_py_float(std::string_view s) {
    std::string t = py_strip(s, std::nullopt, StripSide::Both);
    std::string lower = py_lower(t);
    const bool negative = !lower.empty() && lower[0] == '-';
    const std::string_view body =
        std::string_view(lower).substr(!lower.empty() && (lower[0] == '-' || lower[0] == '+'));
    if (body == "inf" || body == "infinity")
        return negative ? -std::numeric_limits<double>::infinity()
                        : std::numeric_limits<double>::infinity();
    if (body == "nan") return std::numeric_limits<double>::quiet_NaN();
    std::erase(t, '_');
    if (t.empty()) return std::nullopt;
    const char* begin = t.data() + (t[0] == '+');
    double v = 0;
    auto [end, ec] = std::from_chars(begin, t.data() + t.size(), v);
    if (ec != std::errc() || end != t.data() + t.size()) return std::nullopt;
    return v;
}

}  // namespace headroom::jinja
