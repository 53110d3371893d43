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

constexpr const char* kSideSuffixes[] = {
    ".weight_scale",     ".weight_zero_point", ".weight_shape",       ".weight_g_idx",
    ".weight_scale_inv", ".input_scale",       ".weight_global_scale"};

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

bool QuantizedCheckpoint::is_side_tensor(const std::string& name) {
    for (const char* s : kSideSuffixes)
        if (name.ends_with(s)) return true;
    return false;
}

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
    if (q.method_ != "compressed-tensors")
        fail(
            "{}: quantization_config says '{}': headroom reads compressed-tensors (GPTQ, AWQ, FP8 "
            "from llm-compressor) and fp8 checkpoints, and F32, F16 and BF16 ones",
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

}  // namespace headroom::hf
