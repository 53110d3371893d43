#include "memory/weight-estimate.h"
#include "core/strings.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "format/tensor-type.h"

namespace headroom {

namespace {

constexpr uint64_t kGroupSize = 128;  // AWQ and GPTQ checkpoints as published (w4, g128)
constexpr uint64_t kNf4Block = 64;    // bitsandbytes blocksize for 4-bit

std::string lower(std::string_view s) {
    return ascii_lower(s);
}

bool contains(const std::string& s, std::string_view part) {
    return s.find(part) != std::string::npos;
}

enum class Category { TokenEmbd, Output, AttnV, AttnK, AttnQkv, AttnOutput, FfnDown, Other };

Category category_of(const std::string& name) {
    if (name == "output.weight") return Category::Output;
    if (name == "token_embd.weight") return Category::TokenEmbd;
    if (contains(name, "attn_qkv.weight")) return Category::AttnQkv;
    if (contains(name, "attn_kv_b.weight") || contains(name, "attn_v.weight"))
        return Category::AttnV;
    if (contains(name, "attn_k.weight")) return Category::AttnK;
    if (contains(name, "attn_output.weight")) return Category::AttnOutput;
    if (contains(name, "ffn_down")) return Category::FfnDown;
    return Category::Other;
}

// Tensors llama.cpp's quantizer leaves in the type the converter wrote: all
// 1-D tensors, norms, the MoE router (written F32). Matrices only count.
bool quantizable(const WeightTensor& t) {
    if (!t.is_matrix()) return false;
    if (!t.name.ends_with("weight")) return false;
    if (contains(t.name, "_norm.weight")) return false;
    if (contains(t.name, "ffn_gate_inp.weight")) return false;
    return true;
}

// What a Hugging Face checkpoint keeps 16-bit when its linear layers are
// quantized: embeddings, lm_head, norms, router, everything not a matrix.
bool hf_linear(const WeightTensor& t) {
    return quantizable(t) && t.name != "token_embd.weight" && t.name != "output.weight";
}

bool use_more_bits(int64_t i_layer, int64_t n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 ||
           (i_layer - n_layers / 8) % 3 == 2;
}

TensorType fallback(TensorType t, uint64_t n_cols) {
    if (n_cols % traits(t).block_size == 0) return t;
    TensorType f = TensorType::F16;
    switch (t) {
        case TensorType::Q4_K:
            f = TensorType::Q5_0;
            break;
        case TensorType::Q5_K:
            f = TensorType::Q5_1;
            break;
        case TensorType::Q6_K:
            f = TensorType::Q8_0;
            break;
        default:
            break;
    }
    return n_cols % traits(f).block_size == 0 ? f : TensorType::F16;
}

// llama.cpp's per-tensor choice for the file types planned here.
struct GgufMix {
    WeightType ftype;
    TensorType base;
    const HParams& hp;
    bool tied;
    int64_t n_attention_wv;
    int64_t i_attention_wv = 0;
    int64_t i_ffn_down = 0;

    TensorType pick(const WeightTensor& t) {
        const Category cat = category_of(t.name);
        const bool k_mix = ftype == WeightType::Q4_K_M || ftype == WeightType::Q5_K_M;
        // llama.cpp's LLM_TYPE_70B: 80 layers with grouped KV heads (Llama 2/3 70B, Qwen2 72B).
        const bool is_70b = hp.n_layer == 80 && hp.n_head_kv < hp.n_head && hp.n_expert == 0;
        TensorType type = base;
        if (cat == Category::Output || (tied && cat == Category::TokenEmbd)) {
            if (ftype == WeightType::MXFP4 || t.n_cols % traits(base).block_size != 0)
                type = TensorType::Q8_0;
            else if (type != TensorType::Q8_0)
                type = TensorType::Q6_K;
        } else if (ftype == WeightType::MXFP4) {
            type = t.n_expert > 1 ? TensorType::MXFP4 : TensorType::Q8_0;
        } else if (cat == Category::AttnV || cat == Category::AttnQkv) {
            if (cat == Category::AttnQkv) {
                if (ftype == WeightType::Q4_K_M) type = TensorType::Q5_K;
                if (ftype == WeightType::Q5_K_M) type = TensorType::Q6_K;
            } else {
                if (k_mix && use_more_bits(i_attention_wv, n_attention_wv)) type = TensorType::Q6_K;
                // 8 query heads share each attn_v in the 70B models: more bits cost little.
                if (is_70b && type == TensorType::Q4_K) type = TensorType::Q5_K;
                if (hp.n_expert == 8) type = TensorType::Q8_0;
            }
            ++i_attention_wv;
        } else if (cat == Category::AttnK) {
            if (hp.n_expert == 8) type = TensorType::Q8_0;
        } else if (cat == Category::FfnDown) {
            // Mixture-of-experts files name the layer; dense ones count.
            const int64_t i_layer = hp.n_expert > 1 ? t.layer : i_ffn_down;
            if (k_mix && use_more_bits(i_layer, hp.n_layer)) type = TensorType::Q6_K;
            ++i_ffn_down;
        } else if (cat == Category::AttnOutput) {
            if (hp.n_expert == 8 && ftype == WeightType::Q4_K_M) type = TensorType::Q5_K;
        }
        return fallback(type, t.n_cols);
    }
};

TensorType gguf_base(WeightType t) {
    switch (t) {
        case WeightType::F32:
            return TensorType::F32;
        case WeightType::F16:
            return TensorType::F16;
        case WeightType::BF16:
            return TensorType::BF16;
        case WeightType::Q8_0:
            return TensorType::Q8_0;
        case WeightType::Q6_K:
            return TensorType::Q6_K;
        case WeightType::Q5_K_M:
            return TensorType::Q5_K;
        case WeightType::Q4_K_M:
            return TensorType::Q4_K;
        case WeightType::Q4_1:
            return TensorType::Q4_1;
        case WeightType::Q4_0:
            return TensorType::Q4_0;
        case WeightType::MXFP4:
            return TensorType::MXFP4;
        default:
            return TensorType::F16;
    }
}

uint64_t hf_linear_bytes(const WeightTensor& t, WeightType type) {
    const uint64_t n = t.n_elements();
    const uint64_t rows = t.n_rows * t.n_expert;
    switch (type) {
        case WeightType::FP8:
            return n + rows * 4;
        case WeightType::NF4:
            return n / 2 + (n + kNf4Block - 1) / kNf4Block * 4;
        case WeightType::AWQ:
        case WeightType::GPTQ: {
            if (t.n_cols % kGroupSize != 0)
                fail("--weight-type {}: {} has {} inputs, not a multiple of the group size {}",
                     name(type), t.name, t.n_cols, kGroupSize);
            const uint64_t groups = t.n_cols / kGroupSize * rows;
            uint64_t bytes = n / 2 + groups * 2 + groups / 2;
            if (type == WeightType::GPTQ) bytes += t.n_cols * t.n_expert * 4;
            return bytes;
        }
        default:
            return n * 2;
    }
}

}  // namespace

const std::vector<WeightTypeInfo>& weight_types() {
    static const std::vector<WeightTypeInfo> kTypes = {
        {WeightType::F32, "f32", "F32", "32-bit", true, 0.0},
        {WeightType::F16, "f16", "FP16", "16-bit", true, 0.0},
        {WeightType::BF16, "bf16", "BF16", "16-bit", true, 0.0},
        {WeightType::FP8, "fp8", "FP8", "8-bit", false, 1.0},
        {WeightType::Q8_0, "q8_0", "Q8_0", "8-bit", true, 1.0},
        {WeightType::Q6_K, "q6_k", "Q6_K", "6-bit", true, 2.0},
        {WeightType::Q5_K_M, "q5_k_m", "Q5_K_M", "5-bit", true, 3.0},
        {WeightType::Q4_K_M, "q4_k_m", "Q4_K_M", "4-bit", true, 4.0},
        {WeightType::AWQ, "awq", "AWQ int4", "4-bit", false, 4.5},
        {WeightType::GPTQ, "gptq", "GPTQ int4", "4-bit", false, 4.5},
        {WeightType::Q4_1, "q4_1", "Q4_1", "4-bit", true, 5.0},
        {WeightType::NF4, "nf4", "NF4", "4-bit", false, 5.0},
        {WeightType::MXFP4, "mxfp4", "MXFP4", "4-bit", true, 5.0},
        {WeightType::Q4_0, "q4_0", "Q4_0", "4-bit", true, 5.5},
    };
    return kTypes;
}

const WeightTypeInfo& info(WeightType type) {
    for (const auto& t : weight_types())
        if (t.type == type) return t;
    return weight_types().front();
}

std::optional<WeightType> weight_type_from_name(std::string_view text) {
    const std::string s = lower(text);
    if (s == "fp32" || s == "float32") return WeightType::F32;
    if (s == "fp16" || s == "float16" || s == "half") return WeightType::F16;
    if (s == "bfloat16") return WeightType::BF16;
    if (s == "int8" || s == "q8") return WeightType::Q8_0;
    if (s == "awq-int4" || s == "awq_int4") return WeightType::AWQ;
    if (s == "gptq-int4" || s == "gptq_int4") return WeightType::GPTQ;
    if (s == "bnb-nf4" || s == "bitsandbytes") return WeightType::NF4;
    for (const auto& t : weight_types())
        if (s == t.name) return t.type;
    return std::nullopt;
}

WeightType checkpoint_weight_type(const ModelShape& shape) {
    const std::string q = lower(shape.quant_method);
    if (q == "fp8") return WeightType::FP8;
    if (q == "awq") return WeightType::AWQ;
    if (q == "gptq") return WeightType::GPTQ;
    if (q == "mxfp4") return WeightType::MXFP4;
    if (q == "bitsandbytes") return WeightType::NF4;
    const std::string d = lower(shape.torch_dtype);
    if (d == "float16") return WeightType::F16;
    if (d == "float32") return WeightType::F32;
    return WeightType::BF16;
}

WeightEstimate estimate_weights(const std::vector<WeightTensor>& tensors_in, const HParams& hp,
                                WeightType type) {
    // llama.cpp visits tensors by layer, then by name; the counters below
    // depend on that order.
    std::vector<const WeightTensor*> tensors;
    for (const auto& t : tensors_in) tensors.push_back(&t);
    std::stable_sort(tensors.begin(), tensors.end(), [](const auto* a, const auto* b) {
        return a->layer != b->layer ? a->layer < b->layer : a->name < b->name;
    });
    bool tied = true;
    int64_t n_attention_wv = 0;
    for (const auto* t : tensors) {
        const Category cat = category_of(t->name);
        if (cat == Category::Output) tied = false;
        if (cat == Category::AttnV || cat == Category::AttnQkv) ++n_attention_wv;
    }
    const WeightTypeInfo& ti = info(type);
    const bool k_quant =
        ti.gguf && type != WeightType::F32 && type != WeightType::F16 && type != WeightType::BF16;
    GgufMix mix{type, gguf_base(type), hp, tied, n_attention_wv};

    WeightEstimate e;
    e.layer_bytes.assign(hp.n_layer, 0);
    for (const auto* t : tensors) {
        const uint64_t n = t->n_elements();
        uint64_t bytes = 0;
        std::string type_name;
        if (ti.gguf) {
            TensorType tt = TensorType::F32;
            if (quantizable(*t)) tt = k_quant ? mix.pick(*t) : gguf_base(type);
            if (n % traits(tt).block_size != 0) tt = TensorType::F32;
            bytes = row_bytes(tt, n);
            type_name = std::string(headroom::name(tt));
        } else if (hf_linear(*t)) {
            bytes = hf_linear_bytes(*t, type);
            type_name = std::string(ti.label);
        } else {
            bytes = n * 2;
            type_name = "BF16";
        }
        e.bytes += bytes;
        e.n_params += n;
        e.bytes_by_type[type_name] += bytes;
        if (t->layer >= 0 && static_cast<uint32_t>(t->layer) < hp.n_layer)
            e.layer_bytes[static_cast<size_t>(t->layer)] += bytes;
    }
    return e;
}

}  // namespace headroom
