#include "tools/quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/progress.h"
#include "core/thread-pool.h"
#include "core/units.h"
#include "format/gguf-reader.h"
#include "format/gguf-writer.h"
#include "kernels/cpu/ref/quant.h"
#include "shape/hparams.h"
#include "shape/model-shape.h"

namespace headroom {

std::vector<TensorType> choose_tensor_types(const gguf::GgufFile& in, const QuantizeOptions& opt) {
    const std::vector<WeightTensor> inventory = tensor_inventory(in);
    std::vector<TensorType> types =
        choose_tensor_types(inventory, read_hparams(in, false), opt.recipe);
    // Tied embeddings are the output matrix too: --output-type sets them, as
    // llama.cpp's --output-tensor-type does (else --embedding-type).
    const bool tied = std::none_of(inventory.begin(), inventory.end(),
                                   [](const WeightTensor& t) { return t.name == "output.weight"; });
    for (size_t i = 0; i < types.size(); ++i) {
        const WeightTensor& t = inventory[i];
        if (!t.is_matrix()) continue;
        const bool output = t.name == "output.weight" || (tied && t.name == "token_embd.weight");
        std::optional<TensorType> want;
        if (output) want = opt.output_type;
        if (!want && t.name == "token_embd.weight") want = opt.embedding_type;
        if (want) types[i] = fit_type_to_row(*want, t.n_cols);
    }
    return types;
}

void quantize_model(const gguf::GgufFile& in, const std::string& out_path,
                    const QuantizeOptions& opt) {
    const std::vector<TensorType> types = choose_tensor_types(in, opt);
    for (const TensorType t : types)
        if (!ref::can_quantize(t))
            fail(
                "quantize: cannot produce {} (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                "Q5_1, Q4_K, Q5_K, Q6_K)",
                name(t));
    for (const auto& t : in.tensors())
        if (!can_dequantize(t.type))
            fail("quantize: {}: tensor '{}' is {}, which headroom cannot read", in.path(), t.name,
                 name(t.type));

    gguf::GgufWriter w(in.alignment());
    w.copy_metadata(in, {"general.file_type", "general.quantization_version"});
    w.set_u32("general.file_type", opt.file_type);
    w.set_u32("general.quantization_version", 2);

    ThreadPool pool(opt.n_threads);
    uint64_t out_bytes = 0;
    for (size_t i = 0; i < in.tensors().size(); ++i) {
        const gguf::TensorInfo& t = in.tensors()[i];
        const TensorType dst_type = types[i];
        const std::vector<int64_t> shape = t.shape();
        out_bytes += gguf::GgufWriter::tensor_bytes(dst_type, shape);
        const gguf::TensorInfo* src = &t;
        w.add_tensor(std::string(t.name), dst_type, shape, [src, dst_type, &pool](uint8_t* dst) {
            const int64_t n_cols = src->ne[0];
            const int64_t n_rows = src->n_rows();
            const uint64_t src_row = row_bytes(src->type, static_cast<uint64_t>(n_cols));
            const uint64_t dst_row = row_bytes(dst_type, static_cast<uint64_t>(n_cols));
            if (src->type == dst_type) {
                std::memcpy(dst, src->data, src->size_bytes);
                return;
            }
            pool.parallel_for(n_rows, [&](int64_t begin, int64_t end, int) {
                std::vector<float> row(static_cast<size_t>(n_cols));  // (n_cols,) f32
                for (int64_t r = begin; r < end; ++r) {
                    ref::dequantize_row(src->type, src->data + r * src_row, row.data(), n_cols);
                    ref::quantize_row(dst_type, row.data(), dst + r * dst_row, n_cols);
                }
            });
        });
    }
    Progress progress("quantize", out_bytes, opt.progress);
    w.write(out_path, [&](size_t i, size_t n, uint64_t done, uint64_t) {
        progress.update(done, fmt::format("{}/{} tensors", i, n));
    });
    progress.finish_with_summary(fmt::format("{} -> {} ({})", format_bytes(in.tensor_bytes_total()),
                                             format_bytes(out_bytes), out_path));
}

}  // namespace headroom
