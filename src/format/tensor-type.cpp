#include "format/tensor-type.h"

#include <array>
#include <cctype>
#include <string>

#include "core/check.h"

namespace headroom {

namespace {

struct Entry {
    TensorType type;
    TensorTypeTraits traits;
};

// Block geometry from ggml's block structs (e.g. block_q4_K: f16 d, f16 dmin,
// 12 bytes of 6-bit scales, 128 bytes of nibbles = 144 bytes per 256).
constexpr std::array kTypes = {
    Entry{TensorType::F32, {"F32", 1, 4}},
    Entry{TensorType::F16, {"F16", 1, 2}},
    Entry{TensorType::Q4_0, {"Q4_0", 32, 18}},
    Entry{TensorType::Q4_1, {"Q4_1", 32, 20}},
    Entry{TensorType::Q5_0, {"Q5_0", 32, 22}},
    Entry{TensorType::Q5_1, {"Q5_1", 32, 24}},
    Entry{TensorType::Q8_0, {"Q8_0", 32, 34}},
    Entry{TensorType::Q8_1, {"Q8_1", 32, 36}},
    Entry{TensorType::Q2_K, {"Q2_K", 256, 84}},
    Entry{TensorType::Q3_K, {"Q3_K", 256, 110}},
    Entry{TensorType::Q4_K, {"Q4_K", 256, 144}},
    Entry{TensorType::Q5_K, {"Q5_K", 256, 176}},
    Entry{TensorType::Q6_K, {"Q6_K", 256, 210}},
    Entry{TensorType::Q8_K, {"Q8_K", 256, 292}},
    Entry{TensorType::IQ2_XXS, {"IQ2_XXS", 256, 66}},
    Entry{TensorType::IQ2_XS, {"IQ2_XS", 256, 74}},
    Entry{TensorType::IQ3_XXS, {"IQ3_XXS", 256, 98}},
    Entry{TensorType::IQ1_S, {"IQ1_S", 256, 50}},
    Entry{TensorType::IQ4_NL, {"IQ4_NL", 32, 18}},
    Entry{TensorType::IQ3_S, {"IQ3_S", 256, 110}},
    Entry{TensorType::IQ2_S, {"IQ2_S", 256, 82}},
    Entry{TensorType::IQ4_XS, {"IQ4_XS", 256, 136}},
    Entry{TensorType::I8, {"I8", 1, 1}},
    Entry{TensorType::I16, {"I16", 1, 2}},
    Entry{TensorType::I32, {"I32", 1, 4}},
    Entry{TensorType::I64, {"I64", 1, 8}},
    Entry{TensorType::F64, {"F64", 1, 8}},
    Entry{TensorType::IQ1_M, {"IQ1_M", 256, 56}},
    Entry{TensorType::BF16, {"BF16", 1, 2}},
    Entry{TensorType::TQ1_0, {"TQ1_0", 256, 54}},
    Entry{TensorType::TQ2_0, {"TQ2_0", 256, 66}},
    Entry{TensorType::MXFP4, {"MXFP4", 32, 17}},
};

const Entry* find(uint32_t id) {
    for (const auto& e : kTypes)
        if (static_cast<uint32_t>(e.type) == id) return &e;
    return nullptr;
}

}  // namespace

std::optional<TensorType> tensor_type_from_id(uint32_t id) {
    if (const Entry* e = find(id)) return e->type;
    return std::nullopt;
}

const TensorTypeTraits& traits(TensorType type) {
    const Entry* e = find(static_cast<uint32_t>(type));
    HR_CHECK(e != nullptr);
    return e->traits;
}

std::optional<TensorType> tensor_type_from_name(std::string_view name) {
    std::string upper(name);
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    // File-type names that name a mix but whose bulk is one type.
    if (upper == "Q4_K_M" || upper == "Q4_K_S") upper = "Q4_K";
    if (upper == "Q5_K_M" || upper == "Q5_K_S") upper = "Q5_K";
    if (upper == "Q3_K_M" || upper == "Q3_K_S" || upper == "Q3_K_L") upper = "Q3_K";
    if (upper == "FP16") upper = "F16";
    if (upper == "FP32") upper = "F32";
    for (const auto& e : kTypes)
        if (e.traits.name == upper) return e.type;
    return std::nullopt;
}

bool can_dequantize(TensorType type) {
    switch (type) {
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::BF16:
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q5_0:
        case TensorType::Q5_1:
        case TensorType::Q8_0:
        case TensorType::Q2_K:
        case TensorType::Q3_K:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K:
        case TensorType::Q8_K:
        case TensorType::IQ4_NL:
        case TensorType::IQ4_XS:
        case TensorType::MXFP4:
            return true;
        default:
            return false;
    }
}

}  // namespace headroom
