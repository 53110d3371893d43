// A model's shape without its weights: what a Hugging Face config.json (or
// the built-in table, which holds the same keys) says about a model, turned
// into the hyperparameters the byte accounting reads (HParams) and into the
// list of tensors a GGUF conversion of it would hold. The planner uses the
// list to count parameters and to estimate weight bytes for any weight type
// (memory/weight-estimate.h); a GGUF file gives the same list exactly from
// its tensor table.
//
// Tensor names follow llama.cpp's GGUF conventions (token_embd, blk.N.attn_q,
// blk.N.ffn_down_exps, ...) because llama.cpp's quantization rules, which the
// estimate reproduces, pick a type per tensor by name.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "shape/hparams.h"

namespace headroom {

namespace gguf {
class GgufFile;
}

// One tensor as a GGUF file stores it: ne0 = n_cols (the row length that
// quantization blocks divide), n_rows rows per expert, n_expert slices.
struct WeightTensor {
    std::string name;
    uint64_t n_cols = 0;
    uint64_t n_rows = 1;
    uint64_t n_expert = 1;
    int32_t layer = -1;  // transformer block, -1 for embeddings, output and final norm
    uint64_t n_elements() const { return n_cols * n_rows * n_expert; }
    bool is_matrix() const { return n_rows > 1 || n_expert > 1; }
};

struct ModelShape {
    HParams hp;                // n_ff is the widest feed-forward a step computes
    std::string model_type;    // config.json's model_type ("llama", "deepseek_v3"...)
    std::string torch_dtype;   // the checkpoint's own dtype ("bfloat16"), if given
    std::string quant_method;  // quantization_config.quant_method ("fp8", "awq"...), if any

    // Feed-forward: dense layers use n_ff_dense; mixture-of-experts layers hold
    // hp.n_expert experts of n_ff_expert each plus shared experts of total
    // width n_ff_shared. The first n_dense_lead layers are dense (DeepSeek).
    uint32_t n_ff_dense = 0;
    uint32_t n_ff_expert = 0;
    uint32_t n_ff_shared = 0;
    uint32_t n_dense_lead = 0;
    std::vector<bool> layer_is_moe;

    // Multi-head latent attention (DeepSeek V2/V3): the query goes through a
    // low-rank q_lora_rank bottleneck (0: a plain projection); keys and
    // values are rebuilt from the cached latent of hp.kv_lora_rank.
    uint32_t q_lora_rank = 0;
    uint32_t qk_nope_head_dim = 0;

    bool qkv_bias = false;            // Qwen2, gpt-oss
    bool o_bias = false;              // gpt-oss
    bool mlp_bias = false;            // gpt-oss experts
    bool attn_sinks = false;          // gpt-oss: one learned logit per head
    bool sandwich_norms = false;      // Gemma 2/3: post-attention and post-FFN norms
    bool router_bias = false;         // DeepSeek V3: expert-selection bias
    bool shared_expert_gate = false;  // Qwen2-MoE: a sigmoid gate on the shared expert
};

// Reads config.json's keys (and a nested "text_config" for multimodal
// checkpoints). Throws headroom::Error naming `label` and the key for an
// unknown model_type, a missing required key, or an attention kind headroom
// cannot account for (e.g. linear attention layers).
ModelShape shape_from_hf_config(const nlohmann::json& config, const std::string& label);
ModelShape read_hf_config(const std::string& path);

// Model types shape_from_hf_config accepts, for messages.
const std::vector<std::string>& known_hf_model_types();

// The tensors a GGUF conversion of the model holds (llama.cpp names and
// shapes). Multi-token-prediction layers are left out, as llama.cpp's
// converter leaves them out.
std::vector<WeightTensor> tensor_inventory(const ModelShape& shape);

// The tensor table of a GGUF file, as WeightTensors.
std::vector<WeightTensor> tensor_inventory(const gguf::GgufFile& file);

}  // namespace headroom
