#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace headroom::unicode {

namespace {

#include "tokenizer/unicode-tables.inc"

// ASCII is looked up often enough to deserve its own table.
constexpr std::array<uint8_t, 128> make_ascii_bits() {
    std::array<uint8_t, 128> bits{};
    size_t r = 0;
    for (uint32_t c = 0; c < 128; ++c) {
        while (r + 1 < std::size(kCodepointRanges) && (kCodepointRanges[r + 1] >> 8) <= c) ++r;
        bits[c] = static_cast<uint8_t>(kCodepointRanges[r] & 0xFF);
    }
    return bits;
}
constexpr std::array<uint8_t, 128> kAsciiBits = make_ascii_bits();

// GPT-2's bytes_to_unicode(): bytes that are printable stay, the rest are
// numbered from U+0100 in byte order.
constexpr bool gpt2_keeps(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Gpt2Tables {
    std::array<uint16_t, 256> byte_to_cpt{};
    std::array<int16_t, 324> cpt_to_byte{};  // codepoints 0..323
};

constexpr Gpt2Tables make_gpt2_tables() {
    Gpt2Tables t;
    for (auto& v : t.cpt_to_byte) v = -1;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
        const int cpt = gpt2_keeps(b) ? b : 256 + n++;
        t.byte_to_cpt[b] = static_cast<uint16_t>(cpt);
        t.cpt_to_byte[cpt] = static_cast<int16_t>(b);
    }
    return t;
}
constexpr Gpt2Tables kGpt2 = make_gpt2_tables();

enum class ScanStatus { Valid, Invalid, Truncated };

struct Scan {
    ScanStatus status;
    size_t n_bytes;  // Valid: the sequence; Invalid: the maximal invalid subpart (>= 1); Truncated:
                     // what is there
};

// Strict UTF-8 (Unicode 15, table 3-7) at s[pos].
Scan scan_strict(std::string_view s, size_t pos) {
    const auto b0 = static_cast<uint8_t>(s[pos]);
    if (b0 < 0x80) return {ScanStatus::Valid, 1};
    size_t n = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        n = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        n = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        n = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return {ScanStatus::Invalid, 1};
    }
    for (size_t i = 1; i < n; ++i) {
        if (pos + i >= s.size()) return {ScanStatus::Truncated, i};
        const auto b = static_cast<uint8_t>(s[pos + i]);
        const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
        if (!ok) return {ScanStatus::Invalid, i};
    }
    return {ScanStatus::Valid, n};
}

}  // namespace

uint8_t codepoint_bits(uint32_t cpt) {
    if (cpt < 128) return kAsciiBits[cpt];
    if (cpt >= 0x110000) return static_cast<uint8_t>(CodepointClass::Undefined);
    const uint32_t key = (cpt << 8) | 0xFF;
    const uint32_t* it =
        std::upper_bound(std::begin(kCodepointRanges), std::end(kCodepointRanges), key);
    return static_cast<uint8_t>(*(it - 1) & 0xFF);
}

uint32_t decode_utf8(std::string_view s, size_t& pos) {
    const auto at = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
    const auto cont = [&](size_t i) { return i < s.size() && (at(i) & 0xC0) == 0x80; };
    const uint8_t b0 = at(pos);
    if (b0 < 0x80) {
        pos += 1;
        return b0;
    }
    if ((b0 & 0xE0) == 0xC0 && cont(pos + 1)) {
        const uint32_t c = ((b0 & 0x1Fu) << 6) | (at(pos + 1) & 0x3Fu);
        pos += 2;
        return c;
    }
    if ((b0 & 0xF0) == 0xE0 && cont(pos + 1) && cont(pos + 2)) {
        const uint32_t c =
            ((b0 & 0x0Fu) << 12) | ((at(pos + 1) & 0x3Fu) << 6) | (at(pos + 2) & 0x3Fu);
        pos += 3;
        return c;
    }
    if ((b0 & 0xF8) == 0xF0 && cont(pos + 1) && cont(pos + 2) && cont(pos + 3)) {
        const uint32_t c = ((b0 & 0x07u) << 18) | ((at(pos + 1) & 0x3Fu) << 12) |
                           ((at(pos + 2) & 0x3Fu) << 6) | (at(pos + 3) & 0x3Fu);
        pos += 4;
        // Past U+10FFFF there is no UTF-8 to re-encode it as.
        return c < 0x110000 ? c : kReplacement;
    }
    pos += 1;
    return kReplacement;
}

void decode_utf8(std::string_view s, std::vector<uint32_t>& out) {
    out.clear();
    out.reserve(s.size());
    for (size_t pos = 0; pos < s.size();) out.push_back(decode_utf8(s, pos));
}

void append_utf8(uint32_t cpt, std::string& out) {
    if (cpt < 0x80) {
        out.push_back(static_cast<char>(cpt));
    } else if (cpt < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
        out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    } else if (cpt < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    } else if (cpt < 0x110000) {
        out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    } else {
        append_utf8(kReplacement, out);
    }
}

uint32_t byte_to_gpt2_codepoint(uint8_t byte) {
    return kGpt2.byte_to_cpt[byte];
}

int gpt2_codepoint_to_byte(uint32_t cpt) {
    return cpt < kGpt2.cpt_to_byte.size() ? kGpt2.cpt_to_byte[cpt] : -1;
}

size_t valid_utf8_prefix(std::string_view s) {
    size_t pos = 0;
    while (pos < s.size()) {
        const Scan sc = scan_strict(s, pos);
        if (sc.status != ScanStatus::Valid) break;
        pos += sc.n_bytes;
    }
    return pos;
}

void append_sanitized_utf8(std::string_view s, std::string& out) {
    size_t pos = 0;
    while (pos < s.size()) {
        const size_t n_valid = valid_utf8_prefix(s.substr(pos));
        out.append(s.substr(pos, n_valid));
        pos += n_valid;
        if (pos < s.size()) {
            pos += scan_strict(s, pos).n_bytes;
            append_utf8(kReplacement, out);
        }
    }
}

size_t incomplete_utf8_suffix(std::string_view s) {
    // Only the last lead byte can start a truncated sequence, and it is at
    // most 3 bytes before the end.
    for (size_t back = 1; back <= 4 && back <= s.size(); ++back) {
        const size_t pos = s.size() - back;
        if ((static_cast<uint8_t>(s[pos]) & 0xC0) == 0x80) continue;
        const Scan sc = scan_strict(s, pos);
        return sc.status == ScanStatus::Truncated ? back : 0;
    }
    return 0;
}

}  // namespace headroom::unicode
