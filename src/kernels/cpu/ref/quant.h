// Scalar reference (de)quantization for the ggml block formats: the spec the
// fast kernels are tested against. Layouts follow ggml's block structs; each
// function opens with the block layout and its equation.
#pragma once

#include <cmath>
#include <cstdint>

#include "format/tensor-type.h"

namespace headroom::ref {

// The 16 levels of IQ4_NL and IQ4_XS: a 4-bit index picks one, nearer
// together near zero, where most weights lie.
inline constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4's E2M1 values (sign, 2 exponent bits, 1 mantissa bit: 0, 0.5, 1,
// 1.5, 2, 3, 4, 6), doubled to integers; the block scale is halved to match
// (mxfp4_half_scale).
inline constexpr int8_t kMxfp4Levels[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// Half the E8M0 block scale 2^(e - 127): 2^(e - 128), subnormal for e < 2.
inline float mxfp4_half_scale(uint8_t e) {
    return std::ldexp(1.0f, static_cast<int>(e) - 128);
}

// dst[0..n) = dequantized src. n must be a multiple of the type's block size.
// Precondition: can_dequantize(type).
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

// True for the types quantize_row can produce.
bool can_quantize(TensorType type);

// dst = quantized src[0..n). n must be a multiple of the type's block size.
// Precondition: can_quantize(type).
void quantize_row(TensorType type, const float* src, void* dst, int64_t n);

}  // namespace headroom::ref
