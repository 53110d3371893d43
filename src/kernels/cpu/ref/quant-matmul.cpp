#include "kernels/cpu/ref/quant-matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "kernels/cpu/act-format.h"
#include "kernels/cpu/ref/quant.h"

namespace headroom::ref {

using kernels::ActPrecision;

namespace {

float load_f16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return f16_to_f32(v);
}

// One weight block as integers: x[i] = d * (q[i] - offset) (+ m), or for the
// K types x[i] = d * sc[s] * q[i] - dmin * mn[s] (Q6_K: d * sc[s] * (q[i] - 32)).
struct IntBlock {
    int32_t q[256];
    int32_t offset = 0;
    float d = 0, m = 0;  // m: Q4_1/Q5_1 min, or the K types' dmin
    bool has_min = false;
    int32_t sc[16];
    int32_t mn[16];
};

uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

void scale_min_k4(int j, const uint8_t* q, int32_t* sc, int32_t* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

void decode(TensorType type, const uint8_t* b, IntBlock* o) {
    switch (type) {
        case TensorType::Q4_0:
        case TensorType::Q4_1: {
            const bool min = type == TensorType::Q4_1;
            const uint8_t* qs = b + (min ? 4 : 2);
            o->d = load_f16(b);
            o->has_min = min;
            o->m = min ? load_f16(b + 2) : 0.0f;
            o->offset = min ? 0 : 8;
            for (int j = 0; j < 16; ++j) {
                o->q[j] = qs[j] & 0xF;
                o->q[j + 16] = qs[j] >> 4;
            }
            return;
        }
        case TensorType::Q5_0:
        case TensorType::Q5_1: {
            const bool min = type == TensorType::Q5_1;
            const uint32_t qh = load_u32(b + (min ? 4 : 2));
            const uint8_t* qs = b + (min ? 8 : 6);
            o->d = load_f16(b);
            o->has_min = min;
            o->m = min ? load_f16(b + 2) : 0.0f;
            o->offset = min ? 0 : 16;
            for (int j = 0; j < 16; ++j) {
                o->q[j] = (qs[j] & 0xF) | static_cast<int32_t>(((qh >> j) & 1) << 4);
                o->q[j + 16] = (qs[j] >> 4) | static_cast<int32_t>(((qh >> (j + 16)) & 1) << 4);
            }
            return;
        }
        case TensorType::Q8_0:
            o->d = load_f16(b);
            o->offset = 0;
            for (int j = 0; j < 32; ++j) o->q[j] = static_cast<int8_t>(b[2 + j]);
            return;
        case TensorType::IQ4_NL:
        case TensorType::MXFP4: {
            // A table's levels: IQ4_NL {f16 d; u8 qs[16]}, MXFP4 {u8 e; u8 qs[16]}
            // with d = 2^(e - 128) for the doubled levels.
            const bool mx = type == TensorType::MXFP4;
            const int8_t* levels = mx ? kMxfp4Levels : kIq4Levels;
            const uint8_t* qs = b + (mx ? 1 : 2);
            o->d = mx ? mxfp4_half_scale(b[0]) : load_f16(b);
            o->offset = 0;
            for (int j = 0; j < 16; ++j) {
                o->q[j] = levels[qs[j] & 0xF];
                o->q[j + 16] = levels[qs[j] >> 4];
            }
            return;
        }
        case TensorType::Q4_K:
        case TensorType::Q5_K: {
            const bool five = type == TensorType::Q5_K;
            o->d = load_f16(b);
            o->m = load_f16(b + 2);
            const uint8_t* scales = b + 4;
            const uint8_t* qh = b + 16;
            const uint8_t* qs = b + (five ? 48 : 16);
            for (int s = 0; s < 8; ++s) {
                scale_min_k4(s, scales, &o->sc[s], &o->mn[s]);
                const uint8_t* chunk = qs + 32 * (s / 2);
                for (int l = 0; l < 32; ++l) {
                    int32_t q = s % 2 ? chunk[l] >> 4 : chunk[l] & 0xF;
                    if (five && (qh[l] >> s) & 1) q += 16;
                    o->q[32 * s + l] = q;
                }
            }
            return;
        }
        case TensorType::Q2_K: {
            // {u8 scales[16]; u8 qs[64]; f16 d, dmin}: q as Q3_K's low bits;
            // sub-block s (16 elements) scale = scales[s] & 15, min = scales[s] >> 4.
            const uint8_t* qs = b + 16;
            o->d = load_f16(b + 80);
            o->m = load_f16(b + 82);
            for (int s = 0; s < 16; ++s) {
                o->sc[s] = b[s] & 0xF;
                o->mn[s] = b[s] >> 4;
            }
            for (int e = 0; e < 256; ++e) {
                const int n = e / 128, j = (e % 128) / 32, l = e % 32;
                o->q[e] = (qs[32 * n + l] >> (2 * j)) & 3;
            }
            return;
        }
        case TensorType::Q3_K: {
            // {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}: element e = 128 n +
            // 32 j + l has q = bits 2j, 2j + 1 of qs[32 n + l] | bit 4n + j of
            // hmask[l] << 2 (0..7, offset 4); sub-block s (16 elements) the
            // 6-bit scale - 32, its low nibble in byte s % 8 (s >= 8: the high
            // one), its high bits at 2 (s / 4) of byte 8 + s % 4.
            const uint8_t* hm = b;
            const uint8_t* qs = b + 32;
            const uint8_t* scales = b + 96;
            o->d = load_f16(b + 108);
            for (int s = 0; s < 16; ++s) {
                const int lo = (scales[s % 8] >> (s < 8 ? 0 : 4)) & 0xF;
                const int hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
                o->sc[s] = (lo | (hi << 4)) - 32;
            }
            for (int e = 0; e < 256; ++e) {
                const int n = e / 128, j = (e % 128) / 32, l = e % 32;
                o->q[e] = ((qs[32 * n + l] >> (2 * j)) & 3) | (((hm[l] >> (4 * n + j)) & 1) << 2);
            }
            return;
        }
        case TensorType::IQ4_XS: {
            // {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}: sub-block s's
            // scale ls - 32 (6 bits: a nibble of scales_l, 2 bits of
            // scales_h), its 32 levels from 16 qs bytes as IQ4_NL's.
            o->d = load_f16(b);
            const uint32_t scales_h = b[2] | (b[3] << 8);
            for (int s = 0; s < 8; ++s) {
                const auto ls = static_cast<int32_t>(((b[4 + s / 2] >> (4 * (s % 2))) & 0xF) |
                                                     (((scales_h >> (2 * s)) & 3) << 4));
                o->sc[s] = ls - 32;
                const uint8_t* qs = b + 8 + 16 * s;
                for (int j = 0; j < 16; ++j) {
                    o->q[32 * s + j] = kIq4Levels[qs[j] & 0xF];
                    o->q[32 * s + 16 + j] = kIq4Levels[qs[j] >> 4];
                }
            }
            return;
        }
        case TensorType::Q6_K: {
            const uint8_t* ql = b;
            const uint8_t* qh = b + 128;
            const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
            o->d = load_f16(b + 208);
            for (int s = 0; s < 16; ++s) o->sc[s] = sc[s];
            for (int h = 0; h < 2; ++h) {
                const uint8_t* l0 = ql + 64 * h;
                const uint8_t* h0 = qh + 32 * h;
                int32_t* q = o->q + 128 * h;
                for (int l = 0; l < 32; ++l) {
                    q[l] = (l0[l] & 0xF) | (((h0[l] >> 0) & 3) << 4);
                    q[l + 32] = (l0[l + 32] & 0xF) | (((h0[l] >> 2) & 3) << 4);
                    q[l + 64] = (l0[l] >> 4) | (((h0[l] >> 4) & 3) << 4);
                    q[l + 96] = (l0[l + 32] >> 4) | (((h0[l] >> 6) & 3) << 4);
                }
            }
            return;
        }
        default:
            HR_CHECK_MSG(false, "matmul_int: unsupported weight type");
    }
}

// Sum over i in [i0, i1) of q[i] * part(a[i]); part selects the whole value,
// or the hi or lo half of an Int16 value.
enum class Part { Whole, Hi, Lo };

int64_t dot(const int32_t* q, int32_t offset, const int32_t* a, int i0, int i1, Part part) {
    int64_t s = 0;
    for (int i = i0; i < i1; ++i) {
        int32_t v = a[i];
        if (part != Part::Whole) {
            int8_t hi, lo;
            split_int16(v, &hi, &lo);
            v = part == Part::Hi ? hi : lo;
        }
        s += int64_t{q[i] - offset} * v;
    }
    return s;
}

int64_t sum(const int32_t* a, int i0, int i1) {
    int64_t s = 0;
    for (int i = i0; i < i1; ++i) s += a[i];
    return s;
}

float as_float(int64_t v) {
    HR_CHECK(v >= INT32_MIN && v <= INT32_MAX);  // the kernels hold it in int32
    return static_cast<float>(static_cast<int32_t>(v));
}

}  // namespace

void quantize_acts(const float* x, int64_t n, int block, ActPrecision quant, int32_t* a, float* d,
                   float* s) {
    const bool int8 = quant == ActPrecision::Int8;
    const float max_q = int8 ? kernels::kInt8Max : kernels::kInt16Max;
    const bool f16_scales = int8 && block == 32;
    for (int64_t b = 0; b < n / block; ++b) {
        const float* xb = x + b * block;
        float amax = 0;
        for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(xb[i]));
        // Tiny blocks quantize to zero rather than overflow the inverse scale.
        const float id = amax < 1e-30f ? 0.0f : max_q / amax;
        int32_t total = 0;
        for (int i = 0; i < block; ++i) {
            a[b * block + i] = static_cast<int32_t>(std::nearbyint(xb[i] * id));
            total += a[b * block + i];
        }
        if (id == 0.0f) {
            d[b] = s[b] = 0.0f;
        } else if (f16_scales) {
            const float db = amax / max_q;
            d[b] = f16_to_f32(f32_to_f16(db));
            s[b] = f16_to_f32(f32_to_f16(db * static_cast<float>(total)));
        } else {
            d[b] = 1.0f / id;
            s[b] = d[b] * static_cast<float>(total);
        }
    }
}

void matmul_int(const kernels::Matrix& w, const float* x, int64_t n_tokens, ActPrecision quant,
                float* y) {
    const int64_t n = w.n_cols;
    const auto& tt = traits(w.type);
    const int bs = static_cast<int>(tt.block_size);
    const int64_t nb = n / bs;
    const bool k_type = kernels::is_k_type(w.type);
    const int act_block = k_type ? 256 : 32;
    std::vector<int32_t> a(static_cast<size_t>(n));
    std::vector<float> da(static_cast<size_t>(n / act_block));
    std::vector<float> sa(static_cast<size_t>(n / act_block));
    IntBlock blk;
    for (int64_t t = 0; t < n_tokens; ++t) {
        quantize_acts(x + t * n, n, act_block, quant, a.data(), da.data(), sa.data());
        for (int64_t r = 0; r < w.n_rows; ++r) {
            const uint8_t* row = w.data + static_cast<uint64_t>(r) * w.row_bytes;
            float acc = 0;
            for (int64_t b = 0; b < nb; ++b) {
                decode(w.type, row + b * tt.block_bytes, &blk);
                const int32_t* ab = a.data() + b * bs;
                const float dab = da[static_cast<size_t>(b)];
                if (!k_type) {
                    acc = std::fma(as_float(dot(blk.q, blk.offset, ab, 0, 32, Part::Whole)),
                                   blk.d * dab, acc);
                    if (blk.has_min) acc = std::fma(blk.m, sa[static_cast<size_t>(b)], acc);
                    continue;
                }
                const bool q6 = w.type == TensorType::Q6_K, q3 = w.type == TensorType::Q3_K;
                const bool q2 = w.type == TensorType::Q2_K;
                const bool has_min = w.type == TensorType::Q4_K || w.type == TensorType::Q5_K || q2;
                const int sub = q6 || q3 || q2 ? 16 : 32;
                const int32_t offset = q6 ? 32 : q3 ? 4 : 0;
                int64_t s_whole = 0, s_hi = 0, s_lo = 0, m = 0;
                for (int s = 0; s < 256 / sub; ++s) {
                    if (quant == ActPrecision::Int8) {
                        s_whole +=
                            blk.sc[s] * dot(blk.q, offset, ab, s * sub, (s + 1) * sub, Part::Whole);
                    } else {
                        s_hi +=
                            blk.sc[s] * dot(blk.q, offset, ab, s * sub, (s + 1) * sub, Part::Hi);
                        s_lo +=
                            blk.sc[s] * dot(blk.q, offset, ab, s * sub, (s + 1) * sub, Part::Lo);
                    }
                    if (has_min) m += blk.mn[s] * sum(ab, s * sub, (s + 1) * sub);
                }
                const float v = quant == ActPrecision::Int8
                                    ? as_float(s_whole)
                                    : std::fma(as_float(s_hi), 256.0f, as_float(s_lo));
                acc = std::fma(v, blk.d * dab, acc);
                if (has_min) acc = std::fma(-as_float(m), blk.m * dab, acc);
            }
            y[t * w.n_rows + r] = acc;
        }
    }
}

void matmul_f32_acts(const kernels::Matrix& w, const float* x, int64_t n_tokens, float* y) {
    const int64_t n = w.n_cols;
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t r = 0; r < w.n_rows; ++r) {
        dequantize_row(w.type, w.data + static_cast<uint64_t>(r) * w.row_bytes, row.data(), n);
        for (int64_t t = 0; t < n_tokens; ++t) {
            float acc = 0;
            for (int64_t k = 0; k < n; ++k) acc = std::fma(row[k], x[t * n + k], acc);
            y[t * w.n_rows + r] = acc;
        }
    }
}

void matmul_float(const kernels::Matrix& w, const float* x, int64_t n_tokens, int n_lanes,
                  float* y) {
    const int64_t n = w.n_cols;
    std::vector<float> row(static_cast<size_t>(n));
    std::vector<float> acc(static_cast<size_t>(n_lanes));
    for (int64_t r = 0; r < w.n_rows; ++r) {
        dequantize_row(w.type, w.data + static_cast<uint64_t>(r) * w.row_bytes, row.data(), n);
        for (int64_t t = 0; t < n_tokens; ++t) {
            const float* xt = x + t * n;
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int64_t k0 = 0; k0 < n; k0 += n_lanes)
                for (int l = 0; l < n_lanes; ++l)
                    if (k0 + l < n) acc[l] = std::fma(row[k0 + l], xt[k0 + l], acc[l]);
            for (int half = n_lanes / 2; half >= 1; half /= 2)
                for (int l = 0; l < half; ++l) acc[l] += acc[l + half];
            y[t * w.n_rows + r] = acc[0];
        }
    }
}

}  // namespace headroom::ref
