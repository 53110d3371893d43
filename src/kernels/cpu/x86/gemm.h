// Integer matmuls (matrix x matrix and matrix x vector) for the x86
// tables, templates over the vector traits V (simd-avx2.h, simd-avx512.h).
//
// A row group (V::kLanes rows) is read a chunk of blocks at a time (pack.h).
// Per block, one integer accumulator per token collects the exact u8 x s8 dot
// products for all rows of the group (a lane per row); the block's scales are
// applied in f32, as ref::matmul_int specifies, into one f32 accumulator per
// token that lives in y between chunks.
//
// A few tokens (decode: up to NR, the tokens one micro-kernel call holds in
// registers) consume the vectors straight from the reader: with the repacked
// copy, one sequential stream of plain loads. A batch packs each chunk once
// into a per-thread panel that stays in L1 and runs every token over it, NR
// at a time. Both paths share the per-block arithmetic below, so y[t, r] is
// bit-identical for any number of tokens in the call.
//
// Each thread walks its own contiguous share of the row groups and steals
// from the others when done (core/share-queue.h), so a core slowed by other
// work takes fewer; every row group is computed by exactly one thread.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>

#include "core/check.h"
#include "core/share-queue.h"
#include "core/thread-pool.h"
#include "kernels/cpu/act-format.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/x86/act-quant.h"
#include "kernels/cpu/x86/pack.h"
#include "kernels/moe.h"

namespace headroom::kernels::x86 {

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

// acc + the products of vector w with 4 activations at a, broadcast.
// Signed weights (Q8_0 where V::kQ8Unsigned is unset) come with abs_w = |w|
// (abs_if_signed), computed once for every token: Int8 activations
// (|a| <= 127) multiply as |w| x (a signed as w), exact for every s8 weight.
// Int16's low halves reach -128, which that cannot negate: they multiply as
// |a| x (w signed as a), with w clamped to -127 (a weight of -128, which
// ggml's quantizer never writes, is read as -127 there).
template <class V, bool kSigned, bool kI16>
HR_KERNEL_INLINE typename V::I dot4(typename V::I acc, typename V::I w, typename V::I abs_w,
                                    const uint8_t* a) {
    if constexpr (kSigned && kI16)
        return V::dot_s8s8_any_a(acc, V::clamp_q8(w), V::bcast32(a));
    else if constexpr (kSigned)
        return V::dot_s8s8(acc, w, abs_w, V::bcast32(a));
    else
        return V::dot_u8s8_at(acc, w, a);
}

template <class V, bool kSigned>
HR_KERNEL_INLINE typename V::I abs_if_signed(typename V::I w) {
    if constexpr (kSigned)
        return V::abs8(w);
    else
        return w;
}

// ---- per-block arithmetic, shared by the panel and the direct (decode) paths --

// s[t] = the int16 sum of the multiply-add pair sums of vectors w[0, G) with
// the activations at tok[t].qs + at (4 per vector), for tables with
// V::kPairSums16. Exact while G pair sums fit int16: the callers bound the
// weight levels.
template <class V, int NR, int G>
HR_KERNEL_INLINE void pair_sums16(const typename V::I* w, const Tok* tok, int64_t at,
                                  typename V::I* s) {
#pragma GCC unroll 8
    for (int k = 0; k < G; ++k) {
#pragma GCC unroll 8
        for (int t = 0; t < NR; ++t) {
            const typename V::I p = V::pairs16(w[k], V::bcast32(tok[t].qs + at + 4 * k));
            s[t] = V::pin(k == 0 ? p : V::add16(s[t], p));
        }
    }
}

// One block of a 32-element type for NR tokens: exact integer sums, then
// acc = fma(isum, dw * da, acc) (and, with a min, acc = fma(mw, da * asum, acc)).
template <class V, TensorType T, int NR, bool kI16>
HR_KERNEL_INLINE void block_32(const typename V::I* w, typename V::F dw, typename V::F mw,
                               const Tok* tok, int64_t blk, typename V::F* acc) {
    using I = typename V::I;
    constexpr bool kMin = Read32<V, T>::kMin;
    constexpr bool kSigned = has_s8_levels(T) && !V::kQ8Unsigned;
    I ia[NR], il[NR];
    for (int t = 0; t < NR; ++t) {
        const I corr = kMin ? V::zero() : V::bcast32(tok[t].sums + 4 * blk);
        ia[t] = kI16 ? V::zero() : corr;
        if (kI16) il[t] = corr;
    }
    if constexpr (V::kPairSums16 && !kI16 && !has_s8_levels(T)) {
        // The multiply-add's int16 pair sums are added as int16 and widened
        // once per G vectors. |level| <= 15 (4-bit) or 31 (5-bit), |a| <= 127:
        // G = 8 pairs sum to at most 30480, G = 4 to 31496, short of 2^15, so
        // the sums are exact and the same integers as widening every pair.
        constexpr int G = Read32<V, T>::kFive ? 4 : 8;
#pragma GCC unroll 2
        for (int g = 0; g < 8; g += G) {
            I s[NR];
            pair_sums16<V, NR, G>(w + g, tok, 32 * blk + 4 * g, s);
            for (int t = 0; t < NR; ++t) ia[t] = V::widen16(ia[t], s[t]);
        }
    } else if constexpr (NR == 1 && !kI16) {
        // One token: two chains of multiply-adds, not one of eight (integer
        // sums, so the split does not change the result).
        I odd = V::zero();
        for (int k = 0; k < 8; k += 2) {
            ia[0] = dot4<V, kSigned, kI16>(ia[0], w[k], abs_if_signed<V, kSigned>(w[k]),
                                           tok[0].qs + 32 * blk + 4 * k);
            odd = dot4<V, kSigned, kI16>(odd, w[k + 1], abs_if_signed<V, kSigned>(w[k + 1]),
                                         tok[0].qs + 32 * blk + 4 * k + 4);
        }
        ia[0] = V::add(ia[0], odd);
    } else {
        for (int k = 0; k < 8; ++k) {
            const I abs_w = abs_if_signed<V, kSigned>(w[k]);
            for (int t = 0; t < NR; ++t) {
                ia[t] = V::pin(
                    dot4<V, kSigned, kI16>(ia[t], w[k], abs_w, tok[t].qs + 32 * blk + 4 * k));
                if (kI16)
                    il[t] = V::pin(
                        dot4<V, kSigned, kI16>(il[t], w[k], abs_w, tok[t].lo + 32 * blk + 4 * k));
            }
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
template <class V, int NR, bool kI16, bool kFive>
HR_KERNEL_INLINE void sub_q45(const typename V::I* w, typename V::I sc, const Tok* tok, int64_t blk,
                              int s, typename V::I* S, typename V::I* Sl) {
    using I = typename V::I;
    if constexpr (V::kPairSums16 && !kI16) {
        // As block_32: int16 pair sums of G vectors (levels <= 15, or 31
        // for Q5_K) are exact; one multiply-add by the scale in both int16
        // halves of each lane (<= 63) widens and scales them at once.
        constexpr int G = kFive ? 4 : 8;
        const I sc2 = V::or_(sc, V::template sll<16>(sc));
#pragma GCC unroll 2
        for (int g = 0; g < 8; g += G) {
            I p16[NR];
            pair_sums16<V, NR, G>(w + g, tok, 256 * blk + 32 * s + 4 * g, p16);
            for (int t = 0; t < NR; ++t) S[t] = V::dot_s16(S[t], p16[t], sc2);
        }
        return;
    }
    I is[NR], il[NR];
    for (int t = 0; t < NR; ++t) is[t] = il[t] = V::zero();
    if constexpr (NR == 1 && !kI16) {
        // One token: two chains of multiply-adds, as block_32's.
        I odd = V::zero();
        for (int k = 0; k < 8; k += 2) {
            const int64_t at = 256 * blk + 32 * s + 4 * k;
            is[0] = V::dot_u8s8_at(is[0], w[k], tok[0].qs + at);
            odd = V::dot_u8s8_at(odd, w[k + 1], tok[0].qs + at + 4);
        }
        S[0] = V::add(S[0], V::mullo(V::add(is[0], odd), sc));
        return;
    }
    for (int k = 0; k < 8; ++k) {
        const int64_t at = 256 * blk + 32 * s + 4 * k;
        for (int t = 0; t < NR; ++t) {
            is[t] = V::dot_u8s8_at(is[t], w[k], tok[t].qs + at);
            if (kI16) il[t] = V::dot_u8s8_at(il[t], w[k], tok[t].lo + at);
        }
    }
    for (int t = 0; t < NR; ++t) {
        S[t] = V::add(S[t], V::mullo(is[t], sc));
        if (kI16) Sl[t] = V::add(Sl[t], V::mullo(il[t], sc));
    }
}

// Sub-block s of Q5_K superblock blk from the five-vector copy
// (ReadQ45K::sub_x8: w[4..8) are 8 x the levels): S += sc * dot, the scaled
// half's sum divided by 8 exactly (a multiple of 8, |8 x sum| < 2^19).
template <class V, int NR>
HR_KERNEL_INLINE void sub_q5_x8(const typename V::I* w, typename V::I sc, const Tok* tok,
                                int64_t blk, int s, typename V::I* S) {
    using I = typename V::I;
    I lo[NR], hi[NR];
    for (int t = 0; t < NR; ++t) lo[t] = hi[t] = V::zero();
    for (int k = 0; k < 4; ++k) {
        const int64_t at = 256 * blk + 32 * s + 4 * k;
        for (int t = 0; t < NR; ++t) {
            lo[t] = V::dot_u8s8_at(lo[t], w[k], tok[t].qs + at);
            hi[t] = V::dot_u8s8_at(hi[t], w[k + 4], tok[t].qs + at + 16);
        }
    }
    for (int t = 0; t < NR; ++t)
        S[t] = V::add(S[t], V::mullo(V::add(lo[t], V::template sra<3>(hi[t])), sc));
}

// The end of a Q4_K / Q5_K superblock (kPairs = 4: 8 sub-blocks) or a Q2_K
// one (kPairs = 8: 16 sub-blocks): M = sum_s m_s * asum_s, then
// acc = fma(v, d * da, acc); acc = fma(-M, dmin * da, acc).
template <class V, int NR, bool kI16, int kPairs = 4>
HR_KERNEL_INLINE void finish_q45(const typename V::I* S, const typename V::I* Sl,
                                 const typename V::I* mp, typename V::F d, typename V::F dmin,
                                 const Tok* tok, int64_t blk, typename V::F* acc) {
    using I = typename V::I;
    using F = typename V::F;
    I M[NR], Ml[NR];
    for (int t = 0; t < NR; ++t) M[t] = Ml[t] = V::zero();
    for (int j = 0; j < kPairs; ++j) {
        for (int t = 0; t < NR; ++t) {
            const uint8_t* sb = tok[t].sums + kKSumBytes * static_cast<uint64_t>(blk);
            M[t] = V::dot_s16(M[t], mp[j], V::bcast32(sb + 4 * j));
            if (kI16) Ml[t] = V::dot_s16(Ml[t], mp[j], V::bcast32(sb + 4 * kPairs + 4 * j));
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

// Sub-block s (16 weights, 4 vectors) of a superblock of 16-element
// sub-blocks: S += sc * (dot - offset * asum) for Q6_K and Q3_K (kOffset: the
// sums hold -offset * asum); S += sc * dot for Q2_K, whose mins come apart.
// kDown: the weights are the levels times 2^kDown (Q2_K's, masked in place),
// and each dot product, a multiple of 2^kDown, is divided exactly first.
template <class V, int NR, bool kI16, bool kOffset = true, int kDown = 0>
HR_KERNEL_INLINE void sub_q6(const typename V::I* w, typename V::I sc, const Tok* tok, int64_t blk,
                             int s, typename V::I* S, typename V::I* Sl) {
    using I = typename V::I;
    I is[NR], il[NR];
    for (int t = 0; t < NR; ++t) {
        const uint8_t* sb = tok[t].sums + kKSumBytes * static_cast<uint64_t>(blk);
        is[t] = kOffset ? V::bcast32(sb + 4 * s) : V::zero();
        il[t] = kOffset && kI16 ? V::bcast32(sb + 64 + 4 * s) : V::zero();
    }
    if constexpr (V::kPairSums16 && !kI16) {
        // As block_32: levels <= 63 and |a| <= 127 make a pair sum at most
        // 16002, so two of them add up exactly in int16 (32004), widened once.
        for (int g = 0; g < 4; g += 2) {
            I p16[NR];
            pair_sums16<V, NR, 2>(w + g, tok, 256 * blk + 16 * s + 4 * g, p16);
            for (int t = 0; t < NR; ++t) is[t] = V::widen16(is[t], p16[t]);
        }
        for (int t = 0; t < NR; ++t) S[t] = V::add(S[t], V::mullo(is[t], sc));
        return;
    }
    for (int k = 0; k < 4; ++k) {
        const int64_t at = 256 * blk + 16 * s + 4 * k;
        for (int t = 0; t < NR; ++t) {
            is[t] = V::dot_u8s8_at(is[t], w[k], tok[t].qs + at);
            if (kI16) il[t] = V::dot_u8s8_at(il[t], w[k], tok[t].lo + at);
        }
    }
    for (int t = 0; t < NR; ++t) {
        if constexpr (kDown > 0) is[t] = V::template sra<kDown>(is[t]);
        S[t] = V::add(S[t], V::mullo(is[t], sc));
        if (kI16) Sl[t] = V::add(Sl[t], V::mullo(il[t], sc));
    }
}

// Q2_K's sub-blocks 8n + 2j and 8n + 2j + 1 (j < 4) from half n's qs
// bytes q, where the multiply-adds take any u8 (V::kExactU8Dot): the levels
// masked in place, as 4^j x level, one operation a vector where a shift and
// a mask take two; sub_q6 divides each dot product by 4^j exactly, a shift
// per token, so it pays for one or two tokens. On one Zen 4 core the product
// ran 8% faster from cache, and a Q2_K TinyLlama's decode read 83-86% of the
// bandwidth against 76-80%.
template <class V, int NR, int j>
HR_KERNEL_INLINE void q2k_pair(const typename V::I q[8], const typename V::I* sc, const Tok* tok,
                               int64_t blk, int n, typename V::I* S) {
    using I = typename V::I;
    static_assert(V::kExactU8Dot);
    const I mask = V::set1_8(static_cast<int8_t>(3 << (2 * j)));
    I w[8];
    for (int k = 0; k < 8; ++k) w[k] = V::and_(q[k], mask);
    const int s = 8 * n + 2 * j;
    sub_q6<V, NR, false, false, 2 * j>(w, sc[s], tok, blk, s, S, nullptr);
    sub_q6<V, NR, false, false, 2 * j>(w + 4, sc[s + 1], tok, blk, s + 1, S, nullptr);
}

// Sub-block s (32 weights, 8 vectors) of IQ4_XS superblock blk, its levels
// taken as Q8_0's weights are: S += sc * (dot - offset * asum).
template <class V, int NR, bool kI16>
HR_KERNEL_INLINE void sub_iq4xs(const typename V::I* w, typename V::I sc, const Tok* tok,
                                int64_t blk, int s, typename V::I* S, typename V::I* Sl) {
    using I = typename V::I;
    constexpr bool kSigned = !V::kQ8Unsigned;
    I is[NR], il[NR];
    for (int t = 0; t < NR; ++t) {
        const uint8_t* sb = tok[t].sums + kKSumBytes * static_cast<uint64_t>(blk);
        is[t] = V::bcast32(sb + 4 * s);
        if (kI16) il[t] = V::bcast32(sb + 64 + 4 * s);
    }
    for (int k = 0; k < 8; ++k) {
        const int64_t at = 256 * blk + 32 * s + 4 * k;
        const I abs_w = abs_if_signed<V, kSigned>(w[k]);
        for (int t = 0; t < NR; ++t) {
            is[t] = dot4<V, kSigned, kI16>(is[t], w[k], abs_w, tok[t].qs + at);
            if (kI16) il[t] = dot4<V, kSigned, kI16>(il[t], w[k], abs_w, tok[t].lo + at);
        }
    }
    for (int t = 0; t < NR; ++t) {
        S[t] = V::add(S[t], V::mullo(is[t], sc));
        if (kI16) Sl[t] = V::add(Sl[t], V::mullo(il[t], sc));
    }
}

// The end of a Q6_K or IQ4_XS superblock: acc = fma(v, d * da, acc).
template <class V, int NR, bool kI16>
HR_KERNEL_INLINE void finish_q6(const typename V::I* S, const typename V::I* Sl, typename V::F d,
                                const Tok* tok, int64_t blk, typename V::F* acc) {
    using F = typename V::F;
    for (int t = 0; t < NR; ++t) {
        const F v = kI16 ? V::fma(V::cvt(S[t]), V::fset1(256.0f), V::cvt(Sl[t])) : V::cvt(S[t]);
        acc[t] = V::fma(v, V::fmul(d, V::fbcast(tok[t].d + blk)), acc[t]);
    }
}

// ---- micro-kernels: panel (a batch) and direct (a few tokens) ----------------

// Blocks [b0, b0 + nb) of a row group for NR tokens, from a packed panel.
template <class V, TensorType T, int NR, bool kI16>
void micro_panel(const uint8_t* panel, int64_t b0, int64_t nb, const Tok* tok, int n_valid,
                 bool first) {
    using I = typename V::I;
    using F = typename V::F;
    constexpr uint64_t vb = V::kBytes;
    constexpr uint64_t stride = panel_block_bytes<V>(T);
    constexpr PanelLayout L = panel_layout(T);
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
                sub_q45<V, NR, kI16, T == TensorType::Q5_K>(w, V::load(panel + (L.scales + s) * vb),
                                                            tok, blk, s, S, Sl);
            }
            for (int j = 0; j < 4; ++j) mp[j] = V::load(panel + (L.mins + j) * vb);
            finish_q45<V, NR, kI16>(
                S, Sl, mp, V::fload(reinterpret_cast<const float*>(panel + L.d * vb)),
                V::fload(reinterpret_cast<const float*>(panel + L.m * vb)), tok, blk, acc);
        } else if constexpr (T == TensorType::Q2_K) {
            I S[NR], Sl[NR], mp[8];
            for (int t = 0; t < NR; ++t) S[t] = Sl[t] = V::zero();
            for (int s = 0; s < 16; ++s) {
                for (int k = 0; k < 4; ++k) w[k] = V::load(panel + (4 * s + k) * vb);
                sub_q6<V, NR, kI16, false>(w, V::load(panel + (L.scales + s) * vb), tok, blk, s, S,
                                           Sl);
            }
            for (int j = 0; j < 8; ++j) mp[j] = V::load(panel + (L.mins + j) * vb);
            finish_q45<V, NR, kI16, 8>(
                S, Sl, mp, V::fload(reinterpret_cast<const float*>(panel + L.d * vb)),
                V::fload(reinterpret_cast<const float*>(panel + L.m * vb)), tok, blk, acc);
        } else if constexpr (T == TensorType::Q6_K || T == TensorType::Q3_K) {
            I S[NR], Sl[NR];
            for (int t = 0; t < NR; ++t) S[t] = Sl[t] = V::zero();
            for (int s = 0; s < 16; ++s) {
                for (int k = 0; k < 4; ++k) w[k] = V::load(panel + (4 * s + k) * vb);
                sub_q6<V, NR, kI16>(w, V::load(panel + (L.scales + s) * vb), tok, blk, s, S, Sl);
            }
            finish_q6<V, NR, kI16>(
                S, Sl, V::fload(reinterpret_cast<const float*>(panel + L.d * vb)), tok, blk, acc);
        } else if constexpr (T == TensorType::IQ4_XS) {
            I S[NR], Sl[NR];
            for (int t = 0; t < NR; ++t) S[t] = Sl[t] = V::zero();
            for (int s = 0; s < 8; ++s) {
                for (int k = 0; k < 8; ++k) w[k] = V::load(panel + (8 * s + k) * vb);
                sub_iq4xs<V, NR, kI16>(w, V::load(panel + (L.scales + s) * vb), tok, blk, s, S, Sl);
            }
            finish_q6<V, NR, kI16>(
                S, Sl, V::fload(reinterpret_cast<const float*>(panel + L.d * vb)), tok, blk, acc);
        } else {
            constexpr bool kMin = Read32<V, T>::kMin;
            for (int k = 0; k < 8; ++k) w[k] = V::load(panel + k * vb);
            const F dw = V::fload(reinterpret_cast<const float*>(panel + L.d * vb));
            const F mw = kMin ? V::fload(reinterpret_cast<const float*>(panel + L.m * vb)) : dw;
            block_32<V, T, NR, kI16>(w, dw, mw, tok, blk, acc);
        }
    }
    store_acc<V, NR>(acc, tok, n_valid);
}

// A decode step streams each row group's weights from memory through L1, and
// the group's tokens' activations wait there for the next group. Rows longer
// than about 2048 elements (16 of them: 27 KiB or more of weights) push the
// activations out between one group and the next, and each block then waits
// on L2 for them (measured: docs/cpu-kernels.md#activations-asked-for-ahead).
//
// So while block blk runs, the activations of block blk + kActAheadBlocks<T>
// (of the range [b0, b0 + nb), wrapping round to its start, which the next
// group reads first) are asked for into L1: each line once, when the block's
// entries start it. One block ahead is 1.3 to 3.4 KiB of a K type's weights
// (16 x 84 to 210 bytes a block); 2 measured the same, 4 worse. The
// 32-element types look about as many bytes ahead (16 x 18 to 34 a block).
template <TensorType T>
inline constexpr int64_t kActAheadBlocks = is_k_type(T) ? 1 : 8;

template <class V, TensorType T, int NR, bool kI16>
HR_KERNEL_INLINE void prefetch_acts(const Tok* tok, int64_t blk, int64_t b0, int64_t nb) {
    constexpr int64_t kAhead = kActAheadBlocks<T>;
    constexpr bool kSuper = is_k_type(T);  // a block's values and sums are whole lines
    constexpr int64_t kBlock = act_block(T);
    constexpr uint64_t kSumBytes = act_sum_bytes(T);
    int64_t b = blk + kAhead;
    // Past the range's end: its start again. A division (tens of cycles,
    // once a row group) only where the range is shorter than kAhead blocks.
    if (b >= b0 + nb) b = nb >= kAhead ? b - nb : b0 + (b - b0) % nb;
    const auto line_start = [](const void* p) {
        return (reinterpret_cast<uintptr_t>(p) & 63) == 0;
    };
    for (int t = 0; t < NR; ++t) {
        const uint8_t* q = tok[t].qs + b * kBlock;
        if (kSuper || line_start(q))
            for (int64_t o = 0; o < kBlock; o += 64) V::prefetch_l1(q + o);
        if constexpr (kI16) {
            const uint8_t* lo = tok[t].lo + b * kBlock;
            if (kSuper || line_start(lo))
                for (int64_t o = 0; o < kBlock; o += 64) V::prefetch_l1(lo + o);
        }
        const uint8_t* sums = tok[t].sums + static_cast<uint64_t>(b) * kSumBytes;
        if (kSuper || line_start(sums))
            for (uint64_t o = 0; o < kSumBytes; o += 64) V::prefetch_l1(sums + o);
        if (line_start(tok[t].d + b)) V::prefetch_l1(tok[t].d + b);
    }
}

// Part `part` of kParts of a decode step's request for the repacked weights
// src.ahead bytes past block blk's start: lines [part, part + 1) x n / kParts
// of the n lines a block spans, into L2 (nothing unless src.ahead). Unrolled,
// part a constant: as a loop, each of a K type's 36 to 53 prefetches a block
// brought an add and a branch with it, and the block ran 1.2 times as long
// from L2 (Q4_K, one Intel Xeon core).
//
// The K types' decode paths spread a block's requests over its work, about
// a line at each step, where the others ask for the whole block at its
// start; kHold keeps a request where it is written (a compiler barrier), for
// AVX-512's Q5_K and Q6_K only. Both as measured:
// docs/cpu-kernels.md#weights-asked-for-ahead.
template <class V, int kParts, class Src, bool kHold = false>
HR_KERNEL_INLINE void ask_ahead(const Src& src, int64_t blk, int part) {
    constexpr int kLines = static_cast<int>((Src::kGroupBlockBytes + 63) / 64);
    if (!src.ahead) return;
    const uint8_t* p = src.base + static_cast<uint64_t>(blk) * Src::kGroupBlockBytes + src.ahead;
#pragma GCC unroll 64
    for (int l = part * kLines / kParts; l < (part + 1) * kLines / kParts; ++l)
        V::prefetch_l2(p + 64 * l);
    if constexpr (kHold) asm volatile("" ::: "memory");
}

// One block of each quantization family for micro_direct: the NR tokens'
// dot products with block blk of the source, added into acc. kAsk: a decode
// step asks for the repacked weights src.ahead bytes ahead; the paths that
// spread those requests over the block's work (kQ4Masked, kQ5Five, kQ6First
// below) hold them where they are written on AVX-512 (ask_ahead's kHold),
// the others ask once at the block's start (micro_direct).
template <class V, TensorType T, bool kI16, class Src>
inline constexpr bool kQ4Masked = T == TensorType::Q4_K && !kI16 && V::kExactU8Dot;
template <class V, TensorType T, bool kI16, class Src>
inline constexpr bool kQ5Five =
    T == TensorType::Q5_K && !kI16 && V::kQ5KFiveVectors && Src::kRepacked;
template <class V, class Src>
inline constexpr bool kQ6First = V::kQ6KScalesFirst&& Src::kRepacked;

// Q4_K and Q5_K.
template <class V, TensorType T, int NR, bool kI16, class Src, bool kAsk>
HR_KERNEL_INLINE void block_q45k(const Src& src, int64_t blk, const Tok* tok, typename V::F* acc) {
    using I = typename V::I;
    using F = typename V::F;
    using R = ReadQ45K<V, T == TensorType::Q5_K>;
    constexpr bool kHold = V::kLanes == 16;
    I S[NR], Sl[NR], sc[8], mp[4], w[16];
    F d, dmin;
    for (int t = 0; t < NR; ++t) S[t] = Sl[t] = V::zero();
    R::scales(src, blk, sc, mp, d, dmin);
    if constexpr (kQ4Masked<V, T, kI16, Src>) {
        // The odd sub-blocks multiply the high nibbles in place, as
        // 16 x level: one mask instead of a shift and a mask per
        // vector. Their sums, multiples of 16, are divided once at
        // the end, exactly (|16 x sum| < 2^28): the same integers.
        I H[NR];
        for (int t = 0; t < NR; ++t) H[t] = V::zero();
        const I low4 = V::set1_8(0x0F), high4 = V::set1_8(static_cast<int8_t>(0xF0));
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            I x[8];
            if constexpr (kAsk) ask_ahead<V, 36>(src, blk, 9 * c);
            src.dw4(blk, 16 + 32 * c, x);
            if constexpr (kAsk) ask_ahead<V, 36>(src, blk, 9 * c + 1);
            src.dw4(blk, 32 + 32 * c, x + 4);
            for (int k = 0; k < 8; k += 2) {
                if constexpr (kAsk) ask_ahead<V, 36>(src, blk, 9 * c + 2 + k / 2);
                w[k] = V::and_(x[k], low4);
                w[k + 1] = V::and_(x[k + 1], low4);
            }
            sub_q45<V, NR, false, false>(w, sc[2 * c], tok, blk, 2 * c, S, Sl);
            for (int k = 0; k < 8; k += 4) {
                if constexpr (kAsk) ask_ahead<V, 36>(src, blk, 9 * c + 6 + k / 4);
                for (int j = k; j < k + 4; ++j) w[j] = V::and_(x[j], high4);
            }
            if constexpr (kAsk) ask_ahead<V, 36>(src, blk, 9 * c + 8);
            sub_q45<V, NR, false, false>(w, sc[2 * c + 1], tok, blk, 2 * c + 1, H, Sl);
        }
        for (int t = 0; t < NR; ++t) S[t] = V::add(S[t], V::template sra<4>(H[t]));
    } else if constexpr (kQ5Five<V, T, kI16, Src>) {
#pragma GCC unroll 8
        for (int s = 0; s < 8; ++s) {
            if constexpr (kAsk) ask_ahead<V, 24, Src, kHold>(src, blk, 3 * s);
            R::sub_x8(src, blk, s, w);
            if constexpr (kAsk) ask_ahead<V, 24, Src, kHold>(src, blk, 3 * s + 1);
            sub_q5_x8<V, NR>(w, sc[s], tok, blk, s, S);
            if constexpr (kAsk) ask_ahead<V, 24, Src, kHold>(src, blk, 3 * s + 2);
        }
    } else {
        for (int c = 0; c < 4; ++c) {
            R::pair(src, blk, c, w);
            sub_q45<V, NR, kI16, T == TensorType::Q5_K>(w, sc[2 * c], tok, blk, 2 * c, S, Sl);
            sub_q45<V, NR, kI16, T == TensorType::Q5_K>(w + 8, sc[2 * c + 1], tok, blk, 2 * c + 1,
                                                        S, Sl);
        }
    }
    finish_q45<V, NR, kI16>(S, Sl, mp, d, dmin, tok, blk, acc);
}

// Q6_K. acts_midway: the next block's activations are asked for halfway
// through this one (prefetch_acts over [b0, b0 + nb)).
template <class V, int NR, bool kI16, class Src, bool kAsk>
HR_KERNEL_INLINE void block_q6k(const Src& src, int64_t blk, const Tok* tok, typename V::F* acc,
                                bool acts_midway, int64_t b0, int64_t nb) {
    using I = typename V::I;
    using F = typename V::F;
    using R = ReadQ6K<V>;
    constexpr bool kHold = V::kLanes == 16;
    I S[NR], Sl[NR], sc[16], w[16];
    F d;
    for (int t = 0; t < NR; ++t) S[t] = Sl[t] = V::zero();
    if constexpr (kQ6First<V, Src>) {
        R::scales(src, blk, sc, d);
#pragma GCC unroll 16
        for (int s = 0; s < 16; ++s) {
            if constexpr (kAsk) ask_ahead<V, 48, Src, kHold>(src, blk, 3 * s);
            R::sub(src, blk, s, w);
            if constexpr (kAsk) ask_ahead<V, 48, Src, kHold>(src, blk, 3 * s + 1);
            sub_q6<V, NR, kI16>(w, sc[s], tok, blk, s, S, Sl);
            if constexpr (kAsk) ask_ahead<V, 48, Src, kHold>(src, blk, 3 * s + 2);
            if (s == 7 && acts_midway)
                prefetch_acts<V, TensorType::Q6_K, NR, kI16>(tok, blk, b0, nb);
        }
    } else if constexpr (Src::kRepacked) {
        // Each scale loaded where its sub-block needs it.
        d = src.half(blk, 208);
        for (int s = 0; s < 16; ++s) {
            R::sub(src, blk, s, w);
            sub_q6<V, NR, kI16>(w, R::scale(src, blk, s), tok, blk, s, S, Sl);
        }
    } else {
        R::scales(src, blk, sc, d);
        for (int h = 0; h < 2; ++h) {
            for (int part = 0; part < 2; ++part) {
                R::quarter(src, blk, h, part, w);
                for (int q = 0; q < 4; ++q) {
                    const int s = 8 * h + 2 * q + part;
                    sub_q6<V, NR, kI16>(w + 4 * q, sc[s], tok, blk, s, S, Sl);
                }
            }
        }
    }
    finish_q6<V, NR, kI16>(S, Sl, d, tok, blk, acc);
}

// Q2_K.
template <class V, int NR, bool kI16, class Src>
HR_KERNEL_INLINE void block_q2k(const Src& src, int64_t blk, const Tok* tok, typename V::F* acc) {
    using I = typename V::I;
    using F = typename V::F;
    using R = ReadQ2K<V>;
    I S[NR], Sl[NR], sc[16], mp[8], q[8], w[8];
    F d, dmin;
    for (int t = 0; t < NR; ++t) S[t] = Sl[t] = V::zero();
    R::scales(src, blk, sc, mp, d, dmin);
    for (int n = 0; n < 2; ++n) {
        R::low_bits(src, blk, n, q);
        for (int j = 0; j < 4; ++j) {
            R::levels(q, j, w);
            const int s = 8 * n + 2 * j;
            sub_q6<V, NR, kI16, false>(w, sc[s], tok, blk, s, S, Sl);
            sub_q6<V, NR, kI16, false>(w + 4, sc[s + 1], tok, blk, s + 1, S, Sl);
        }
    }
    finish_q45<V, NR, kI16, 8>(S, Sl, mp, d, dmin, tok, blk, acc);
}

// Q3_K.
template <class V, int NR, bool kI16, class Src>
HR_KERNEL_INLINE void block_q3k(const Src& src, int64_t blk, const Tok* tok, typename V::F* acc) {
    using I = typename V::I;
    using F = typename V::F;
    using R = ReadQ3K<V>;
    I S[NR], Sl[NR], sc[16];
    F d;
    for (int t = 0; t < NR; ++t) S[t] = Sl[t] = V::zero();
    R::scales(src, blk, sc, d);
    R::pairs(
        src, blk, [&](int p, const I* w) __attribute__((always_inline)) {
            sub_q6<V, NR, kI16>(w, sc[2 * p], tok, blk, 2 * p, S, Sl);
            sub_q6<V, NR, kI16>(w + 4, sc[2 * p + 1], tok, blk, 2 * p + 1, S, Sl);
        });
    finish_q6<V, NR, kI16>(S, Sl, d, tok, blk, acc);
}

// IQ4_XS.
template <class V, int NR, bool kI16, class Src>
HR_KERNEL_INLINE void block_iq4xs(const Src& src, int64_t blk, const Tok* tok, typename V::F* acc) {
    using I = typename V::I;
    using F = typename V::F;
    using R = ReadIq4Xs<V>;
    I S[NR], Sl[NR], sc[8], w[8];
    F d;
    for (int t = 0; t < NR; ++t) S[t] = Sl[t] = V::zero();
    R::scales(src, blk, sc, d);
    for (int s = 0; s < 8; ++s) {
        R::sub(src, blk, s, w);
        sub_iq4xs<V, NR, kI16>(w, sc[s], tok, blk, s, S, Sl);
    }
    finish_q6<V, NR, kI16>(S, Sl, d, tok, blk, acc);
}

// Q4_0 and Q4_1 in int8 where the multiply-adds take any u8: the high
// nibbles multiply in place, as 16 x level: one mask instead of a shift and
// a mask per vector. Their sums, multiples of 16, are divided once per
// block, exactly (|16 x sum| < 2^20).
template <class V, TensorType T, int NR, class Src>
HR_KERNEL_INLINE void block_q4_nibbles(const Src& src, int64_t blk, const Tok* tok,
                                       typename V::F* acc) {
    using I = typename V::I;
    using F = typename V::F;
    using R = Read32<V, T>;
    I x[4], lo[NR], hi[NR];
    F dw, mw;
    R::nibbles(src, blk, x, dw, mw);
    const I low4 = V::set1_8(0x0F), high4 = V::set1_8(static_cast<int8_t>(0xF0));
    for (int t = 0; t < NR; ++t) {
        lo[t] = R::kMin ? V::zero() : V::bcast32(tok[t].sums + 4 * blk);
        hi[t] = V::zero();
    }
    for (int j = 0; j < 4; ++j) {
        const I wl = V::and_(x[j], low4), wh = V::and_(x[j], high4);
        for (int t = 0; t < NR; ++t) {
            const uint8_t* a = tok[t].qs + 32 * blk + 4 * j;
            lo[t] = V::dot_u8s8_at(lo[t], wl, a);
            hi[t] = V::dot_u8s8_at(hi[t], wh, a + 16);
        }
    }
    for (int t = 0; t < NR; ++t) {
        const I isum = V::add(lo[t], V::template sra<4>(hi[t]));
        acc[t] = V::fma(V::cvt(isum), V::fmul(dw, V::fbcast(tok[t].d + blk)), acc[t]);
        if constexpr (R::kMin)
            acc[t] =
                V::fma(mw, V::fbcast(reinterpret_cast<const float*>(tok[t].sums) + blk), acc[t]);
    }
}

// micro_panel's work straight from a source (pack.h): each block is read once for the
// NR tokens, with no panel in between, by its family's block_* function. kAhead: a
// decode step, streaming the weights from memory: ask for the repacked ones src.ahead
// bytes ahead (Context::decode_prefetch_bytes), and for the activations of a block
// ahead (prefetch_acts).
template <class V, TensorType T, int NR, bool kI16, class Src, bool kAhead = true>
void micro_direct(const Src& src, int64_t b0, int64_t nb, const Tok* tok, int n_valid, bool first) {
    using I = typename V::I;
    using F = typename V::F;
    constexpr bool kQ6Spread = T == TensorType::Q6_K && kQ6First<V, Src>;
    constexpr bool kAsk = kAhead && Src::kRepacked;
    // The paths that spread a block's requests for weights over its work
    // (ask_ahead); the others ask for the whole block at its start.
    constexpr bool kSpread =
        kAsk && (kQ4Masked<V, T, kI16, Src> || kQ5Five<V, T, kI16, Src> || kQ6Spread);
    bool acts_midway = false;
    if constexpr (kQ6Spread && kAsk) acts_midway = src.ahead != 0;
    F acc[NR];
    load_acc<V, NR>(acc, tok, n_valid, first);
    for (int64_t blk = b0; blk < b0 + nb; ++blk) {
        // (The stream goes on into the next group, and the next part's.)
        if constexpr (kAsk && !kSpread) ask_ahead<V, 1>(src, blk, 0);
        // Where it asks for weights ahead, Q6_K asks for the next block's
        // activations halfway through its own (block_q6k): on the Intel Xeon
        // of ask_ahead, its decode read 88-90% of the bandwidth against
        // 85-86% asking at the start (Q4_K and Q5_K gained nothing there).
        if constexpr (kAhead)
            if (!acts_midway) prefetch_acts<V, T, NR, kI16>(tok, blk, b0, nb);
        if constexpr (T == TensorType::Q4_K || T == TensorType::Q5_K) {
            block_q45k<V, T, NR, kI16, Src, kAsk>(src, blk, tok, acc);
        } else if constexpr (T == TensorType::Q6_K) {
            block_q6k<V, NR, kI16, Src, kAsk>(src, blk, tok, acc, acts_midway, b0, nb);
        } else if constexpr (T == TensorType::Q2_K) {
            block_q2k<V, NR, kI16>(src, blk, tok, acc);
        } else if constexpr (T == TensorType::Q3_K) {
            block_q3k<V, NR, kI16>(src, blk, tok, acc);
        } else if constexpr (T == TensorType::IQ4_XS) {
            block_iq4xs<V, NR, kI16>(src, blk, tok, acc);
        } else if constexpr ((T == TensorType::Q4_0 || T == TensorType::Q4_1) && !kI16 &&
                             V::kExactU8Dot) {
            block_q4_nibbles<V, T, NR>(src, blk, tok, acc);
        } else {
            I w[8];
            F dw, mw;
            Read32<V, T>::read(src, blk, w, dw, mw);
            block_32<V, T, NR, kI16>(w, dw, mw, tok, blk, acc);
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
    uint64_t ahead = 0;       // a decode step's PackedSrc::ahead
};

// The kernels for one weight type and activation precision.
template <class V>
struct IntKernel {
    using Pack = void (*)(const GroupRef<V>&, int64_t, int64_t, uint8_t*);
    using Panel = void (*)(const uint8_t*, int64_t, int64_t, const Tok*, int, bool);
    using Direct = void (*)(const GroupRef<V>&, int64_t, int64_t, const Tok*, int, bool);
    Pack pack;         // into a panel
    Panel panel[9];    // [nr], nr = 1..nr_max: a batch
    Direct direct[9];  // [nr]: a few tokens
    int nr_max;
    int chunk;  // blocks per packed chunk
    // panel[] reads the repacked copy itself: it takes the group's first
    // block where the others take a panel, and a batch packs nothing.
    bool panel_reads_packed;
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
        micro_direct<V, T, NR, kI16>(PackedSrc<V, T>{g.packed, g.ahead}, b0, nb, tok, n_valid,
                                     first);
    else
        micro_direct<V, T, NR, kI16>(RowsSrc<V, T>{*g.rows}, b0, nb, tok, n_valid, first);
}

// A batch's chunk read from the repacked copy at `group` (its first block).
template <class V, TensorType T, int NR, bool kI16>
void batch_from_packed(const uint8_t* group, int64_t b0, int64_t nb, const Tok* tok, int n_valid,
                       bool first) {
    micro_direct<V, T, NR, kI16, PackedSrc<V, T>, false>(PackedSrc<V, T>{group}, b0, nb, tok,
                                                         n_valid, first);
}

// Whether a batch reads T's repacked copy as it is: where the panel would
// hold the same vectors (Q8_0: only its scales would widen to f32), packing
// it again for each tile of tokens (V::kActTileBytes) costs more than it
// saves.
template <class V>
constexpr bool batch_reads_packed(TensorType t, bool packed) {
    return packed && t == TensorType::Q8_0 && V::kActTileBytes > 0;
}

template <class V, TensorType T, bool kI16, bool kPacked, int N>
void fill_kernels(IntKernel<V>& k) {
    if constexpr (N >= 1) {
        if constexpr (batch_reads_packed<V>(T, kPacked))
            k.panel[N] = &batch_from_packed<V, T, N, kI16>;
        else
            k.panel[N] = &micro_panel<V, T, N, kI16>;
        k.direct[N] = &direct_from<V, T, N, kI16, kPacked>;
        fill_kernels<V, T, kI16, kPacked, N - 1>(k);
    }
}

template <class V, TensorType T, bool kI16, bool kPacked>
IntKernel<V> make_kernel() {
    constexpr bool k_type = T == TensorType::Q2_K || T == TensorType::Q3_K ||
                            T == TensorType::Q4_K || T == TensorType::Q5_K ||
                            T == TensorType::Q6_K || T == TensorType::IQ4_XS;
    constexpr bool small = T == TensorType::Q4_0 || T == TensorType::Q4_1;
    constexpr int nr = k_type  ? (kI16 ? V::kNrKInt16 : V::kNrKInt8)
                       : kI16  ? V::kNr32Int16
                       : small ? V::kNr32Int8Small
                               : V::kNr32Int8;
    IntKernel<V> k{};
    k.nr_max = nr;
    k.chunk = k_type ? 2 : 16;
    k.pack = &pack_from<V, T, kPacked>;
    k.panel_reads_packed = batch_reads_packed<V>(T, kPacked);
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
        case TensorType::IQ4_NL:
            return make_kernel<V, TensorType::IQ4_NL, kI16, kPacked>();
        case TensorType::MXFP4:
            return make_kernel<V, TensorType::MXFP4, kI16, kPacked>();
        case TensorType::Q4_K:
            return make_kernel<V, TensorType::Q4_K, kI16, kPacked>();
        case TensorType::Q5_K:
            return make_kernel<V, TensorType::Q5_K, kI16, kPacked>();
        case TensorType::IQ4_XS:
            return make_kernel<V, TensorType::IQ4_XS, kI16, kPacked>();
        case TensorType::Q3_K:
            return make_kernel<V, TensorType::Q3_K, kI16, kPacked>();
        case TensorType::Q2_K:
            return make_kernel<V, TensorType::Q2_K, kI16, kPacked>();
        default:
            return make_kernel<V, TensorType::Q6_K, kI16, kPacked>();
    }
}

template <class V>
IntKernel<V> int_kernel(TensorType t, bool i16, bool packed) {
    if (packed) return i16 ? int_kernel_for<V, true, true>(t) : int_kernel_for<V, false, true>(t);
    return i16 ? int_kernel_for<V, true, false>(t) : int_kernel_for<V, false, false>(t);
}

// Hands out row groups [0, n_groups) to a pool's threads: a contiguous share
// each (core/share-queue.h). For a few tokens (memory-bound) a thread takes
// 1/32 of its share at a time, so one slowed by the machine's other load
// gives up most of it; a batch makes each group a large piece of work, taken
// one at a time.
inline int64_t group_grab(int64_t n_groups, int n_threads, int64_t n_tokens) {
    return n_tokens >= 16 ? 1 : n_groups / (32 * static_cast<int64_t>(n_threads));
}
inline ShareQueue group_queue(int64_t n_groups, int n_threads, int64_t n_tokens) {
    return ShareQueue(n_groups, n_threads, group_grab(n_groups, n_threads, n_tokens));
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

// Tokens per tile of a batch of n_tokens (matmul_int): a multiple of nr
// whose quantized activations, row_bytes each, fit V::kActTileBytes (0: the
// whole batch is one tile).
template <class V>
int64_t act_tile_tokens(uint64_t row_bytes, int nr, int64_t n_tokens) {
    if constexpr (V::kActTileBytes == 0) return n_tokens;
    return std::max<int64_t>(1, static_cast<int64_t>(V::kActTileBytes / row_bytes) / nr) * nr;
}

// Runs fn(g, more, thread) for every row group of w, handed out by a
// ShareQueue (more: the same range goes on with g + 1).
template <class V, class Fn>
void for_each_group(const Matrix& w, int64_t n_tokens, const Context& ctx, Fn&& fn) {
    constexpr int L = V::kLanes;
    ShareQueue queue = group_queue((w.n_rows + L - 1) / L, ctx.pool->n_threads(), n_tokens);
    ctx.pool->run([&](int thread) {
        queue.drain(thread, [&](int64_t g0, int64_t g1) {
            for (int64_t g = g0; g < g1; ++g) fn(g, g + 1 < g1, thread);
        });
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
        uint8_t* out = w.parts ? const_cast<uint8_t*>(packed_rows(w, r0))
                               : dst + static_cast<uint64_t>(r0) * w.row_bytes;
        repack_group<V, T>(rg, nb, out);
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
        case TensorType::IQ4_NL:
            return repack_matrix<V, TensorType::IQ4_NL>(w, dst, ctx);
        case TensorType::MXFP4:
            return repack_matrix<V, TensorType::MXFP4>(w, dst, ctx);
        case TensorType::Q4_K:
            return repack_matrix<V, TensorType::Q4_K>(w, dst, ctx);
        case TensorType::Q5_K:
            return repack_matrix<V, TensorType::Q5_K>(w, dst, ctx);
        case TensorType::Q6_K:
            return repack_matrix<V, TensorType::Q6_K>(w, dst, ctx);
        case TensorType::IQ4_XS:
            return repack_matrix<V, TensorType::IQ4_XS>(w, dst, ctx);
        case TensorType::Q3_K:
            return repack_matrix<V, TensorType::Q3_K>(w, dst, ctx);
        case TensorType::Q2_K:
            return repack_matrix<V, TensorType::Q2_K>(w, dst, ctx);
        default:
            return;
    }
}

// One matmul_int call, set up once: each matrix's kernel, how the n
// matrices' row groups are numbered, and how the batch is cut into token
// tiles. A work item is one (tile, row group) pair.
//
// Row groups are numbered part by part (PackedParts): part 0 of matrix 0,
// part 0 of matrix 1, ..., part 1 of matrix 0, ... ("runs"), where every
// matrix is cut into the same number of parts, else as one part each. A
// decode call with a part per pool thread gives thread t the runs of part t
// (share_bounds), the weights it reads next in its own stream.
template <class V>
class IntMatmul {
  public:
    static constexpr int kMaxMatrices = 4;
    static constexpr int kMaxParts = ShareQueue::kMaxShares;

    // ahead: Context::decode_prefetch_bytes.
    IntMatmul(const Matrix* const* ws, float* const* ys, int n, const Acts& x, const bool* packed,
              uint64_t ahead)
        : ws_(ws), ys_(ys), packed_(packed), x_(x), n_(n), ahead_(ahead) {
        HR_CHECK(n >= 1 && n <= kMaxMatrices);
        al_ = act_layout(ws[0]->n_cols, ws[0]->type, x.quant);
        nb_ = ws[0]->n_cols / al_.block;
        first_group_[0] = 0;
        for (int i = 0; i < n; ++i) {
            kern_[i] = int_kernel<V>(ws[i]->type, x.quant == ActPrecision::Int16, packed[i]);
            first_group_[i + 1] = first_group_[i] + (ws[i]->n_rows + kLanes - 1) / kLanes;
        }
        n_parts_ = packed[0] && ws[0]->parts ? ws[0]->parts->n() : 1;
        for (int i = 0; i < n; ++i)
            if (!packed[i] || !ws[i]->parts || ws[i]->parts->n() != n_parts_) n_parts_ = 1;
        if (n_parts_ > kMaxParts) n_parts_ = 1;
        int64_t at = 0;
        for (int t = 0; t < n_parts_; ++t) {
            for (int i = 0; i < n; ++i) {
                run_first_[t * n + i] = at;
                if (n_parts_ == 1) {
                    at += first_group_[i + 1] - first_group_[i];
                } else {
                    const std::vector<int64_t>& row0 = ws[i]->parts->row0;
                    HR_DCHECK(row0[t] % kLanes == 0 && row0[t + 1] % kLanes == 0);
                    at += (row0[t + 1] - row0[t]) / kLanes;
                }
            }
        }
        run_first_[n_parts_ * n] = at;
        HR_CHECK(at == first_group_[n]);
        n_chunks_ = (nb_ + kern_[0].chunk - 1) / kern_[0].chunk;
        direct_ = x.n_tokens <= kern_[0].nr_max;
        // A batch runs as tiles of tokens whose activations stay in L2 while
        // row group after row group passes over them (a whole batch's
        // activations do not fit, and each group would read them again from
        // L3). Items are numbered tile by tile, so each thread's share goes
        // through its tiles in turn.
        tile_ =
            direct_ ? x.n_tokens : act_tile_tokens<V>(x.q_row_bytes, kern_[0].nr_max, x.n_tokens);
    }

    int64_t n_items() const { return (x_.n_tokens + tile_ - 1) / tile_ * n_groups(); }

    // For a decode call whose matrices have a part per thread of an
    // n_threads pool: bounds[t] (t <= n_threads), the first item of part t.
    bool share_bounds(int n_threads, int64_t* bounds) const {
        if (!direct_ || n_parts_ == 1 || n_parts_ != n_threads) return false;
        for (int t = 0; t <= n_parts_; ++t) bounds[t] = run_first_[t * n_];
        return true;
    }

    // Item `item`; range_goes_on: the same thread runs item + 1 next.
    void run(int64_t item, bool range_goes_on, uint8_t* panel, Tok* tok) const {
        const int64_t gg = item % n_groups();
        const int64_t tok0 = item / n_groups() * tile_;
        const int64_t tok1 = std::min(tok0 + tile_, x_.n_tokens);
        // The run holding gg: the last to start at or before it (an empty
        // run starts where the next one does).
        const auto run = static_cast<int>(
            std::upper_bound(run_first_, run_first_ + n_parts_ * n_ + 1, gg) - run_first_ - 1);
        const int i = run % n_;
        const Matrix& w = *ws_[i];
        const IntKernel<V>& k = kern_[i];
        const int64_t part_row0 = n_parts_ == 1 ? 0 : w.parts->row0[run / n_];
        const int64_t r0 = part_row0 + (gg - run_first_[run]) * kLanes;
        const int n_valid = static_cast<int>(std::min<int64_t>(kLanes, w.n_rows - r0));
        const uint64_t at = static_cast<uint64_t>(r0) * w.row_bytes;
        RowGroup<V> rg;
        GroupRef<V> ref{&rg, nullptr, ahead_};
        if (packed_[i])
            ref.packed = packed_rows(w, r0);
        else
            rg = make_row_group<V>(w.data + at, w.row_bytes, n_valid);
        // Bytes of the next group to prefetch, if the next item is the next
        // group of the same matrix and tile.
        const bool next_here = range_goes_on && gg + 1 < run_first_[run + 1];
        const uint64_t next_bytes =
            next_here && !packed_[i]
                ? static_cast<uint64_t>(std::min<int64_t>(kLanes, w.n_rows - r0 - kLanes)) *
                      w.row_bytes
                : 0;
        // Chunks bound the panel and pace the prefetch of the next group; a
        // direct pass over a repacked copy needs neither and keeps its sums in
        // registers across the whole row.
        const int64_t step = direct_ && packed_[i] ? nb_ : k.chunk;
        for (int64_t b0 = 0; b0 < nb_; b0 += step) {
            const int64_t n_chunk = std::min<int64_t>(step, nb_ - b0);
            if (next_bytes)
                prefetch_slice<V>(w.data + at + kLanes * w.row_bytes, next_bytes, b0 / k.chunk,
                                  n_chunks_);
            if (!direct_ && !k.panel_reads_packed) k.pack(ref, b0, n_chunk, panel);
            for (int64_t t0 = tok0; t0 < tok1; t0 += k.nr_max) {
                const int nr = static_cast<int>(std::min<int64_t>(k.nr_max, tok1 - t0));
                point_tokens(tok, t0, nr, ys_[i] + r0, w.n_rows);
                if (direct_)
                    k.direct[nr](ref, b0, n_chunk, tok, n_valid, b0 == 0);
                else
                    k.panel[nr](k.panel_reads_packed ? ref.packed : panel, b0, n_chunk, tok,
                                n_valid, b0 == 0);
            }
        }
    }

  private:
    static constexpr int kLanes = V::kLanes;

    int64_t n_groups() const { return first_group_[n_]; }

    // tok[0, nr): tokens t0.. as the kernels read them (their quantized
    // activations' parts) and where their outputs for this group go
    // (y: output row 0's entry for the group's first row).
    void point_tokens(Tok* tok, int64_t t0, int nr, float* y, int64_t n_rows) const {
        for (int t = 0; t < nr; ++t) {
            const uint8_t* row = x_.q + static_cast<uint64_t>(t0 + t) * x_.q_row_bytes;
            tok[t] = {row, row + al_.lo, reinterpret_cast<const float*>(row + al_.d),
                      row + al_.sums, y + (t0 + t) * n_rows};
        }
    }

    const Matrix* const* ws_;
    float* const* ys_;
    const bool* packed_;
    const Acts& x_;
    int n_;
    uint64_t ahead_;
    ActLayout al_;
    int64_t nb_;
    IntKernel<V> kern_[kMaxMatrices];
    int64_t first_group_[kMaxMatrices + 1];
    int n_parts_ = 1;
    int64_t run_first_[kMaxParts * kMaxMatrices + 1];  // [part * n + matrix]: its first group
    int64_t n_chunks_;
    bool direct_;
    int64_t tile_;
};

// The queue of one call's items: a share per part where the matrices have a
// part per thread (IntMatmul::share_bounds), else group_queue's.
template <class V>
ShareQueue item_queue(const IntMatmul<V>& mm, int n_threads, int64_t n_tokens) {
    int64_t bounds[IntMatmul<V>::kMaxParts + 1];
    if (mm.share_bounds(n_threads, bounds))
        return ShareQueue(std::span<const int64_t>(bounds, n_threads + 1),
                          group_grab(mm.n_items(), n_threads, n_tokens));
    return group_queue(mm.n_items(), n_threads, n_tokens);
}

// y_i = x @ W_i^T for n matrices of one type and width (a layer's Q, K, V, or
// gate and up) as one piece of work: their row groups are handed out from one
// queue, so the threads finish together once, not n times.
// packed[i]: W_i.packed holds this table's repacked copy.
template <class V>
void matmul_int(const Matrix* const* ws, float* const* ys, int n, const Acts& x, const Context& ctx,
                const bool* packed) {
    const IntMatmul<V> mm(ws, ys, n, x, packed, ctx.decode_prefetch_bytes);
    ShareQueue queue = item_queue(mm, ctx.pool->n_threads(), x.n_tokens);
    ctx.pool->run([&](int thread) {
        uint8_t* panel = ctx.thread_scratch(thread);
        Tok tok[16];
        queue.drain(thread, [&](int64_t item0, int64_t item1) {
            for (int64_t item = item0; item < item1; ++item)
                mm.run(item, item + 1 < item1, panel, tok);
        });
    });
}

// The experts' matmuls of one MoE projection (Ops::matmul_experts) as one
// piece of work: each group is an IntMatmul over its rows of x, and the
// groups' items are numbered one after another and handed out from one
// queue. A thread sets up the IntMatmul of the group its items are in when
// it enters that group (its share is contiguous, so rarely).
// is_packed(W): W.packed holds this table's repacked copy.
template <class V>
void matmul_experts_int(const ExpertGroup* gs, int n_groups, int n_ws, const Acts& x,
                        float* const* ys, const Context& ctx, bool (*is_packed)(const Matrix&)) {
    HR_CHECK(n_groups >= 0 && n_groups <= static_cast<int>(kMaxExperts) && n_ws >= 1 && n_ws <= 2);
    if (n_groups == 0) return;
    // One group's matmul, as a thread holds it.
    struct Group {
        int g = -1;
        Acts x;
        const Matrix* ws[2];
        float* ys[2];
        bool packed[2];
        std::optional<IntMatmul<V>> mm;
        void enter(int gi, const ExpertGroup& e, int n_ws, const Acts& all, float* const* out,
                   bool (*is_packed)(const Matrix&), uint64_t ahead) {
            g = gi;
            x = acts_rows(all, e.row0, e.n_tok);
            for (int i = 0; i < n_ws; ++i) {
                ws[i] = e.ws[i];
                ys[i] = out[i] + e.row0 * e.ws[i]->n_rows;
                packed[i] = is_packed(*e.ws[i]);
            }
            mm.emplace(ws, ys, n_ws, x, packed, ahead);
        }
    };
    std::array<int64_t, kMaxExperts + 1> first_item;
    first_item[0] = 0;
    {
        Group probe;
        for (int g = 0; g < n_groups; ++g) {
            probe.enter(g, gs[g], n_ws, x, ys, is_packed, ctx.decode_prefetch_bytes);
            first_item[g + 1] = first_item[g] + probe.mm->n_items();
        }
    }
    const int64_t n_items = first_item[n_groups];
    ShareQueue queue = group_queue(n_items, ctx.pool->n_threads(), x.n_tokens / n_groups);
    ctx.pool->run([&](int thread) {
        uint8_t* panel = ctx.thread_scratch(thread);
        Tok tok[16];
        Group cur;
        queue.drain(thread, [&](int64_t item0, int64_t item1) {
            for (int64_t item = item0; item < item1; ++item) {
                if (cur.g < 0 || item < first_item[cur.g] || item >= first_item[cur.g + 1]) {
                    const int g =
                        static_cast<int>(std::upper_bound(first_item.begin(),
                                                          first_item.begin() + n_groups + 1, item) -
                                         first_item.begin() - 1);
                    cur.enter(g, gs[g], n_ws, x, ys, is_packed, ctx.decode_prefetch_bytes);
                }
                const int64_t local = item - first_item[cur.g];
                const bool goes_on = item + 1 < item1 && item + 1 < first_item[cur.g + 1];
                cur.mm->run(local, goes_on, panel, tok);
            }
        });
    });
}

}  // namespace headroom::kernels::x86
