// SentencePiece-style tokenizer (tokenizer.ggml.model = "llama"), as
// llama.cpp implements it: spaces become "▁" (with one prepended at the start
// and after each special token when add_space_prefix), the text is split
// into UTF-8 characters, and the adjacent pair whose concatenation is the
// best-scoring token is merged until no pair is a token. A piece that is no
// token falls back to its bytes: <0xXX> tokens, else one-byte tokens, else
// the unknown token.
#pragma once

#include <array>

#include "tokenizer/tokenizer.h"

namespace headroom {

class SpmTokenizer final : public Tokenizer {
  public:
    explicit SpmTokenizer(Vocab vocab);

  protected:
    void encode_text(std::string_view text, bool after_special,
                     std::vector<int32_t>& out) const override;
    void append_normal_piece(int32_t id, std::string& out) const override;
    size_t model_memory_bytes() const override { return sizeof(*this); }

  private:
    std::array<int32_t, 256> byte_tokens_;  // -1 where a byte has no token
};

}  // namespace headroom
