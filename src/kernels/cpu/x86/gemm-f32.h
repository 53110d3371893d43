// Matmuls in f32 for the x86 tables (templates over the vector traits V):
// quantized weights against unquantized activations (ActPrecision::F32), and
// float weights (F32, F16, BF16).
//
// F32 precision: a chunk of 256 columns of a row group is packed (pack.h),
// dequantized into an f32 panel exactly as ref::dequantize_row computes each
// weight, then acc = fma(w_k, x_k, acc) for k in order, lanes = rows
// (ref::matmul_f32_acts), NR tokens at a time.
//
// Float weights use plain dot products: lane l of a vector accumulator takes
// elements l mod kLanes, summed by halving at the end (ref::matmul_float), MR
// rows x NR tokens at a time.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/x86/gemm.h"

namespace headroom::kernels::x86 {

// ---- quantized weights, f32 activations (ActPrecision::F32) -------------------

// Extracts byte c of every int32 lane as f32: unsigned, or sign-extended.
template <class V, int C, bool kSigned>
inline typename V::F byte_f32(typename V::I v) {
    if constexpr (kSigned)
        return V::cvt(V::template sra<24>(V::template sll<24 - 8 * C>(v)));
    else
        return V::cvt(V::and_(V::template srl<8 * C>(v), V::set1(0xFF)));
}

// fpanel[col][lane] = the weight as ref::dequantize_row computes it, for the
// nb blocks of a packed chunk (same operations, same order).
template <class V, bool kSigned>
void dequant_cols(const uint8_t* vecs, int n_vec, typename V::F scale, typename V::F add,
                  bool affine, typename V::F sub, float* out) {
    using F = typename V::F;
    constexpr int L = V::kLanes;
    for (int j = 0; j < n_vec; ++j) {
        const auto w = V::load(vecs + j * V::kBytes);
        F q[4] = {byte_f32<V, 0, kSigned>(w), byte_f32<V, 1, kSigned>(w),
                  byte_f32<V, 2, kSigned>(w), byte_f32<V, 3, kSigned>(w)};
        for (int c = 0; c < 4; ++c) {
            // affine: scale * q + add (Q4_1, Q5_1) or scale * q - sub (K types);
            // else scale * (q - sub).
            F v;
            if (affine)
                v = V::fsub(V::fadd(V::fmul(scale, q[c]), add), sub);
            else
                v = V::fmul(scale, V::fsub(q[c], sub));
            V::fstore(out + (4 * j + c) * L, v);
        }
    }
}

template <class V>
void dequant_panel(TensorType t, const uint8_t* panel, int64_t nb, float* out) {
    using F = typename V::F;
    using I = typename V::I;
    constexpr int L = V::kLanes;
    constexpr uint64_t vb = V::kBytes;
    const uint64_t stride = panel_block_bytes<V>(t);
    const F zero = V::fzero();
    for (int64_t b = 0; b < nb; ++b, panel += stride) {
        if (!is_k_type(t)) {
            const F d = V::fload(reinterpret_cast<const float*>(panel + 8 * vb));
            float* o = out + b * 32 * L;
            if (t == TensorType::Q4_1 || t == TensorType::Q5_1) {
                const F m = V::fload(reinterpret_cast<const float*>(panel + 9 * vb));
                dequant_cols<V, false>(panel, 8, d, m, true, zero, o);
            } else if (has_s8_levels(t) && !V::kQ8Unsigned) {
                dequant_cols<V, true>(panel, 8, d, zero, false, zero, o);
            } else {
                const float off = static_cast<float>(t == TensorType::Q4_0   ? 8
                                                     : t == TensorType::Q5_0 ? 16
                                                                             : 128);
                dequant_cols<V, false>(panel, 8, d, zero, false, V::fset1(off), o);
            }
            continue;
        }
        // The superblock types, by their panel layout: 8 sub-blocks of 32
        // (Q4_K, Q5_K, IQ4_XS) or 16 of 16 (Q2_K, Q3_K, Q6_K).
        float* o = out + b * 256 * L;
        const PanelLayout pl = panel_layout(t);
        const int n_sub =
            t == TensorType::Q4_K || t == TensorType::Q5_K || t == TensorType::IQ4_XS ? 8 : 16;
        const int n_vec = 64 / n_sub;  // 4 columns each
        const F d = V::fload(reinterpret_cast<const float*>(panel + pl.d * vb));
        if (pl.mins) {
            // Q2_K, Q4_K, Q5_K: d * sc * q - dmin * m.
            const F dmin = V::fload(reinterpret_cast<const float*>(panel + pl.m * vb));
            for (int s = 0; s < n_sub; ++s) {
                const I pair = V::load(panel + (pl.mins + s / 2) * vb);
                const I m = s % 2 ? V::template srl<16>(pair) : V::and_(pair, V::set1(0xFFFF));
                const F d1 = V::fmul(d, V::cvt(V::load(panel + (pl.scales + s) * vb)));
                const F m1 = V::fmul(dmin, V::cvt(m));
                dequant_cols<V, false>(panel + n_vec * s * vb, n_vec, d1, zero, true, m1,
                                       o + 4 * n_vec * s * L);
            }
            continue;
        }
        // Q6_K, Q3_K, IQ4_XS: d * sc * (q - offset); IQ4_XS's levels as
        // Q8_0's weights, signed or + 128.
        const bool is_signed = t == TensorType::IQ4_XS && !V::kQ8Unsigned;
        const F off = V::fset1(t == TensorType::Q6_K   ? 32.0f
                               : t == TensorType::Q3_K ? 4.0f
                               : is_signed             ? 0.0f
                                                       : 128.0f);
        for (int s = 0; s < n_sub; ++s) {
            const F ds = V::fmul(d, V::cvt(V::load(panel + (pl.scales + s) * vb)));
            if (is_signed)
                dequant_cols<V, true>(panel + n_vec * s * vb, n_vec, ds, zero, false, off,
                                      o + 4 * n_vec * s * L);
            else
                dequant_cols<V, false>(panel + n_vec * s * vb, n_vec, ds, zero, false, off,
                                       o + 4 * n_vec * s * L);
        }
    }
}

// y for NR tokens over n_cols dequantized columns: acc = fma(w_k, x_k, acc), k in order.
template <class V, int NR>
void micro_f32(const float* fpanel, int64_t n_cols, const float* const* x, const Tok* tok,
               int n_valid, bool first) {
    using F = typename V::F;
    constexpr int L = V::kLanes;
    F acc[NR];
    load_acc<V, NR>(acc, tok, n_valid, first);
    for (int64_t k = 0; k < n_cols; ++k) {
        const F w = V::fload(fpanel + k * L);
        for (int t = 0; t < NR; ++t) acc[t] = V::fma(w, V::fbcast(x[t] + k), acc[t]);
    }
    store_acc<V, NR>(acc, tok, n_valid);
}

template <class V, int NR>
void micro_f32_any(int nr, const float* fpanel, int64_t n_cols, const float* const* x,
                   const Tok* tok, int n_valid, bool first) {
    if constexpr (NR >= 1) {
        if (nr == NR) return micro_f32<V, NR>(fpanel, n_cols, x, tok, n_valid, first);
        micro_f32_any<V, NR - 1>(nr, fpanel, n_cols, x, tok, n_valid, first);
    }
}

template <class V>
void matmul_dequant(const Matrix& w, const Acts& x, float* y, const Context& ctx, bool packed) {
    constexpr int L = V::kLanes;
    constexpr int NR = V::kNr32Int8;
    const IntKernel<V> kern = int_kernel<V>(w.type, false, packed);
    const int block = act_block(w.type);
    const int64_t nb = w.n_cols / block;
    const int64_t chunk = 256 / block;  // 256 columns: the f32 panel is 256 x L floats
    for_each_group<V>(w, x.n_tokens, ctx, [&](int64_t g, bool, int thread) {
        uint8_t* panel = ctx.thread_scratch(thread);
        auto* fpanel = reinterpret_cast<float*>(panel + 16 * 1024);
        Tok tok[NR];
        const float* xs[NR];
        const int64_t r0 = g * L;
        const int n_valid = static_cast<int>(std::min<int64_t>(L, w.n_rows - r0));
        const uint64_t at = static_cast<uint64_t>(r0) * w.row_bytes;
        RowGroup<V> rg;
        GroupRef<V> ref{&rg, nullptr};
        if (packed)
            ref.packed = packed_rows(w, r0);
        else
            rg = make_row_group<V>(w.data + at, w.row_bytes, n_valid);
        for (int64_t b0 = 0; b0 < nb; b0 += chunk) {
            const int64_t n_chunk = std::min<int64_t>(chunk, nb - b0);
            kern.pack(ref, b0, n_chunk, panel);
            dequant_panel<V>(w.type, panel, n_chunk, fpanel);
            for (int64_t t0 = 0; t0 < x.n_tokens; t0 += NR) {
                const int nr = static_cast<int>(std::min<int64_t>(NR, x.n_tokens - t0));
                for (int t = 0; t < nr; ++t) {
                    xs[t] = x.f32 + (t0 + t) * x.n + b0 * block;
                    tok[t].y = y + (t0 + t) * w.n_rows + r0;
                }
                micro_f32_any<V, NR>(nr, fpanel, n_chunk * block, xs, tok, n_valid, b0 == 0);
            }
        }
    });
}

// ---- float weights ----------------------------------------------------------

template <class V>
inline typename V::F load_w(TensorType t, const uint8_t* row, int64_t k) {
    if (t == TensorType::F16) return V::load_f16(row + 2 * k);
    if (t == TensorType::BF16) return V::load_bf16(row + 2 * k);
    return V::fload(reinterpret_cast<const float*>(row) + k);
}

template <class V>
inline typename V::F load_w_n(TensorType t, const uint8_t* row, int64_t k, int n) {
    if (t == TensorType::F16) return V::load_f16_n(row + 2 * k, n);
    if (t == TensorType::BF16) return V::load_bf16_n(row + 2 * k, n);
    return V::fload_n(reinterpret_cast<const float*>(row) + k, n);
}

// y[t, r0..r0+MR) for tokens t0..t0+NR: plain dot products, lanes over k.
template <class V, int MR, int NR>
void micro_float(const Matrix& w, int64_t r0, const float* x, int64_t t0, float* y, int64_t n_out) {
    using F = typename V::F;
    constexpr int L = V::kLanes;
    const int64_t n = w.n_cols;
    const uint8_t* rows[MR];
    for (int i = 0; i < MR; ++i) rows[i] = w.data + static_cast<uint64_t>(r0 + i) * w.row_bytes;
    F acc[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = V::fzero();
    int64_t k = 0;
    for (; k + L <= n; k += L) {
        F wv[MR];
        for (int i = 0; i < MR; ++i) wv[i] = load_w<V>(w.type, rows[i], k);
        for (int j = 0; j < NR; ++j) {
            const F xv = V::fload(x + (t0 + j) * n + k);
            for (int i = 0; i < MR; ++i) acc[i][j] = V::fma(wv[i], xv, acc[i][j]);
        }
    }
    if (k < n) {
        const int rem = static_cast<int>(n - k);
        F wv[MR];
        for (int i = 0; i < MR; ++i) wv[i] = load_w_n<V>(w.type, rows[i], k, rem);
        for (int j = 0; j < NR; ++j) {
            const F xv = V::fload_n(x + (t0 + j) * n + k, rem);
            for (int i = 0; i < MR; ++i) acc[i][j] = V::fma(wv[i], xv, acc[i][j]);
        }
    }
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) y[(t0 + j) * n_out + r0 + i] = V::reduce_halving(acc[i][j]);
}

template <class V, int MR>
void float_rows(const Matrix& w, int64_t r0, const Acts& x, float* y) {
    constexpr int NR = V::kFloatNr;
    int64_t t0 = 0;
    for (; t0 + NR <= x.n_tokens; t0 += NR) micro_float<V, MR, NR>(w, r0, x.f32, t0, y, w.n_rows);
    for (; t0 < x.n_tokens; ++t0) micro_float<V, MR, 1>(w, r0, x.f32, t0, y, w.n_rows);
}

template <class V>
void matmul_float(const Matrix& w, const Acts& x, float* y, const Context& ctx) {
    constexpr int MR = V::kFloatMr;
    const int64_t n_groups = (w.n_rows + MR - 1) / MR;
    ShareQueue queue = group_queue(n_groups, ctx.pool->n_threads(), x.n_tokens);
    ctx.pool->run([&](int thread) {
        queue.drain(thread, [&](int64_t g0, int64_t g1) {
            for (int64_t g = g0; g < g1; ++g) {
                const int64_t r0 = g * MR;
                if (r0 + MR <= w.n_rows) {
                    float_rows<V, MR>(w, r0, x, y);
                } else {
                    for (int64_t r = r0; r < w.n_rows; ++r) float_rows<V, 1>(w, r, x, y);
                }
            }
        });
    });
}

}  // namespace headroom::kernels::x86
