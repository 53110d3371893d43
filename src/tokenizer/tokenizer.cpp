#include "tokenizer/tokenizer.h"

#include <limits>

#include "core/error.h"
#include "format/gguf-reader.h"
#include "tokenizer/bpe.h"
#include "tokenizer/spm.h"
#include "tokenizer/unicode.h"

namespace headroom {

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::GgufFile& file) {
    Vocab vocab = Vocab::from_gguf(file);
    if (vocab.type() == VocabType::Spm) return std::make_unique<SpmTokenizer>(std::move(vocab));
    return std::make_unique<BpeTokenizer>(std::move(vocab), file);
}

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
    specials_.build(vocab_);
}

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
    if (text.size() > std::numeric_limits<uint32_t>::max()) {
        fail("tokenize: the text is {} bytes, expected at most 4 GiB", text.size());
    }
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (add_special && vocab_.add_bos()) out.push_back(vocab_.bos_id());
    std::vector<Fragment> fragments;
    specials_.partition(vocab_, text, parse_special, fragments);
    bool after_special = true;  // the start of the input counts as after a special token
    for (const Fragment& f : fragments) {
        if (f.token >= 0) {
            out.push_back(f.token);
            after_special = true;
        } else {
            encode_text(text.substr(f.offset, f.length), after_special, out);
            after_special = false;
        }
    }
    if (add_special && vocab_.add_eos()) out.push_back(vocab_.eos_id());
    return out;
}

void Tokenizer::append_piece(int32_t id, bool render_special, std::string& out) const {
    if (!vocab_.valid(id)) return;
    const uint8_t a = vocab_.attrs(id);
    if (a & (attr::kControl | attr::kUnknown)) {
        if (render_special) out += vocab_.text(id);
    } else if (a & attr::kUserDefined) {
        out += vocab_.text(id);
    } else if (a & attr::kNormal) {
        append_normal_piece(id, out);
    } else if (a & attr::kByte) {
        out.push_back(static_cast<char>(vocab_.byte_value(id)));
    }
    // Unused tokens render nothing.
}

std::string Tokenizer::decode(std::span<const int32_t> tokens, bool render_special) const {
    std::string out;
    // With a space prefix the first token's leading space is the prefix: drop
    // it, even when that token renders nothing (then nothing is dropped).
    bool strip_space = vocab_.add_space_prefix();
    for (const int32_t id : tokens) {
        const size_t from = out.size();
        append_piece(id, render_special, out);
        if (strip_space && out.size() > from && out[from] == ' ') out.erase(from, 1);
        strip_space = false;
    }
    return out;
}

std::string_view Tokenizer::token_text(int32_t id) const {
    return vocab_.valid(id) ? vocab_.text(id) : std::string_view();
}

TokenAttr Tokenizer::token_attr(int32_t id) const {
    if (!vocab_.valid(id)) return TokenAttr::Normal;
    const uint8_t a = vocab_.attrs(id);
    if (a & attr::kByte) return TokenAttr::Byte;
    if (a & attr::kUserDefined) return TokenAttr::UserDefined;
    if (a & attr::kUnknown) return TokenAttr::Unknown;
    if (a & attr::kControl) return TokenAttr::Control;
    if (a & attr::kUnused) return TokenAttr::Unused;
    return TokenAttr::Normal;
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
    const int32_t id = vocab_.find(text);
    if (id < 0) return std::nullopt;
    return id;
}

size_t Tokenizer::memory_bytes() const {
    return vocab_.memory_bytes() + specials_.memory_bytes() + model_memory_bytes();
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool render_special)
    : tokenizer_(tokenizer), render_special_(render_special) {}

std::string StreamDecoder::push(int32_t token) {
    tokenizer_.append_piece(token, render_special_, pending_);
    const size_t n_final = pending_.size() - unicode::incomplete_utf8_suffix(pending_);
    std::string out;
    unicode::append_sanitized_utf8(std::string_view(pending_).substr(0, n_final), out);
    pending_.erase(0, n_final);
    return out;
}

std::string StreamDecoder::flush() {
    std::string out;
    unicode::append_sanitized_utf8(pending_, out);
    pending_.clear();
    return out;
}

}  // namespace headroom
