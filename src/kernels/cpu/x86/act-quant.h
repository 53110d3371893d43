// Quantizing activations for the x86 integer matmuls (templates over the
// vector traits V): ref::quantize_acts' values, plus the per-block sums the
// kernels of gemm.h take (kernels/cpu/act-format.h).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/thread-pool.h"
#include "kernels/cpu/act-format.h"
#include "kernels/cpu/ops.h"

namespace headroom::kernels::x86 {

// ---- activations ----------------------------------------------------------

// The offset the packer adds to the weights' levels (see pack.h).
template <class V>
constexpr int32_t weight_offset(TensorType t) {
    switch (t) {
        case TensorType::Q4_0:
            return 8;
        case TensorType::Q5_0:
            return 16;
        case TensorType::Q3_K:
            return 4;
        case TensorType::Q6_K:
            return 32;
        default:
            return (has_s8_levels(t) || t == TensorType::IQ4_XS) && V::kQ8Unsigned ? 128 : 0;
    }
}

// x rounded to the nearest f16 (ties to even) and back, as
// f16_to_f32(f32_to_f16(x)) but in one F16C instruction each way.
inline float round_to_f16(float x) {
    return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}

// Quantizes one row x[0..n) as ref::quantize_acts does, and writes the sums
// this table's kernels need for weights of type wt (act-format.h).
template <class V>
void quantize_act_row(const float* x, const ActLayout& al, TensorType wt, ActPrecision quant,
                      uint8_t* row) {
    using I = typename V::I;
    using F = typename V::F;
    constexpr int L = V::kLanes;
    const int bs = al.block;
    const bool i16 = quant == ActPrecision::Int16;
    const float max_q = i16 ? kInt16Max : kInt8Max;
    // Scales as ref::quantize_acts: f16 for Int8 32-element blocks.
    const bool f16_scales = !i16 && bs == 32;
    auto* qs = reinterpret_cast<int8_t*>(row);
    auto* lo = reinterpret_cast<int8_t*>(row + al.lo);
    auto* d = reinterpret_cast<float*>(row + al.d);
    uint8_t* sums = row + al.sums;
    const bool min_type = wt == TensorType::Q4_1 || wt == TensorType::Q5_1;
    const int32_t offset = weight_offset<V>(wt);
    // Sums of the K types, per sub-block of 16 (Q2_K, Q3_K, Q6_K) or 32 (Q4_K,
    // Q5_K, IQ4_XS) elements: the int16 sums the mins multiply (Q2_K, Q4_K,
    // Q5_K; the lo halves' after the 8 or 16 of the hi ones), else the int32
    // offset correction -offset * sum (the lo halves' at byte 64).
    const int sub =
        wt == TensorType::Q6_K || wt == TensorType::Q3_K || wt == TensorType::Q2_K ? 16 : 32;
    const bool min_sums =
        wt == TensorType::Q2_K || wt == TensorType::Q4_K || wt == TensorType::Q5_K;
    const uint64_t lo_sums = wt == TensorType::Q2_K ? 32 : 16;
    // K types take sums per sub-block; the others one per block.
    const bool sub_sums = al.sum_bytes == kKSumBytes;
    for (int64_t b = 0; b < al.n / bs; ++b) {
        const float* xb = x + b * bs;
        F m = V::fzero();
        for (int i = 0; i < bs; i += L) m = V::fmax(m, V::fabs(V::fload(xb + i)));
        const float amax = V::reduce_max(m);
        const float id = amax < 1e-30f ? 0.0f : max_q / amax;
        const float db = id == 0.0f ? 0.0f : f16_scales ? amax / max_q : 1.0f / id;
        d[b] = f16_scales ? round_to_f16(db) : db;
        const F vid = V::fset1(id);
        // Integer sums, kept in vectors and reduced once per (sub-)block.
        I total = V::zero(), part = V::zero(), part_lo = V::zero();
        for (int i = 0; i < bs; i += L) {
            const I a = V::cvt_rne(V::fmul(V::fload(xb + i), vid));
            const int64_t at = b * bs + i;
            I sum_v = a, sum_lo = V::zero();
            if (i16) {
                const I l = V::low_byte_signed(a);
                const I h = V::template sra<8>(V::sub(a, l));
                V::store_i8(qs + at, h);
                V::store_i8(lo + at, l);
                sum_v = h;
                sum_lo = l;
            } else {
                V::store_i8(qs + at, a);
            }
            if (!sub_sums) {
                total = V::add(total, a);
            } else {
                part = V::add(part, sum_v);
                if (i16) part_lo = V::add(part_lo, sum_lo);
                if ((i + L) % sub != 0) continue;
                // Sub-block s done: store its sums.
                const int s = (i + L) / sub - 1;
                const int32_t p = V::reduce_add(part), p_lo = i16 ? V::reduce_add(part_lo) : 0;
                uint8_t* sb = sums + static_cast<uint64_t>(b) * kKSumBytes;
                if (!min_sums) {
                    reinterpret_cast<int32_t*>(sb)[s] = -offset * p;
                    reinterpret_cast<int32_t*>(sb + 64)[s] = -offset * p_lo;
                } else {
                    reinterpret_cast<int16_t*>(sb)[s] = static_cast<int16_t>(p);
                    reinterpret_cast<int16_t*>(sb + lo_sums)[s] = static_cast<int16_t>(p_lo);
                }
                part = part_lo = V::zero();
            }
        }
        if (sub_sums) continue;
        const int32_t sum = V::reduce_add(total);
        if (min_type) {
            const float sb = db * static_cast<float>(sum);
            reinterpret_cast<float*>(sums)[b] = f16_scales ? round_to_f16(sb) : sb;
        } else
            reinterpret_cast<int32_t*>(sums)[b] = -offset * sum;
    }
}

template <class V>
Acts prepare(const float* x, int64_t n_tokens, int64_t n, TensorType wt, const Context& ctx) {
    Acts a;
    a.f32 = x;
    a.n_tokens = n_tokens;
    a.n = n;
    a.w_type = wt;
    a.quant = ctx.act_precision;
    if (!is_int_type(wt) || a.quant == ActPrecision::F32) return a;
    a.quantized = true;
    const ActLayout al = act_layout(n, wt, a.quant);
    a.q = ctx.acts_q;
    a.q_row_bytes = al.row_bytes;
    auto run = [&](int64_t t0, int64_t t1, int) {
        for (int64_t t = t0; t < t1; ++t)
            quantize_act_row<V>(x + t * n, al, wt, a.quant,
                                ctx.acts_q + static_cast<uint64_t>(t) * al.row_bytes);
    };
    if (n_tokens * n >= 16384)
        ctx.pool->parallel_for(n_tokens, run);
    else
        run(0, n_tokens, 0);
    return a;
}

}  // namespace headroom::kernels::x86
