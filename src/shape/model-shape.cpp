#include "shape/model-shape.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "format/gguf-reader.h"

namespace headroom {

namespace {

using nlohmann::json;

// config.json's model_type -> the llama.cpp architecture whose tensor names
// and defaults it follows.
struct TypeInfo {
    const char* model_type;
    const char* arch;
    bool tied_default;  // the config class's default for tie_word_embeddings
};

constexpr TypeInfo kTypes[] = {
    {"llama", "llama", false},           {"mistral", "llama", false},
    {"mixtral", "llama", false},         {"qwen2", "qwen2", false},
    {"qwen2_moe", "qwen2moe", false},    {"qwen3", "qwen3", false},
    {"qwen3_moe", "qwen3moe", false},    {"gemma", "gemma", true},
    {"gemma2", "gemma2", true},          {"gemma3", "gemma3", true},
    {"gemma3_text", "gemma3", true},     {"deepseek_v2", "deepseek2", false},
    {"deepseek_v3", "deepseek2", false}, {"gpt_oss", "gpt-oss", false},
};

// Keys read from the text part of the config, falling back to the top level
// (multimodal checkpoints keep tie_word_embeddings and torch_dtype outside
// text_config).
class Config {
  public:
    Config(const json& top, std::string label) : top_(top), label_(std::move(label)) {
        if (auto it = top.find("text_config"); it != top.end() && it->is_object()) text_ = &*it;
    }
    const json* find(const char* key) const {
        if (text_) {
            if (auto it = text_->find(key); it != text_->end() && !it->is_null()) return &*it;
        }
        if (auto it = top_.find(key); it != top_.end() && !it->is_null()) return &*it;
        return nullptr;
    }
    std::optional<uint32_t> u32(const char* key) const {
        const json* v = find(key);
        if (!v) return std::nullopt;
        if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > 0xFFFFFFFFll)
            fail("{}: '{}' is {}, expected a non-negative integer", label_, key, v->dump());
        return static_cast<uint32_t>(v->get<int64_t>());
    }
    uint32_t req(const char* key) const {
        auto v = u32(key);
        if (!v || *v == 0)
            fail("{}: '{}' is missing or 0, expected a positive integer", label_, key);
        return *v;
    }
    uint32_t opt(const char* key, uint32_t dflt) const { return u32(key).value_or(dflt); }
    std::optional<bool> flag(const char* key) const {
        const json* v = find(key);
        if (!v) return std::nullopt;
        if (!v->is_boolean())
            fail("{}: '{}' is {}, expected true or false", label_, key, v->dump());
        return v->get<bool>();
    }
    std::string str(const char* key) const {
        const json* v = find(key);
        return v && v->is_string() ? v->get<std::string>() : std::string();
    }
    const std::string& label() const { return label_; }

  private:
    const json& top_;
    const json* text_ = nullptr;
    std::string label_;
};

std::string model_type_of(const json& top) {
    if (auto it = top.find("text_config"); it != top.end() && it->is_object()) {
        if (auto t = it->find("model_type"); t != it->end() && t->is_string()) {
            // A multimodal wrapper's text model ("gemma3_text") names the
            // decoder; the wrapper's own type ("gemma3") is the same family.
            return t->get<std::string>();
        }
    }
    if (auto t = top.find("model_type"); t != top.end() && t->is_string())
        return t->get<std::string>();
    return {};
}

// Which layers use a sliding window: layer_types when given, else the
// family's fixed pattern.
void read_sliding_window(const Config& c, const std::string& arch, ModelShape& s) {
    HParams& hp = s.hp;
    hp.layer_is_swa.assign(hp.n_layer, false);
    const uint32_t window = c.opt("sliding_window", 0);
    if (const json* types = c.find("layer_types")) {
        if (!types->is_array() || types->size() != hp.n_layer)
            fail("{}: 'layer_types' has {} entries, expected one per layer ({})", c.label(),
                 types->is_array() ? types->size() : 0, hp.n_layer);
        for (uint32_t il = 0; il < hp.n_layer; ++il) {
            const json& t = (*types)[il];
            const std::string kind = t.is_string() ? t.get<std::string>() : t.dump();
            if (kind == "sliding_attention") {
                hp.layer_is_swa[il] = true;
            } else if (kind != "full_attention") {
                fail(
                    "{}: layer {} is '{}': headroom can plan full and sliding-window attention "
                    "only, not this layer kind",
                    c.label(), il, kind);
            }
        }
        if (hp.n_swa_layers() > 0) {
            if (window == 0)
                fail("{}: layer_types has sliding layers but 'sliding_window' is missing",
                     c.label());
            hp.sliding_window = window;
        }
        return;
    }
    if (window == 0) return;
    if (arch == "gemma3") {
        // Five local layers, then one global (Gemma 3 technical report).
        const uint32_t pattern =
            c.opt("sliding_window_pattern", c.opt("_sliding_window_pattern", 6));
        for (uint32_t il = 0; il < hp.n_layer; ++il)
            hp.layer_is_swa[il] = pattern > 0 && (il + 1) % pattern != 0;
    } else if (arch == "gemma2" || arch == "gpt-oss") {
        // Local and global layers alternate, starting with a local one.
        for (uint32_t il = 0; il < hp.n_layer; ++il) hp.layer_is_swa[il] = il % 2 == 0;
    } else if (arch == "qwen2" || arch == "qwen3" || arch == "qwen2moe" || arch == "qwen3moe") {
        // Qwen configs carry a window that is off unless use_sliding_window;
        // then layers from max_window_layers on use it.
        if (!c.flag("use_sliding_window").value_or(false)) return;
        const uint32_t from = c.opt("max_window_layers", 0);
        for (uint32_t il = from; il < hp.n_layer; ++il) hp.layer_is_swa[il] = true;
    } else if (arch == "llama") {
        // Mistral 7B v0.1: every layer attends over the last `window` tokens.
        hp.layer_is_swa.assign(hp.n_layer, true);
    } else {
        fail(
            "{}: 'sliding_window' {} is set but headroom does not know which layers of '{}' use it",
            c.label(), window, s.model_type);
    }
    if (hp.n_swa_layers() > 0) hp.sliding_window = window;
}

void read_moe(const Config& c, const std::string& arch, ModelShape& s) {
    HParams& hp = s.hp;
    hp.n_expert = c.opt("num_local_experts", c.opt("num_experts", c.opt("n_routed_experts", 0)));
    s.layer_is_moe.assign(hp.n_layer, false);
    if (hp.n_expert <= 1) {
        hp.n_expert = 0;
        return;
    }
    hp.n_expert_used = c.opt("num_experts_per_tok", c.opt("experts_per_token", 0));
    if (hp.n_expert_used == 0 || hp.n_expert_used > hp.n_expert)
        fail("{}: num_experts_per_tok {} must be between 1 and the {} experts", c.label(),
             hp.n_expert_used, hp.n_expert);
    s.n_ff_expert = c.opt("moe_intermediate_size", s.n_ff_dense);
    if (arch == "deepseek2") {
        s.n_dense_lead = c.opt("first_k_dense_replace", 0);
        const uint32_t freq = std::max(1u, c.opt("moe_layer_freq", 1));
        for (uint32_t il = s.n_dense_lead; il < hp.n_layer; ++il)
            s.layer_is_moe[il] = il % freq == 0;
        s.n_ff_shared = c.opt("n_shared_experts", 0) * s.n_ff_expert;
    } else if (arch == "qwen2moe" || arch == "qwen3moe") {
        const uint32_t step = std::max(1u, c.opt("decoder_sparse_step", 1));
        std::vector<bool> dense_only(hp.n_layer, false);
        if (const json* only = c.find("mlp_only_layers"); only && only->is_array())
            for (const auto& v : *only)
                if (v.is_number_integer() && v.get<int64_t>() >= 0 &&
                    v.get<int64_t>() < int64_t{hp.n_layer})
                    dense_only[v.get<size_t>()] = true;
        for (uint32_t il = 0; il < hp.n_layer; ++il)
            s.layer_is_moe[il] = !dense_only[il] && (il + 1) % step == 0;
        s.n_ff_shared = c.opt("shared_expert_intermediate_size", 0);
        s.shared_expert_gate = s.n_ff_shared > 0;
    } else {
        s.layer_is_moe.assign(hp.n_layer, true);
    }
}

}  // namespace

const std::vector<std::string>& known_hf_model_types() {
    static const std::vector<std::string> kNames = [] {
        std::vector<std::string> v;
        for (const auto& t : kTypes) v.push_back(t.model_type);
        return v;
    }();
    return kNames;
}

ModelShape shape_from_hf_config(const json& top, const std::string& label) {
    if (!top.is_object()) fail("{}: expected a JSON object (a config.json)", label);
    ModelShape s;
    s.model_type = model_type_of(top);
    const TypeInfo* info = nullptr;
    for (const auto& t : kTypes)
        if (s.model_type == t.model_type) info = &t;
    if (!info) {
        std::string names;
        for (const auto& t : kTypes)
            names += (names.empty() ? "" : ", ") + std::string(t.model_type);
        fail("{}: model_type '{}' is not one headroom can plan (known: {})", label,
             s.model_type.empty() ? "(missing)" : s.model_type, names);
    }
    const std::string arch = info->arch;
    const Config c(top, label);
    HParams& hp = s.hp;
    hp.arch = arch;
    hp.name = c.str("_name_or_path");
    hp.n_embd = c.req("hidden_size");
    hp.n_layer = c.req("num_hidden_layers");
    if (hp.n_layer > kMaxLayers)
        fail("{}: 'num_hidden_layers' is {}, more than {}: not a model headroom can plan",
             c.label(), hp.n_layer, kMaxLayers);
    hp.n_head = c.req("num_attention_heads");
    hp.n_head_kv = c.opt("num_key_value_heads", hp.n_head);
    hp.n_vocab = c.req("vocab_size");
    hp.n_ctx_train = c.opt("max_position_embeddings", 0);
    s.n_ff_dense = c.req("intermediate_size");
    if (hp.n_head_kv == 0 || hp.n_head % hp.n_head_kv != 0)
        fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", label,
             hp.n_head, hp.n_head_kv);
    hp.head_dim_k = c.opt("head_dim", hp.n_embd / hp.n_head);
    hp.head_dim_v = hp.head_dim_k;
    hp.n_rot = hp.head_dim_k;
    hp.tied_embeddings = c.flag("tie_word_embeddings").value_or(info->tied_default);
    s.torch_dtype = c.str("torch_dtype");
    if (s.torch_dtype.empty()) s.torch_dtype = c.str("dtype");
    if (const json* q = c.find("quantization_config"); q && q->is_object())
        if (auto m = q->find("quant_method"); m != q->end() && m->is_string())
            s.quant_method = m->get<std::string>();

    if (arch == "deepseek2") {
        hp.kv_lora_rank = c.req("kv_lora_rank");
        hp.qk_rope_head_dim = c.req("qk_rope_head_dim");
        s.qk_nope_head_dim = c.req("qk_nope_head_dim");
        s.q_lora_rank = c.opt("q_lora_rank", 0);
        // Attention runs per head on the rebuilt keys and values.
        hp.head_dim_k = s.qk_nope_head_dim + hp.qk_rope_head_dim;
        hp.head_dim_v = c.req("v_head_dim");
        hp.n_head_kv = hp.n_head;
        hp.n_rot = hp.qk_rope_head_dim;
        s.router_bias = c.str("topk_method") == "noaux_tc";
    } else if (c.find("kv_lora_rank")) {
        fail(
            "{}: 'kv_lora_rank' (latent attention) is set but model_type '{}' is not a DeepSeek "
            "one",
            label, s.model_type);
    }
    s.qkv_bias = arch == "qwen2" || arch == "qwen2moe" || c.flag("attention_bias").value_or(false);
    s.o_bias = arch == "gpt-oss";
    s.mlp_bias = arch == "gpt-oss" || c.flag("mlp_bias").value_or(false);
    s.attn_sinks = arch == "gpt-oss";
    s.sandwich_norms = arch == "gemma2" || arch == "gemma3";
    hp.qk_norm = arch == "qwen3" || arch == "qwen3moe" || arch == "gemma3";
    hp.rope_style = arch == "llama" ? RopeStyle::Normal : RopeStyle::NeoX;

    read_sliding_window(c, arch, s);
    read_moe(c, arch, s);
    // Activations: the widest feed-forward one token goes through.
    hp.n_ff = s.n_ff_dense;
    if (hp.n_expert > 0) {
        const bool any_dense =
            std::find(s.layer_is_moe.begin(), s.layer_is_moe.end(), false) != s.layer_is_moe.end();
        hp.n_ff = std::max(any_dense ? s.n_ff_dense : 0u, std::max(s.n_ff_expert, s.n_ff_shared));
    }
    // The byte counts multiply these widths in 64 bits: a config whose
    // tensors hold more than 2^50 parameters (a thousand times the largest
    // published model) is damaged, and is refused before it could wrap them.
    long double n_params = 0;
    for (const WeightTensor& t : tensor_inventory(s))
        n_params += static_cast<long double>(t.n_cols) * t.n_rows * t.n_expert;
    if (n_params > 0x1p50L)
        fail(
            "{}: the config describes {:.3g} parameters, more than 2^50: not a model headroom can "
            "plan",
            label, static_cast<double>(n_params));
    return s;
}

ModelShape read_hf_config(const std::string& path) {
    std::ifstream in(path);
    if (!in) fail("--hf-config {}: cannot read the file", path);
    json j;
    try {
        j = json::parse(in);
    } catch (const json::exception& e) {
        fail("--hf-config {}: not valid JSON ({})", path, e.what());
    }
    return shape_from_hf_config(j, path);
}

std::vector<WeightTensor> tensor_inventory(const ModelShape& s) {
    const HParams& hp = s.hp;
    std::vector<WeightTensor> out;
    const uint64_t E = hp.n_embd, H = hp.n_head;
    auto add = [&](int32_t il, const char* name, uint64_t cols, uint64_t rows = 1,
                   uint64_t experts = 1) {
        const std::string full = il < 0 ? std::string(name) : fmt::format("blk.{}.{}", il, name);
        out.push_back({full, cols, rows, experts, il});
    };
    add(-1, "token_embd.weight", E, hp.n_vocab);
    for (uint32_t l = 0; l < hp.n_layer; ++l) {
        const auto il = static_cast<int32_t>(l);
        add(il, "attn_norm.weight", E);
        if (hp.kv_lora_rank > 0) {
            const uint64_t qk = s.qk_nope_head_dim + hp.qk_rope_head_dim;
            if (s.q_lora_rank > 0) {
                add(il, "attn_q_a.weight", E, s.q_lora_rank);
                add(il, "attn_q_a_norm.weight", s.q_lora_rank);
                add(il, "attn_q_b.weight", s.q_lora_rank, H * qk);
            } else {
                add(il, "attn_q.weight", E, H * qk);
            }
            add(il, "attn_kv_a_mqa.weight", E, hp.kv_lora_rank + hp.qk_rope_head_dim);
            add(il, "attn_kv_a_norm.weight", hp.kv_lora_rank);
            add(il, "attn_kv_b.weight", hp.kv_lora_rank, H * (s.qk_nope_head_dim + hp.head_dim_v));
            add(il, "attn_output.weight", H * hp.head_dim_v, E);
        } else {
            const uint64_t q = H * hp.head_dim_k, k = uint64_t{hp.n_head_kv} * hp.head_dim_k,
                           v = uint64_t{hp.n_head_kv} * hp.head_dim_v;
            add(il, "attn_q.weight", E, q);
            add(il, "attn_k.weight", E, k);
            add(il, "attn_v.weight", E, v);
            add(il, "attn_output.weight", H * hp.head_dim_v, E);
            if (s.qkv_bias) {
                add(il, "attn_q.bias", q);
                add(il, "attn_k.bias", k);
                add(il, "attn_v.bias", v);
            }
            if (s.o_bias) add(il, "attn_output.bias", E);
            if (hp.qk_norm) {
                add(il, "attn_q_norm.weight", hp.head_dim_k);
                add(il, "attn_k_norm.weight", hp.head_dim_k);
            }
            if (s.attn_sinks) add(il, "attn_sinks.weight", H);
        }
        if (s.sandwich_norms) {
            add(il, "post_attention_norm.weight", E);
            add(il, "post_ffw_norm.weight", E);
        }
        add(il, "ffn_norm.weight", E);
        if (!s.layer_is_moe[l]) {
            const uint64_t F = s.n_ff_dense;
            add(il, "ffn_gate.weight", E, F);
            add(il, "ffn_up.weight", E, F);
            add(il, "ffn_down.weight", F, E);
            if (s.mlp_bias) {
                add(il, "ffn_gate.bias", F);
                add(il, "ffn_up.bias", F);
                add(il, "ffn_down.bias", E);
            }
            continue;
        }
        const uint64_t X = hp.n_expert, F = s.n_ff_expert;
        add(il, "ffn_gate_inp.weight", E, X);
        if (s.mlp_bias) add(il, "ffn_gate_inp.bias", X);
        if (s.router_bias) add(il, "exp_probs_b.bias", X);
        add(il, "ffn_gate_exps.weight", E, F, X);
        add(il, "ffn_up_exps.weight", E, F, X);
        add(il, "ffn_down_exps.weight", F, E, X);
        if (s.mlp_bias) {
            add(il, "ffn_gate_exps.bias", F, 1, X);
            add(il, "ffn_up_exps.bias", F, 1, X);
            add(il, "ffn_down_exps.bias", E, 1, X);
        }
        if (s.n_ff_shared > 0) {
            add(il, "ffn_gate_shexp.weight", E, s.n_ff_shared);
            add(il, "ffn_up_shexp.weight", E, s.n_ff_shared);
            add(il, "ffn_down_shexp.weight", s.n_ff_shared, E);
            if (s.shared_expert_gate) add(il, "ffn_gate_inp_shexp.weight", E);
        }
    }
    add(-1, "output_norm.weight", E);
    if (!hp.tied_embeddings) add(-1, "output.weight", E, hp.n_vocab);
    return out;
}

std::vector<WeightTensor> tensor_inventory(const gguf::GgufFile& file) {
    std::vector<WeightTensor> out;
    for (const auto& t : file.tensors()) {
        WeightTensor w;
        w.name = std::string(t.name);
        w.n_cols = t.n_dims > 0 ? t.ne[0] : 1;
        w.n_rows = t.n_dims > 1 ? t.ne[1] : 1;
        w.n_expert = 1;
        for (uint32_t d = 2; d < t.n_dims; ++d) w.n_expert *= t.ne[d];
        if (w.name.starts_with("blk.")) {
            int32_t il = -1;
            const std::string_view rest = std::string_view(w.name).substr(4);
            auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), il);
            if (ec == std::errc()) w.layer = il;
        }
        out.push_back(std::move(w));
    }
    return out;
}

}  // namespace headroom
