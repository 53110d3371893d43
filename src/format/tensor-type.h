// Tensor element types as GGUF numbers them (ggml's type ids). Quantized
// types store a row as blocks of `block_size` elements in `block_bytes` bytes;
// a row's length must be a multiple of the block size.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace headroom {

enum class TensorType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
};

struct TensorTypeTraits {
    std::string_view name;  // "Q4_K", as llama.cpp prints it
    uint32_t block_size;    // elements per block (1 for plain types)
    uint32_t block_bytes;   // bytes per block
};

// nullopt for an id GGUF does not define (untrusted input).
std::optional<TensorType> tensor_type_from_id(uint32_t id);
const TensorTypeTraits& traits(TensorType type);
inline std::string_view name(TensorType type) {
    return traits(type).name;
}

// Case-insensitive: "q4_k", "Q4_K", "q4_k_m" (the file-type names that map to
// one tensor type) are accepted. nullopt for an unknown name.
std::optional<TensorType> tensor_type_from_name(std::string_view name);

// Bytes for `n_elements` elements; n_elements must be a multiple of the block
// size (callers validate that first).
inline uint64_t row_bytes(TensorType type, uint64_t n_elements) {
    const auto& t = traits(type);
    return n_elements / t.block_size * t.block_bytes;
}

// Bits per weight, e.g. 4.5 for Q4_0.
inline double bits_per_weight(TensorType type) {
    const auto& t = traits(type);
    return 8.0 * t.block_bytes / t.block_size;
}

// True for the types headroom can dequantize (and so load and run).
bool can_dequantize(TensorType type);

}  // namespace headroom
