// Unicode helpers for the tokenizers: codepoint classes (\p{L}, \p{N}, \p{P},
// \s ...) from a generated range table, UTF-8 decoding that never fails, and
// GPT-2's byte <-> printable-character map.
//
// The table is Unicode 14.0 (see the generator for how that differs from
// llama.cpp's 15.1 and when it matters).
//
// Decoding follows llama.cpp's, because the reference ids depend on it: a lead
// byte announces the length, only the continuation bytes' top bits are
// checked (so overlong forms and surrogates decode), and anything else turns
// one byte into U+FFFD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace headroom::unicode {

// General category, grouped as the regexes use it. Values match the
// generator (scripts/gen-unicode-tables.py).
enum class CodepointClass : uint8_t {
    Undefined = 0,  // Cn: unassigned (in the table's Unicode version)
    Number = 1,     // Nd Nl No
    Letter = 2,     // Lu Ll Lt Lm Lo
    Separator = 3,  // Zs Zl Zp
    Mark = 4,       // Mn Mc Me
    Punctuation = 5,
    Symbol = 6,
    Control = 7,  // Cc Cf Co Cs
};

inline constexpr uint8_t kClassMask = 0x07;
inline constexpr uint8_t kWhitespaceBit = 0x08;  // the White_Space property, i.e. regex \s

// Class in the low bits, kWhitespaceBit if White_Space. Codepoints past
// U+10FFFF are Undefined.
uint8_t codepoint_bits(uint32_t cpt);

inline CodepointClass codepoint_class(uint32_t cpt) {
    return static_cast<CodepointClass>(codepoint_bits(cpt) & kClassMask);
}

inline constexpr uint32_t kReplacement = 0xFFFD;

// Bytes of the sequence that `lead` starts (1 for a stray continuation byte).
inline size_t utf8_sequence_length(uint8_t lead) {
    static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return kLengths[lead >> 4];
}

// Decodes the codepoint at `pos` and advances past it; an invalid sequence
// yields U+FFFD and advances one byte. Precondition: pos < s.size().
uint32_t decode_utf8(std::string_view s, size_t& pos);
void decode_utf8(std::string_view s, std::vector<uint32_t>& out);

// Appends the UTF-8 encoding of `cpt`; a value past U+10FFFF appends U+FFFD.
void append_utf8(uint32_t cpt, std::string& out);

// GPT-2 byte-level BPE spells every byte as a printable character: the
// printable Latin-1 bytes as themselves, the other 68 as U+0100 onwards.
uint32_t byte_to_gpt2_codepoint(uint8_t byte);
// The byte a GPT-2 character stands for, or -1 if it stands for none.
int gpt2_codepoint_to_byte(uint32_t cpt);

// Bytes of the longest prefix of `s` that is complete, valid UTF-8 (strict:
// no overlong forms, surrogates or codepoints past U+10FFFF).
size_t valid_utf8_prefix(std::string_view s);
// Appends `s` with each maximal invalid subsequence replaced by U+FFFD.
void append_sanitized_utf8(std::string_view s, std::string& out);
// Length of the tail of `s` that is an incomplete but still valid start of a
// UTF-8 sequence (0..3): bytes a streaming decoder must hold back.
size_t incomplete_utf8_suffix(std::string_view s);

}  // namespace headroom::unicode
