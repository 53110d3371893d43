// Matrix x matrix and matrix x vector for the x86 backends, templates over
// the vector traits V (simd-avx2.h, simd-avx512.h).
//
// Quantized weights: a row group (V::kLanes rows) is packed one chunk of
// blocks at a time into a per-thread panel (pack.h) that stays in L1, then
// every token of the call runs over it, NR tokens at a time. Per block, one
// integer accumulator per token collects the exact u8 x s8 dot products for
// all rows of the group (a lane per row); the block's scales are applied in
// f32, as ref::matmul_int specifies, into one f32 accumulator per token that
// lives in y between chunks. A decode step (1 token) takes the same path, so
// y[t, r] is bit-identical for any number of tokens in the call.
//
// Threads take row groups from a shared counter, so a core slowed by other
// work takes fewer; every row group is computed by exactly one thread.
//
// Float weights (F32, F16, BF16) use plain dot products instead: lane l of a
// vector accumulator takes elements l mod kLanes, summed by halving at the end
// (ref::matmul_float), MR rows x NR tokens at a time.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "core/check.h"
#include "core/thread-pool.h"
#include "kernels/act-format.h"
#include "kernels/cpu/x86/pack.h"
#include "kernels/kernels.h"

namespace headroom::kernels::x86 {

// ---- activations ----------------------------------------------------------

// The offset the packer adds to weights of a 32-element type (see pack.h).
template <class V>
constexpr int32_t weight_offset(TensorType t) {
    switch (t) {
        case TensorType::Q4_0:
            return 8;
        case TensorType::Q5_0:
            return 16;
        case TensorType::Q8_0:
            return V::kQ8Unsigned ? 128 : 0;
        default:
            return 0;
    }
}

// Quantizes one row x[0..n) as ref::quantize_acts does, and writes the sums
// this backend's kernels need for weights of type wt (act-format.h).
template <class V>
void quantize_act_row(const float* x, const ActLayout& al, TensorType wt, ActPrecision quant,
                      uint8_t* row) {
    using I = typename V::I;
    using F = typename V::F;
    constexpr int L = V::kLanes;
    const int bs = al.block;
    const bool i16 = quant == ActPrecision::Int16;
    const float max_q = i16 ? kInt16Max : kInt8Max;
    auto* qs = reinterpret_cast<int8_t*>(row);
    auto* lo = reinterpret_cast<int8_t*>(row + al.lo);
    auto* d = reinterpret_cast<float*>(row + al.d);
    uint8_t* sums = row + al.sums;
    const bool min_type = wt == TensorType::Q4_1 || wt == TensorType::Q5_1;
    const int32_t offset = weight_offset<V>(wt);
    // Sub-block sums of the K types: 16 elements for Q6_K, 32 for Q4_K / Q5_K.
    const int sub = wt == TensorType::Q6_K ? 16 : 32;
    for (int64_t b = 0; b < al.n / bs; ++b) {
        const float* xb = x + b * bs;
        F m = V::fzero();
        for (int i = 0; i < bs; i += L) m = V::fmax(m, V::fabs(V::fload(xb + i)));
        const float amax = V::reduce_max(m);
        const float db = amax < 1e-30f ? 0.0f : amax / max_q;
        const float id = db != 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        const F vid = V::fset1(id);
        int32_t total = 0, part = 0, part_lo = 0;
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
            total += V::reduce_add(a);
            if (al.sum_bytes == kKSumBytes) {
                part += V::reduce_add(sum_v);
                part_lo += V::reduce_add(sum_lo);
                if ((i + L) % sub != 0) continue;
                // Sub-block s done: store its sums.
                const int s = (i + L) / sub - 1;
                uint8_t* sb = sums + static_cast<uint64_t>(b) * kKSumBytes;
                if (sub == 16) {
                    reinterpret_cast<int32_t*>(sb)[s] = -32 * part;
                    reinterpret_cast<int32_t*>(sb + 64)[s] = -32 * part_lo;
                } else {
                    reinterpret_cast<int16_t*>(sb)[s] = static_cast<int16_t>(part);
                    reinterpret_cast<int16_t*>(sb + 16)[s] = static_cast<int16_t>(part_lo);
                }
                part = part_lo = 0;
            }
        }
        if (al.sum_bytes == kKSumBytes) continue;
        if (min_type)
            reinterpret_cast<float*>(sums)[b] = db * static_cast<float>(total);
        else
            reinterpret_cast<int32_t*>(sums)[b] = -offset * total;
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

// ---- micro-kernels ----------------------------------------------------------

// One token's prepared activations and its output row (at the group's first row).
struct Tok {
    const uint8_t* qs;  // int8 (Int8) or hi (Int16)
    const uint8_t* lo;
    const float* d;
    const uint8_t* sums;
    float* y;
};

template <class V, int NR>
HR_KERNEL_INLINE void load_acc(typename V::F* acc, const Tok* tok, int n_valid, bool first) {
    for (int t = 0; t < NR; ++t) {
        if (first)
            acc[t] = V::fzero();
        else
            acc[t] = n_valid == V::kLanes ? V::fload(tok[t].y) : V::fload_n(tok[t].y, n_valid);
    }
}

template <class V, int NR>
HR_KERNEL_INLINE void store_acc(const typename V::F* acc, const Tok* tok, int n_valid) {
    for (int t = 0; t < NR; ++t) {
        if (n_valid == V::kLanes)
            V::fstore(tok[t].y, acc[t]);
        else
            V::fstore_n(tok[t].y, acc[t], n_valid);
    }
}

template <class V, bool kSigned>
HR_KERNEL_INLINE typename V::I dot4(typename V::I acc, typename V::I w, const uint8_t* a) {
    if constexpr (kSigned)
        return V::dot_s8s8(acc, w, V::bcast32(a));
    else
        return V::dot_u8s8(acc, w, V::bcast32(a));
}

// ---- per-block arithmetic, shared by the panel and the direct (decode) paths --

// One block of a 32-element type for NR tokens: exact integer sums, then
// acc = fma(isum, dw * da, acc) (and, with a min, acc = fma(mw, da * asum, acc)).
template <class V, int NR, bool kMin, bool kI16, bool kSigned>
HR_KERNEL_INLINE void block_32(const typename V::I* w, typename V::F dw, typename V::F mw,
                               const Tok* tok, int64_t blk, typename V::F* acc) {
    using I = typename V::I;
    I ia[NR], il[NR];
    for (int t = 0; t < NR; ++t) {
        const I corr = kMin ? V::zero() : V::bcast32(tok[t].sums + 4 * blk);
        ia[t] = kI16 ? V::zero() : corr;
        if (kI16) il[t] = corr;
    }
    for (int k = 0; k < 8; ++k) {
        for (int t = 0; t < NR; ++t) {
            ia[t] = dot4<V, kSigned>(ia[t], w[k], tok[t].qs + 32 * blk + 4 * k);
            if (kI16) il[t] = dot4<V, kSigned>(il[t], w[k], tok[t].lo + 32 * blk + 4 * k);
        }
    }
    for (int t = 0; t < NR; ++t) {
        const I isum = kI16 ? V::add(V::template sll<8>(ia[t]), il[t]) : ia[t];
        acc[t] = V::fma(V::cvt(isum), V::fmul(dw, V::fbcast(tok[t].d + blk)), acc[t]);
    }
    if (kMin)
        for (int t = 0; t < NR; ++t)
            acc[t] =
                V::fma(mw, V::fbcast(reinterpret_cast<const float*>(tok[t].sums) + blk), acc[t]);
}

// Sub-block s (32 weights, 8 vectors) of Q4_K / Q5_K superblock blk:
// S += sc * dot (hi and lo halves apart for Int16).
template <class V, int NR, bool kI16>
HR_KERNEL_INLINE void sub_q45(const typename V::I* w, typename V::I sc, const Tok* tok, int64_t blk,
                              int s, typename V::I* S, typename V::I* Sl) {
    using I = typename V::I;
    I is[NR], il[NR];
    for (int t = 0; t < NR; ++t) is[t] = il[t] = V::zero();
    for (int k = 0; k < 8; ++k) {
        const int64_t at = 256 * blk + 32 * s + 4 * k;
        for (int t = 0; t < NR; ++t) {
            is[t] = V::dot_u8s8(is[t], w[k], V::bcast32(tok[t].qs + at));
            if (kI16) il[t] = V::dot_u8s8(il[t], w[k], V::bcast32(tok[t].lo + at));
        }
    }
    for (int t = 0; t < NR; ++t) {
        S[t] = V::add(S[t], V::mullo(is[t], sc));
        if (kI16) Sl[t] = V::add(Sl[t], V::mullo(il[t], sc));
    }
}

// The end of a Q4_K / Q5_K superblock: M = sum_s m_s * asum_s, then
// acc = fma(v, d * da, acc); acc = fma(-M, dmin * da, acc).
template <class V, int NR, bool kI16>
HR_KERNEL_INLINE void finish_q45(const typename V::I* S, const typename V::I* Sl,
                                 const typename V::I* mp, typename V::F d, typename V::F dmin,
                                 const Tok* tok, int64_t blk, typename V::F* acc) {
    using I = typename V::I;
    using F = typename V::F;
    I M[NR], Ml[NR];
    for (int t = 0; t < NR; ++t) M[t] = Ml[t] = V::zero();
    for (int j = 0; j < 4; ++j) {
        for (int t = 0; t < NR; ++t) {
            const uint8_t* sb = tok[t].sums + kKSumBytes * static_cast<uint64_t>(blk);
            M[t] = V::dot_s16(M[t], mp[j], V::bcast32(sb + 4 * j));
            if (kI16) Ml[t] = V::dot_s16(Ml[t], mp[j], V::bcast32(sb + 16 + 4 * j));
        }
    }
    for (int t = 0; t < NR; ++t) {
        const F da = V::fbcast(tok[t].d + blk);
        const F v = kI16 ? V::fma(V::cvt(S[t]), V::fset1(256.0f), V::cvt(Sl[t])) : V::cvt(S[t]);
        acc[t] = V::fma(v, V::fmul(d, da), acc[t]);
        const I m = kI16 ? V::add(V::template sll<8>(M[t]), Ml[t]) : M[t];
        acc[t] = V::fnma(V::cvt(m), V::fmul(dmin, da), acc[t]);
    }
}

// Sub-block s (16 weights, 4 vectors) of Q6_K superblock blk:
// S += sc * (dot - 32 * asum).
template <class V, int NR, bool kI16>
HR_KERNEL_INLINE void sub_q6(const typename V::I* w, typename V::I sc, const Tok* tok, int64_t blk,
                             int s, typename V::I* S, typename V::I* Sl) {
    using I = typename V::I;
    I is[NR], il[NR];
    for (int t = 0; t < NR; ++t) {
        const uint8_t* sb = tok[t].sums + kKSumBytes * static_cast<uint64_t>(blk);
        is[t] = V::bcast32(sb + 4 * s);
        if (kI16) il[t] = V::bcast32(sb + 64 + 4 * s);
    }
    for (int k = 0; k < 4; ++k) {
        const int64_t at = 256 * blk + 16 * s + 4 * k;
        for (int t = 0; t < NR; ++t) {
            is[t] = V::dot_u8s8(is[t], w[k], V::bcast32(tok[t].qs + at));
            if (kI16) il[t] = V::dot_u8s8(il[t], w[k], V::bcast32(tok[t].lo + at));
        }
    }
    for (int t = 0; t < NR; ++t) {
        S[t] = V::add(S[t], V::mullo(is[t], sc));
        if (kI16) Sl[t] = V::add(Sl[t], V::mullo(il[t], sc));
    }
}

template <class V, int NR, bool kI16>
HR_KERNEL_INLINE void finish_q6(const typename V::I* S, const typename V::I* Sl, typename V::F d,
                                const Tok* tok, int64_t blk, typename V::F* acc) {
    using F = typename V::F;
    for (int t = 0; t < NR; ++t) {
        const F v = kI16 ? V::fma(V::cvt(S[t]), V::fset1(256.0f), V::cvt(Sl[t])) : V::cvt(S[t]);
        acc[t] = V::fma(v, V::fmul(d, V::fbcast(tok[t].d + blk)), acc[t]);
    }
}

template <TensorType T>
inline constexpr bool is_k_type_v =
    T == TensorType::Q4_K || T == TensorType::Q5_K || T == TensorType::Q6_K;

// ---- micro-kernels: panel (a batch) and direct (a few tokens) ----------------

// Blocks [b0, b0 + nb) of a row group for NR tokens, from a packed panel.
template <class V, TensorType T, int NR, bool kI16>
void micro_panel(const uint8_t* panel, int64_t b0, int64_t nb, const Tok* tok, int n_valid,
                 bool first) {
    using I = typename V::I;
    using F = typename V::F;
    constexpr uint64_t vb = V::kBytes;
    constexpr uint64_t stride = panel_block_bytes<V>(T);
    F acc[NR];
    load_acc<V, NR>(acc, tok, n_valid, first);
    for (int64_t b = 0; b < nb; ++b, panel += stride) {
        const int64_t blk = b0 + b;
        I w[8];
        if constexpr (T == TensorType::Q4_K || T == TensorType::Q5_K) {
            I S[NR], Sl[NR], mp[4];
            for (int t = 0; t < NR; ++t) S[t] = Sl[t] = V::zero();
            for (int s = 0; s < 8; ++s) {
                for (int k = 0; k < 8; ++k) w[k] = V::load(panel + (8 * s + k) * vb);
                sub_q45<V, NR, kI16>(w, V::load(panel + (64 + s) * vb), tok, blk, s, S, Sl);
            }
            for (int j = 0; j < 4; ++j) mp[j] = V::load(panel + (72 + j) * vb);
            finish_q45<V, NR, kI16>(
                S, Sl, mp, V::fload(reinterpret_cast<const float*>(panel + 76 * vb)),
                V::fload(reinterpret_cast<const float*>(panel + 77 * vb)), tok, blk, acc);
        } else if constexpr (T == TensorType::Q6_K) {
            I S[NR], Sl[NR];
            for (int t = 0; t < NR; ++t) S[t] = Sl[t] = V::zero();
            for (int s = 0; s < 16; ++s) {
                for (int k = 0; k < 4; ++k) w[k] = V::load(panel + (4 * s + k) * vb);
                sub_q6<V, NR, kI16>(w, V::load(panel + (64 + s) * vb), tok, blk, s, S, Sl);
            }
            finish_q6<V, NR, kI16>(S, Sl, V::fload(reinterpret_cast<const float*>(panel + 80 * vb)),
                                   tok, blk, acc);
        } else {
            constexpr bool kMin = Read32<V, T>::kMin;
            constexpr bool kSigned = T == TensorType::Q8_0 && !V::kQ8Unsigned;
            for (int k = 0; k < 8; ++k) w[k] = V::load(panel + k * vb);
            const F dw = V::fload(reinterpret_cast<const float*>(panel + 8 * vb));
            const F mw = kMin ? V::fload(reinterpret_cast<const float*>(panel + 9 * vb)) : dw;
            block_32<V, NR, kMin, kI16, kSigned>(w, dw, mw, tok, blk, acc);
        }
    }
    store_acc<V, NR>(acc, tok, n_valid);
}

// The same straight from a source (pack.h): each block is read once for the
// NR tokens, with no panel in between.
template <class V, TensorType T, int NR, bool kI16, class Src>
void micro_direct(const Src& src, int64_t b0, int64_t nb, const Tok* tok, int n_valid, bool first) {
    using I = typename V::I;
    using F = typename V::F;
    F acc[NR];
    load_acc<V, NR>(acc, tok, n_valid, first);
    for (int64_t blk = b0; blk < b0 + nb; ++blk) {
        if constexpr (!is_k_type_v<T>) src.prefetch(blk);
        if constexpr (T == TensorType::Q4_K || T == TensorType::Q5_K) {
            using R = ReadQ45K<V, T == TensorType::Q5_K>;
            I S[NR], Sl[NR], sc[8], mp[4], w[16];
            F d, dmin;
            for (int t = 0; t < NR; ++t) S[t] = Sl[t] = V::zero();
            R::scales(src, blk, sc, mp, d, dmin);
            for (int c = 0; c < 4; ++c) {
                src.prefetch(blk, c, 4);
                R::pair(src, blk, c, w);
                sub_q45<V, NR, kI16>(w, sc[2 * c], tok, blk, 2 * c, S, Sl);
                sub_q45<V, NR, kI16>(w + 8, sc[2 * c + 1], tok, blk, 2 * c + 1, S, Sl);
            }
            finish_q45<V, NR, kI16>(S, Sl, mp, d, dmin, tok, blk, acc);
        } else if constexpr (T == TensorType::Q6_K) {
            using R = ReadQ6K<V>;
            I S[NR], Sl[NR], sc[16], w[16];
            F d;
            for (int t = 0; t < NR; ++t) S[t] = Sl[t] = V::zero();
            R::scales(src, blk, sc, d);
            for (int h = 0; h < 2; ++h) {
                for (int part = 0; part < 2; ++part) {
                    src.prefetch(blk, 2 * h + part, 4);
                    R::quarter(src, blk, h, part, w);
                    for (int q = 0; q < 4; ++q) {
                        const int s = 8 * h + 2 * q + part;
                        sub_q6<V, NR, kI16>(w + 4 * q, sc[s], tok, blk, s, S, Sl);
                    }
                }
            }
            finish_q6<V, NR, kI16>(S, Sl, d, tok, blk, acc);
        } else {
            using R = Read32<V, T>;
            constexpr bool kSigned = T == TensorType::Q8_0 && !V::kQ8Unsigned;
            I w[8];
            F dw, mw;
            R::read(src, blk, w, dw, mw);
            block_32<V, NR, R::kMin, kI16, kSigned>(w, dw, mw, tok, blk, acc);
        }
    }
    store_acc<V, NR>(acc, tok, n_valid);
}

// ---- drivers --------------------------------------------------------------

// Where a row group's weights come from: the GGUF rows, or the repacked copy.
template <class V>
struct GroupRef {
    const RowGroup<V>* rows;  // set when reading the GGUF rows
    const uint8_t* packed;    // set when reading the repacked copy
};

// The kernels for one weight type and activation precision.
template <class V>
struct IntKernel {
    using Pack = void (*)(const GroupRef<V>&, int64_t, int64_t, uint8_t*);
    using Panel = void (*)(const uint8_t*, int64_t, int64_t, const Tok*, int, bool);
    using Direct = void (*)(const GroupRef<V>&, int64_t, int64_t, const Tok*, int, bool);
    Pack pack;         // into a panel
    Panel panel[9];    // [nr], nr = 1..nr_max
    Direct direct[9];  // [nr]
    int nr_max;
    int chunk;  // blocks per packed chunk
};

template <class V, TensorType T, bool kPacked>
void pack_from(const GroupRef<V>& g, int64_t b0, int64_t nb, uint8_t* panel) {
    if constexpr (kPacked)
        pack_panel<V, T>(PackedSrc<V, T>{g.packed}, b0, nb, panel);
    else
        pack_panel<V, T>(RowsSrc<V, T>{*g.rows}, b0, nb, panel);
}

template <class V, TensorType T, int NR, bool kI16, bool kPacked>
void direct_from(const GroupRef<V>& g, int64_t b0, int64_t nb, const Tok* tok, int n_valid,
                 bool first) {
    if constexpr (kPacked)
        micro_direct<V, T, NR, kI16>(PackedSrc<V, T>{g.packed}, b0, nb, tok, n_valid, first);
    else
        micro_direct<V, T, NR, kI16>(RowsSrc<V, T>{*g.rows}, b0, nb, tok, n_valid, first);
}

template <class V, TensorType T, bool kI16, bool kPacked, int N>
void fill_kernels(IntKernel<V>& k) {
    if constexpr (N >= 1) {
        k.panel[N] = &micro_panel<V, T, N, kI16>;
        k.direct[N] = &direct_from<V, T, N, kI16, kPacked>;
        fill_kernels<V, T, kI16, kPacked, N - 1>(k);
    }
}

template <class V, TensorType T, bool kI16, bool kPacked>
IntKernel<V> make_kernel() {
    constexpr bool k_type = T == TensorType::Q4_K || T == TensorType::Q5_K || T == TensorType::Q6_K;
    constexpr int nr =
        k_type ? (kI16 ? V::kNrKInt16 : V::kNrKInt8) : (kI16 ? V::kNr32Int16 : V::kNr32Int8);
    IntKernel<V> k{};
    k.nr_max = nr;
    k.chunk = k_type ? 2 : 16;
    k.pack = &pack_from<V, T, kPacked>;
    fill_kernels<V, T, kI16, kPacked, nr>(k);
    return k;
}

template <class V, bool kI16, bool kPacked>
IntKernel<V> int_kernel_for(TensorType t) {
    switch (t) {
        case TensorType::Q4_0:
            return make_kernel<V, TensorType::Q4_0, kI16, kPacked>();
        case TensorType::Q4_1:
            return make_kernel<V, TensorType::Q4_1, kI16, kPacked>();
        case TensorType::Q5_0:
            return make_kernel<V, TensorType::Q5_0, kI16, kPacked>();
        case TensorType::Q5_1:
            return make_kernel<V, TensorType::Q5_1, kI16, kPacked>();
        case TensorType::Q8_0:
            return make_kernel<V, TensorType::Q8_0, kI16, kPacked>();
        case TensorType::Q4_K:
            return make_kernel<V, TensorType::Q4_K, kI16, kPacked>();
        case TensorType::Q5_K:
            return make_kernel<V, TensorType::Q5_K, kI16, kPacked>();
        default:
            return make_kernel<V, TensorType::Q6_K, kI16, kPacked>();
    }
}

template <class V>
IntKernel<V> int_kernel(TensorType t, bool i16, bool packed) {
    if (packed) return i16 ? int_kernel_for<V, true, true>(t) : int_kernel_for<V, false, true>(t);
    return i16 ? int_kernel_for<V, true, false>(t) : int_kernel_for<V, false, false>(t);
}

// Row groups handed out per grab: small enough to balance, large enough to
// keep the shared counter quiet. A batch makes each group a large piece of
// work: then one at a time.
inline int64_t grab_size(int64_t n_groups, int n_threads, int64_t n_tokens) {
    if (n_tokens >= 16) return 1;
    return std::max<int64_t>(1, n_groups / (32 * static_cast<int64_t>(n_threads)));
}

// A row group's rows are contiguous, but RowsSrc reads them as 16
// interleaved streams, which the hardware prefetchers follow at half the
// bandwidth. So while group g is read, the next group's bytes are fetched
// into L2 as one sequential stream, a slice per chunk. (A repacked copy is
// one sequential stream already.)
template <class V>
inline void prefetch_slice(const uint8_t* base, uint64_t bytes, int64_t slice, int64_t n_slices) {
    const uint64_t begin = bytes * static_cast<uint64_t>(slice) / static_cast<uint64_t>(n_slices);
    const uint64_t end = bytes * static_cast<uint64_t>(slice + 1) / static_cast<uint64_t>(n_slices);
    for (uint64_t off = begin & ~uint64_t{63}; off < end; off += 64) V::prefetch_l2(base + off);
}

// Runs fn(g, thread) for every row group of w, groups handed out from a
// shared counter.
template <class V, class Fn>
void for_each_group(const Matrix& w, int64_t n_tokens, const Context& ctx, Fn&& fn) {
    constexpr int L = V::kLanes;
    const int64_t n_groups = (w.n_rows + L - 1) / L;
    const int64_t grab = grab_size(n_groups, ctx.pool->n_threads(), n_tokens);
    std::atomic<int64_t> next{0};
    ctx.pool->run([&](int thread) {
        for (;;) {
            const int64_t g0 = next.fetch_add(grab, std::memory_order_relaxed);
            if (g0 >= n_groups) break;
            const int64_t g1 = std::min(n_groups, g0 + grab);
            for (int64_t g = g0; g < g1; ++g) fn(g, g + 1 < g1, thread);
        }
    });
}

// Bytes of w's repacked copy: whole row groups.
template <class V>
uint64_t packed_bytes(const Matrix& w) {
    if (!is_int_type(w.type)) return 0;
    const uint64_t n_groups = static_cast<uint64_t>((w.n_rows + V::kLanes - 1) / V::kLanes);
    return n_groups * V::kLanes * w.row_bytes;
}

template <class V, TensorType T>
void repack_matrix(const Matrix& w, uint8_t* dst, const Context& ctx) {
    constexpr int L = V::kLanes;
    const int64_t nb = w.n_cols / static_cast<int64_t>(traits(T).block_size);
    for_each_group<V>(w, 1, ctx, [&](int64_t g, bool, int) {
        const int64_t r0 = g * L;
        const int n_valid = static_cast<int>(std::min<int64_t>(L, w.n_rows - r0));
        const RowGroup<V> rg = make_row_group<V>(w.data + static_cast<uint64_t>(r0) * w.row_bytes,
                                                 w.row_bytes, n_valid);
        repack_group<V, T>(rg, nb, dst + static_cast<uint64_t>(r0) * w.row_bytes);
    });
}

// Writes w's repacked copy (packed_bytes(w) bytes) to dst.
template <class V>
void repack(const Matrix& w, uint8_t* dst, const Context& ctx) {
    switch (w.type) {
        case TensorType::Q4_0:
            return repack_matrix<V, TensorType::Q4_0>(w, dst, ctx);
        case TensorType::Q4_1:
            return repack_matrix<V, TensorType::Q4_1>(w, dst, ctx);
        case TensorType::Q5_0:
            return repack_matrix<V, TensorType::Q5_0>(w, dst, ctx);
        case TensorType::Q5_1:
            return repack_matrix<V, TensorType::Q5_1>(w, dst, ctx);
        case TensorType::Q8_0:
            return repack_matrix<V, TensorType::Q8_0>(w, dst, ctx);
        case TensorType::Q4_K:
            return repack_matrix<V, TensorType::Q4_K>(w, dst, ctx);
        case TensorType::Q5_K:
            return repack_matrix<V, TensorType::Q5_K>(w, dst, ctx);
        case TensorType::Q6_K:
            return repack_matrix<V, TensorType::Q6_K>(w, dst, ctx);
        default:
            return;
    }
}

// y_i = x @ W_i^T for n matrices of one type and width (a layer's Q, K, V, or
// gate and up) as one piece of work: their row groups are handed out from one
// counter, so the threads finish together once, not n times.
// packed[i]: W_i.packed holds this backend's repacked copy.
template <class V>
void matmul_int(const Matrix* const* ws, float* const* ys, int n, const Acts& x, const Context& ctx,
                const bool* packed) {
    constexpr int L = V::kLanes;
    constexpr int kMaxMatrices = 4;
    HR_CHECK(n >= 1 && n <= kMaxMatrices);
    const Matrix& w0 = *ws[0];
    const ActLayout al = act_layout(w0.n_cols, w0.type, x.quant);
    const int64_t nb = w0.n_cols / al.block;
    IntKernel<V> kern[kMaxMatrices];
    int64_t first_group[kMaxMatrices + 1];
    first_group[0] = 0;
    for (int i = 0; i < n; ++i) {
        kern[i] = int_kernel<V>(ws[i]->type, x.quant == ActPrecision::Int16, packed[i]);
        first_group[i + 1] = first_group[i] + (ws[i]->n_rows + L - 1) / L;
    }
    const int64_t n_chunks = (nb + kern[0].chunk - 1) / kern[0].chunk;
    const bool direct = x.n_tokens <= kern[0].nr_max;
    const int64_t n_groups = first_group[n];
    const int64_t grab = grab_size(n_groups, ctx.pool->n_threads(), x.n_tokens);
    std::atomic<int64_t> next{0};
    ctx.pool->run([&](int thread) {
        uint8_t* panel = ctx.thread_scratch(thread);
        Tok tok[16];
        for (;;) {
            const int64_t g0 = next.fetch_add(grab, std::memory_order_relaxed);
            if (g0 >= n_groups) break;
            const int64_t g1 = std::min(n_groups, g0 + grab);
            for (int64_t gg = g0; gg < g1; ++gg) {
                int i = 0;
                while (gg >= first_group[i + 1]) ++i;
                const Matrix& w = *ws[i];
                const IntKernel<V>& k = kern[i];
                float* y = ys[i];
                const int64_t r0 = (gg - first_group[i]) * L;
                const int n_valid = static_cast<int>(std::min<int64_t>(L, w.n_rows - r0));
                const uint64_t at = static_cast<uint64_t>(r0) * w.row_bytes;
                RowGroup<V> rg;
                GroupRef<V> ref{&rg, nullptr};
                if (packed[i])
                    ref.packed = w.packed + at;
                else
                    rg = make_row_group<V>(w.data + at, w.row_bytes, n_valid);
                // The next group of this grab in the same matrix, if any.
                const uint64_t next_bytes =
                    gg + 1 < std::min(g1, first_group[i + 1]) && !packed[i]
                        ? static_cast<uint64_t>(std::min<int64_t>(L, w.n_rows - r0 - L)) *
                              w.row_bytes
                        : 0;
                for (int64_t b0 = 0; b0 < nb; b0 += k.chunk) {
                    const int64_t n_chunk = std::min<int64_t>(k.chunk, nb - b0);
                    if (next_bytes)
                        prefetch_slice<V>(w.data + at + L * w.row_bytes, next_bytes, b0 / k.chunk,
                                          n_chunks);
                    if (!direct) k.pack(ref, b0, n_chunk, panel);
                    for (int64_t t0 = 0; t0 < x.n_tokens; t0 += k.nr_max) {
                        const int nr =
                            static_cast<int>(std::min<int64_t>(k.nr_max, x.n_tokens - t0));
                        for (int t = 0; t < nr; ++t) {
                            const uint8_t* row =
                                x.q + static_cast<uint64_t>(t0 + t) * x.q_row_bytes;
                            tok[t] = {row, row + al.lo, reinterpret_cast<const float*>(row + al.d),
                                      row + al.sums, y + (t0 + t) * w.n_rows + r0};
                        }
                        if (direct)
                            k.direct[nr](ref, b0, n_chunk, tok, n_valid, b0 == 0);
                        else
                            k.panel[nr](panel, b0, n_chunk, tok, n_valid, b0 == 0);
                    }
                }
            }
        }
    });
}

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
            } else if (t == TensorType::Q8_0 && !V::kQ8Unsigned) {
                dequant_cols<V, true>(panel, 8, d, zero, false, zero, o);
            } else {
                const float off = static_cast<float>(t == TensorType::Q4_0   ? 8
                                                     : t == TensorType::Q5_0 ? 16
                                                                             : 128);
                dequant_cols<V, false>(panel, 8, d, zero, false, V::fset1(off), o);
            }
            continue;
        }
        float* o = out + b * 256 * L;
        if (t == TensorType::Q6_K) {
            const F d = V::fload(reinterpret_cast<const float*>(panel + 80 * vb));
            for (int s = 0; s < 16; ++s) {
                const F ds = V::fmul(d, V::cvt(V::load(panel + (64 + s) * vb)));
                dequant_cols<V, false>(panel + 4 * s * vb, 4, ds, zero, false, V::fset1(32.0f),
                                       o + 16 * s * L);
            }
            continue;
        }
        const F d = V::fload(reinterpret_cast<const float*>(panel + 76 * vb));
        const F dmin = V::fload(reinterpret_cast<const float*>(panel + 77 * vb));
        for (int s = 0; s < 8; ++s) {
            const I pair = V::load(panel + (72 + s / 2) * vb);
            const I m = s % 2 ? V::template srl<16>(pair) : V::and_(pair, V::set1(0xFFFF));
            const F d1 = V::fmul(d, V::cvt(V::load(panel + (64 + s) * vb)));
            const F m1 = V::fmul(dmin, V::cvt(m));
            dequant_cols<V, false>(panel + 8 * s * vb, 8, d1, zero, true, m1, o + 32 * s * L);
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
    const int block = is_k_type(w.type) ? 256 : 32;
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
            ref.packed = w.packed + at;
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
    const int64_t grab = grab_size(n_groups, ctx.pool->n_threads(), x.n_tokens);
    std::atomic<int64_t> next{0};
    ctx.pool->run([&](int) {
        for (;;) {
            const int64_t g0 = next.fetch_add(grab, std::memory_order_relaxed);
            if (g0 >= n_groups) break;
            for (int64_t g = g0; g < std::min(n_groups, g0 + grab); ++g) {
                const int64_t r0 = g * MR;
                if (r0 + MR <= w.n_rows) {
                    float_rows<V, MR>(w, r0, x, y);
                } else {
                    for (int64_t r = r0; r < w.n_rows; ++r) float_rows<V, 1>(w, r, x, y);
                }
            }
        }
    });
}

}  // namespace headroom::kernels::x86
