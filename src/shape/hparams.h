// Model hyperparameters read from GGUF metadata (or, for the planner, from a
// Hugging Face config.json or a built-in table). Everything the forward pass
// and the byte accounting need to know about a model's shape lives here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace headroom {

namespace gguf {
class GgufFile;
}

enum class RopeStyle {
    Normal,  // rotate pairs (2i, 2i+1): llama
    NeoX,    // rotate pairs (i, i + d/2): qwen2, gemma3
};

struct HParams {
    std::string arch;  // general.architecture
    std::string name;  // general.name, if any
    uint32_t n_vocab = 0;
    uint32_t n_ctx_train = 0;
    uint32_t n_embd = 0;
    uint32_t n_layer = 0;
    uint32_t n_ff = 0;
    uint32_t n_head = 0;
    uint32_t n_head_kv = 0;
    uint32_t head_dim_k = 0;  // key_length; n_embd / n_head unless given
    uint32_t head_dim_v = 0;  // value_length
    uint32_t n_rot = 0;       // rope dimensions (<= head_dim_k)
    float rms_eps = 1e-5f;
    float rope_base = 10000.0f;
    float rope_base_local = 10000.0f;  // gemma3's sliding-window layers
    float rope_scale = 1.0f;           // linear position scaling (1 = none)
    // YaRN context extension (rope.scaling.type "yarn"; kernels::RopeArgs):
    // factor 0 = none.
    float yarn_factor = 0.0f;
    uint32_t yarn_orig_ctx = 0;
    float yarn_beta_fast = 32.0f;
    float yarn_beta_slow = 1.0f;
    bool yarn_truncate = true;  // false: gpt-oss (its reference's ramp is not rounded)
    RopeStyle rope_style = RopeStyle::Normal;
    bool tied_embeddings = false;  // no output.weight: logits use token_embd
    bool qk_norm = false;          // qwen3, gemma3
    // Sliding-window attention: window in tokens (0 = none) and which layers
    // use it. Layers not marked attend over the whole context.
    uint32_t sliding_window = 0;
    std::vector<bool> layer_is_swa;
    // Mixture of experts: each layer's feed-forward is n_expert experts of
    // width n_ff_exp, of which a router picks n_expert_used per token
    // (kernels/moe.h), plus a shared expert of width n_ff_shexp behind a
    // sigmoid gate (Qwen2-MoE). For a MoE model n_ff is the widest
    // feed-forward a step computes, max(n_ff_exp, n_ff_shexp).
    uint32_t n_expert = 0;
    uint32_t n_expert_used = 0;
    uint32_t n_ff_exp = 0;
    uint32_t n_ff_shexp = 0;
    bool expert_weights_norm = false;  // the chosen experts' weights are renormalized to sum 1
    bool softmax_after_topk = false;   // weights = softmax of the k chosen logits (gpt-oss)
    bool swiglu_oai = false;           // experts use kernels::swiglu_oai, with biases (gpt-oss)
    // Multi-head latent attention (planner only).
    uint32_t kv_lora_rank = 0;
    uint32_t qk_rope_head_dim = 0;

    uint32_t n_swa_layers() const;
    uint32_t gqa_group() const { return n_head / n_head_kv; }
};

// More layers than any published model has by an order of magnitude: a count
// past this is a damaged file, refused before per-layer tables are sized.
inline constexpr uint32_t kMaxLayers = 4096;

// Architectures headroom can run (llama with or without experts, qwen2,
// qwen3, gemma3, qwen2moe, qwen3moe, gpt-oss).
bool is_supported_arch(const std::string& arch);

// Reads and validates hyperparameters. Throws headroom::Error naming the
// missing or inconsistent key. `for_inference` additionally requires an
// architecture headroom can run.
HParams read_hparams(const gguf::GgufFile& file, bool for_inference);

}  // namespace headroom
