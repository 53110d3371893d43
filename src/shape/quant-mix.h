// Which type each tensor of a GGUF model is written as for a llama.cpp file
// type: one rule, used by `headroom quantize` to write the file and by the
// planner (memory/weight-estimate.h) to predict its size, so the two agree
// to the byte.
//
// The rule is llama.cpp's (src/llama-quant.cpp, llama_tensor_get_type):
//   - only matrices named "*weight" are quantized; norms, biases and the MoE
//     router (ffn_gate_inp) are F32;
//   - with a mix (every quantized file type unless the file is "pure"), the
//     output matrix, or the token embeddings when they are tied to it, is
//     Q6_K (Q8_0 when the file type is Q8_0, or its rows do not fit 256);
//     the K mixes give attn_v and ffn_down of the layers use_more_bits picks
//     Q6_K (_M), or the first layers Q5_K (Q4_K_S); the 3-bit and 2-bit
//     mixes raise attn_v, ffn_down and attn_output one or two K types
//     (Q3_K_M: Q4_K, the first layers Q5_K; Q2_K: Q3_K, attn_v Q4_K under
//     grouped-query attention of 4 or more); IQ4_NL / IQ4_XS give the first
//     eighth of ffn_down Q5_K; 8-expert models keep attn_v and attn_k Q8_0;
//   - a row whose length the type's block does not divide falls back to a
//     32-element type of similar size: Q4_K -> Q5_0, Q5_K -> Q5_1,
//     Q6_K -> Q8_0, Q8_K -> Q8_0, Q2_K / Q3_K -> Q4_0, IQ4_XS -> IQ4_NL,
//     and F16 when even 32 does not divide it.
#pragma once

#include <cstdint>
#include <vector>

#include "format/tensor-type.h"
#include "shape/hparams.h"
#include "shape/model-shape.h"

namespace headroom {

enum class TensorMix {
    Pure,     // every matrix the base type
    Default,  // llama.cpp's rules for its plain types (Q8_0, Q4_0, ...): the output Q6_K
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q3_K_S,
    Q3_K_M,
    Q3_K_L,
    Q2_K,
    Iq4,    // IQ4_NL and IQ4_XS
    Mxfp4,  // experts MXFP4, other matrices Q8_0
};

struct QuantRecipe {
    TensorType base = TensorType::Q4_0;
    TensorMix mix = TensorMix::Default;
};

// A matrix llama.cpp's quantizer converts (see above).
bool is_quantizable(const WeightTensor& t);

// `want` if rows of `row_length` elements fit its blocks, else the fallback.
TensorType fit_type_to_row(TensorType want, uint64_t row_length);

// The type of each tensor, in the order of `tensors`. `hp` supplies n_layer,
// n_head / n_head_kv (the 70B rule) and n_expert (the 8-expert rules).
std::vector<TensorType> choose_tensor_types(const std::vector<WeightTensor>& tensors,
                                            const HParams& hp, const QuantRecipe& recipe);

}  // namespace headroom
