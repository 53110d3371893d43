// Pre-tokenizers for byte-level BPE: split text into words before merging.
// Each is a hand-written scanner for one of llama.cpp's regex sets, chosen by
// tokenizer.ggml.pre. A set is a chain: every regex splits the pieces the
// previous one left (matches and the gaps between them both become pieces).
//
//   Gpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Smollm  \p{N}  then Gpt2 (digits stand alone; starcoder, refact, command-r ...)
//   Llama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2   as Llama3 with \p{N} instead of \p{N}{1,3}
//   Default [\p{P}\$\+<=>\^~\|]+  then Gpt2, \p{N}+, [0-9][0-9][0-9]
//
// The scanners reproduce llama.cpp's own, including where those differ from
// the regex: a lookahead never sees past the end of the current piece.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace headroom {

enum class PreTokenizer : uint8_t { Default, Gpt2, Smollm, Llama3, Qwen2 };

std::string_view name(PreTokenizer kind);

// Splits `cpts` into words: appends each word's length in codepoints to
// `lengths` (which sum to cpts.size()). `bits` holds unicode::codepoint_bits
// of each codepoint.
void split_words(PreTokenizer kind, std::span<const uint32_t> cpts, std::span<const uint8_t> bits,
                 std::vector<uint32_t>& lengths);

}  // namespace headroom
