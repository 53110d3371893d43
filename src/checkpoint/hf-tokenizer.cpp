#include "checkpoint/hf-tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/strings.h"

namespace headroom::hf {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// llama.cpp's token types.
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;
// More ids than any published vocabulary by far: past it the file is damaged.
constexpr int64_t kMaxVocab = 1 << 24;

// The two Split regexes byte-level BPE tokenizers publish beside GPT-2's
// own (ByteLevel with use_regex): Llama 3's and Qwen2's (digits alone).
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Codepoints in UTF-8 text (continuation bytes are not counted).
size_t utf8_length(std::string_view s) {
    return static_cast<size_t>(
        std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// The steps of a pre-tokenizer or normalizer: a Sequence's, or itself.
std::vector<const json*> steps(const json& j, const char* list_key) {
    std::vector<const json*> out;
    if (!j.is_object()) return out;
    if (auto t = j.find("type"); t != j.end() && *t == "Sequence") {
        if (auto l = j.find(list_key); l != j.end() && l->is_array())
            for (const auto& s : *l) out.push_back(&s);
    } else {
        out.push_back(&j);
    }
    return out;
}

bool is_type(const json* j, std::string_view type) {
    if (!j || !j->is_object()) return false;
    auto t = j->find("type");
    return t != j->end() && t->is_string() && t->get<std::string>() == type;
}

bool flag(const json& j, const char* key, bool dflt) {
    auto it = j.find(key);
    return it != j.end() && it->is_boolean() ? it->get<bool>() : dflt;
}

// The llama.cpp pre-tokenizer name whose rules these steps are.
std::string byte_level_pre(const json& pre, const std::string& label) {
    const auto s = steps(pre, "pretokenizers");
    auto regex_of = [](const json* step) -> std::string {
        if (!is_type(step, "Split")) return {};
        auto p = step->find("pattern");
        if (p == step->end() || !p->is_object()) return {};
        auto r = p->find("Regex");
        return r != p->end() && r->is_string() ? r->get<std::string>() : std::string();
    };
    if (s.size() == 1 && is_type(s[0], "ByteLevel") && flag(*s[0], "use_regex", true))
        return "gpt-2";
    if (s.size() == 2 && is_type(s[0], "Digits") && flag(*s[0], "individual_digits", false) &&
        is_type(s[1], "ByteLevel") && flag(*s[1], "use_regex", true))
        return "smollm";
    if (s.size() == 2 && is_type(s[1], "ByteLevel") && !flag(*s[1], "use_regex", true)) {
        const std::string r = regex_of(s[0]);
        if (r == kLlama3Regex) return "llama-bpe";
        if (r == kQwen2Regex) return "qwen2";
    }
    fail(
        "{}: pre_tokenizer {} is not one headroom implements (GPT-2's byte-level rules, SmolLM's "
        "digits then GPT-2's, Llama 3's or Qwen2's split regex)",
        label, clipped(pre.dump(), 200));
}

// "a b" or ["a", "b"]: merges as llama.cpp stores them.
std::vector<std::string> read_merges(const json& model, const std::string& label) {
    std::vector<std::string> out;
    auto m = model.find("merges");
    if (m == model.end()) return out;
    if (!m->is_array()) fail("{}: model.merges is not an array", label);
    out.reserve(m->size());
    for (const auto& e : *m) {
        if (e.is_string()) {
            out.push_back(e.get<std::string>());
        } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
            out.push_back(e[0].get<std::string>() + " " + e[1].get<std::string>());
        } else {
            fail("{}: merge {} is {}, expected \"a b\" or [\"a\", \"b\"]", label, out.size(),
                 clipped(e.dump()));
        }
    }
    return out;
}

// A token named in tokenizer_config.json: "text" or {"content": "text"}.
std::optional<std::string> token_text(const json& cfg, const char* key) {
    auto it = cfg.find(key);
    if (it == cfg.end()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object())
        if (auto c = it->find("content"); c != it->end() && c->is_string())
            return c->get<std::string>();
    return std::nullopt;
}

// An id from config.json or generation_config.json: a number or a list
// whose first entry is taken.
std::optional<int64_t> first_id(const std::optional<json>& j, const char* key) {
    if (!j || !j->is_object()) return std::nullopt;
    auto it = j->find(key);
    if (it == j->end()) return std::nullopt;
    if (it->is_number_integer()) return it->get<int64_t>();
    if (it->is_array() && !it->empty() && (*it)[0].is_number_integer())
        return (*it)[0].get<int64_t>();
    return std::nullopt;
}

std::string chat_template(const fs::path& dir, const std::optional<json>& cfg) {
    if (cfg && cfg->is_object()) {
        if (auto t = cfg->find("chat_template"); t != cfg->end()) {
            if (t->is_string()) return t->get<std::string>();
            // A list of named templates: the default one.
            if (t->is_array())
                for (const auto& e : *t)
                    if (e.is_object() && e.value("name", "") == "default" &&
                        e.contains("template") && e["template"].is_string())
                        return e["template"].get<std::string>();
        }
    }
    if (std::ifstream in(dir / "chat_template.jinja"); in) {
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }
    if (auto j = read_json_file((dir / "chat_template.json").string()); j && j->is_object())
        if (auto t = j->find("chat_template"); t != j->end() && t->is_string())
            return t->get<std::string>();
    return {};
}

}  // namespace

std::optional<json> read_json_file(const std::string& path) {
    if (!fs::exists(path)) return std::nullopt;
    std::ifstream in(path);
    if (!in) fail("{}: cannot read the file", path);
    try {
        return json::parse(in);
    } catch (const json::exception& e) {
        fail("{}: not valid JSON ({})", path, e.what());
    }
}

void add_tokenizer(const std::string& dir_name, uint32_t n_vocab, gguf::GgufWriter& w) {
    const fs::path dir(dir_name);
    const auto tok = read_json_file((dir / "tokenizer.json").string());
    if (!tok) fail("{}: tokenizer.json is missing; headroom reads the tokenizer from it", dir_name);
    const auto cfg = read_json_file((dir / "tokenizer_config.json").string());
    TokenizerFiles files;
    files.label = (dir / "tokenizer.json").string();
    files.tokenizer_config = cfg.value_or(json());
    files.config = read_json_file((dir / "config.json").string()).value_or(json());
    files.generation_config =
        read_json_file((dir / "generation_config.json").string()).value_or(json());
    files.chat_template = chat_template(dir, cfg);
    add_tokenizer(*tok, files, n_vocab, w);
}

namespace {

void add_tokenizer_checked(const json& tokenizer, const TokenizerFiles& files, uint32_t n_vocab,
                           gguf::GgufWriter& w) {
    const std::string& label = files.label;
    const json* tok = &tokenizer;
    if (!tok->is_object()) fail("{}: expected a JSON object", label);
    const std::optional<json> cfg =
        files.tokenizer_config.is_null() ? std::nullopt : std::optional(files.tokenizer_config);
    const std::optional<json> config =
        files.config.is_null() ? std::nullopt : std::optional(files.config);
    const std::optional<json> gen =
        files.generation_config.is_null() ? std::nullopt : std::optional(files.generation_config);

    const auto model_it = tok->find("model");
    if (model_it == tok->end() || !model_it->is_object())
        fail("{}: 'model' is missing, expected the tokenizer model", label);
    const json& model = *model_it;
    const std::string type = model.value("type", model.contains("merges") ? "BPE" : "");
    if (type != "BPE")
        fail("{}: model.type is '{}': headroom implements BPE tokenizers only", label,
             clipped(type));
    const auto vocab_it = model.find("vocab");
    if (vocab_it == model.end() || !vocab_it->is_object())
        fail("{}: model.vocab is missing, expected an object of token -> id", label);

    // Texts by id: the vocabulary, then the added tokens.
    std::map<int64_t, std::string> texts;
    std::map<int64_t, int32_t> added_types;
    auto put = [&](const std::string& text, const json& id, const char* where) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxVocab)
            fail("{}: {} token '{}' has id {}, expected 0 to {}", label, where, clipped(text),
                 clipped(id.dump()), kMaxVocab - 1);
        const int64_t i = id.get<int64_t>();
        if (auto [it, fresh] = texts.emplace(i, text); !fresh && it->second != text)
            fail("{}: id {} is both '{}' and '{}'", label, i, clipped(it->second), clipped(text));
        return i;
    };
    for (const auto& [text, id] : vocab_it->items()) put(text, id, "vocabulary");
    if (auto added = tok->find("added_tokens"); added != tok->end() && added->is_array()) {
        for (const auto& a : *added) {
            if (!a.is_object() || !a.contains("content") || !a["content"].is_string() ||
                !a.contains("id"))
                fail("{}: an added token is {}, expected {{\"id\", \"content\"}}", label,
                     clipped(a.dump()));
            const int64_t i = put(a["content"].get<std::string>(), a["id"], "added");
            added_types[i] = flag(a, "special", false) ? kControl : kUserDefined;
        }
    }
    if (texts.empty()) fail("{}: the vocabulary is empty", label);
    if (n_vocab > kMaxVocab)
        fail(
            "{}: the model's vocabulary is said to be {} tokens, more than {}: config.json is "
            "damaged",
            label, n_vocab, kMaxVocab);
    const int64_t n = std::max<int64_t>(texts.rbegin()->first + 1, n_vocab);
    if (n > n_vocab)
        fail("{}: token id {} is past the model's vocabulary of {} (config.json vocab_size)", label,
             texts.rbegin()->first, n_vocab);

    // Byte-level BPE or SentencePiece-style.
    const json pre = tok->value("pre_tokenizer", json());
    const json decoder = tok->value("decoder", json());
    bool byte_level = false;
    for (const json* s : steps(pre, "pretokenizers")) byte_level |= is_type(s, "ByteLevel");
    for (const json* s : steps(decoder, "decoders")) byte_level |= is_type(s, "ByteLevel");

    const std::vector<std::string> merges = read_merges(model, label);
    std::vector<std::string> tokens(n);
    std::vector<int32_t> types(n, kUnused);
    for (int64_t i = 0; i < n; ++i) tokens[i] = fmt::format("[PAD{}]", i);
    for (const auto& [i, text] : texts) {
        tokens[i] = text;
        types[i] = kNormal;
    }
    const std::optional<std::string> unk =
        model.contains("unk_token") && model["unk_token"].is_string()
            ? std::optional(model["unk_token"].get<std::string>())
            : std::nullopt;
    std::map<std::string, int64_t> id_of;
    for (const auto& [i, text] : texts) id_of.emplace(text, i);
    if (byte_level) {
        w.set_string("tokenizer.ggml.model", "gpt2");
        w.set_string("tokenizer.ggml.pre", byte_level_pre(pre, label));
    } else {
        w.set_string("tokenizer.ggml.model", "llama");
        // Scores by merge rank: the token made by merge r scores -r - 1;
        // single characters and tokens no merge makes score 0 and -1e9.
        std::vector<float> scores(n, 0.0f);
        for (const auto& [i, text] : texts) {
            const bool single = utf8_length(text) == 1;
            if (!single) scores[i] = -1e9f;
        }
        for (size_t r = 0; r < merges.size(); ++r) {
            const std::string& m = merges[r];
            const size_t sp = m.find(' ');
            if (sp == std::string::npos) continue;
            auto it = id_of.find(m.substr(0, sp) + m.substr(sp + 1));
            if (it != id_of.end() && scores[it->second] == -1e9f)
                scores[it->second] = -static_cast<float>(r) - 1.0f;
        }
        w.set_f32s("tokenizer.ggml.scores", scores);
        for (const auto& [i, text] : texts)
            if (text.size() == 6 && text.starts_with("<0x") && text.ends_with('>'))
                types[i] = kByte;
        bool prefix = false;
        const json normalizer = tok->value("normalizer", json());
        for (const json* s : steps(normalizer, "normalizers"))
            if (is_type(s, "Prepend")) prefix = true;
        for (const json* s : steps(pre, "pretokenizers"))
            if (is_type(s, "Metaspace"))
                prefix = s->value("prepend_scheme", flag(*s, "add_prefix_space", true)
                                                        ? std::string("always")
                                                        : std::string("never")) != "never";
        w.set_bool("tokenizer.ggml.add_space_prefix", prefix);
    }
    if (unk)
        if (auto it = id_of.find(*unk); it != id_of.end() && !added_types.contains(it->second))
            types[it->second] = kUnknown;
    for (const auto& [i, t] : added_types) types[i] = t;
    w.set_strings("tokenizer.ggml.tokens", tokens);
    w.set_i32s("tokenizer.ggml.token_type", types);
    w.set_strings("tokenizer.ggml.merges", merges);

    // Special tokens: tokenizer_config.json by text, else config.json or
    // generation_config.json by id.
    const json none = json::object();
    const json& c = cfg && cfg->is_object() ? *cfg : none;
    auto set_id = [&](const char* key, const char* cfg_key, const char* id_key) {
        std::optional<int64_t> id;
        if (auto text = token_text(c, cfg_key))
            if (auto it = id_of.find(*text); it != id_of.end()) id = it->second;
        if (!id && id_key) id = first_id(gen, id_key);
        if (!id && id_key) id = first_id(config, id_key);
        if (id && *id >= 0 && *id < n)
            w.set_u32(fmt::format("tokenizer.ggml.{}_token_id", key), static_cast<uint32_t>(*id));
    };
    set_id("bos", "bos_token", "bos_token_id");
    set_id("eos", "eos_token", "eos_token_id");
    set_id("unknown", "unk_token", nullptr);
    set_id("padding", "pad_token", "pad_token_id");
    // BOS first: tokenizer_config.json says, else the post-processor's
    // template starts with a special token.
    if (auto it = c.find("add_bos_token"); it != c.end() && it->is_boolean()) {
        w.set_bool("tokenizer.ggml.add_bos_token", it->get<bool>());
    } else if (auto pp = tok->find("post_processor"); pp != tok->end() && pp->is_object()) {
        for (const json* s : steps(*pp, "processors")) {
            if (!is_type(s, "TemplateProcessing")) continue;
            auto single = s->find("single");
            const bool bos = single != s->end() && single->is_array() && !single->empty() &&
                             (*single)[0].is_object() && (*single)[0].contains("SpecialToken");
            w.set_bool("tokenizer.ggml.add_bos_token", bos);
        }
    }
    if (auto it = c.find("add_eos_token"); it != c.end() && it->is_boolean())
        w.set_bool("tokenizer.ggml.add_eos_token", it->get<bool>());
    if (!files.chat_template.empty()) w.set_string("tokenizer.chat_template", files.chat_template);
}

}  // namespace

void add_tokenizer(const json& tokenizer, const TokenizerFiles& files, uint32_t n_vocab,
                   gguf::GgufWriter& w) {
    // A field of an unexpected JSON type surfaces as the library's exception.
    try {
        add_tokenizer_checked(tokenizer, files, n_vocab, w);
    } catch (const json::exception& e) {
        fail("{}: a field has an unexpected type ({})", files.label, e.what());
    }
}

}  // namespace headroom::hf
