// Layout of one token's activations quantized for the integer matmul kernels
// (Context::acts_q holds n_tokens such rows, each q_row_bytes apart).
//
// The block size follows the weights: 32 for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// IQ4_NL and MXFP4; 256 for the K types (Q2_K .. Q6_K) and IQ4_XS. Per block,
// a = rne(x * kMax / amax) with kMax = 127 (Int8) or 32512 (Int16), and d the
// block's scale as ref::quantize_acts rounds it (f16 for Int8 32-element
// blocks, as llama.cpp's Q8_0 / Q8_1). An Int16 value is stored as two int8
// halves, a = 256 * hi + lo with lo the low byte sign-extended and |hi| <=
// 127, so both halves feed u8 x s8 multiply-adds.
//
//   qs    int8[n]           Int8: a;  Int16: hi
//   lo    int8[n]           Int16 only
//   d     f32[n / block]    scale of each block
//   sums  per block:        what the weight type needs besides the dot product
//     32-element types: 4 bytes, table-defined (the offset correction
//                       -offset * sum(a) as int32, or ref::quantize_acts'
//                       s as f32 for the types with a min, Q4_1 / Q5_1)
//     K types:          kKSumBytes, table-defined (sub-block sums)
//
// Rows start 64-byte aligned. The values (qs, lo, d) are fixed by
// ref::quantize_acts, the spec; the sums are each table's business.
#pragma once

#include <cstdint>

#include "format/tensor-type.h"
#include "kernels/cpu/ops.h"

namespace headroom::kernels {

inline constexpr float kInt8Max = 127.0f;
inline constexpr float kInt16Max = 32512.0f;  // 127 * 256: keeps |hi| <= 127
inline constexpr uint64_t kKSumBytes = 128;

// 256-element superblocks of sub-blocks with their own scales.
constexpr bool is_k_type(TensorType t) {
    return t == TensorType::Q2_K || t == TensorType::Q3_K || t == TensorType::Q4_K ||
           t == TensorType::Q5_K || t == TensorType::Q6_K || t == TensorType::IQ4_XS;
}

// Elements per activation scale for weights of type t, and bytes of a
// block's sums (ActLayout).
constexpr int act_block(TensorType t) {
    return is_k_type(t) ? 256 : 32;
}
constexpr uint64_t act_sum_bytes(TensorType t) {
    return is_k_type(t) ? kKSumBytes : 4;
}

// Types the integer kernels take (others run on f32 activations).
inline bool is_int_type(TensorType t) {
    switch (t) {
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q5_0:
        case TensorType::Q5_1:
        case TensorType::Q8_0:
        case TensorType::IQ4_NL:
        case TensorType::MXFP4:
        case TensorType::Q2_K:
        case TensorType::Q3_K:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K:
        case TensorType::IQ4_XS:
            return true;
        default:
            return false;
    }
}

// 32-element types whose weights are signed 8-bit levels times the block's
// scale: Q8_0 stores them; IQ4_NL and MXFP4 store 4-bit indices into a table
// of 16 (ref::kIq4Levels, ref::kMxfp4Levels).
constexpr bool has_s8_levels(TensorType t) {
    return t == TensorType::Q8_0 || t == TensorType::IQ4_NL || t == TensorType::MXFP4;
}

struct ActLayout {
    int64_t n = 0;
    int block = 32;          // elements per scale
    uint64_t lo = 0;         // offset of lo (Int16)
    uint64_t d = 0;          // offset of the scales
    uint64_t sums = 0;       // offset of the per-block sums
    uint64_t sum_bytes = 0;  // per block
    uint64_t row_bytes = 0;  // 64-byte multiple
};

inline ActLayout act_layout(int64_t n, TensorType w_type, ActPrecision quant) {
    ActLayout l;
    l.n = n;
    l.block = act_block(w_type);
    const auto un = static_cast<uint64_t>(n);
    const uint64_t nb = un / static_cast<uint64_t>(l.block);
    l.lo = un;
    l.d = quant == ActPrecision::Int16 ? 2 * un : un;
    l.sums = l.d + 4 * nb;
    l.sum_bytes = act_sum_bytes(w_type);
    l.row_bytes = (l.sums + l.sum_bytes * nb + 63) / 64 * 64;
    return l;
}

}  // namespace headroom::kernels
