#include "checkpoint/hf-quantized.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/strings.h"

namespace headroom::hf {

namespace {

using nlohmann::json;
using safetensors::Dtype;

// A field that may be absent or null.
template <class T>
T field(const json& j, const char* key, T dflt) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? dflt : it->get<T>();
}

// A float of a scale tensor (f32, f16 or bf16).
float scalar(const Stored& s, uint64_t i) {
    const uint8_t* p = s.data + i * safetensors::size_bytes(s.tensor->dtype);
    switch (s.tensor->dtype) {
        case Dtype::F32: {
            float f;
            std::memcpy(&f, p, 4);
            return f;
        }
        case Dtype::F16: {
            uint16_t h;
            std::memcpy(&h, p, 2);
            return f16_to_f32(h);
        }
        default: {
            uint16_t h;
            std::memcpy(&h, p, 2);
            return bf16_to_f32(h);
        }
    }
}

uint32_t word(const uint8_t* p, uint64_t i) {
    uint32_t w;
    std::memcpy(&w, p + 4 * i, 4);
    return w;
}

// FP8 e4m3 (OCP): sign, 4 exponent bits (bias 7), 3 mantissa bits; no
// infinities; 0x7F and 0xFF are NaN.
float fp8_e4m3(uint8_t b) {
    const int sign = b >> 7, exp = (b >> 3) & 0xF, mant = b & 7;
    float v = exp == 0 ? std::ldexp(static_cast<float>(mant), -9)
                       : std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
    if (exp == 15 && mant == 7) v = std::nanf("");
    return sign ? -v : v;
}

void put_f16(uint8_t* p, float v) {
    const uint16_t h = f32_to_f16(v);
    std::memcpy(p, &h, 2);
}

}  // namespace

std::optional<QuantizedCheckpoint> QuantizedCheckpoint::from_config(const json& config,
                                                                    const std::string& label) {
    const json* qc = nullptr;
    for (const json* c :
         {&config, config.contains("text_config") ? &config["text_config"] : nullptr})
        if (c && c->is_object() && c->contains("quantization_config") &&
            (*c)["quantization_config"].is_object())
            qc = &(*c)["quantization_config"];
    if (!qc) return std::nullopt;
    QuantizedCheckpoint q;
    q.label_ = label;
    q.method_ = field<std::string>(*qc, "quant_method", "");
    if (q.method_ == "fp8") {
        q.is_float = true;
        q.num_bits = 8;
        q.format_ = "float-quantized";
        if (auto b = qc->find("weight_block_size"); b != qc->end() && !b->is_null()) {
            if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() ||
                !(*b)[1].is_number_integer() || (*b)[0].get<int64_t>() <= 0 ||
                (*b)[1].get<int64_t>() <= 0)
                fail("{}: quantization_config.weight_block_size is {}, expected [rows, cols]",
                     label, clipped(b->dump()));
            q.block_rows = (*b)[0].get<int64_t>();
            q.block_cols = (*b)[1].get<int64_t>();
        }
        return q;
    }
    if (q.method_ == "gptq" || q.method_ == "awq") {
        q.num_bits = field<uint32_t>(*qc, q.method_ == "gptq" ? "bits" : "w_bit", 0u);
        if (q.num_bits == 0) q.num_bits = field<uint32_t>(*qc, "bits", 0u);
        q.group_size = field<int64_t>(*qc, q.method_ == "gptq" ? "group_size" : "q_group_size", 0);
        if (q.group_size == 0) q.group_size = field<int64_t>(*qc, "group_size", -1);
        if (q.group_size <= 0) q.group_size = 0;  // one group per column of inputs: per channel
        q.symmetric = q.method_ == "gptq" ? field<bool>(*qc, "sym", true)
                                          : !field<bool>(*qc, "zero_point", true);
        q.format_ = field<std::string>(*qc, q.method_ == "gptq" ? "checkpoint_format" : "version",
                                       q.method_ == "gptq" ? "gptq" : "gemm");
        for (char& c : q.format_)
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        q.zeros_minus_one = q.method_ == "gptq" && q.format_ == "gptq";
        if (q.num_bits != 4)
            fail("{}: {}-bit {} weights: headroom reads 4-bit ones", label, q.num_bits, q.method_);
        if (q.method_ == "gptq" && q.format_ != "gptq" && q.format_ != "gptq_v2")
            fail("{}: GPTQ checkpoint_format '{}' is not one headroom reads (gptq, gptq_v2)", label,
                 clipped(q.format_));
        if (q.method_ == "awq" && q.format_ != "gemm")
            fail("{}: AWQ version '{}' is not one headroom reads (gemm)", label,
                 clipped(q.format_));
        return q;
    }
    if (q.method_ != "compressed-tensors")
        fail(
            "{}: quantization_config says '{}': headroom reads compressed-tensors, gptq, awq and "
            "fp8 checkpoints, and F32, F16 and BF16 ones",
            label, clipped(q.method_));
    q.format_ = field<std::string>(*qc, "format", "");
    const auto groups = qc->find("config_groups");
    if (groups == qc->end() || !groups->is_object() || groups->empty())
        fail("{}: quantization_config.config_groups is missing", label);
    bool first = true;
    for (const auto& [name, g] : groups->items()) {
        const auto w = g.find("weights");
        if (w == g.end() || !w->is_object())
            fail("{}: config group '{}' quantizes no weights: headroom reads weight quantization",
                 label, clipped(name));
        // Activations quantized at run time (FP8 dynamic) are not: headroom
        // keeps its own activation precision and reads the weights only.
        const auto bits = field<uint32_t>(*w, "num_bits", 0u);
        const bool is_float = field<std::string>(*w, "type", "int") == "float";
        const bool sym = field<bool>(*w, "symmetric", true);
        const std::string strategy = field<std::string>(*w, "strategy", "");
        int64_t gs = 0;
        if (strategy == "group") {
            gs = field<int64_t>(*w, "group_size", 0);
            if (gs <= 0) fail("{}: group strategy with group_size {}", label, gs);
        } else if (strategy == "tensor") {
            gs = -1;
        } else if (strategy == "block") {
            const auto b = w->find("block_structure");
            if (b == w->end() || !b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() ||
                !(*b)[1].is_number_integer() || (*b)[0].get<int64_t>() <= 0 ||
                (*b)[1].get<int64_t>() <= 0)
                fail("{}: block strategy without block_structure [rows, cols]", label);
            q.block_rows = (*b)[0].get<int64_t>();
            q.block_cols = (*b)[1].get<int64_t>();
        } else if (strategy != "channel") {
            fail(
                "{}: weight strategy '{}' is not one headroom reads (group, channel, tensor, "
                "block)",
                label, clipped(strategy));
        }
        if (const auto fmt = field<std::string>(g, "format", ""); !fmt.empty()) q.format_ = fmt;
        if (!first && (bits != q.num_bits || is_float != q.is_float || sym != q.symmetric ||
                       gs != q.group_size))
            fail("{}: config groups quantize weights differently: headroom reads one scheme",
                 label);
        first = false;
        q.num_bits = bits;
        q.is_float = is_float;
        q.symmetric = sym;
        q.group_size = gs;
    }
    const bool ok = (q.is_float && q.num_bits == 8) ||
                    (!q.is_float && (q.num_bits == 4 || (q.num_bits == 8 && q.symmetric)));
    if (!ok)
        fail(
            "{}: {}-bit {} {} weights are not a scheme headroom reads (int4, symmetric int8, "
            "fp8)",
            label, q.num_bits, q.symmetric ? "symmetric" : "asymmetric",
            q.is_float ? "float" : "int");
    return q;
}

std::optional<Repacked> QuantizedCheckpoint::repack(const std::string& name,
                                                    const StoredTensors& tensors) const {
    const std::string base = name.substr(0, name.size() - std::string(".weight").size());
    auto find = [&](const std::string& suffix) -> const Stored* {
        auto it = tensors.find(base + suffix);
        return it == tensors.end() ? nullptr : &it->second;
    };
    auto need = [&](const std::string& suffix, const char* what) -> const Stored& {
        const Stored* s = find(suffix);
        if (!s)
            fail("{}: the checkpoint lacks '{}{}' ({}) beside its quantized weight", label_, base,
                 suffix, what);
        return *s;
    };
    if (method_ == "gptq" || method_ == "awq") return repack_gptq_awq(base, tensors);
    const Stored* packed = find(".weight_packed");
    const Stored* plain = find(".weight");
    if (!packed &&
        (!plain || (plain->tensor->dtype != Dtype::F8_E4M3 && plain->tensor->dtype != Dtype::I8)))
        return std::nullopt;

    Repacked r;
    const Stored& w = packed ? *packed : *plain;
    const auto& shape = w.tensor->shape;
    if (shape.size() != 2) fail("{}: tensor '{}' is not a matrix", w.file, w.tensor->name);
    r.n_rows = shape[0];
    r.n_cols = shape[1];
    if (packed) {
        if (w.tensor->dtype != Dtype::I32)
            fail("{}: tensor '{}' is {}, expected I32 (8 or 4 values a word)", w.file,
                 w.tensor->name, safetensors::name(w.tensor->dtype));
        const Stored& s = need(".weight_shape", "the unpacked shape");
        if (s.tensor->n_elements() != 2 ||
            (s.tensor->dtype != Dtype::I64 && s.tensor->dtype != Dtype::I32))
            fail("{}: tensor '{}' is not [rows, cols]", s.file, s.tensor->name);
        int64_t dims[2];
        for (int i = 0; i < 2; ++i) {
            if (s.tensor->dtype == Dtype::I64)
                std::memcpy(&dims[i], s.data + 8 * i, 8);
            else
                dims[i] = static_cast<int32_t>(word(s.data, i));
        }
        r.n_cols = dims[1];
        if (dims[0] != shape[0] || dims[1] <= 0 || (dims[1] * num_bits + 31) / 32 != shape[1])
            fail("{}: '{}' holds {} x {} words, not {} x {} values of {} bits", w.file,
                 w.tensor->name, shape[0], shape[1], dims[0], dims[1], num_bits);
    }
    const int64_t rows = r.n_rows, cols = r.n_cols;
    if (cols % 32 != 0)
        fail("{}: '{}' rows of {} values are not whole 32-value blocks", w.file, w.tensor->name,
             cols);

    // Scales: one per group of `gs` columns of a row, per row, per tensor, or per block.
    const bool fp8_native = method_ == "fp8";
    const Stored& scale = need(fp8_native ? ".weight_scale_inv" : ".weight_scale", "the scales");
    const Dtype sd = scale.tensor->dtype;
    if (sd != Dtype::F32 && sd != Dtype::F16 && sd != Dtype::BF16)
        fail("{}: scales '{}' are {}, expected F32, F16 or BF16", scale.file, scale.tensor->name,
             safetensors::name(sd));
    const uint64_t n_scales = scale.tensor->n_elements();
    int64_t gs = group_size;
    int64_t br = block_rows, bc = block_cols;
    if (br == 0 && gs == 0 && n_scales == 1) gs = -1;  // per-tensor in fact
    uint64_t want_scales = 0;
    if (br > 0) {
        want_scales = static_cast<uint64_t>((rows + br - 1) / br) * ((cols + bc - 1) / bc);
    } else if (gs == -1) {
        want_scales = 1;
    } else if (gs == 0) {
        want_scales = static_cast<uint64_t>(rows);
    } else {
        if (cols % gs != 0)
            fail("{}: '{}' rows of {} values are not whole groups of {}", w.file, w.tensor->name,
                 cols, gs);
        want_scales = static_cast<uint64_t>(rows) * (cols / gs);
    }
    if (n_scales != want_scales)
        fail("{}: '{}' holds {} scales, expected {} for {} x {} weights", scale.file,
             scale.tensor->name, n_scales, want_scales, rows, cols);
    // Everything the producers use is captured by value (or points into `tensors`).
    const Stored* sp = &scale;
    auto scale_at = [sp, gs, br, bc, cols](int64_t row, int64_t col) {
        if (br > 0) return scalar(*sp, (row / br) * ((cols + bc - 1) / bc) + col / bc);
        if (gs == -1) return scalar(*sp, 0);
        if (gs == 0) return scalar(*sp, row);
        return scalar(*sp, row * (cols / gs) + col / gs);
    };

    if (is_float || (plain && plain->tensor->dtype == Dtype::F8_E4M3)) {
        if (w.tensor->dtype != Dtype::F8_E4M3)
            fail("{}: '{}' is {}, expected F8_E4M3", w.file, w.tensor->name,
                 safetensors::name(w.tensor->dtype));
        r.type = TensorType::BF16;
        const Stored* wp = &w;
        r.produce = [wp, rows, cols, scale_at](uint8_t* dst) {
            for (int64_t i = 0; i < rows; ++i)
                for (int64_t j = 0; j < cols; ++j) {
                    const float v = fp8_e4m3(wp->data[i * cols + j]) * scale_at(i, j);
                    const uint16_t b = f32_to_bf16(v);
                    std::memcpy(dst + 2 * (i * cols + j), &b, 2);
                }
        };
        return r;
    }

    // Integers: q(i, j) signed, from the packed words (or int8 as stored).
    const uint32_t bits = packed ? num_bits : 8;
    const int64_t words_per_row = packed ? shape[1] : 0;
    const Stored* wp = &w;
    const bool is_packed = packed != nullptr;
    auto q_at = [wp, bits, words_per_row, is_packed, cols](int64_t i, int64_t j) -> int32_t {
        if (!is_packed) return static_cast<int8_t>(wp->data[i * cols + j]);
        const uint32_t per = 32 / bits;
        const uint32_t u = (word(wp->data, i * words_per_row + j / per) >> (bits * (j % per))) &
                           ((1u << bits) - 1);
        return static_cast<int32_t>(u) - (1 << (bits - 1));
    };
    // Zero points (asymmetric): packed along the rows, one per (row, group).
    const Stored* zp = symmetric ? nullptr : &need(".weight_zero_point", "the zero points");
    const int64_t n_groups = gs > 0 ? cols / gs : 1;
    if (zp) {
        if (zp->tensor->dtype != Dtype::I32 ||
            zp->tensor->n_elements() !=
                static_cast<uint64_t>((rows * bits + 31) / 32) * static_cast<uint64_t>(n_groups))
            fail("{}: zero points '{}' are not {} rows of {} packed {}-bit values", zp->file,
                 zp->tensor->name, rows, n_groups, bits);
    }
    auto z_at = [zp, bits, n_groups](int64_t i, int64_t g) -> int32_t {
        if (!zp) return 0;
        const uint32_t per = 32 / bits;
        const uint32_t u =
            (word(zp->data, (i / per) * n_groups + g) >> (bits * (i % per))) & ((1u << bits) - 1);
        return static_cast<int32_t>(u) - (1 << (bits - 1));
    };
    // Activation order: a group index per column; the usual one (column / G) changes nothing.
    bool reordered = false;
    const Stored* g_idx = find(".weight_g_idx");
    if (g_idx) {
        if (g_idx->tensor->dtype != Dtype::I32 ||
            g_idx->tensor->n_elements() != static_cast<uint64_t>(cols))
            fail("{}: '{}' is not one I32 group index per column", g_idx->file,
                 g_idx->tensor->name);
        for (int64_t j = 0; j < cols; ++j) {
            const auto gi = static_cast<int32_t>(word(g_idx->data, j));
            if (gi < 0 || gi >= n_groups)
                fail("{}: '{}' names group {} of {}", g_idx->file, g_idx->tensor->name, gi,
                     n_groups);
            reordered |= gs > 0 && gi != j / gs;
        }
    }
    const bool groups_whole = gs <= 0 || gs % 32 == 0;
    if (reordered || !groups_whole) {
        // Any column's group: the dequantized weight in BF16.
        r.type = TensorType::BF16;
        r.produce = [=](uint8_t* dst) {
            for (int64_t i = 0; i < rows; ++i)
                for (int64_t j = 0; j < cols; ++j) {
                    const int64_t g =
                        g_idx ? static_cast<int32_t>(word(g_idx->data, j)) : (gs > 0 ? j / gs : 0);
                    const int64_t col = gs > 0 ? g * gs : 0;  // a column of group g
                    const float v = static_cast<float>(q_at(i, j) - z_at(i, g)) * scale_at(i, col);
                    const uint16_t b = f32_to_bf16(v);
                    std::memcpy(dst + 2 * (i * cols + j), &b, 2);
                }
        };
        return r;
    }
    // Whole 32-column blocks under one scale (and zero point).
    const int64_t n_blocks = cols / 32;
    if (bits == 8) {
        r.type = TensorType::Q8_0;  // {f16 d; int8 q[32]}
        r.produce = [=](uint8_t* dst) {
            for (int64_t i = 0; i < rows; ++i)
                for (int64_t b = 0; b < n_blocks; ++b) {
                    uint8_t* blk = dst + (i * n_blocks + b) * 34;
                    put_f16(blk, scale_at(i, b * 32));
                    for (int k = 0; k < 32; ++k)
                        blk[2 + k] = static_cast<uint8_t>(static_cast<int8_t>(q_at(i, b * 32 + k)));
                }
        };
        return r;
    }
    // 4 bits: Q4_0 {f16 d; u8 qs[16]} (w = d (u − 8)) or Q4_1 {f16 d, m; u8 qs[16]}
    // (w = d u + m), nibble k low and k + 16 high in byte k.
    r.type = symmetric ? TensorType::Q4_0 : TensorType::Q4_1;
    const bool sym = symmetric;
    r.produce = [=](uint8_t* dst) {
        const int64_t block_bytes = sym ? 18 : 20;
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t b = 0; b < n_blocks; ++b) {
                uint8_t* blk = dst + (i * n_blocks + b) * block_bytes;
                const float d = scale_at(i, b * 32);
                put_f16(blk, d);
                uint8_t* qs = blk + 2;
                if (!sym) {
                    const int32_t z = z_at(i, gs > 0 ? (b * 32) / gs : 0);
                    // w = d (q − z) = d u − d (z + 8), u = q + 8.
                    put_f16(blk + 2, -d * static_cast<float>(z + 8));
                    qs = blk + 4;
                }
                for (int k = 0; k < 16; ++k) {
                    const auto lo = static_cast<uint8_t>(q_at(i, b * 32 + k) + 8);
                    const auto hi = static_cast<uint8_t>(q_at(i, b * 32 + k + 16) + 8);
                    qs[k] = static_cast<uint8_t>(lo | (hi << 4));
                }
            }
    };
    return r;
}

std::optional<Repacked> QuantizedCheckpoint::repack_gptq_awq(const std::string& base,
                                                             const StoredTensors& tensors) const {
    auto find = [&](const char* suffix) -> const Stored* {
        auto it = tensors.find(base + suffix);
        return it == tensors.end() ? nullptr : &it->second;
    };
    const Stored* qweight = find(".qweight");
    if (!qweight) return std::nullopt;
    const Stored* qzeros = find(".qzeros");
    const Stored* scales = find(".scales");
    const Stored* g_idx = find(".g_idx");
    if (!qzeros || !scales)
        fail("{}: the checkpoint lacks '{}.qzeros' or '{}.scales' beside its qweight", label_, base,
             base);
    const bool gptq = method_ == "gptq";
    const auto& ws = qweight->tensor->shape;
    const auto& ss = scales->tensor->shape;
    if (qweight->tensor->dtype != Dtype::I32 || ws.size() != 2 || ss.size() != 2 ||
        qzeros->tensor->dtype != Dtype::I32 || qzeros->tensor->shape.size() != 2)
        fail("{}: '{}' is not an I32 matrix with qzeros and scales matrices", qweight->file,
             qweight->tensor->name);
    // GPTQ: qweight [in/8, out]; AWQ: qweight [in, out/8]. scales [groups, out].
    const int64_t out = gptq ? ws[1] : ws[1] * 8;
    const int64_t in = gptq ? ws[0] * 8 : ws[0];
    const int64_t n_groups = ss[0];
    if (ss[1] != out || n_groups <= 0 || in % n_groups != 0 ||
        qzeros->tensor->shape[0] != n_groups || qzeros->tensor->shape[1] * 8 != out)
        fail(
            "{}: '{}' ({} x {}), its scales ({} x {}) and qzeros do not agree on {} inputs and "
            "{} outputs",
            qweight->file, qweight->tensor->name, ws[0], ws[1], ss[0], ss[1], in, out);
    const Dtype sd = scales->tensor->dtype;
    if (sd != Dtype::F16 && sd != Dtype::BF16 && sd != Dtype::F32)
        fail("{}: scales '{}' are {}, expected F16", scales->file, scales->tensor->name,
             safetensors::name(sd));
    if (in % 32 != 0)
        fail("{}: '{}' has {} inputs, not whole 32-value blocks", qweight->file,
             qweight->tensor->name, in);
    const int64_t gs = in / n_groups;
    // AWQ packs eight outputs of a word in this order of nibbles.
    static constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    int awq_slot[8];  // output 8j + k is in nibble awq_slot[k]
    for (int k = 0; k < 8; ++k) awq_slot[kAwqOrder[k]] = k;
    const Stored* wp = qweight;
    const Stored* zp = qzeros;
    const Stored* sp = scales;
    // q(o, i) and z(o, g), unsigned 4-bit.
    auto q_at = [=](int64_t o, int64_t i) -> int32_t {
        if (gptq)
            return static_cast<int32_t>((word(wp->data, (i / 8) * out + o) >> (4 * (i % 8))) & 15);
        return static_cast<int32_t>(
            (word(wp->data, i * (out / 8) + o / 8) >> (4 * awq_slot[o % 8])) & 15);
    };
    const bool minus_one = zeros_minus_one;
    auto z_at = [=](int64_t o, int64_t g) -> int32_t {
        const int slot = gptq ? static_cast<int>(o % 8) : awq_slot[o % 8];
        const auto z =
            static_cast<int32_t>((word(zp->data, g * (out / 8) + o / 8) >> (4 * slot)) & 15);
        return minus_one ? z + 1 : z;
    };
    auto s_at = [=](int64_t o, int64_t g) { return scalar(*sp, g * out + o); };
    bool reordered = false;
    if (g_idx) {
        if (g_idx->tensor->dtype != Dtype::I32 ||
            g_idx->tensor->n_elements() != static_cast<uint64_t>(in))
            fail("{}: '{}' is not one I32 group index per input", g_idx->file, g_idx->tensor->name);
        for (int64_t i = 0; i < in; ++i) {
            const auto g = static_cast<int32_t>(word(g_idx->data, i));
            if (g < 0 || g >= n_groups)
                fail("{}: '{}' names group {} of {}", g_idx->file, g_idx->tensor->name, g,
                     n_groups);
            reordered |= g != i / gs;
        }
    }
    Repacked r;
    r.n_rows = out;
    r.n_cols = in;
    const Stored* gp = g_idx;
    if (reordered || gs % 32 != 0) {
        r.type = TensorType::BF16;
        r.produce = [=](uint8_t* dst) {
            for (int64_t o = 0; o < out; ++o)
                for (int64_t i = 0; i < in; ++i) {
                    const int64_t g = gp ? static_cast<int32_t>(word(gp->data, i)) : i / gs;
                    const float v = static_cast<float>(q_at(o, i) - z_at(o, g)) * s_at(o, g);
                    const uint16_t b = f32_to_bf16(v);
                    std::memcpy(dst + 2 * (o * in + i), &b, 2);
                }
        };
        return r;
    }
    // Zero points all 8: Q4_0 exactly; else Q4_1 with m = −scale · z.
    bool all_eight = true;
    for (int64_t o = 0; o < out && all_eight; ++o)
        for (int64_t g = 0; g < n_groups && all_eight; ++g) all_eight = z_at(o, g) == 8;
    r.type = all_eight ? TensorType::Q4_0 : TensorType::Q4_1;
    const int64_t n_blocks = in / 32;
    r.produce = [=](uint8_t* dst) {
        const int64_t block_bytes = all_eight ? 18 : 20;
        for (int64_t o = 0; o < out; ++o)
            for (int64_t b = 0; b < n_blocks; ++b) {
                uint8_t* blk = dst + (o * n_blocks + b) * block_bytes;
                const int64_t g = (b * 32) / gs;
                const float d = s_at(o, g);
                put_f16(blk, d);
                uint8_t* qs = blk + 2;
                if (!all_eight) {
                    put_f16(blk + 2, -d * static_cast<float>(z_at(o, g)));
                    qs = blk + 4;
                }
                for (int k = 0; k < 16; ++k)
                    qs[k] =
                        static_cast<uint8_t>(q_at(o, b * 32 + k) | (q_at(o, b * 32 + k + 16) << 4));
            }
    };
    return r;
}

}  // namespace headroom::hf
