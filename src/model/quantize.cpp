#include "model/quantize.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/progress.h"
#include "core/thread-pool.h"
#include "core/units.h"
#include "format/gguf-reader.h"
#include "format/gguf-writer.h"
#include "kernels/cpu/ref/quant.h"

namespace headroom {

namespace {

TensorType fallback_for(TensorType t) {
    switch (t) {
        case TensorType::Q4_K:
            return TensorType::Q5_0;
        case TensorType::Q5_K:
            return TensorType::Q5_1;
        case TensorType::Q6_K:
            return TensorType::Q8_0;
        case TensorType::Q8_K:
            return TensorType::Q8_0;
        default:
            return TensorType::F16;
    }
}

// ggml's file-type codes (general.file_type) for the types quantize writes.
uint32_t file_type_code(TensorType t) {
    switch (t) {
        case TensorType::F32:
            return 0;
        case TensorType::F16:
            return 1;
        case TensorType::Q4_0:
            return 2;
        case TensorType::Q4_1:
            return 3;
        case TensorType::Q8_0:
            return 7;
        case TensorType::Q5_0:
            return 8;
        case TensorType::Q5_1:
            return 9;
        case TensorType::Q4_K:
            return 15;  // Q4_K_M
        case TensorType::Q5_K:
            return 17;  // Q5_K_M
        case TensorType::Q6_K:
            return 18;
        case TensorType::BF16:
            return 32;
        default:
            return 0;
    }
}

}  // namespace

TensorType choose_tensor_type(const gguf::TensorInfo& t, const QuantizeOptions& opt) {
    if (t.n_dims == 1) return TensorType::F32;
    TensorType want = opt.type;
    if (t.name == "token_embd.weight" && opt.embedding_type) want = *opt.embedding_type;
    if (t.name == "output.weight" && opt.output_type) want = *opt.output_type;
    return fit_type_to_row(want, t.ne[0]);
}

TensorType fit_type_to_row(TensorType want, int64_t row_length) {
    const auto row = static_cast<uint64_t>(row_length);
    if (row % traits(want).block_size == 0) return want;
    const TensorType fb = fallback_for(want);
    if (row % traits(fb).block_size == 0) return fb;
    return TensorType::F16;
}

void quantize_model(const gguf::GgufFile& in, const std::string& out_path,
                    const QuantizeOptions& opt) {
    if (!ref::can_quantize(opt.type))
        fail(
            "quantize: cannot produce {} (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
            "Q5_1, Q4_K, Q5_K, Q6_K)",
            name(opt.type));
    for (const auto& t : in.tensors())
        if (!can_dequantize(t.type))
            fail("quantize: {}: tensor '{}' is {}, which headroom cannot read", in.path(), t.name,
                 name(t.type));

    gguf::GgufWriter w(in.alignment());
    w.copy_metadata(in, {"general.file_type", "general.quantization_version"});
    w.set_u32("general.file_type", file_type_code(opt.type));
    w.set_u32("general.quantization_version", 2);

    ThreadPool pool(opt.n_threads);
    uint64_t out_bytes = 0;
    for (const auto& t : in.tensors()) {
        const TensorType dst_type = choose_tensor_type(t, opt);
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
    Progress progress(fmt::format("quantize {}", name(opt.type)), out_bytes, opt.progress);
    w.write(out_path, [&](size_t i, size_t n, uint64_t done, uint64_t) {
        progress.update(done, fmt::format("{}/{} tensors", i, n));
    });
    progress.finish_with_summary(fmt::format("{} -> {} ({})", format_bytes(in.tensor_bytes_total()),
                                             format_bytes(out_bytes), out_path));
}

}  // namespace headroom
