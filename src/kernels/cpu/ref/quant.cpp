#include "kernels/cpu/ref/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/half.h"

namespace headroom::ref {

namespace {

constexpr float kGroupMaxEps = 1e-15f;

// Round half to even, as ggml's nearest_int: adding 1.5 * 2^23 leaves the
// rounded integer in the low mantissa bits (exact for |v| < 2^22; larger
// values, which every caller clamps, saturate). A bit trick instead of
// std::nearbyint, which without SSE4.1 is a library call per element and
// made the K-quant fits 30 times slower than Q4_0.
inline int nearest_int(float v) {
    if (!(std::fabs(v) < 4194304.0f)) return v > 0 ? 4194304 : -4194304;
    const float shifted = v + 12582912.0f;
    int32_t bits;
    std::memcpy(&bits, &shifted, 4);
    return (bits & 0x007fffff) - 0x00400000;
}

inline uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}
inline void store_u16(uint8_t* p, uint16_t v) {
    std::memcpy(p, &v, 2);
}
inline float load_f16(const uint8_t* p) {
    return f16_to_f32(load_u16(p));
}
inline void store_f16(uint8_t* p, float v) {
    store_u16(p, f32_to_f16(v));
}

// ---- 32-element formats -------------------------------------------------

// Q4_0: {f16 d; u8 qs[16]}. x[j] = d * (nibble_j - 8); nibbles: j < 16 low, j >= 16 high.
void dequant_q4_0(const uint8_t* b, float* y) {
    const float d = load_f16(b);
    for (int j = 0; j < 16; ++j) {
        y[j] = d * ((b[2 + j] & 0x0F) - 8);
        y[j + 16] = d * ((b[2 + j] >> 4) - 8);
    }
}

// Q4_1: {f16 d; f16 m; u8 qs[16]}. x[j] = d * nibble_j + m.
void dequant_q4_1(const uint8_t* b, float* y) {
    const float d = load_f16(b), m = load_f16(b + 2);
    for (int j = 0; j < 16; ++j) {
        y[j] = d * (b[4 + j] & 0x0F) + m;
        y[j + 16] = d * (b[4 + j] >> 4) + m;
    }
}

// Q5_0: {f16 d; u32 qh; u8 qs[16]}. x[j] = d * ((nibble_j | bit_j(qh) << 4) - 16).
void dequant_q5_0(const uint8_t* b, float* y) {
    const float d = load_f16(b);
    uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    for (int j = 0; j < 16; ++j) {
        const int h0 = ((qh >> j) << 4) & 0x10;
        const int h1 = (qh >> (j + 12)) & 0x10;
        y[j] = d * (((b[6 + j] & 0x0F) | h0) - 16);
        y[j + 16] = d * (((b[6 + j] >> 4) | h1) - 16);
    }
}

// Q5_1: {f16 d; f16 m; u32 qh; u8 qs[16]}. x[j] = d * (nibble_j | bit_j(qh) << 4) + m.
void dequant_q5_1(const uint8_t* b, float* y) {
    const float d = load_f16(b), m = load_f16(b + 2);
    uint32_t qh;
    std::memcpy(&qh, b + 4, 4);
    for (int j = 0; j < 16; ++j) {
        const int h0 = ((qh >> j) << 4) & 0x10;
        const int h1 = (qh >> (j + 12)) & 0x10;
        y[j] = d * ((b[8 + j] & 0x0F) | h0) + m;
        y[j + 16] = d * ((b[8 + j] >> 4) | h1) + m;
    }
}

// Q8_0: {f16 d; i8 qs[32]}. x[j] = d * qs[j].
void dequant_q8_0(const uint8_t* b, float* y) {
    const float d = load_f16(b);
    for (int j = 0; j < 32; ++j) y[j] = d * static_cast<int8_t>(b[2 + j]);
}

// ---- 256-element "K" formats --------------------------------------------

// Unpacks sub-block j's 6-bit scale and min from Q4_K/Q5_K's 12 scale bytes.
inline void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Q4_K: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}, 8 sub-blocks of 32.
// x = d * sc_s * q - dmin * m_s; sub-blocks 2i and 2i+1 share 32 bytes of qs
// (low nibbles, then high nibbles).
void dequant_q4_k(const uint8_t* b, float* y) {
    const float d = load_f16(b), dmin = load_f16(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 16;
    for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
        uint8_t sc, m;
        scale_min_k4(is, scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        scale_min_k4(is + 1, scales, &sc, &m);
        const float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
        for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
}

// Q5_K: {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: Q4_K plus a
// fifth bit per element from qh (bit 2i for the low half, 2i+1 for the high).
void dequant_q5_k(const uint8_t* b, float* y) {
    const float d = load_f16(b), dmin = load_f16(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* ql = b + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
        uint8_t sc, m;
        scale_min_k4(is, scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        scale_min_k4(is + 1, scales, &sc, &m);
        const float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
}

// Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}, 16 sub-blocks of 16.
// x = d * scales[s] * (q - 32), q = 4 low bits from ql | 2 high bits from qh.
void dequant_q6_k(const uint8_t* b, float* y) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = load_f16(b + 208);
    for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc[is] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
    }
}

// Q2_K: {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}, 16 sub-blocks of 16.
// x = d * (sc & 15) * q - dmin * (sc >> 4), q the 2-bit field at `shift`.
void dequant_q2_k(const uint8_t* b, float* y) {
    const uint8_t* scales = b;
    const uint8_t* q = b + 16;
    const float d = load_f16(b + 80), dmin = load_f16(b + 82);
    int is = 0;
    for (int n = 0; n < 256; n += 128, q += 32) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; ++half) {
                const uint8_t sc = scales[is++];
                const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
            }
        }
    }
}

// Q3_K: {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}, 16 sub-blocks of 16.
// x = d * (scale6 - 32) * (q2 - (hmask bit ? 0 : 4)).
void dequant_q3_k(const uint8_t* b, float* y) {
    const uint8_t* hm = b;
    const uint8_t* q = b + 32;
    const float d_all = load_f16(b + 108);
    // Unpack sixteen 6-bit scales: low 4 bits from bytes 0..7, high 2 bits from 8..11.
    uint32_t aux[4];
    std::memcpy(aux, b + 96, 12);
    constexpr uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    const uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    int8_t scales[16];
    std::memcpy(scales, aux, 16);
    int is = 0;
    uint8_t m = 1;
    for (int n = 0; n < 256; n += 128, q += 32) {
        for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
            for (int half = 0; half < 2; ++half) {
                const float dl = d_all * (scales[is++] - 32);
                for (int l = 16 * half; l < 16 * half + 16; ++l)
                    *y++ = dl * (((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
            }
        }
    }
}

// Q8_K: {f32 d; i8 qs[256]; i16 bsums[16]}. x = d * qs.
void dequant_q8_k(const uint8_t* b, float* y) {
    float d;
    std::memcpy(&d, b, 4);
    for (int j = 0; j < 256; ++j) y[j] = d * static_cast<int8_t>(b[4 + j]);
}

// ---- non-linear 4-bit formats -------------------------------------------

// IQ4_NL: {f16 d; u8 qs[16]}. x[j] = d * kIq4Levels[nibble_j]; nibbles as Q4_0's.
void dequant_iq4_nl(const uint8_t* b, float* y) {
    const float d = load_f16(b);
    for (int j = 0; j < 16; ++j) {
        y[j] = d * kIq4Levels[b[2 + j] & 0x0F];
        y[j + 16] = d * kIq4Levels[b[2 + j] >> 4];
    }
}

// IQ4_XS: {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}, 8 sub-blocks of
// 32. Sub-block s's 6-bit scale ls = nibble s of scales_l | (2 bits 2s of
// scales_h) << 4; x = d * (ls - 32) * kIq4Levels[nibble], each sub-block's
// 16 qs bytes as an IQ4_NL block's.
void dequant_iq4_xs(const uint8_t* b, float* y) {
    const float d = load_f16(b);
    const uint16_t scales_h = load_u16(b + 2);
    for (int s = 0; s < 8; ++s, y += 32) {
        const int ls =
            ((b[4 + s / 2] >> (4 * (s % 2))) & 0x0F) | (((scales_h >> (2 * s)) & 3) << 4);
        const float dl = d * static_cast<float>(ls - 32);
        const uint8_t* qs = b + 8 + 16 * s;
        for (int j = 0; j < 16; ++j) {
            y[j] = dl * kIq4Levels[qs[j] & 0x0F];
            y[j + 16] = dl * kIq4Levels[qs[j] >> 4];
        }
    }
}

// MXFP4 (OCP microscaling FP4): {u8 e; u8 qs[16]}. Each nibble is an E2M1
// number, stored doubled as kMxfp4Levels; the block's scale is the E8M0
// power 2^(e - 127), so x[j] = kMxfp4Levels[nibble_j] * 2^(e - 128). Nibbles
// as Q4_0's.
void dequant_mxfp4(const uint8_t* b, float* y) {
    const float d = mxfp4_half_scale(b[0]);
    for (int j = 0; j < 16; ++j) {
        y[j] = d * kMxfp4Levels[b[1 + j] & 0x0F];
        y[j + 16] = d * kMxfp4Levels[b[1 + j] >> 4];
    }
}

// ---- quantizers -----------------------------------------------------------

// A NaN element (or an infinite one, whose block gets d = inf and id = 0)
// stores 0: no float-to-integer conversion of a value out of range.
void quant_q8_0(const float* x, uint8_t* b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d ? 1.0f / d : 0.0f;
    store_f16(b, d);
    for (int j = 0; j < 32; ++j) {
        const float q = std::round(x[j] * id);
        b[2 + j] = static_cast<uint8_t>(std::isnan(q) ? 0 : static_cast<int8_t>(q));
    }
}

// The element of largest magnitude, with its sign.
float signed_absmax(const float* x, int n) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; ++j) {
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    return max;
}

void quant_q4_0(const float* x, uint8_t* b) {
    const float d = signed_absmax(x, 32) / -8.0f;
    const float id = d ? 1.0f / d : 0.0f;
    store_f16(b, d);
    for (int j = 0; j < 16; ++j) {
        const auto q0 =
            std::min<uint8_t>(15, static_cast<uint8_t>(static_cast<int8_t>(x[j] * id + 8.5f)));
        const auto q1 =
            std::min<uint8_t>(15, static_cast<uint8_t>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
        b[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
}

void quant_q4_1(const float* x, uint8_t* b) {
    float min = x[0], max = x[0];
    for (int j = 1; j < 32; ++j) {
        min = std::min(min, x[j]);
        max = std::max(max, x[j]);
    }
    const float d = (max - min) / 15.0f;
    const float id = d ? 1.0f / d : 0.0f;
    store_f16(b, d);
    store_f16(b + 2, min);
    for (int j = 0; j < 16; ++j) {
        const auto q0 = std::min<uint8_t>(
            15, static_cast<uint8_t>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
        const auto q1 = std::min<uint8_t>(
            15, static_cast<uint8_t>(static_cast<int8_t>((x[j + 16] - min) * id + 0.5f)));
        b[4 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
}

void quant_q5_0(const float* x, uint8_t* b) {
    const float d = signed_absmax(x, 32) / -16.0f;
    const float id = d ? 1.0f / d : 0.0f;
    store_f16(b, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        const auto q0 =
            std::min<uint8_t>(31, static_cast<uint8_t>(static_cast<int8_t>(x[j] * id + 16.5f)));
        const auto q1 = std::min<uint8_t>(
            31, static_cast<uint8_t>(static_cast<int8_t>(x[j + 16] * id + 16.5f)));
        b[6 + j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
        qh |= ((q0 & 0x10u) >> 4) << j;
        qh |= ((q1 & 0x10u) >> 4) << (j + 16);
    }
    std::memcpy(b + 2, &qh, 4);
}

void quant_q5_1(const float* x, uint8_t* b) {
    float min = x[0], max = x[0];
    for (int j = 1; j < 32; ++j) {
        min = std::min(min, x[j]);
        max = std::max(max, x[j]);
    }
    const float d = (max - min) / 31.0f;
    const float id = d ? 1.0f / d : 0.0f;
    store_f16(b, d);
    store_f16(b + 2, min);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        const auto q0 = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
        const auto q1 = static_cast<uint8_t>((x[j + 16] - min) * id + 0.5f);
        b[8 + j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
        qh |= ((q0 & 0x10u) >> 4) << j;
        qh |= ((q1 & 0x10u) >> 4) << (j + 16);
    }
    std::memcpy(b + 4, &qh, 4);
}

constexpr int kMaxTrials = 24;  // the trial scales of one fit, computed side by side

// l = round-half-even(clamp(v, 0, nmax)), as a float. Clamping first gives the
// same level as rounding first, and adding 1.5 * 2^23 rounds exactly for
// values this small.
inline float level(float v, float nmax) {
    const float c = std::min(std::max(v, 0.0f), nmax);
    return (c + 12582912.0f) - 12582912.0f;
}

// Weighted least-squares fit of x ~ scale * L + min with L in [0, nmax] over
// one sub-block of n <= 32 elements (32 for Q4_K / Q5_K, 16 for Q2_K), after ggml's
// make_qkx2_quants: the plain min/max scale, then nstep + 1 trial scales (nmax + rmin + rdelta *
// is) / (max - min), each refined by solving the 2x2 normal equations
//   [sum w    sum wl ] [min  ]   [sum wx ]
//   [sum wl   sum wl2] [scale] = [sum wlx]
// (min clamped to <= 0). For that solution the weighted error is
//   sum w (x - scale l - min)^2 = sum wx^2 - scale sum wlx - min sum wx,
// and the trial with the smallest is kept. Unlike ggml, every trial starts
// from the data's min (ggml moves it to the best fit so far), so the trials
// are independent and computed side by side, one per vector lane: each
// trial's sums still run over the elements in order, the same on every
// instruction set. Cloned for AVX2. Returns scale; *neg_min = -min >= 0.
[[gnu::target_clones("avx2", "default")]] float fit_scale_min(int n, int nmax_int, const float* x,
                                                              const float* w, uint8_t* L,
                                                              float* neg_min, float rmin,
                                                              float rdelta, int nstep) {
    const auto nmax = static_cast<float>(nmax_int);
    float min = x[0], max = x[0];
    float sum_w = 0, sum_x = 0, sum_xx = 0;
    for (int i = 0; i < n; ++i) {
        min = std::min(min, x[i]);
        max = std::max(max, x[i]);
        sum_w += w[i];
        sum_x += w[i] * x[i];
        sum_xx += w[i] * x[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        std::fill(L, L + n, 0);
        *neg_min = -min;
        return 0.0f;
    }
    const float data_min = min;
    float best_iscale = nmax / (max - min);
    float scale = 1 / best_iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = scale * level(best_iscale * (x[i] - min), nmax) + min - x[i];
        best_error += w[i] * diff * diff;
    }
    const int n_trials = std::min(nstep + 1, kMaxTrials);
    float iscale[kMaxTrials], s_l[kMaxTrials] = {}, s_l2[kMaxTrials] = {}, s_xl[kMaxTrials] = {};
    for (int t = 0; t < kMaxTrials; ++t)
        iscale[t] =
            (rmin + rdelta * static_cast<float>(std::min(t, n_trials - 1)) + nmax) / (max - min);
    for (int i = 0; i < n; ++i) {
        const float xm = x[i] - data_min, wi = w[i], xi = x[i];
        for (int t = 0; t < kMaxTrials; ++t) {
            const float l = level(iscale[t] * xm, nmax);
            const float wl = wi * l;
            s_l[t] += wl;
            s_l2[t] += wl * l;
            s_xl[t] += wl * xi;
        }
    }
    for (int t = 0; t < n_trials; ++t) {
        const float D = sum_w * s_l2[t] - s_l[t] * s_l[t];
        if (D <= 0) continue;
        float this_scale = (sum_w * s_xl[t] - sum_x * s_l[t]) / D;
        float this_min = (s_l2[t] * sum_x - s_l[t] * s_xl[t]) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = s_xl[t] / s_l2[t];
        }
        const float cur_error = sum_xx - this_scale * s_xl[t] - this_min * sum_x;
        if (cur_error < best_error) {
            best_error = cur_error;
            best_iscale = iscale[t];
            scale = this_scale;
            min = this_min;
        }
    }
    for (int i = 0; i < n; ++i)
        L[i] = static_cast<uint8_t>(level(best_iscale * (x[i] - data_min), nmax));
    *neg_min = -min;
    return scale;
}

// Symmetric fit x ~ scale * (L - nmax), L in [0, 2 nmax), weights x^2
// (ggml's make_qx_quants with rmse_type 1). Returns scale.
float fit_scale_symmetric(int n, int nmax, const float* x, int8_t* L) {
    const float max = signed_absmax(x, n), amax = std::fabs(max);
    if (amax < kGroupMaxEps) {
        std::fill(L, L + n, 0);
        return 0.0f;
    }
    auto try_scale = [&](float iscale, float* sumlx, float* suml2) {
        *sumlx = *suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            *sumlx += w * x[i] * l;
            *suml2 += w * l * l;
        }
    };
    auto assign = [&](float iscale) {
        for (int i = 0; i < n; ++i)
            L[i] =
                static_cast<int8_t>(nmax + std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
    };
    float iscale = -nmax / max;
    float sumlx, suml2;
    try_scale(iscale, &sumlx, &suml2);
    assign(iscale);
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        try_scale(iscale, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            assign(iscale);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per-sub-block scale and min,
// quantized to 6 bits against the block's d and dmin. Writes d, dmin, the 12
// scale bytes and L[256].
void fit_k_block(const float* x, int nmax, uint8_t* b, uint8_t* L) {
    float scales[8], mins[8], weights[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
        scales[j] =
            fit_scale_min(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], -1.0f, 0.1f, 20);
        max_scale = std::max(max_scale, scales[j]);
        max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t* sc = b + 4;
    std::memset(sc, 0, 12);
    for (int j = 0; j < 8; ++j) {
        const auto ls = static_cast<uint8_t>(std::min(63, nearest_int(inv_scale * scales[j])));
        const auto lm = static_cast<uint8_t>(std::min(63, nearest_int(inv_min * mins[j])));
        if (j < 4) {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
            sc[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
            sc[j] |= static_cast<uint8_t>((lm >> 4) << 6);
        }
    }
    store_f16(b, max_scale / 63.0f);
    store_f16(b + 2, max_min / 63.0f);
    const float d_all = load_f16(b), dmin_all = load_f16(b + 2);
    for (int j = 0; j < 8; ++j) {
        uint8_t s, m;
        scale_min_k4(j, sc, &s, &m);
        const float d = d_all * s;
        if (!d) continue;
        const float dm = dmin_all * m;
        const auto top = static_cast<float>(nmax);
        for (int ii = 0; ii < 32; ++ii)
            L[32 * j + ii] = static_cast<uint8_t>(level((x[32 * j + ii] + dm) / d, top));
    }
}

void quant_q4_k(const float* x, uint8_t* b) {
    uint8_t L[256];
    fit_k_block(x, 15, b, L);
    uint8_t* q = b + 16;
    for (int j = 0; j < 256; j += 64, q += 32)
        for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
}

void quant_q5_k(const float* x, uint8_t* b) {
    uint8_t L[256];
    fit_k_block(x, 31, b, L);
    uint8_t* qh = b + 16;
    uint8_t* ql = b + 48;
    std::memset(qh, 0, 32);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < 256; n += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
        for (int j = 0; j < 32; ++j) {
            int l1 = L[n + j], l2 = L[n + j + 32];
            if (l1 > 15) {
                l1 -= 16;
                qh[j] |= m1;
            }
            if (l2 > 15) {
                l2 -= 16;
                qh[j] |= m2;
            }
            ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
        }
    }
}

void quant_q6_k(const float* x, uint8_t* b) {
    int8_t L[256];
    float scales[16];
    for (int ib = 0; ib < 16; ++ib)
        scales[ib] = fit_scale_symmetric(16, 32, x + 16 * ib, L + 16 * ib);
    const float max_scale = signed_absmax(scales, 16), max_abs_scale = std::fabs(max_scale);
    std::memset(b, 0, 210);
    if (max_abs_scale < kGroupMaxEps) return;
    auto* sc = reinterpret_cast<int8_t*>(b + 192);
    const float iscale = -128.0f / max_scale;
    store_f16(b + 208, 1 / iscale);
    for (int ib = 0; ib < 16; ++ib)
        sc[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    const float d_all = load_f16(b + 208);
    for (int j = 0; j < 16; ++j) {
        const float d = d_all * sc[j];
        if (!d) continue;
        for (int ii = 0; ii < 16; ++ii)
            L[16 * j + ii] =
                static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
    }
    uint8_t* ql = b;
    uint8_t* qh = b + 128;
    for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; ++l) {
            const int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
            const int q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
            ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
            ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
            qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                         ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
        }
    }
}

// Q2_K and Q3_K keep their 2-bit fields in the same places: element
// e = 128 h + 32 k + l (h < 2, k < 4, l < 32) is bits 2k..2k+1 of qs[32 h + l].
void pack_2bit_fields(const uint8_t* L, uint8_t* qs) {
    std::memset(qs, 0, 64);
    for (int e = 0; e < 256; ++e)
        qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>((L[e] & 3) << (2 * ((e % 128) / 32)));
}

// Q2_K: per 16-element sub-block, x ~ scale * L + min (L in 0..3) by the
// weighted fit Q4_K uses (weights |x|, ggml's trial range); the scales and
// the mins are then quantized to 4 bits against the block's d = max scale / 15
// and dmin = max min / 15, and L refitted to the quantized pair.
void quant_q2_k(const float* x, uint8_t* b) {
    uint8_t L[256];
    float scales[16], mins[16], weights[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
        for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
        scales[j] =
            fit_scale_min(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], -0.5f, 0.1f, 15);
        max_scale = std::max(max_scale, scales[j]);
        max_min = std::max(max_min, mins[j]);
    }
    uint8_t* sc = b;
    const float inv_scale = max_scale > 0 ? 15.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 15.0f / max_min : 0.0f;
    for (int j = 0; j < 16; ++j) {
        const int ls = std::min(15, nearest_int(inv_scale * scales[j]));
        const int lm = std::min(15, nearest_int(inv_min * mins[j]));
        sc[j] = static_cast<uint8_t>(ls | (lm << 4));
    }
    store_f16(b + 80, max_scale / 15.0f);
    store_f16(b + 82, max_min / 15.0f);
    const float d_all = load_f16(b + 80), dmin_all = load_f16(b + 82);
    for (int j = 0; j < 16; ++j) {
        const float d = d_all * (sc[j] & 0xF);
        if (!d) continue;
        const float dm = dmin_all * (sc[j] >> 4);
        for (int l = 0; l < 16; ++l)
            L[16 * j + l] = static_cast<uint8_t>(level((x[16 * j + l] + dm) / d, 3.0f));
    }
    pack_2bit_fields(L, b + 16);
}

// Q3_K: per 16-element sub-block the symmetric fit x ~ scale * (L - 4), L in
// 0..7 (Q6_K's fit with nmax 4); the 16 scales quantized to signed 6 bits
// against d = -(the scale of largest magnitude) / 32, and L refitted. L's
// low two bits go to qs, bit 2 to hmask: element e = 32 k + l (k < 8, l < 32)
// is bit k of hmask[l]. Scale s (0..63, stored s + 32) keeps its low nibble
// in byte s (s < 8) or the high nibble of byte s - 8, its top two bits at
// 2 (s / 4) of byte 8 + s % 4.
void quant_q3_k(const float* x, uint8_t* b) {
    int8_t L[256];
    float scales[16];
    for (int j = 0; j < 16; ++j) scales[j] = fit_scale_symmetric(16, 4, x + 16 * j, L + 16 * j);
    const float max_scale = signed_absmax(scales, 16), max_abs_scale = std::fabs(max_scale);
    std::memset(b, 0, 110);
    if (max_abs_scale < kGroupMaxEps) return;
    const float iscale = -32.0f / max_scale;
    uint8_t* sc = b + 96;
    int ls[16];
    for (int j = 0; j < 16; ++j) {
        ls[j] = std::clamp(nearest_int(iscale * scales[j]), -32, 31);
        const int v = ls[j] + 32;
        if (j < 8)
            sc[j] |= static_cast<uint8_t>(v & 0xF);
        else
            sc[j - 8] |= static_cast<uint8_t>((v & 0xF) << 4);
        sc[8 + j % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (j / 4)));
    }
    store_f16(b + 108, 1 / iscale);
    const float d_all = load_f16(b + 108);
    uint8_t U[256];
    for (int j = 0; j < 16; ++j) {
        const float d = d_all * static_cast<float>(ls[j]);
        for (int l = 0; l < 16; ++l) {
            const int e = 16 * j + l;
            U[e] = static_cast<uint8_t>(d ? std::clamp(nearest_int(x[e] / d), -4, 3) + 4 : L[e]);
        }
    }
    uint8_t* hmask = b;
    for (int e = 0; e < 256; ++e)
        if (U[e] > 3) hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
    pack_2bit_fields(U, b + 32);
}

// The index of the level of kIq4Levels nearest v (the levels ascend).
inline uint8_t nearest_iq4_level(float v) {
    if (v <= kIq4Levels[0]) return 0;
    if (v >= kIq4Levels[15]) return 15;
    int i = 0;
    while (v > kIq4Levels[i + 1]) ++i;  // kIq4Levels[i] < v <= kIq4Levels[i + 1]
    return static_cast<uint8_t>(v - kIq4Levels[i] <= kIq4Levels[i + 1] - v ? i : i + 1);
}

// Weighted fit x ~ d * kIq4Levels[L] over n elements (weights x^2): the
// sub-block's largest magnitude is put near the level -127 and near 14
// trial levels beside it; for each, L is the nearest level and d the
// least-squares scale sum(w q x) / sum(w q^2); the trial with the smallest
// error (largest (sum w q x)^2 / sum w q^2) is kept. Returns d.
float fit_iq4(int n, const float* x, uint8_t* L) {
    const float max = signed_absmax(x, n), amax = std::fabs(max);
    if (amax < kGroupMaxEps) {
        std::fill(L, L + n, nearest_iq4_level(0));
        return 0.0f;
    }
    float best_d = 0, best = -1;
    uint8_t trial[32];
    for (int t = -7; t <= 7; ++t) {
        const float id = static_cast<float>(kIq4Levels[0] + t) / max;
        float sum_qx = 0, sum_q2 = 0;
        for (int i = 0; i < n; ++i) {
            trial[i] = nearest_iq4_level(id * x[i]);
            const float q = kIq4Levels[trial[i]], w = x[i] * x[i];
            sum_qx += w * q * x[i];
            sum_q2 += w * q * q;
        }
        if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
            best = sum_qx * sum_qx / sum_q2;
            best_d = sum_qx / sum_q2;
            std::copy(trial, trial + n, L);
        }
    }
    return best_d;
}

// L[i] = the nearest level of x[i] / d (d as stored).
void refit_iq4(int n, const float* x, float d, uint8_t* L) {
    const float id = d ? 1 / d : 0.0f;
    for (int i = 0; i < n; ++i) L[i] = nearest_iq4_level(id * x[i]);
}

void pack_iq4_nibbles(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
}

void quant_iq4_nl(const float* x, uint8_t* b) {
    uint8_t L[32];
    store_f16(b, fit_iq4(32, x, L));
    refit_iq4(32, x, load_f16(b), L);
    pack_iq4_nibbles(L, b + 2);
}

// IQ4_XS: each 32-element sub-block's IQ4 fit; the 8 scales quantized to
// signed 6 bits against d = -(the scale of largest magnitude) / 32, and L
// refitted to the quantized scale.
void quant_iq4_xs(const float* x, uint8_t* b) {
    uint8_t L[32];
    float scales[8];
    for (int j = 0; j < 8; ++j) scales[j] = fit_iq4(32, x + 32 * j, L);
    const float max_scale = signed_absmax(scales, 8), max_abs_scale = std::fabs(max_scale);
    std::memset(b, 0, 136);
    if (max_abs_scale < kGroupMaxEps) {
        for (int j = 0; j < 8; ++j) {
            std::fill(L, L + 32, nearest_iq4_level(0));
            pack_iq4_nibbles(L, b + 8 + 16 * j);
        }
        return;
    }
    store_f16(b, -max_scale / 32.0f);
    const float d = load_f16(b);
    uint16_t scales_h = 0;
    for (int j = 0; j < 8; ++j) {
        const int l = d ? std::clamp(nearest_int(scales[j] / d), -32, 31) : 0;
        const int v = l + 32;
        b[4 + j / 2] |= static_cast<uint8_t>((v & 0xF) << (4 * (j % 2)));
        scales_h = static_cast<uint16_t>(scales_h | ((v >> 4) << (2 * j)));
        refit_iq4(32, x + 32 * j, d * static_cast<float>(l), L);
        pack_iq4_nibbles(L, b + 8 + 16 * j);
    }
    store_u16(b + 2, scales_h);
}

// MXFP4: the half-scale 2^(e - 128) with e = floor(log2 amax) + 125, so
// amax / scale is in [8, 16) and the largest level (12) saturates above 12;
// each element takes the level nearest x / scale (the first of equals).
void quant_mxfp4(const float* x, uint8_t* b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const int e =
        amax > 0 ? std::clamp(static_cast<int>(std::floor(std::log2(amax))) + 125, 0, 254) : 0;
    b[0] = static_cast<uint8_t>(e);
    const float d = mxfp4_half_scale(b[0]);
    uint8_t L[32];
    for (int j = 0; j < 32; ++j) {
        int best = 0;
        float best_err = std::fabs(d * kMxfp4Levels[0] - x[j]);
        for (int k = 1; k < 16; ++k) {
            const float err = std::fabs(d * kMxfp4Levels[k] - x[j]);
            if (err < best_err) {
                best_err = err;
                best = k;
            }
        }
        L[j] = static_cast<uint8_t>(best);
    }
    pack_iq4_nibbles(L, b + 1);
}

void quant_q8_k(const float* x, uint8_t* b) {
    std::memset(b, 0, 292);
    const float max = signed_absmax(x, 256);
    if (!max) return;
    const float iscale = -127.0f / max;
    auto* qs = reinterpret_cast<int8_t*>(b + 4);
    for (int j = 0; j < 256; ++j)
        qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < 16; ++j) {
        int16_t sum = 0;
        for (int i = 0; i < 16; ++i) sum = static_cast<int16_t>(sum + qs[16 * j + i]);
        std::memcpy(b + 260 + 2 * j, &sum, 2);
    }
    const float d = 1 / iscale;
    std::memcpy(b, &d, 4);
}

using DequantFn = void (*)(const uint8_t*, float*);
using QuantFn = void (*)(const float*, uint8_t*);

DequantFn dequant_fn(TensorType type) {
    switch (type) {
        case TensorType::Q4_0:
            return dequant_q4_0;
        case TensorType::Q4_1:
            return dequant_q4_1;
        case TensorType::Q5_0:
            return dequant_q5_0;
        case TensorType::Q5_1:
            return dequant_q5_1;
        case TensorType::Q8_0:
            return dequant_q8_0;
        case TensorType::Q2_K:
            return dequant_q2_k;
        case TensorType::Q3_K:
            return dequant_q3_k;
        case TensorType::Q4_K:
            return dequant_q4_k;
        case TensorType::Q5_K:
            return dequant_q5_k;
        case TensorType::Q6_K:
            return dequant_q6_k;
        case TensorType::Q8_K:
            return dequant_q8_k;
        case TensorType::IQ4_NL:
            return dequant_iq4_nl;
        case TensorType::IQ4_XS:
            return dequant_iq4_xs;
        case TensorType::MXFP4:
            return dequant_mxfp4;
        default:
            return nullptr;
    }
}

QuantFn quant_fn(TensorType type) {
    switch (type) {
        case TensorType::Q4_0:
            return quant_q4_0;
        case TensorType::Q4_1:
            return quant_q4_1;
        case TensorType::Q5_0:
            return quant_q5_0;
        case TensorType::Q5_1:
            return quant_q5_1;
        case TensorType::Q8_0:
            return quant_q8_0;
        case TensorType::Q4_K:
            return quant_q4_k;
        case TensorType::Q5_K:
            return quant_q5_k;
        case TensorType::Q6_K:
            return quant_q6_k;
        case TensorType::Q8_K:
            return quant_q8_k;
        case TensorType::Q2_K:
            return quant_q2_k;
        case TensorType::Q3_K:
            return quant_q3_k;
        case TensorType::IQ4_NL:
            return quant_iq4_nl;
        case TensorType::IQ4_XS:
            return quant_iq4_xs;
        case TensorType::MXFP4:
            return quant_mxfp4;
        default:
            return nullptr;
    }
}

}  // namespace

void dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
    const auto* s = static_cast<const uint8_t*>(src);
    switch (type) {
        case TensorType::F32:
            std::memcpy(dst, s, static_cast<size_t>(n) * 4);
            return;
        case TensorType::F16:
            for (int64_t i = 0; i < n; ++i) dst[i] = load_f16(s + 2 * i);
            return;
        case TensorType::BF16:
            for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(s + 2 * i));
            return;
        default:
            break;
    }
    const DequantFn fn = dequant_fn(type);
    HR_CHECK_MSG(fn != nullptr, "dequantize_row: unsupported type");
    const auto& t = traits(type);
    HR_DCHECK(n % t.block_size == 0);
    for (int64_t i = 0; i < n / t.block_size; ++i)
        fn(s + i * t.block_bytes, dst + i * t.block_size);
}

bool can_quantize(TensorType type) {
    return type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16 ||
           quant_fn(type) != nullptr;
}

void quantize_row(TensorType type, const float* src, void* dst, int64_t n) {
    auto* d = static_cast<uint8_t*>(dst);
    switch (type) {
        case TensorType::F32:
            std::memcpy(d, src, static_cast<size_t>(n) * 4);
            return;
        case TensorType::F16:
            for (int64_t i = 0; i < n; ++i) store_f16(d + 2 * i, src[i]);
            return;
        case TensorType::BF16:
            for (int64_t i = 0; i < n; ++i) store_u16(d + 2 * i, f32_to_bf16(src[i]));
            return;
        default:
            break;
    }
    const QuantFn fn = quant_fn(type);
    HR_CHECK_MSG(fn != nullptr, "quantize_row: unsupported type");
    const auto& t = traits(type);
    HR_DCHECK(n % t.block_size == 0);
    for (int64_t i = 0; i < n / t.block_size; ++i)
        fn(src + i * t.block_size, d + i * t.block_bytes);
}

}  // namespace headroom::ref
