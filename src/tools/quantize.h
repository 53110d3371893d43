// Re-quantizing a GGUF model: which type each tensor gets, and the rewrite.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "format/tensor-type.h"
#include "shape/quant-mix.h"

namespace headroom {

namespace gguf {
class GgufFile;
struct TensorInfo;
}  // namespace gguf

struct QuantizeOptions {
    QuantRecipe recipe;                        // the file type: base type and mix
    uint32_t file_type = 0;                    // general.file_type (LLAMA_FTYPE_*)
    std::optional<TensorType> embedding_type;  // token_embd.weight; default: the recipe's
    std::optional<TensorType> output_type;     // output.weight; default: the recipe's
    int n_threads = 1;
    bool progress = true;
    // Every tensor in its own type (the recipe unused): a model written out
    // as it is, e.g. a pre-quantized checkpoint's repacked weights.
    bool keep_types = false;
};

// The type of every tensor of `in`, in file order: the recipe's rule
// (shape/quant-mix.h, the planner's too), then the two overrides, each fitted
// to the row length.
std::vector<TensorType> choose_tensor_types(const gguf::GgufFile& in, const QuantizeOptions& opt);

// Writes `in` to `out_path` with tensors re-quantized, tensor by tensor on
// opt.n_threads threads: host memory holds one output tensor at a time (a
// mapped input's pages are dropped once read). The file is llama.cpp's
// layout: a Hugging Face llama's q/k rows are permuted for pairwise RoPE
// (checkpoint/hf-folder.h). Throws headroom::Error.
void quantize_model(const gguf::GgufFile& in, const std::string& out_path,
                    const QuantizeOptions& opt);

// The metadata and tensor table quantize_model would write, without data,
// for planning the result before it exists (describe_gguf reads it). Tensor
// names point into `in`, which must outlive the view. Throws headroom::Error
// for a type the quantizers cannot produce.
gguf::GgufFile quantized_view(const gguf::GgufFile& in, const QuantizeOptions& opt);

}  // namespace headroom
