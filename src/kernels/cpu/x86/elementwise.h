// Elementwise ops for the x86 tables (templates over the vector traits V):
// vectorized, and spread over the pool when there is enough work. Each output
// row depends only on its input row, so they are batch invariant.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/thread-pool.h"
#include "kernels/cpu/ops.h"

namespace headroom::kernels::x86 {

// Below this many elements an op runs on the calling thread: waking the pool
// costs more than the work.
inline constexpr int64_t kParallelElements = 32768;

// e^x for each lane, within 2 ulp of expf for x in [-87, 88] (flushes to 0
// below, saturates above): e^x = 2^n * e^r, r = x - n ln2, |r| <= ln2 / 2,
// e^r by a degree-6 polynomial (Cephes' expf coefficients).
template <class V>
inline typename V::F exp(typename V::F x) {
    using F = typename V::F;
    x = V::fmin(V::fmax(x, V::fset1(-87.3f)), V::fset1(88.3f));
    const F n = V::cvt(V::cvt_rne(V::fmul(x, V::fset1(1.44269504088896341f))));
    F r = V::fnma(n, V::fset1(0.693359375f), x);
    r = V::fnma(n, V::fset1(-2.12194440e-4f), r);
    F p = V::fset1(1.9875691500e-4f);
    p = V::fma(p, r, V::fset1(1.3981999507e-3f));
    p = V::fma(p, r, V::fset1(8.3334519073e-3f));
    p = V::fma(p, r, V::fset1(4.1665795894e-2f));
    p = V::fma(p, r, V::fset1(1.6666665459e-1f));
    p = V::fma(p, r, V::fset1(5.0000001201e-1f));
    p = V::fma(p, V::fmul(r, r), V::fadd(r, V::fset1(1.0f)));
    // 2^n built in the exponent field; n in [-126, 127] after the clamp.
    const auto e = V::template sll<23>(V::add(V::cvt_rne(n), V::set1(127)));
    return V::fmul(p, V::as_f(e));
}

// Runs fn(begin, end) over [0, n) in pieces of `align` elements, on the pool
// if the work is large.
template <class Fn>
void for_range(int64_t n, int64_t work, int64_t align, const Context& ctx, Fn&& fn) {
    if (work < kParallelElements || ctx.pool->n_threads() == 1) {
        fn(int64_t{0}, n);
        return;
    }
    const int64_t n_units = (n + align - 1) / align;
    ctx.pool->parallel_for(
        n_units, [&](int64_t u0, int64_t u1, int) { fn(u0 * align, std::min(n, u1 * align)); });
}

template <class V>
void rmsnorm(const float* x, const float* w, float weight_offset, float eps, int64_t n_tokens,
             int64_t n, float* out, const Context& ctx) {
    using F = typename V::F;
    constexpr int L = V::kLanes;
    for_range(n_tokens, n_tokens * n, 1, ctx, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const float* xr = x + t * n;
            float* o = out + t * n;
            F ss = V::fzero();
            int64_t i = 0;
            for (; i + L <= n; i += L) {
                const F v = V::fload(xr + i);
                ss = V::fma(v, v, ss);
            }
            float sum = V::reduce_halving(ss);
            for (; i < n; ++i) sum += xr[i] * xr[i];
            const float scale = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
            const F vs = V::fset1(scale), off = V::fset1(weight_offset);
            for (i = 0; i + L <= n; i += L)
                V::fstore(o + i,
                          V::fmul(V::fmul(V::fload(xr + i), vs), V::fadd(V::fload(w + i), off)));
            for (; i < n; ++i) o[i] = xr[i] * scale * (w[i] + weight_offset);
        }
    });
}

template <class V>
void silu_mul(float* gate, const float* up, int64_t n, const Context& ctx) {
    using F = typename V::F;
    constexpr int L = V::kLanes;
    for_range(n, n, 1024, ctx, [&](int64_t i0, int64_t i1) {
        int64_t i = i0;
        const F one = V::fset1(1.0f);
        for (; i + L <= i1; i += L) {
            const F g = V::fload(gate + i);
            const F s = V::fdiv(g, V::fadd(one, exp<V>(V::fsub(V::fzero(), g))));
            V::fstore(gate + i, V::fmul(s, V::fload(up + i)));
        }
        for (; i < i1; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
    });
}

template <class V>
void gelu_mul(float* gate, const float* up, int64_t n, const Context& ctx) {
    using F = typename V::F;
    constexpr int L = V::kLanes;
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    for_range(n, n, 1024, ctx, [&](int64_t i0, int64_t i1) {
        int64_t i = i0;
        const F one = V::fset1(1.0f), two = V::fset1(2.0f), half = V::fset1(0.5f);
        for (; i + L <= i1; i += L) {
            const F g = V::fload(gate + i);
            const F u = V::fmul(V::fset1(kSqrt2OverPi),
                                V::fma(V::fmul(V::fset1(0.044715f), g), V::fmul(g, g), g));
            // tanh(u) = 1 - 2 / (e^(2u) + 1)
            const F th = V::fsub(one, V::fdiv(two, V::fadd(exp<V>(V::fmul(two, u)), one)));
            V::fstore(gate + i,
                      V::fmul(V::fmul(V::fmul(half, g), V::fadd(one, th)), V::fload(up + i)));
        }
        for (; i < i1; ++i) {
            const float g = gate[i];
            gate[i] =
                0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up[i];
        }
    });
}

template <class V>
void add(float* x, const float* y, int64_t n, const Context& ctx) {
    constexpr int L = V::kLanes;
    for_range(n, n, 1024, ctx, [&](int64_t i0, int64_t i1) {
        int64_t i = i0;
        for (; i + L <= i1; i += L) V::fstore(x + i, V::fadd(V::fload(x + i), V::fload(y + i)));
        for (; i < i1; ++i) x[i] += y[i];
    });
}

// As kernels::store_row; f16 rows a vector at a time (the same rounding).
template <class V>
void store_row(const float* x, int64_t n, KvDtype dtype, uint8_t* dst) {
    constexpr int L = V::kLanes;
    if (dtype != KvDtype::F16 || n % L != 0) return kernels::store_row(x, n, dtype, dst);
    for (int64_t i = 0; i < n; i += L) V::store_f16(dst + 2 * i, V::fload(x + i));
}

// One position's rotation angles: cos and sin of each of n_rot / 2 pairs,
// and the same laid out for pairs of adjacent elements (RopeMode::Normal):
// cs2 = (c0, c0, c1, c1, ...), sn2 = (-s0, s0, -s1, s1, ...).
struct RopeAngles {
    uint32_t position = 0;
    float base = 0.0f;
    float position_scale = 0.0f;
    float yarn_factor = 0.0f;
    uint32_t yarn_orig_ctx = 0;
    float yarn_beta_fast = 0.0f, yarn_beta_slow = 0.0f;
    bool yarn_truncate = true;
    uint32_t n_rot = 0;                         // 0: none kept
    static constexpr uint32_t kMaxPairs = 512;  // rope() leaves wider rotations to the reference
    alignas(64) float cs[kMaxPairs];
    alignas(64) float sn[kMaxPairs];
    alignas(64) float cs2[2 * kMaxPairs];
    alignas(64) float sn2[2 * kMaxPairs];

    bool holds(uint32_t pos, const RopeArgs& a) const {
        return n_rot == a.n_rot && position == pos && base == a.base &&
               position_scale == a.position_scale && !a.freq_factors &&
               yarn_factor == a.yarn_factor && yarn_orig_ctx == a.yarn_orig_ctx &&
               yarn_beta_fast == a.yarn_beta_fast && yarn_beta_slow == a.yarn_beta_slow &&
               yarn_truncate == a.yarn_truncate;
    }
    void compute(uint32_t pos, const RopeArgs& a) {
        const float mscale = rope_yarn_mscale(a);
        for (uint32_t i = 0; i < a.n_rot / 2; ++i) {
            const double theta = rope_theta(pos, i, a);
            cs[i] = static_cast<float>(std::cos(theta)) * mscale;
            sn[i] = static_cast<float>(std::sin(theta)) * mscale;
            cs2[2 * i] = cs2[2 * i + 1] = cs[i];
            sn2[2 * i] = -sn[i];
            sn2[2 * i + 1] = sn[i];
        }
        position = pos;
        base = a.base;
        position_scale = a.position_scale;
        yarn_factor = a.yarn_factor;
        yarn_orig_ctx = a.yarn_orig_ctx;
        yarn_beta_fast = a.yarn_beta_fast;
        yarn_beta_slow = a.yarn_beta_slow;
        yarn_truncate = a.yarn_truncate;
        n_rot = a.freq_factors ? 0 : a.n_rot;  // scaled angles are not kept
    }
};

// The angles a thread computed last. A decode step rotates q and k of every
// layer at one position: 2 x n_layer calls share one computation, which
// costs more (pow, cos, sin per pair) than rotating all the heads. Angles
// scaled by freq_factors (a model's tensor, which can change under the
// same address) are not kept.
inline thread_local RopeAngles t_rope_angles;

// One head v rotated by `angles`, a vector of pairs at a time: the
// reference's x0 * c - x1 * s and x0 * s + x1 * c, each product and sum
// rounded as there (x + y * -s is x - y * s exactly; sums commute).
template <class V>
void rope_head(float* v, const RopeAngles& angles, uint32_t half, RopeMode mode) {
    using F = typename V::F;
    constexpr uint32_t L = V::kLanes;
    const bool normal = mode == RopeMode::Normal;
    uint32_t i = 0;  // pairs done
    if (normal) {
        for (; 2 * i + L <= 2 * half; i += L / 2) {
            const F x = V::fload(v + 2 * i);
            V::fstore(v + 2 * i, V::fadd(V::fmul(x, V::fload(angles.cs2 + 2 * i)),
                                         V::fmul(V::fswap_pairs(x), V::fload(angles.sn2 + 2 * i))));
        }
    } else {
        for (; i + L <= half; i += L) {
            const F x0 = V::fload(v + i), x1 = V::fload(v + i + half);
            const F c = V::fload(angles.cs + i), s = V::fload(angles.sn + i);
            V::fstore(v + i, V::fsub(V::fmul(x0, c), V::fmul(x1, s)));
            V::fstore(v + i + half, V::fadd(V::fmul(x0, s), V::fmul(x1, c)));
        }
    }
    for (; i < half; ++i) {
        const uint32_t i0 = normal ? 2 * i : i, i1 = normal ? 2 * i + 1 : i + half;
        const float x0 = v[i0], x1 = v[i1];
        v[i0] = x0 * angles.cs[i] - x1 * angles.sn[i];
        v[i1] = x0 * angles.sn[i] + x1 * angles.cs[i];
    }
}

// As kernels::rope, with each token's angles computed once for all heads
// (and kept for the next call at the same position), the tokens spread over
// the pool.
template <class V>
void rope(float* x, int64_t n_tokens, const uint32_t* positions, const RopeArgs& a,
          const Context& ctx) {
    const uint32_t half = a.n_rot / 2;
    if (half > RopeAngles::kMaxPairs) return kernels::rope(x, n_tokens, positions, a);
    for_range(n_tokens, n_tokens * a.n_head * a.head_dim, 1, ctx, [&](int64_t t0, int64_t t1) {
        RopeAngles& angles = t_rope_angles;
        for (int64_t t = t0; t < t1; ++t) {
            if (!angles.holds(positions[t], a)) angles.compute(positions[t], a);
            for (uint32_t h = 0; h < a.n_head; ++h)
                rope_head<V>(x + (t * a.n_head + h) * a.head_dim, angles, half, a.mode);
        }
    });
}

}  // namespace headroom::kernels::x86
