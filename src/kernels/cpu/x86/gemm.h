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
inline void load_acc(typename V::F* acc, const Tok* tok, int n_valid, bool first) {
    for (int t = 0; t < NR; ++t) {
        if (first)
            acc[t] = V::fzero();
        else
            acc[t] = n_valid == V::kLanes ? V::fload(tok[t].y) : V::fload_n(tok[t].y, n_valid);
    }
}

template <class V, int NR>
inline void store_acc(const typename V::F* acc, const Tok* tok, int n_valid) {
    for (int t = 0; t < NR; ++t) {
        if (n_valid == V::kLanes)
            V::fstore(tok[t].y, acc[t]);
        else
            V::fstore_n(tok[t].y, acc[t], n_valid);
    }
}

template <class V, bool kSigned>
inline typename V::I dot4(typename V::I acc, typename V::I w, const uint8_t* a) {
    if constexpr (kSigned)
        return V::dot_s8s8(acc, w, V::bcast32(a));
    else
        return V::dot_u8s8(acc, w, V::bcast32(a));
}

// 32-element types, blocks [b0, b0 + nb) of the row against the panel.
template <class V, int NR, bool kMin, bool kI16, bool kSigned>
void micro_32(const uint8_t* panel, uint64_t stride, int64_t b0, int64_t nb, const Tok* tok,
              int n_valid, bool first) {
    using I = typename V::I;
    using F = typename V::F;
    constexpr uint64_t vb = V::kBytes;
    F acc[NR];
    load_acc<V, NR>(acc, tok, n_valid, first);
    for (int64_t b = 0; b < nb; ++b, panel += stride) {
        const int64_t blk = b0 + b;
        I ia[NR], il[NR];
        for (int t = 0; t < NR; ++t) {
            const I corr = kMin ? V::zero() : V::bcast32(tok[t].sums + 4 * blk);
            ia[t] = kI16 ? V::zero() : corr;
            if (kI16) il[t] = corr;
        }
        for (int k = 0; k < 8; ++k) {
            const I w = V::load(panel + k * vb);
            for (int t = 0; t < NR; ++t) {
                ia[t] = dot4<V, kSigned>(ia[t], w, tok[t].qs + 32 * blk + 4 * k);
                if (kI16) il[t] = dot4<V, kSigned>(il[t], w, tok[t].lo + 32 * blk + 4 * k);
            }
        }
        const F dw = V::fload(reinterpret_cast<const float*>(panel + 8 * vb));
        for (int t = 0; t < NR; ++t) {
            const I isum = kI16 ? V::add(V::template sll<8>(ia[t]), il[t]) : ia[t];
            acc[t] = V::fma(V::cvt(isum), V::fmul(dw, V::fbcast(tok[t].d + blk)), acc[t]);
        }
        if (kMin) {
            const F mw = V::fload(reinterpret_cast<const float*>(panel + 9 * vb));
            for (int t = 0; t < NR; ++t)
                acc[t] = V::fma(mw, V::fbcast(reinterpret_cast<const float*>(tok[t].sums) + blk),
                                acc[t]);
        }
    }
    store_acc<V, NR>(acc, tok, n_valid);
}

// Q4_K / Q5_K, superblocks [b0, b0 + nb).
template <class V, int NR, bool kI16>
void micro_q45_k(const uint8_t* panel, uint64_t stride, int64_t b0, int64_t nb, const Tok* tok,
                 int n_valid, bool first) {
    using I = typename V::I;
    using F = typename V::F;
    constexpr uint64_t vb = V::kBytes;
    F acc[NR];
    load_acc<V, NR>(acc, tok, n_valid, first);
    for (int64_t b = 0; b < nb; ++b, panel += stride) {
        const int64_t blk = b0 + b;
        I S[NR], Sl[NR];
        for (int t = 0; t < NR; ++t) S[t] = Sl[t] = V::zero();
        for (int s = 0; s < 8; ++s) {
            I is[NR], il[NR];
            for (int t = 0; t < NR; ++t) is[t] = il[t] = V::zero();
            for (int k = 0; k < 8; ++k) {
                const I w = V::load(panel + (8 * s + k) * vb);
                const int64_t at = 256 * blk + 32 * s + 4 * k;
                for (int t = 0; t < NR; ++t) {
                    is[t] = V::dot_u8s8(is[t], w, V::bcast32(tok[t].qs + at));
                    if (kI16) il[t] = V::dot_u8s8(il[t], w, V::bcast32(tok[t].lo + at));
                }
            }
            const I sc = V::load(panel + (64 + s) * vb);
            for (int t = 0; t < NR; ++t) {
                S[t] = V::add(S[t], V::mullo(is[t], sc));
                if (kI16) Sl[t] = V::add(Sl[t], V::mullo(il[t], sc));
            }
        }
        I M[NR], Ml[NR];
        for (int t = 0; t < NR; ++t) M[t] = Ml[t] = V::zero();
        for (int j = 0; j < 4; ++j) {
            const I mp = V::load(panel + (72 + j) * vb);
            for (int t = 0; t < NR; ++t) {
                const uint8_t* sb = tok[t].sums + kKSumBytes * static_cast<uint64_t>(blk);
                M[t] = V::dot_s16(M[t], mp, V::bcast32(sb + 4 * j));
                if (kI16) Ml[t] = V::dot_s16(Ml[t], mp, V::bcast32(sb + 16 + 4 * j));
            }
        }
        const F d = V::fload(reinterpret_cast<const float*>(panel + 76 * vb));
        const F dmin = V::fload(reinterpret_cast<const float*>(panel + 77 * vb));
        for (int t = 0; t < NR; ++t) {
            const F da = V::fbcast(tok[t].d + blk);
            const F v = kI16 ? V::fma(V::cvt(S[t]), V::fset1(256.0f), V::cvt(Sl[t])) : V::cvt(S[t]);
            acc[t] = V::fma(v, V::fmul(d, da), acc[t]);
            const I m = kI16 ? V::add(V::template sll<8>(M[t]), Ml[t]) : M[t];
            acc[t] = V::fnma(V::cvt(m), V::fmul(dmin, da), acc[t]);
        }
    }
    store_acc<V, NR>(acc, tok, n_valid);
}

// Q6_K, superblocks [b0, b0 + nb).
template <class V, int NR, bool kI16>
void micro_q6_k(const uint8_t* panel, uint64_t stride, int64_t b0, int64_t nb, const Tok* tok,
                int n_valid, bool first) {
    using I = typename V::I;
    using F = typename V::F;
    constexpr uint64_t vb = V::kBytes;
    F acc[NR];
    load_acc<V, NR>(acc, tok, n_valid, first);
    for (int64_t b = 0; b < nb; ++b, panel += stride) {
        const int64_t blk = b0 + b;
        I S[NR], Sl[NR];
        for (int t = 0; t < NR; ++t) S[t] = Sl[t] = V::zero();
        for (int s = 0; s < 16; ++s) {
            I is[NR], il[NR];
            for (int t = 0; t < NR; ++t) {
                const uint8_t* sb = tok[t].sums + kKSumBytes * static_cast<uint64_t>(blk);
                is[t] = V::bcast32(sb + 4 * s);
                if (kI16) il[t] = V::bcast32(sb + 64 + 4 * s);
            }
            for (int k = 0; k < 4; ++k) {
                const I w = V::load(panel + (4 * s + k) * vb);
                const int64_t at = 256 * blk + 16 * s + 4 * k;
                for (int t = 0; t < NR; ++t) {
                    is[t] = V::dot_u8s8(is[t], w, V::bcast32(tok[t].qs + at));
                    if (kI16) il[t] = V::dot_u8s8(il[t], w, V::bcast32(tok[t].lo + at));
                }
            }
            const I sc = V::load(panel + (64 + s) * vb);
            for (int t = 0; t < NR; ++t) {
                S[t] = V::add(S[t], V::mullo(is[t], sc));
                if (kI16) Sl[t] = V::add(Sl[t], V::mullo(il[t], sc));
            }
        }
        const F d = V::fload(reinterpret_cast<const float*>(panel + 80 * vb));
        for (int t = 0; t < NR; ++t) {
            const F v = kI16 ? V::fma(V::cvt(S[t]), V::fset1(256.0f), V::cvt(Sl[t])) : V::cvt(S[t]);
            acc[t] = V::fma(v, V::fmul(d, V::fbcast(tok[t].d + blk)), acc[t]);
        }
    }
    store_acc<V, NR>(acc, tok, n_valid);
}

// ---- drivers --------------------------------------------------------------

// The kernels for one weight type and activation precision, NR tokens at a time.
template <class V>
struct IntKernel {
    void (*pack)(const RowGroup<V>&, int64_t, int64_t, uint8_t*);
    using Micro = void (*)(const uint8_t*, uint64_t, int64_t, int64_t, const Tok*, int, bool);
    Micro micro[9];  // [nr] for nr = 1..nr_max
    int nr_max;
    int chunk;  // blocks per packed chunk
};

template <class V, int N, template <class, int> class M>
constexpr void fill_micro(typename IntKernel<V>::Micro* out) {
    if constexpr (N >= 1) {
        out[N] = &M<V, N>::run;
        fill_micro<V, N - 1, M>(out);
    }
}

template <class V, bool kMin, bool kI16, bool kSigned>
struct Micro32Bind {
    template <class VV, int NR>
    struct M {
        static void run(const uint8_t* p, uint64_t s, int64_t b0, int64_t nb, const Tok* t, int nv,
                        bool first) {
            micro_32<VV, NR, kMin, kI16, kSigned>(p, s, b0, nb, t, nv, first);
        }
    };
};

template <class V, bool kI16>
struct MicroKBind {
    template <class VV, int NR>
    struct M45 {
        static void run(const uint8_t* p, uint64_t s, int64_t b0, int64_t nb, const Tok* t, int nv,
                        bool first) {
            micro_q45_k<VV, NR, kI16>(p, s, b0, nb, t, nv, first);
        }
    };
    template <class VV, int NR>
    struct M6 {
        static void run(const uint8_t* p, uint64_t s, int64_t b0, int64_t nb, const Tok* t, int nv,
                        bool first) {
            micro_q6_k<VV, NR, kI16>(p, s, b0, nb, t, nv, first);
        }
    };
};

template <class V, bool kMin, bool kI16, bool kSigned, int NR>
IntKernel<V> make_kernel_32(void (*pack)(const RowGroup<V>&, int64_t, int64_t, uint8_t*)) {
    IntKernel<V> k{pack, {}, NR, 16};
    fill_micro<V, NR, Micro32Bind<V, kMin, kI16, kSigned>::template M>(k.micro);
    return k;
}

template <class V, bool kI16, bool kSix, int NR>
IntKernel<V> make_kernel_k(void (*pack)(const RowGroup<V>&, int64_t, int64_t, uint8_t*)) {
    IntKernel<V> k{pack, {}, NR, 2};
    if constexpr (kSix)
        fill_micro<V, NR, MicroKBind<V, kI16>::template M6>(k.micro);
    else
        fill_micro<V, NR, MicroKBind<V, kI16>::template M45>(k.micro);
    return k;
}

template <class V, bool kI16>
IntKernel<V> int_kernel_for(TensorType t) {
    constexpr int nr32 = kI16 ? V::kNr32Int16 : V::kNr32Int8;
    constexpr int nrk = kI16 ? V::kNrKInt16 : V::kNrKInt8;
    switch (t) {
        case TensorType::Q4_0:
            return make_kernel_32<V, false, kI16, false, nr32>(&pack_q4<V, false>);
        case TensorType::Q4_1:
            return make_kernel_32<V, true, kI16, false, nr32>(&pack_q4<V, true>);
        case TensorType::Q5_0:
            return make_kernel_32<V, false, kI16, false, nr32>(&pack_q5<V, false>);
        case TensorType::Q5_1:
            return make_kernel_32<V, true, kI16, false, nr32>(&pack_q5<V, true>);
        case TensorType::Q8_0:
            return make_kernel_32<V, false, kI16, !V::kQ8Unsigned, nr32>(&pack_q8_0<V>);
        case TensorType::Q4_K:
            return make_kernel_k<V, kI16, false, nrk>(&pack_q45_k<V, false>);
        case TensorType::Q5_K:
            return make_kernel_k<V, kI16, false, nrk>(&pack_q45_k<V, true>);
        default:
            return make_kernel_k<V, kI16, true, nrk>(&pack_q6_k<V>);
    }
}

// Row groups handed out per grab: small enough to balance, large enough to
// keep the shared counter quiet.
inline int64_t grab_size(int64_t n_groups, int n_threads) {
    return std::max<int64_t>(1, n_groups / (8 * static_cast<int64_t>(n_threads)));
}

template <class V>
void matmul_int(const Matrix& w, const Acts& x, float* y, const Context& ctx) {
    constexpr int L = V::kLanes;
    const bool i16 = x.quant == ActPrecision::Int16;
    const IntKernel<V> kern =
        i16 ? int_kernel_for<V, true>(w.type) : int_kernel_for<V, false>(w.type);
    const ActLayout al = act_layout(w.n_cols, w.type, x.quant);
    const int64_t nb = w.n_cols / al.block;
    const uint64_t stride = panel_block_bytes<V>(w.type);
    const int64_t n_groups = (w.n_rows + L - 1) / L;
    const int64_t grab = grab_size(n_groups, ctx.pool->n_threads());
    std::atomic<int64_t> next{0};
    ctx.pool->run([&](int thread) {
        uint8_t* panel = ctx.thread_scratch(thread);
        Tok tok[16];
        for (;;) {
            const int64_t g0 = next.fetch_add(grab, std::memory_order_relaxed);
            if (g0 >= n_groups) break;
            for (int64_t g = g0; g < std::min(n_groups, g0 + grab); ++g) {
                const int64_t r0 = g * L;
                const int n_valid = static_cast<int>(std::min<int64_t>(L, w.n_rows - r0));
                const RowGroup<V> rg = make_row_group<V>(
                    w.data + static_cast<uint64_t>(r0) * w.row_bytes, w.row_bytes, n_valid);
                for (int64_t b0 = 0; b0 < nb; b0 += kern.chunk) {
                    const int64_t n_chunk = std::min<int64_t>(kern.chunk, nb - b0);
                    kern.pack(rg, b0, n_chunk, panel);
                    for (int64_t t0 = 0; t0 < x.n_tokens; t0 += kern.nr_max) {
                        const int nr =
                            static_cast<int>(std::min<int64_t>(kern.nr_max, x.n_tokens - t0));
                        for (int t = 0; t < nr; ++t) {
                            const uint8_t* row =
                                x.q + static_cast<uint64_t>(t0 + t) * x.q_row_bytes;
                            tok[t] = {row, row + al.lo, reinterpret_cast<const float*>(row + al.d),
                                      row + al.sums, y + (t0 + t) * w.n_rows + r0};
                        }
                        kern.micro[nr](panel, stride, b0, n_chunk, tok, n_valid, b0 == 0);
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
void matmul_dequant(const Matrix& w, const Acts& x, float* y, const Context& ctx) {
    constexpr int L = V::kLanes;
    constexpr int NR = V::kNr32Int8;
    const IntKernel<V> kern = int_kernel_for<V, false>(w.type);
    const int block = is_k_type(w.type) ? 256 : 32;
    const int64_t nb = w.n_cols / block;
    const int64_t chunk = 256 / block;  // 256 columns: the f32 panel is 256 x L floats
    const int64_t n_groups = (w.n_rows + L - 1) / L;
    const int64_t grab = grab_size(n_groups, ctx.pool->n_threads());
    std::atomic<int64_t> next{0};
    ctx.pool->run([&](int thread) {
        uint8_t* panel = ctx.thread_scratch(thread);
        auto* fpanel = reinterpret_cast<float*>(panel + 16 * 1024);
        Tok tok[NR];
        const float* xs[NR];
        for (;;) {
            const int64_t g0 = next.fetch_add(grab, std::memory_order_relaxed);
            if (g0 >= n_groups) break;
            for (int64_t g = g0; g < std::min(n_groups, g0 + grab); ++g) {
                const int64_t r0 = g * L;
                const int n_valid = static_cast<int>(std::min<int64_t>(L, w.n_rows - r0));
                const RowGroup<V> rg = make_row_group<V>(
                    w.data + static_cast<uint64_t>(r0) * w.row_bytes, w.row_bytes, n_valid);
                for (int64_t b0 = 0; b0 < nb; b0 += chunk) {
                    const int64_t n_chunk = std::min<int64_t>(chunk, nb - b0);
                    kern.pack(rg, b0, n_chunk, panel);
                    dequant_panel<V>(w.type, panel, n_chunk, fpanel);
                    for (int64_t t0 = 0; t0 < x.n_tokens; t0 += NR) {
                        const int nr = static_cast<int>(std::min<int64_t>(NR, x.n_tokens - t0));
                        for (int t = 0; t < nr; ++t) {
                            xs[t] = x.f32 + (t0 + t) * x.n + b0 * block;
                            tok[t].y = y + (t0 + t) * w.n_rows + r0;
                        }
                        micro_f32_any<V, NR>(nr, fpanel, n_chunk * block, xs, tok, n_valid,
                                             b0 == 0);
                    }
                }
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
    const int64_t grab = grab_size(n_groups, ctx.pool->n_threads());
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
