// Byte-level BPE tokenizer (tokenizer.ggml.model = "gpt2"), as llama.cpp
// implements it. The pre-tokenizer splits the text into words; a word's
// bytes are spelled with GPT-2's printable byte characters, one symbol per
// byte, and the adjacent pair with the lowest merge rank (leftmost on ties)
// merges until no pair has a rank. With ignore_merges (Llama 3) a word that
// is a token is taken whole. A final symbol that is no token falls back to
// one-byte tokens, and is dropped where there are none.
//
// Merges are ranked on "atoms": a symbol's text as a token id, or for the
// rare merge operand that is no token, an id past the vocabulary. The rank
// table is open addressing on (left atom, right atom), 12 bytes a slot.
#pragma once

#include <array>

#include "tokenizer/tokenizer.h"

namespace headroom {

class BpeTokenizer final : public Tokenizer {
  public:
    // Reads tokenizer.ggml.merges ("left right" strings, best first).
    BpeTokenizer(Vocab vocab, const gguf::GgufFile& file);

  protected:
    void encode_text(std::string_view text, bool after_special,
                     std::vector<int32_t>& out) const override;
    void append_normal_piece(int32_t id, std::string& out) const override;
    size_t model_memory_bytes() const override;

  private:
    struct MergeSlot {
        int32_t left = -1;  // -1: empty
        int32_t right = -1;
        int32_t rank = -1;
    };
    struct Scratch;

    int32_t atom_of(std::string_view text) const;  // -1 if none
    int32_t add_atom(std::string_view text);
    int32_t rank(int32_t left, int32_t right) const;  // -1 if they do not merge
    size_t slot_of(int32_t left, int32_t right) const;
    void encode_word(std::string_view word, Scratch& scratch, std::vector<int32_t>& out) const;

    std::vector<MergeSlot> merge_slots_;
    size_t merge_mask_ = 0;
    std::vector<int32_t> merge_result_;  // rank -> atom of the merged text, or -1
    // Merge operands that are no token: atom n_vocab + i is extra_[i].
    std::string extra_blob_;
    std::vector<std::pair<uint32_t, uint32_t>> extra_;  // offset, size in extra_blob_
    TokenIndex extra_index_;
    std::array<int32_t, 256> byte_atom_;   // atom of each byte's GPT-2 character
    std::array<int32_t, 256> byte_token_;  // token whose text is the single byte, or -1
};

}  // namespace headroom
