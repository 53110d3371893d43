// Element types the KV cache can be stored in (--kv-dtype).
#pragma once

#include <optional>
#include <string_view>

#include "format/tensor-type.h"

namespace headroom {

enum class KvDtype { F32, F16, BF16, Q8_0 };

inline TensorType tensor_type(KvDtype d) {
    switch (d) {
        case KvDtype::F32:
            return TensorType::F32;
        case KvDtype::F16:
            return TensorType::F16;
        case KvDtype::BF16:
            return TensorType::BF16;
        case KvDtype::Q8_0:
            return TensorType::Q8_0;
    }
    return TensorType::F16;
}

inline std::string_view name(KvDtype d) {
    switch (d) {
        case KvDtype::F32:
            return "f32";
        case KvDtype::F16:
            return "f16";
        case KvDtype::BF16:
            return "bf16";
        case KvDtype::Q8_0:
            return "q8_0";
    }
    return "?";
}

// Case-insensitive: f32, f16, bf16, q8_0 (also fp16, fp32, auto = f16).
std::optional<KvDtype> kv_dtype_from_name(std::string_view s);

}  // namespace headroom
