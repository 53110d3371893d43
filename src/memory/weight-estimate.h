// Weight bytes of a model in a weight type it is not (yet) stored in: the
// planner's estimate for a Hugging Face config, a built-in model, or a GGUF
// file re-quantized (--compare-quant, --fit).
//
// GGUF types are estimated tensor by tensor with the rule `headroom quantize`
// writes by (shape/quant-mix.h, llama.cpp's llama_tensor_get_type): a K-quant
// "mix" such as Q4_K_M gives attn_v and ffn_down of some layers Q6_K, the
// output (or tied token embeddings) Q6_K, and falls back to a 32-element
// block type for rows whose length is not a multiple of 256. Applied to the
// real tensor list, the estimate is the quantized file's size to the byte.
//
// Formats loaded from Hugging Face checkpoints quantize the linear layers
// only; embeddings, lm_head, norms and routers stay 16-bit:
//   fp8   1 B per weight + one f32 scale per output row
//   nf4   bitsandbytes NF4: 4 bits + one f32 absmax per 64 weights (4.5 bits;
//         double quantization off, the transformers default)
//   awq   4 bits + per group of 128 inputs an f16 scale and a 4-bit zero
//   gptq  as awq, plus an int32 group index per input column (act-order)
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shape/hparams.h"
#include "shape/model-shape.h"
#include "shape/quant-mix.h"

namespace headroom {

enum class WeightType {
    F32,
    F16,
    BF16,
    FP8,
    Q8_0,
    Q6_K,
    Q5_K_M,
    Q5_K_S,
    Q5_1,
    Q5_0,
    Q5_K,  // every matrix Q5_K (no mix)
    Q4_K_M,
    Q4_K_S,
    Q4_K,  // every matrix Q4_K (no mix)
    Q4_1,
    Q4_0,
    IQ4_XS,
    IQ4_NL,
    Q3_K_L,
    Q3_K_M,
    Q3_K_S,
    Q2_K,
    MXFP4,
    NF4,
    AWQ,
    GPTQ
};

struct WeightTypeInfo {
    WeightType type;
    std::string_view name;   // as --weight-type takes it: "q4_k_m"
    std::string_view label;  // for tables: "Q4_K_M", "FP16"
    std::string_view bits;   // the class people compare: "16-bit", "8-bit", "4-bit"
    bool gguf;               // a llama.cpp file type
    // Rank for --fit: how much quality a switch to this type gives up
    // (0: none). Community perplexity comparisons order them this way.
    double quality_cost;
    // Offered by --fit and --compare-quant (the others are taken when named).
    bool candidate;
};

const std::vector<WeightTypeInfo>& weight_types();
const WeightTypeInfo& info(WeightType type);
inline std::string_view name(WeightType type) {
    return info(type).name;
}
// Case-insensitive; also accepts fp16, float16, bfloat16, int8 (= q8_0),
// awq-int4, gptq-int4. nullopt for an unknown name.
std::optional<WeightType> weight_type_from_name(std::string_view name);

// The checkpoint's own type from config.json: its quantization_config, else
// torch_dtype, else bf16.
WeightType checkpoint_weight_type(const ModelShape& shape);

// The GGUF file type's per-tensor rule (shape/quant-mix.h): the same for the
// estimate and `headroom quantize`. Throws for a type that is not a GGUF one.
QuantRecipe gguf_recipe(WeightType type);
// llama.cpp's general.file_type code (LLAMA_FTYPE_MOSTLY_*) for a GGUF type;
// the unmixed K types write their _M code, as llama.cpp's --pure does.
uint32_t gguf_file_type_code(WeightType type);

struct WeightEstimate {
    uint64_t bytes = 0;
    uint64_t n_params = 0;
    std::vector<uint64_t> layer_bytes;              // per transformer block
    std::vector<uint64_t> layer_expert_bytes;       // of those, the experts' (*_exps)
    std::map<std::string, uint64_t> bytes_by_type;  // "Q4_K" -> bytes
    double bits_per_weight() const {
        return n_params ? 8.0 * static_cast<double>(bytes) / static_cast<double>(n_params) : 0;
    }
};

// Whether `type` can hold every tensor: AWQ and GPTQ need each quantized
// matrix's inputs to be a multiple of their group (128); the rest hold any.
bool weight_type_holds(const std::vector<WeightTensor>& tensors, WeightType type);

// `hp` supplies n_layer, n_head/n_head_kv (70B and 8-expert rules) and
// n_expert. Throws headroom::Error for a tensor a 4-bit group format cannot
// hold (rows not a multiple of its group).
WeightEstimate estimate_weights(const std::vector<WeightTensor>& tensors, const HParams& hp,
                                WeightType type);

}  // namespace headroom
