// Re-quantizing a GGUF model: which type each tensor gets, and the rewrite.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "format/tensor-type.h"

namespace headroom {

namespace gguf {
class GgufFile;
struct TensorInfo;
}  // namespace gguf

struct QuantizeOptions {
    TensorType type = TensorType::Q4_0;
    std::optional<TensorType> embedding_type;  // token_embd.weight; default: type
    std::optional<TensorType> output_type;     // output.weight; default: type
    int n_threads = 1;
    bool progress = true;
};

// The type a tensor is written as: 1-D tensors (norms, biases) become F32;
// rows that are not a multiple of the target's block size fall back to a
// 32-element type of similar size (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0,
// otherwise F16 when even 32 does not divide the row).
TensorType choose_tensor_type(const gguf::TensorInfo& t, const QuantizeOptions& opt);

// `want` if rows of `row_length` elements fit its blocks, else the fallback above.
TensorType fit_type_to_row(TensorType want, int64_t row_length);

// Writes `in` to `out_path` with tensors re-quantized. Throws headroom::Error.
void quantize_model(const gguf::GgufFile& in, const std::string& out_path,
                    const QuantizeOptions& opt);

}  // namespace headroom
