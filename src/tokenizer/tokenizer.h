// Tokenizers read from a GGUF's tokenizer.ggml.* metadata.
//
// Two models, both producing the ids llama.cpp produces for the same file:
//   - SentencePiece (tokenizer.ggml.model = "llama"): spaces become "▁", an
//     optional "▁" prefix, then adjacent pieces merge by best score; text no
//     piece covers falls back to <0xXX> byte tokens (spm.cpp).
//   - byte-level BPE ("gpt2"): a pre-tokenizer chosen by tokenizer.ggml.pre
//     splits the text into words, each word's bytes are spelled with GPT-2's
//     printable byte characters and merged by merge rank (bpe.cpp).
// encode() first cuts special-token texts out of the input (special-tokens.h),
// then tokenizes the text between them.
//
// decode() concatenates token pieces: byte tokens become their bytes, "▁"
// (SentencePiece) or GPT-2's byte characters (BPE) become what they spell,
// and for SentencePiece with a space prefix the first token loses one
// leading space, as in llama.cpp. Unlike llama.cpp, decode() never rewrites
// " ," into "," (clean_up_tokenization_spaces), so decode(encode(s)) == s.
// Pieces can end inside a UTF-8 character; StreamDecoder holds such bytes
// back until the character is complete.
//
// A Tokenizer is immutable once built and safe to use from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/special-tokens.h"
#include "tokenizer/vocab.h"

namespace headroom {

namespace gguf {
class GgufFile;
}

// GGUF token_type 1..6.
enum class TokenAttr : uint8_t { Normal, Unknown, Control, UserDefined, Unused, Byte };

class Tokenizer {
  public:
    // Reads tokenizer.ggml.* from the file. Throws headroom::Error naming the
    // key for a missing or invalid vocabulary, or an unsupported model or
    // pre-tokenizer.
    static std::unique_ptr<Tokenizer> from_gguf(const gguf::GgufFile& file);
    virtual ~Tokenizer();

    // add_special: BOS first / EOS last as tokenizer.ggml.add_bos_token /
    // add_eos_token say (llama.cpp's defaults when absent).
    // parse_special: control-token texts such as "<|im_start|>" become those
    // tokens; otherwise they are plain text. User-defined tokens are always
    // recognized. Any bytes are accepted; invalid UTF-8 is tokenized as
    // llama.cpp does (as U+FFFD for BPE, byte tokens for SentencePiece).
    // Throws headroom::Error only for text over 4 GiB.
    std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

    // Concatenated pieces; control and unknown tokens render their text only
    // if render_special. Ids outside the vocabulary render nothing.
    std::string decode(std::span<const int32_t> tokens, bool render_special = false) const;
    // Appends one token's piece (no leading-space removal).
    void append_piece(int32_t id, bool render_special, std::string& out) const;

    std::string_view token_text(int32_t id) const;  // raw vocabulary string; "" if out of range
    TokenAttr token_attr(int32_t id) const;         // Normal if out of range
    int32_t n_vocab() const { return vocab_.n_tokens(); }
    int32_t bos_id() const { return vocab_.bos_id(); }  // -1 if none
    int32_t eos_id() const { return vocab_.eos_id(); }  // -1 if none
    int32_t eot_id() const { return vocab_.eot_id(); }  // -1 if none
    bool add_bos() const { return vocab_.add_bos(); }
    bool add_eos() const { return vocab_.add_eos(); }
    // EOS, EOT, EOM and the tokens llama.cpp treats as ending generation by
    // their text (<|im_end|>, <end_of_turn>, <|eot_id|>, <|endoftext|> ...).
    bool is_end_of_generation(int32_t id) const { return vocab_.is_eog(id); }
    const std::vector<int32_t>& end_of_generation_ids() const { return vocab_.eog_ids(); }
    std::optional<int32_t> find_token(std::string_view text) const;
    VocabType type() const { return vocab_.type(); }
    const Vocab& vocab() const { return vocab_; }

    // Heap bytes held: this object, vocabulary texts and tables, merge ranks,
    // the special-token trie (capacities, not sizes).
    size_t memory_bytes() const;

  protected:
    explicit Tokenizer(Vocab vocab);
    // Appends the tokens of plain text (no special tokens in it). For
    // SentencePiece, `after_special` says the text starts the input or
    // follows a special token, which is where the space prefix goes.
    virtual void encode_text(std::string_view text, bool after_special,
                             std::vector<int32_t>& out) const = 0;
    virtual void append_normal_piece(int32_t id, std::string& out) const = 0;
    virtual size_t model_memory_bytes() const = 0;

    Vocab vocab_;

  private:
    SpecialTokenMatcher specials_;
};

// Detokenizes one sequence token by token. push() returns the text that is
// final so far and never ends inside a UTF-8 character: the bytes of an
// incomplete character are held until a later token completes them. Invalid
// UTF-8 becomes U+FFFD, so everything returned is valid UTF-8. Pieces are
// emitted as they are (a SentencePiece "▁" on the first token stays a space:
// the stream continues a prompt).
class StreamDecoder {
  public:
    explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = false);
    std::string push(int32_t token);
    // The held bytes, each incomplete character as U+FFFD; resets the decoder.
    std::string flush();

  private:
    const Tokenizer& tokenizer_;
    bool render_special_;
    std::string pending_;  // at most 3 bytes between calls
};

}  // namespace headroom
