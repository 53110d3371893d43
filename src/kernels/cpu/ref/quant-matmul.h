// The spec of the fast matmul kernels' arithmetic, in plain scalar code: how
// activations are quantized (kernels/cpu/act-format.h) and which float operations,
// in which order, turn exact integer block sums into y. A fast kernel computes
// its integer sums however it likes (they are exact) and must then match these
// functions bit for bit; tests hold it to that. Independently, the reference
// table (f32 activations, ops.cpp) bounds how far both are from exact.
#pragma once

#include <cstdint>

#include "kernels/cpu/ops.h"

namespace headroom::ref {

// One row x[0..n) quantized in blocks of `block`: a[i] (the Int8 value, or
// the full Int16 value 256 * hi + lo), d[n / block] (each block's scale) and
// s[n / block] (d times the block's sum of a, for the weight types with a
// min). With amax the block's largest |x| and id = kMax / amax, a = rne(x * id);
// Int8 rounds as llama.cpp's Q8_0 / Q8_1 / Q8_K do, so that its greedy
// outputs can be reproduced:
//   32-element blocks:   d = f16(amax / kMax), s = f16(amax / kMax * sum a)
//   256-element blocks:  d = 1 / id, s = d * sum a
// Int16 uses the 256-element rule for both.
void quantize_acts(const float* x, int64_t n, int block, kernels::ActPrecision quant, int32_t* a,
                   float* d, float* s);

// Splits an Int16 activation into its int8 halves (a = 256 * hi + lo).
inline void split_int16(int32_t a, int8_t* hi, int8_t* lo) {
    *lo = static_cast<int8_t>(static_cast<uint8_t>(a & 0xFF));
    *hi = static_cast<int8_t>((a - *lo) / 256);
}

// y (n_tokens, w.n_rows) as the integer kernels compute it, for w.type one of
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS. Per row r and
// token t, with exact integer block sums:
//   32-element types:  acc = fma(isum_b, dw_b * da_b, acc), isum over the
//                      weights' integer levels (IQ4_NL and MXFP4: the table's,
//                      MXFP4's doubled with dw = 2^(e - 128))
//                      then, Q4_1/Q5_1: acc = fma(mw_b, s_b, acc)
//   Q4_K/Q5_K, Int8:   acc = fma(S, d * da, acc); acc = fma(-M, dmin * da, acc)
//                      S = sum_s sc_s * dot_s, M = sum_s m_s * asum_s
//   Q4_K/Q5_K, Int16:  v = fma(S_hi, 256, S_lo); acc = fma(v, d * da, acc); M as above
//   Q6_K:              as Q4_K without M, dot_s over (q - 32)
//   Q3_K:              as Q6_K, dot_s over (q - 4)
//   Q2_K:              as Q4_K over 16 sub-blocks of 16
//   IQ4_XS:            as Q4_K without M, sc_s = ls_s - 32, dot_s over the levels
void matmul_int(const kernels::Matrix& w, const float* x, int64_t n_tokens,
                kernels::ActPrecision quant, float* y);

// y as the fast kernels compute it at ActPrecision::F32 for quantized weights:
// each row dequantized by dequantize_row, then acc = fma(w_k, x_k, acc) for k
// in order.
void matmul_f32_acts(const kernels::Matrix& w, const float* x, int64_t n_tokens, float* y);

// y as the float-weight kernels (F32, F16, BF16) compute it with `n_lanes`
// lanes: lane l accumulates elements k = l (mod n_lanes) with fma in order;
// the lanes are then summed by halving (l += l + n_lanes / 2, ...). Elements
// past n_cols count as zero.
void matmul_float(const kernels::Matrix& w, const float* x, int64_t n_tokens, int n_lanes,
                  float* y);

}  // namespace headroom::ref
