#include "kernels/kv-dtype.h"

#include "core/strings.h"

namespace headroom {

std::optional<KvDtype> kv_dtype_from_name(std::string_view s) {
    const std::string lower = ascii_lower(s);
    if (lower == "f16" || lower == "fp16" || lower == "auto" || lower == "float16")
        return KvDtype::F16;
    if (lower == "f32" || lower == "fp32" || lower == "float32") return KvDtype::F32;
    if (lower == "bf16" || lower == "bfloat16") return KvDtype::BF16;
    if (lower == "q8_0" || lower == "q8" || lower == "int8") return KvDtype::Q8_0;
    return std::nullopt;
}

}  // namespace headroom
