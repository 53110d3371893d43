// The vocabulary behind a Tokenizer, read from tokenizer.ggml.*: token texts
// (one blob), scores, attributes, the special ids, and the flags that steer
// encoding. Defaults for absent keys and the text-based fix-ups of special
// tokens (EOG detection, "unused" control tokens, phi-3's rstrip) follow
// llama.cpp, whose ids are the reference. Anything malformed (wrong array
// types or lengths, duplicate texts, an id outside the vocabulary, a token
// type outside 1..6) is a headroom::Error naming the key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pre-tokenizer.h"

namespace headroom {

namespace gguf {
class GgufFile;
}

enum class VocabType : uint8_t { Spm, Bpe };

// Attribute bits of a token, as llama.cpp keeps them (a token can be
// Control and Unused at once).
namespace attr {
inline constexpr uint8_t kNormal = 0x01;
inline constexpr uint8_t kUnknown = 0x02;
inline constexpr uint8_t kControl = 0x04;
inline constexpr uint8_t kUserDefined = 0x08;
inline constexpr uint8_t kUnused = 0x10;
inline constexpr uint8_t kByte = 0x20;
inline constexpr uint8_t kRstrip = 0x40;  // a special match swallows the whitespace after it
inline constexpr uint8_t kLstrip = 0x80;  // ... and before it
}  // namespace attr

// Open-addressing map from token text to id, over texts kept elsewhere (the
// vocabulary's blob): 4 bytes a slot, at most half full. `text_of(id)` gives
// an id's text; every call must pass the same one.
class TokenIndex {
  public:
    // Empties the map and sizes it for up to n entries.
    void reset(size_t n);
    // The id whose text is `text`, or -1.
    template <class TextOf>
    int32_t find(std::string_view text, const TextOf& text_of) const {
        if (slots_.empty()) return -1;
        for (size_t i = hash(text) & mask_;; i = (i + 1) & mask_) {
            const int32_t id = slots_[i];
            if (id < 0 || text_of(id) == text) return id;
        }
    }
    // Adds id under its text unless the text is there already; returns the id
    // already there, or -1 when added.
    template <class TextOf>
    int32_t insert(int32_t id, const TextOf& text_of) {
        const std::string_view text = text_of(id);
        for (size_t i = hash(text) & mask_;; i = (i + 1) & mask_) {
            const int32_t at = slots_[i];
            if (at < 0) {
                slots_[i] = id;
                return -1;
            }
            if (text_of(at) == text) return at;
        }
    }
    size_t memory_bytes() const { return slots_.capacity() * sizeof(int32_t); }

  private:
    static size_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }

    std::vector<int32_t> slots_;  // id, or -1 for empty
    size_t mask_ = 0;
};

class Vocab {
  public:
    static Vocab from_gguf(const gguf::GgufFile& file);

    int32_t n_tokens() const { return static_cast<int32_t>(tokens_.size()); }
    bool valid(int32_t id) const { return id >= 0 && id < n_tokens(); }
    std::string_view text(int32_t id) const {
        const Token& t = tokens_[id];
        return {blob_.data() + t.offset, t.size};
    }
    float score(int32_t id) const { return tokens_[id].score; }
    uint8_t attrs(int32_t id) const { return tokens_[id].attrs; }
    // The byte a Byte token stands for (its text is "<0xXX>").
    uint8_t byte_value(int32_t id) const { return tokens_[id].byte; }
    int32_t find(std::string_view text) const;

    VocabType type() const { return type_; }
    PreTokenizer pre() const { return pre_; }
    bool add_bos() const { return add_bos_; }
    bool add_eos() const { return add_eos_; }
    bool add_space_prefix() const { return add_space_prefix_; }
    bool ignore_merges() const { return ignore_merges_; }
    int32_t bos_id() const { return bos_id_; }
    int32_t eos_id() const { return eos_id_; }
    int32_t eot_id() const { return eot_id_; }
    int32_t unk_id() const { return unk_id_; }
    int32_t pad_id() const { return pad_id_; }
    bool is_eog(int32_t id) const;
    const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
    // Control, user-defined and unknown tokens: what encode() cuts out of the
    // text before pre-tokenizing, longest text first.
    const std::vector<int32_t>& special_ids() const { return special_ids_; }

    size_t memory_bytes() const;

  private:
    struct Token {
        uint32_t offset = 0;  // into blob_
        uint32_t size = 0;
        float score = 0.0f;
        uint8_t attrs = 0;
        uint8_t byte = 0;
    };

    void read_tokens(const gguf::GgufFile& file);
    void read_type_and_flags(const gguf::GgufFile& file);
    void read_special_ids(const gguf::GgufFile& file);
    void detect_special_tokens(const gguf::GgufFile& file);
    auto text_of() const {
        return [this](int32_t id) { return text(id); };
    }

    std::string blob_;
    std::vector<Token> tokens_;
    TokenIndex index_;
    VocabType type_ = VocabType::Spm;
    PreTokenizer pre_ = PreTokenizer::Default;
    bool add_bos_ = false;
    bool add_eos_ = false;
    bool add_space_prefix_ = false;
    bool ignore_merges_ = false;
    int32_t bos_id_ = -1, eos_id_ = -1, eot_id_ = -1, eom_id_ = -1, unk_id_ = -1, pad_id_ = -1;
    int32_t fim_pre_id_ = -1, fim_suf_id_ = -1, fim_mid_id_ = -1;
    int32_t fim_pad_id_ = -1, fim_rep_id_ = -1, fim_sep_id_ = -1;
    std::vector<int32_t> eog_ids_;  // sorted
    std::vector<int32_t> special_ids_;
};

}  // namespace headroom
