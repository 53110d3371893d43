#include "tokenizer/vocab.h"

#include "core/strings.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <limits>
#include <span>

#include "core/error.h"
#include "format/gguf-reader.h"

namespace headroom {

namespace {

constexpr std::string_view kModelKey = "tokenizer.ggml.model";
constexpr std::string_view kPreKey = "tokenizer.ggml.pre";
constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";

// A pre-tokenizer name and what llama.cpp attaches to it.
struct PreInfo {
    std::string_view name;
    PreTokenizer kind;
    bool ignore_merges = false;  // a word that is a token is taken whole
    bool add_bos = false;        // default for tokenizer.ggml.add_bos_token
    bool no_bos = false;         // the default BOS id (11) does not apply
};

constexpr PreInfo kPreTokenizers[] = {
    {"default", PreTokenizer::Default},
    {"llama3", PreTokenizer::Llama3, true, true},
    {"llama-v3", PreTokenizer::Llama3, true, true},
    {"llama-bpe", PreTokenizer::Llama3, true, true},
    {"falcon3", PreTokenizer::Llama3, true, true},
    {"falcon-h1", PreTokenizer::Llama3, true, true},
    {"pixtral", PreTokenizer::Llama3, true, true},
    {"midm-2.0", PreTokenizer::Llama3, true, true},
    {"lfm2", PreTokenizer::Llama3, true, true},
    {"dbrx", PreTokenizer::Llama3},
    {"smaug-bpe", PreTokenizer::Llama3},
    {"chatglm-bpe", PreTokenizer::Llama3, false, false, true},
    {"glm4", PreTokenizer::Llama3, true, false, true},
    {"qwen2", PreTokenizer::Qwen2},
    {"deepseek-r1-qwen", PreTokenizer::Qwen2},
    {"megrez", PreTokenizer::Qwen2},
    {"stablelm2", PreTokenizer::Qwen2},
    {"hunyuan", PreTokenizer::Qwen2},
    {"gpt-2", PreTokenizer::Gpt2},
    {"phi-2", PreTokenizer::Gpt2},
    {"roberta-bpe", PreTokenizer::Gpt2},
    {"mpt", PreTokenizer::Gpt2},
    {"olmo", PreTokenizer::Gpt2},
    {"jais", PreTokenizer::Gpt2},
    {"exaone4", PreTokenizer::Gpt2},
    {"trillion", PreTokenizer::Gpt2},
    {"smollm", PreTokenizer::Smollm},
    {"starcoder", PreTokenizer::Smollm},
    {"refact", PreTokenizer::Smollm},
    {"command-r", PreTokenizer::Smollm},
    {"codeshell", PreTokenizer::Smollm},
    {"exaone", PreTokenizer::Smollm},
    {"minerva-7b", PreTokenizer::Smollm},
};

std::string supported_pre_names() {
    std::string names;
    for (const auto& p : kPreTokenizers) names += (names.empty() ? "" : ", ") + std::string(p.name);
    return names;
}

bool is_one_of(std::string_view text, std::span<const std::string_view> texts) {
    return std::find(texts.begin(), texts.end(), text) != texts.end();
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

// Texts llama.cpp recognizes special tokens by when the metadata is silent.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>",        "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>",   "<EOT>",      "_<EOT>",  "[EOT]",         "<｜end▁of▁sentence｜>",
    "<end_of_utterance>"};
constexpr std::string_view kEomTexts[] = {"<|eom_id|>"};
constexpr std::string_view kFimPreTexts[] = {"<|fim_prefix|>",  "<fim-prefix>", "<fim_prefix>",
                                             "<｜fim▁begin｜>", "<PRE>",        "▁<PRE>",
                                             "<|code_prefix|>", "<|prefix|>"};
constexpr std::string_view kFimSufTexts[] = {"<|fim_suffix|>",  "<fim-suffix>", "<fim_suffix>",
                                             "<｜fim▁hole｜>",  "<SUF>",        "▁<SUF>",
                                             "<|code_suffix|>", "<|suffix|>"};
constexpr std::string_view kFimMidTexts[] = {"<|fim_middle|>",  "<fim-middle>", "<fim_middle>",
                                             "<｜fim▁end｜>",   "<MID>",        "▁<MID>",
                                             "<|code_middle|>", "<|middle|>"};
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                             "[PAD]"};
constexpr std::string_view kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                             "<REPO>", "<reponame>"};
constexpr std::string_view kFimSepTexts[] = {"<|file_sep|>"};
// Tokens that end generation whatever the metadata says.
constexpr std::string_view kEogTexts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<|return|>",
                                          "<|call|>",
                                          "<|flush|>",
                                          "<|calls|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "</s>",
                                          "<|eom_id|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "[EOS]",
                                          "<|end_of_text|>",
                                          "<end_of_utterance>",
                                          "<eos>",
                                          "<turn|>",
                                          "<|tool_response>",
                                          "<｜end▁of▁sentence｜>",
                                          "[e~["};
// gpt-oss's structural tokens, always rendered.
constexpr std::string_view kAlwaysRenderedTexts[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                     "<|constrain|>"};

}  // namespace

void TokenIndex::reset(size_t n) {
    const size_t size = std::bit_ceil(std::max<size_t>(16, 2 * n));
    slots_.assign(size, -1);
    mask_ = size - 1;
}

Vocab Vocab::from_gguf(const gguf::GgufFile& file) {
    Vocab v;
    v.read_type_and_flags(file);
    v.read_tokens(file);
    v.read_special_ids(file);
    v.detect_special_tokens(file);
    return v;
}

int32_t Vocab::find(std::string_view text) const {
    return index_.find(text, text_of());
}

bool Vocab::is_eog(int32_t id) const {
    return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

void Vocab::read_type_and_flags(const gguf::GgufFile& file) {
    const std::string_view model = file.require_string(kModelKey);
    if (model == "llama") {
        type_ = VocabType::Spm;
        bos_id_ = 1;
        eos_id_ = 2;
        unk_id_ = 0;
        add_space_prefix_ = true;
        add_bos_ = true;
    } else if (model == "gpt2") {
        type_ = VocabType::Bpe;
        bos_id_ = 11;
        eos_id_ = 11;
        const auto pre = file.get_string(kPreKey);
        const PreInfo* info = &kPreTokenizers[0];  // absent: "default"
        if (pre) {
            info = nullptr;
            for (const auto& p : kPreTokenizers) {
                if (p.name == *pre) info = &p;
            }
            if (!info) {
                fail("{}: {} is '{}', a pre-tokenizer headroom does not support (supported: {})",
                     file.path(), kPreKey, clipped(*pre), supported_pre_names());
            }
        }
        pre_ = info->kind;
        ignore_merges_ = info->ignore_merges;
        add_bos_ = info->add_bos;
        if (info->no_bos) bos_id_ = -1;
    } else {
        fail("{}: {} is '{}', expected 'llama' (SentencePiece) or 'gpt2' (byte-level BPE)",
             file.path(), kModelKey, clipped(model));
    }
    if (auto v = file.get_bool("tokenizer.ggml.add_space_prefix")) add_space_prefix_ = *v;
}

void Vocab::read_tokens(const gguf::GgufFile& file) {
    const gguf::Array& texts = file.require_array(kTokensKey);
    if (texts.elem_type != gguf::ValueType::STRING) {
        fail("{}: {} is an array of {}, expected strings", file.path(), kTokensKey,
             gguf::name(texts.elem_type));
    }
    const uint64_t n = texts.strings.size();
    if (n == 0 || n > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
        fail("{}: {} has {} tokens, expected 1 to 2^31-1", file.path(), kTokensKey, n);
    }

    const gguf::Array* scores = file.get_array(kScoresKey);
    if (scores) {
        if (scores->elem_type != gguf::ValueType::FLOAT32 &&
            scores->elem_type != gguf::ValueType::INT32) {
            fail("{}: {} is an array of {}, expected FLOAT32", file.path(), kScoresKey,
                 gguf::name(scores->elem_type));
        }
        if (scores->n < n) {
            fail("{}: {} has {} entries, expected one per token ({})", file.path(), kScoresKey,
                 scores->n, n);
        }
    }
    const gguf::Array* types = file.get_array(kTypesKey);
    if (types) {
        if (types->elem_type != gguf::ValueType::INT32) {
            fail("{}: {} is an array of {}, expected INT32", file.path(), kTypesKey,
                 gguf::name(types->elem_type));
        }
        if (types->n < n) {
            fail("{}: {} has {} entries, expected one per token ({})", file.path(), kTypesKey,
                 types->n, n);
        }
    }

    uint64_t total = 0;
    for (const auto& s : texts.strings) total += s.empty() ? 24 : s.size();
    if (total > std::numeric_limits<uint32_t>::max()) {
        fail("{}: {} holds {} bytes of text, expected under 4 GiB", file.path(), kTokensKey, total);
    }
    blob_.reserve(total);
    tokens_.resize(n);
    for (uint64_t i = 0; i < n; ++i) {
        Token& t = tokens_[i];
        t.offset = static_cast<uint32_t>(blob_.size());
        // llama.cpp renames empty tokens so that every text is distinct.
        if (texts.strings[i].empty()) {
            blob_ += "[EMPTY_" + std::to_string(i) + "]";
        } else {
            blob_ += texts.strings[i];
        }
        t.size = static_cast<uint32_t>(blob_.size() - t.offset);
        if (scores) t.score = static_cast<float>(scores->float_at(i));
        t.attrs = attr::kNormal;
        if (types) {
            const int64_t type = types->int_at(i);
            static constexpr uint8_t kByType[] = {0,
                                                  attr::kNormal,
                                                  attr::kUnknown,
                                                  attr::kControl,
                                                  attr::kUserDefined,
                                                  attr::kUnused,
                                                  attr::kByte};
            if (type < 1 || type > 6) {
                fail(
                    "{}: {}[{}] is {}, expected 1..6 (normal, unknown, control, user-defined, "
                    "unused, byte)",
                    file.path(), kTypesKey, i, type);
            }
            t.attrs = kByType[type];
        }
    }

    index_.reset(n);
    for (int32_t id = 0; id < n_tokens(); ++id) {
        const int32_t other = index_.insert(id, text_of());
        if (other >= 0) {
            fail("{}: {}[{}] '{}' repeats token {}, expected distinct texts", file.path(),
                 kTokensKey, id, clipped(text(id)), other);
        }
        if (tokens_[id].attrs & attr::kByte) {
            const std::string_view s = text(id);
            const int hi = s.size() == 6 ? hex_digit(s[3]) : -1;
            const int lo = s.size() == 6 ? hex_digit(s[4]) : -1;
            if (!s.starts_with("<0x") || s.back() != '>' || hi < 0 || lo < 0) {
                fail("{}: {}[{}] '{}' is a byte token, expected the text <0xXX>", file.path(),
                     kTokensKey, id, clipped(s));
            }
            tokens_[id].byte = static_cast<uint8_t>(hi * 16 + lo);
        }
    }
}

void Vocab::read_special_ids(const gguf::GgufFile& file) {
    const struct {
        std::string_view key;
        int32_t& id;
    } keys[] = {
        {"tokenizer.ggml.bos_token_id", bos_id_},
        {"tokenizer.ggml.eos_token_id", eos_id_},
        {"tokenizer.ggml.eot_token_id", eot_id_},
        {"tokenizer.ggml.eom_token_id", eom_id_},
        {"tokenizer.ggml.unknown_token_id", unk_id_},
        {"tokenizer.ggml.padding_token_id", pad_id_},
        {"tokenizer.ggml.fim_pre_token_id", fim_pre_id_},
        {"tokenizer.ggml.fim_suf_token_id", fim_suf_id_},
        {"tokenizer.ggml.fim_mid_token_id", fim_mid_id_},
        {"tokenizer.ggml.fim_pad_token_id", fim_pad_id_},
        {"tokenizer.ggml.fim_rep_token_id", fim_rep_id_},
        {"tokenizer.ggml.fim_sep_token_id", fim_sep_id_},
        {"tokenizer.ggml.prefix_token_id", fim_pre_id_},
        {"tokenizer.ggml.suffix_token_id", fim_suf_id_},
        {"tokenizer.ggml.middle_token_id", fim_mid_id_},
    };
    for (const auto& k : keys) {
        if (!valid(k.id)) k.id = -1;  // a default the vocabulary is too small for
        const auto v = file.get_uint(k.key);
        if (!v) continue;
        if (*v >= tokens_.size()) {
            fail("{}: {} is {}, outside the vocabulary of {} tokens", file.path(), k.key, *v,
                 tokens_.size());
        }
        k.id = static_cast<int32_t>(*v);
    }
    if (auto v = file.get_bool("tokenizer.ggml.add_bos_token")) add_bos_ = *v;
    if (auto v = file.get_bool("tokenizer.ggml.add_eos_token")) add_eos_ = *v;
    if (add_bos_ && bos_id_ < 0) {
        fail("{}: tokenizer.ggml.add_bos_token is true but there is no BOS token", file.path());
    }
    if (add_eos_ && eos_id_ < 0) {
        fail("{}: tokenizer.ggml.add_eos_token is true but there is no EOS token", file.path());
    }
}

void Vocab::detect_special_tokens(const gguf::GgufFile& file) {
    const auto mark_control = [&](int32_t id) { tokens_[id].attrs |= attr::kControl; };
    const auto detect = [&](int32_t& slot, int32_t id, std::span<const std::string_view> l) {
        if (slot < 0 && is_one_of(text(id), l)) {
            slot = id;
            mark_control(id);
        }
    };
    for (int32_t id = 0; id < n_tokens(); ++id) {
        detect(eot_id_, id, kEotTexts);
        detect(eom_id_, id, kEomTexts);
        detect(fim_pre_id_, id, kFimPreTexts);
        detect(fim_suf_id_, id, kFimSufTexts);
        detect(fim_mid_id_, id, kFimMidTexts);
        detect(fim_pad_id_, id, kFimPadTexts);
        detect(fim_rep_id_, id, kFimRepTexts);
        detect(fim_sep_id_, id, kFimSepTexts);
    }
    // Control tokens named "unused" are placeholders.
    for (Token& t : tokens_) {
        if ((t.attrs & attr::kControl) &&
            std::string_view(blob_.data() + t.offset, t.size).find("unused") !=
                std::string_view::npos) {
            t.attrs |= attr::kUnused;
        }
    }

    std::vector<int32_t> eog;
    for (int32_t id : {fim_pad_id_, fim_rep_id_, fim_sep_id_}) {
        if (id >= 0) eog.push_back(id);
    }
    for (int32_t id = 0; id < n_tokens(); ++id) {
        const std::string_view s = text(id);
        if (is_one_of(s, kEogTexts)) {
            eog.push_back(id);
            mark_control(id);
        }
        if (is_one_of(s, kAlwaysRenderedTexts)) {
            tokens_[id].attrs = attr::kUserDefined;
        }
    }
    for (int32_t id : {eos_id_, eot_id_, eom_id_}) {
        if (id >= 0) eog.push_back(id);
    }
    std::sort(eog.begin(), eog.end());
    eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
    const auto eog_with_text = [&](std::string_view s) -> int32_t {
        for (int32_t id : eog) {
            if (text(id) == s) return id;
        }
        return -1;
    };
    // Harmony (gpt-oss) and solar-open end a message with <|end|> but a turn
    // with <|return|> / <|call|>: there <|end|> is not an end of generation.
    const int32_t end_id = eog_with_text("<|end|>");
    const bool has_call = eog_with_text("<|call|>") >= 0 || eog_with_text("<|calls|>") >= 0;
    if (end_id >= 0 && has_call &&
        (eog_with_text("<|return|>") >= 0 || eog_with_text("<|flush|>") >= 0)) {
        std::erase(eog, end_id);
        tokens_[end_id].attrs = attr::kUserDefined;
    }
    // Where </s> sits next to these, it is ordinary text.
    const int32_t s_id = eog_with_text("</s>");
    if (s_id >= 0 &&
        (eog_with_text("<|tool_response>") >= 0 || eog_with_text("<|plamo:eos|>") >= 0)) {
        std::erase(eog, s_id);
        tokens_[s_id].attrs = attr::kNormal;
    }
    eog_ids_ = std::move(eog);

    for (int32_t id = 0; id < n_tokens(); ++id) {
        if (attrs(id) & (attr::kControl | attr::kUserDefined | attr::kUnknown)) {
            special_ids_.push_back(id);
        }
    }
    std::stable_sort(special_ids_.begin(), special_ids_.end(),
                     [&](int32_t a, int32_t b) { return tokens_[a].size > tokens_[b].size; });

    // Phi-3 strips the whitespace that follows its special tokens.
    const std::string model_name = ascii_lower(file.get_string("general.name").value_or(""));
    if (model_name.find("phi-3") != std::string::npos ||
        model_name.find("phi3") != std::string::npos) {
        for (int32_t id : special_ids_) tokens_[id].attrs |= attr::kRstrip;
        if (int32_t id = find("</s>"); id >= 0) tokens_[id].attrs |= attr::kRstrip;
        for (std::string_view s : {"<unk>", "<s>", "<|endoftext|>"}) {
            if (int32_t id = find(s); id >= 0) tokens_[id].attrs &= ~attr::kRstrip;
        }
    }
}

size_t Vocab::memory_bytes() const {
    return blob_.capacity() + tokens_.capacity() * sizeof(Token) + index_.memory_bytes() +
           (eog_ids_.capacity() + special_ids_.capacity()) * sizeof(int32_t);
}

}  // namespace headroom
