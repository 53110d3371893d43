#include "memory/weight-estimate.h"
#include "core/strings.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "format/tensor-type.h"
#include "shape/quant-mix.h"

namespace headroom {

namespace {

constexpr uint64_t kGroupSize = 128;  // AWQ and GPTQ checkpoints as published (w4, g128)
constexpr uint64_t kNf4Block = 64;    // bitsandbytes blocksize for 4-bit

std::string lower(std::string_view s) {
    return ascii_lower(s);
}

// What a Hugging Face checkpoint keeps 16-bit when its linear layers are
// quantized: embeddings, lm_head, norms, router, everything not a matrix.
bool hf_linear(const WeightTensor& t) {
    return is_quantizable(t) && t.name != "token_embd.weight" && t.name != "output.weight";
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

QuantRecipe gguf_recipe(WeightType t) {
    switch (t) {
        case WeightType::F32:
            return {TensorType::F32, TensorMix::Pure};
        case WeightType::F16:
            return {TensorType::F16, TensorMix::Pure};
        case WeightType::BF16:
            return {TensorType::BF16, TensorMix::Pure};
        case WeightType::Q8_0:
            return {TensorType::Q8_0, TensorMix::Default};
        case WeightType::Q6_K:
            return {TensorType::Q6_K, TensorMix::Default};
        case WeightType::Q5_K_M:
            return {TensorType::Q5_K, TensorMix::Q5_K_M};
        case WeightType::Q5_K_S:
            return {TensorType::Q5_K, TensorMix::Q5_K_S};
        case WeightType::Q5_K:
            return {TensorType::Q5_K, TensorMix::Pure};
        case WeightType::Q5_1:
            return {TensorType::Q5_1, TensorMix::Default};
        case WeightType::Q5_0:
            return {TensorType::Q5_0, TensorMix::Default};
        case WeightType::Q4_K_M:
            return {TensorType::Q4_K, TensorMix::Q4_K_M};
        case WeightType::Q4_K_S:
            return {TensorType::Q4_K, TensorMix::Q4_K_S};
        case WeightType::Q4_K:
            return {TensorType::Q4_K, TensorMix::Pure};
        case WeightType::Q4_1:
            return {TensorType::Q4_1, TensorMix::Default};
        case WeightType::Q4_0:
            return {TensorType::Q4_0, TensorMix::Default};
        case WeightType::MXFP4:
            return {TensorType::MXFP4, TensorMix::Mxfp4};
        case WeightType::IQ4_XS:
            return {TensorType::IQ4_XS, TensorMix::Iq4};
        case WeightType::IQ4_NL:
            return {TensorType::IQ4_NL, TensorMix::Iq4};
        case WeightType::Q3_K_L:
            return {TensorType::Q3_K, TensorMix::Q3_K_L};
        case WeightType::Q3_K_M:
            return {TensorType::Q3_K, TensorMix::Q3_K_M};
        case WeightType::Q3_K_S:
            return {TensorType::Q3_K, TensorMix::Q3_K_S};
        case WeightType::Q2_K:
            return {TensorType::Q2_K, TensorMix::Q2_K};
        case WeightType::FP8:
        case WeightType::NF4:
        case WeightType::AWQ:
        case WeightType::GPTQ:
            break;
    }
    fail("--weight-type {} is not a GGUF file type", name(t));
}

uint32_t gguf_file_type_code(WeightType t) {
    switch (t) {
        case WeightType::F32:
            return 0;
        case WeightType::F16:
            return 1;
        case WeightType::Q4_0:
            return 2;
        case WeightType::Q4_1:
            return 3;
        case WeightType::Q8_0:
            return 7;
        case WeightType::Q5_0:
            return 8;
        case WeightType::Q5_1:
            return 9;
        case WeightType::Q4_K_S:
            return 14;
        case WeightType::Q4_K_M:
        case WeightType::Q4_K:
            return 15;
        case WeightType::Q5_K_S:
            return 16;
        case WeightType::Q5_K_M:
        case WeightType::Q5_K:
            return 17;
        case WeightType::Q6_K:
            return 18;
        case WeightType::BF16:
            return 32;
        case WeightType::MXFP4:
            return 38;
        case WeightType::Q2_K:
            return 10;
        case WeightType::Q3_K_S:
            return 11;
        case WeightType::Q3_K_M:
            return 12;
        case WeightType::Q3_K_L:
            return 13;
        case WeightType::IQ4_NL:
            return 25;
        case WeightType::IQ4_XS:
            return 30;
        default:
            break;
    }
    fail("--weight-type {} is not a GGUF file type", name(t));
}

const std::vector<WeightTypeInfo>& weight_types() {
    static const std::vector<WeightTypeInfo> kTypes = {
        {WeightType::F32, "f32", "F32", "32-bit", true, 0.0, true},
        {WeightType::F16, "f16", "FP16", "16-bit", true, 0.0, true},
        {WeightType::BF16, "bf16", "BF16", "16-bit", true, 0.0, true},
        {WeightType::FP8, "fp8", "FP8", "8-bit", false, 1.0, true},
        {WeightType::Q8_0, "q8_0", "Q8_0", "8-bit", true, 1.0, true},
        {WeightType::Q6_K, "q6_k", "Q6_K", "6-bit", true, 2.0, true},
        {WeightType::Q5_K_M, "q5_k_m", "Q5_K_M", "5-bit", true, 3.0, true},
        {WeightType::Q5_K_S, "q5_k_s", "Q5_K_S", "5-bit", true, 3.2, false},
        {WeightType::Q5_1, "q5_1", "Q5_1", "5-bit", true, 3.4, false},
        {WeightType::Q5_0, "q5_0", "Q5_0", "5-bit", true, 3.6, false},
        {WeightType::Q5_K, "q5_k", "Q5_K", "5-bit", true, 3.8, false},
        {WeightType::Q4_K_M, "q4_k_m", "Q4_K_M", "4-bit", true, 4.0, true},
        {WeightType::Q4_K_S, "q4_k_s", "Q4_K_S", "4-bit", true, 4.2, false},
        {WeightType::IQ4_XS, "iq4_xs", "IQ4_XS", "4-bit", true, 4.3, false},
        {WeightType::Q4_K, "q4_k", "Q4_K", "4-bit", true, 4.4, false},
        {WeightType::AWQ, "awq", "AWQ int4", "4-bit", false, 4.5, true},
        {WeightType::GPTQ, "gptq", "GPTQ int4", "4-bit", false, 4.5, true},
        {WeightType::IQ4_NL, "iq4_nl", "IQ4_NL", "4-bit", true, 4.6, false},
        {WeightType::Q4_1, "q4_1", "Q4_1", "4-bit", true, 5.0, true},
        {WeightType::NF4, "nf4", "NF4", "4-bit", false, 5.0, true},
        {WeightType::MXFP4, "mxfp4", "MXFP4", "4-bit", true, 5.0, true},
        {WeightType::Q4_0, "q4_0", "Q4_0", "4-bit", true, 5.5, true},
        {WeightType::Q3_K_L, "q3_k_l", "Q3_K_L", "3-bit", true, 6.0, false},
        {WeightType::Q3_K_M, "q3_k_m", "Q3_K_M", "3-bit", true, 6.5, false},
        {WeightType::Q3_K_S, "q3_k_s", "Q3_K_S", "3-bit", true, 7.0, false},
        {WeightType::Q2_K, "q2_k", "Q2_K", "2-bit", true, 8.0, false},
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

bool weight_type_holds(const std::vector<WeightTensor>& tensors, WeightType type) {
    if (type != WeightType::AWQ && type != WeightType::GPTQ) return true;
    return std::all_of(tensors.begin(), tensors.end(), [](const WeightTensor& t) {
        return !hf_linear(t) || t.n_cols % kGroupSize == 0;
    });
}

WeightEstimate estimate_weights(const std::vector<WeightTensor>& tensors, const HParams& hp,
                                WeightType type) {
    const WeightTypeInfo& ti = info(type);
    std::vector<TensorType> gguf_types;
    if (ti.gguf) gguf_types = choose_tensor_types(tensors, hp, gguf_recipe(type));
    WeightEstimate e;
    e.layer_bytes.assign(hp.n_layer, 0);
    e.layer_expert_bytes.assign(hp.n_layer, 0);
    for (size_t i = 0; i < tensors.size(); ++i) {
        const WeightTensor& t = tensors[i];
        const uint64_t n = t.n_elements();
        uint64_t bytes = 0;
        std::string type_name;
        if (ti.gguf) {
            bytes = row_bytes(gguf_types[i], n);
            type_name = std::string(headroom::name(gguf_types[i]));
        } else if (hf_linear(t)) {
            bytes = hf_linear_bytes(t, type);
            type_name = std::string(ti.label);
        } else {
            bytes = n * 2;
            type_name = "BF16";
        }
        e.bytes += bytes;
        e.n_params += n;
        e.bytes_by_type[type_name] += bytes;
        if (t.layer >= 0 && static_cast<uint32_t>(t.layer) < hp.n_layer) {
            e.layer_bytes[static_cast<size_t>(t.layer)] += bytes;
            if (t.name.find("_exps.") != std::string::npos)
                e.layer_expert_bytes[static_cast<size_t>(t.layer)] += bytes;
        }
    }
    return e;
}

}  // namespace headroom
