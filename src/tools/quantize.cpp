#include "tools/quantize.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "checkpoint/hf-folder.h"
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
    if (opt.keep_types) {
        std::vector<TensorType> types;
        for (const auto& t : in.tensors()) types.push_back(t.type);
        return types;
    }
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

namespace {

void drop_pages(const uint8_t* p, uint64_t n) {
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto lo = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
    const auto hi = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
    if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

// The keys a written file does not carry over: its type, and the mark of
// unpermuted q/k rows (the writer permutes them).
const std::vector<std::string> kDroppedKeys = {"general.file_type", "general.quantization_version",
                                               hf::kRopeNeoxKey};

gguf::GgufWriter header_for(const gguf::GgufFile& in, const QuantizeOptions& opt) {
    gguf::GgufWriter w(in.alignment());
    w.copy_metadata(in, kDroppedKeys);
    w.set_u32("general.file_type", opt.file_type);
    w.set_u32("general.quantization_version", 2);
    return w;
}

std::vector<TensorType> checked_types(const gguf::GgufFile& in, const QuantizeOptions& opt) {
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
    return types;
}

// The input row that output row r of `t` is: a Hugging Face llama's q and k
// keep each head's rotated halves apart (i, i + d/2), llama.cpp's GGUF has
// them in pairs (2i, 2i + 1); other rows stay.
struct RowOrder {
    int64_t head_rows = 0;  // 0: rows as they are

    int64_t source(int64_t r) const {
        if (head_rows == 0) return r;
        const int64_t half = head_rows / 2;
        const int64_t head = r / head_rows;
        const int64_t j = r % head_rows;
        return head * head_rows + (j % 2) * half + j / 2;
    }
};

RowOrder row_order(const gguf::GgufFile& in, const HParams& hp, std::string_view name) {
    if (!in.get_bool(hf::kRopeNeoxKey).value_or(false) || hp.arch != "llama") return {};
    if (name.ends_with(".attn_q.weight") || name.ends_with(".attn_k.weight"))
        return {static_cast<int64_t>(hp.head_dim_k)};
    return {};
}

}  // namespace

gguf::GgufFile quantized_view(const gguf::GgufFile& in, const QuantizeOptions& opt) {
    const std::vector<TensorType> types = checked_types(in, opt);
    std::vector<gguf::TensorInfo> tensors;
    uint64_t offset = 0;
    for (size_t i = 0; i < in.tensors().size(); ++i) {
        gguf::TensorInfo t = in.tensors()[i];
        t.type = types[i];
        t.size_bytes = gguf::GgufWriter::tensor_bytes(t.type, t.shape());
        t.offset = offset;
        t.data = nullptr;
        offset += (t.size_bytes + in.alignment() - 1) / in.alignment() * in.alignment();
        tensors.push_back(t);
    }
    return gguf::GgufFile::assemble(fmt::format("{} as {}", in.path(), name(opt.recipe.base)),
                                    header_for(in, opt).to_bytes(), std::move(tensors), {}, nullptr,
                                    false);
}

void quantize_model(const gguf::GgufFile& in, const std::string& out_path,
                    const QuantizeOptions& opt) {
    const std::vector<TensorType> types = checked_types(in, opt);
    const HParams hp = read_hparams(in, false);
    gguf::GgufWriter w = header_for(in, opt);

    ThreadPool pool(opt.n_threads);
    uint64_t out_bytes = 0;
    for (size_t i = 0; i < in.tensors().size(); ++i) {
        const gguf::TensorInfo& t = in.tensors()[i];
        const TensorType dst_type = types[i];
        const std::vector<int64_t> shape = t.shape();
        out_bytes += gguf::GgufWriter::tensor_bytes(dst_type, shape);
        const gguf::TensorInfo* src = &t;
        const RowOrder order = row_order(in, hp, t.name);
        // Only a mapping's pages: an f32 copy beside it would be zeroed.
        const auto section = in.data_section();
        const bool drop = in.is_mapped() && t.data && t.data >= section.data() &&
                          t.data + t.size_bytes <= section.data() + section.size();
        const gguf::GgufFile::Producer* produce = in.producer(i);
        w.add_tensor(
            std::string(t.name), dst_type, shape,
            [src, dst_type, order, drop, produce, &pool](uint8_t* dst) {
                const int64_t n_cols = src->ne[0];
                const int64_t n_rows = src->n_rows();
                const uint64_t src_row = row_bytes(src->type, static_cast<uint64_t>(n_cols));
                const uint64_t dst_row = row_bytes(dst_type, static_cast<uint64_t>(n_cols));
                const bool same = src->type == dst_type && order.head_rows == 0;
                // A produced tensor (a pre-quantized checkpoint's, repacked) is made
                // first: in place when it is written as it is.
                if (produce && same) {
                    (*produce)(dst);
                    return;
                }
                std::vector<uint8_t> made;
                const uint8_t* data = src->data;
                if (produce) {
                    made.resize(src->size_bytes);
                    (*produce)(made.data());
                    data = made.data();
                }
                if (same) {
                    std::memcpy(dst, data, src->size_bytes);
                } else if (src->type == dst_type) {
                    // Rows reordered, bytes unchanged (no round trip through f32).
                    for (int64_t r = 0; r < n_rows; ++r)
                        std::memcpy(dst + r * dst_row, data + order.source(r) * src_row, dst_row);
                } else {
                    pool.parallel_for(n_rows, [&](int64_t begin, int64_t end, int) {
                        std::vector<float> row(static_cast<size_t>(n_cols));  // (n_cols,) f32
                        for (int64_t r = begin; r < end; ++r) {
                            const uint8_t* in_row = data + order.source(r) * src_row;
                            ref::dequantize_row(src->type, in_row, row.data(), n_cols);
                            ref::quantize_row(dst_type, row.data(), dst + r * dst_row, n_cols);
                        }
                    });
                }
                // The input's pages are not read again: out of this process's
                // memory (whole pages inside the tensor; the file keeps them).
                if (drop) drop_pages(src->data, src->size_bytes);
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
