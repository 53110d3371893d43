// Pre-quantized Hugging Face checkpoints, repacked at load into the types
// headroom's kernels run. Each quantized linear layer becomes one tensor of
// a GGUF type whose bytes a producer computes from the checkpoint's tensors:
//
//   compressed-tensors "pack-quantized", int4 (W4A16: llm-compressor's GPTQ,
//   AWQ, RTN), w = scale · (q − z), q and z 4-bit, groups of G ≥ 32 columns
//   (G a multiple of 32) or one group per row:
//     symmetric (z = 0)  -> Q4_0, d = scale: exact where the scale is an
//                           f16 normal (|scale| ≥ 2^-14), as in every
//                           published checkpoint;
//     asymmetric         -> Q4_1, d = scale, m = −scale · (z + 8) rounded to
//                           f16: |error| ≤ |m| · 2^-11 per weight.
//   int8 (W8A16), symmetric -> Q8_0, d = scale: exact, as above.
//   Groups chosen by activation order (a weight_g_idx that is not column / G)
//   -> BF16 of the dequantized weight: |error| ≤ 2^-9 |w|.
//   AutoGPTQ (quant_method "gptq": qweight [in/8, out] packed down the
//   inputs, qzeros [groups, out/8] stored less 1 in the v1 format, scales
//   [groups, out], g_idx) and AutoAWQ GEMM (quant_method "awq": qweight
//   [in, out/8] and qzeros packed across the outputs in the order
//   0 2 4 6 1 3 5 7), w = scale (q − z), q and z unsigned 4-bit: as the
//   int4 above (z = 8 everywhere: Q4_0; else Q4_1; g_idx reordered: BF16).
//   FP8 e4m3 (compressed-tensors "float-quantized" with a per-tensor,
//   per-channel or per-group weight_scale; quant_method "fp8" with
//   weight_scale_inv blocks, as Qwen3-FP8 and DeepSeek-V3) -> BF16 of
//   fp8 · scale: |error| ≤ 2^-9 |w|.
//
// The reference dequantizes in the scale's dtype (compressed-tensors'
// dequantize rounds (q − z) · scale to bf16 or f16); headroom's kernels
// multiply in f32, which is the exact value of the stored numbers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "format/safetensors.h"
#include "format/tensor-type.h"

namespace headroom::hf {

// A checkpoint tensor and where its bytes are.
struct Stored {
    std::string file;  // the shard, for messages
    const safetensors::Tensor* tensor = nullptr;
    const uint8_t* data = nullptr;
};
using StoredTensors = std::map<std::string, Stored>;

struct Repacked {
    TensorType type = TensorType::F32;
    int64_t n_rows = 0;  // out
    int64_t n_cols = 0;  // in
    // Writes the n_rows rows of n_cols in `type` to dst.
    std::function<void(uint8_t* dst)> produce;
};

class QuantizedCheckpoint {
  public:
    // From config.json's quantization_config; nullopt when there is none.
    // Throws headroom::Error naming `label` for a method or setting headroom
    // does not read.
    static std::optional<QuantizedCheckpoint> from_config(const nlohmann::json& config,
                                                          const std::string& label);

    // The weight `name` ("model.layers.0.self_attn.q_proj.weight") when the
    // checkpoint stores it quantized: its tensors are checked (shapes,
    // dtypes, scales and zero points present) and a producer made. nullopt
    // for a weight stored plainly. The producer reads `tensors`, which must
    // outlive it.
    std::optional<Repacked> repack(const std::string& name, const StoredTensors& tensors) const;

    const std::string& method() const { return method_; }

  private:
    std::string label_;
    std::string method_;  // "compressed-tensors", "fp8"
    std::string format_;  // "pack-quantized", "float-quantized", "naive-quantized"
    uint32_t num_bits = 0;
    bool is_float = false;
    bool symmetric = true;
    int64_t group_size = 0;                  // 0: one group per row (channel), -1: the whole tensor
    int64_t block_rows = 0, block_cols = 0;  // fp8 weight_scale_inv blocks
    bool zeros_minus_one = false;            // GPTQ v1: zeros are stored less 1

    // AutoGPTQ's and AutoAWQ's own layouts (qweight, qzeros, scales, g_idx).
    std::optional<Repacked> repack_gptq_awq(const std::string& base,
                                            const StoredTensors& tensors) const;
};

}  // namespace headroom::hf
