// Scalar reference (de)quantization for the ggml block formats: the spec the
// fast kernels are tested against. Layouts follow ggml's block structs; each
// function opens with the block layout and its equation.
#pragma once

#include <cstdint>

#include "format/tensor-type.h"

namespace headroom::ref {

// dst[0..n) = dequantized src. n must be a multiple of the type's block size.
// Precondition: can_dequantize(type).
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

// True for the types quantize_row can produce.
bool can_quantize(TensorType type);

// dst = quantized src[0..n). n must be a multiple of the type's block size.
// Precondition: can_quantize(type).
void quantize_row(TensorType type, const float* src, void* dst, int64_t n);

}  // namespace headroom::ref
