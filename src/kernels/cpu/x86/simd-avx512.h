// The vector operations the shared x86 kernels (gemm.h, pack.h, attention.h,
// elementwise.h) are written in, for AVX-512 (F, BW, VL, DQ, VNNI): 16 int32
// or f32 lanes. Include only from files compiled with the AVX-512 flags.
//
// Every function here is a static member of Avx512 so that nothing with
// external linkage is compiled twice with different instruction sets.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/x86/tables.h"

namespace headroom::kernels::x86 {

struct Avx512 {
    static constexpr const char* kName = "avx512";
    static constexpr int kLanes = 16;  // f32 / int32 lanes, = rows of a packed panel
    static constexpr int kBytes = 64;
    // Q8_0 weights are packed as u8 = w + 128 (vpdpbusd takes u8 x s8 without
    // saturating); the activation side subtracts 128 * sum(a).
    static constexpr bool kQ8Unsigned = true;
    // dot_u8s8 sums any u8 x s8 products exactly (no 16-bit stage).
    static constexpr bool kExactU8Dot = true;
    // vpdpbusd sums into int32 directly (no int16 pair sums to add first).
    static constexpr bool kPairSums16 = false;
    // A repacked Q5_K copy holds each sub-block's levels as five vectors,
    // some taken 8 times over (ReadQ45K::repack_levels): exact here, where
    // the multiply-adds take any u8.
    static constexpr bool kQ5KFiveVectors = true;
    // A decode step loads a repacked Q6_K block's 16 scales first, into
    // registers, rather than each where its sub-block needs it (gemm.h,
    // micro_direct). From memory on one Zen 4 core, TinyLlama's Q6_K decode
    // read 88-91% of a plain read's bandwidth with the scales loaded in
    // between and 90-94% with them first; from cache the matrix x vector
    // product is 3% slower so.
    static constexpr bool kQ6KScalesFirst = true;
    // Tokens per micro-kernel call (register budget: 32 vectors) and the
    // float kernels' rows x tokens tile.
    static constexpr int kNr32Int8 = 8, kNr32Int8Small = 8, kNr32Int16 = 6, kNrKInt8 = 6,
                         kNrKInt16 = 4;
    static constexpr int kFloatMr = 4, kFloatNr = 4;
    // A batch is one tile of tokens (see simd-avx2.h): tiles were measured
    // only on Zen 3 cores, which have no AVX-512.
    static constexpr uint64_t kActTileBytes = 0;
    using I = __m512i;
    using F = __m512;

    // ---- integers ----
    static I zero() { return _mm512_setzero_si512(); }
    static I load(const void* p) { return _mm512_loadu_si512(p); }
    // A load the compiler may not fold into the instructions using it: a
    // vector used twice (a Q4 block's low and high nibbles) is then read from
    // L1 once, not once per use.
    static I load_once(const void* p) {
        I v = load(p);
        asm("" : "+v"(v));
        return v;
    }
    // v, opaque to the optimizer: a sum chain built with it is computed in
    // the order written. (GCC otherwise regroups integer sums into a tree
    // whose partial products outnumber the registers and spill.)
    static I pin(I v) {
        asm("" : "+v"(v));
        return v;
    }
    static void store(void* p, I v) { _mm512_storeu_si512(p, v); }
    static I bcast32(const void* p) {
        int32_t v;
        std::memcpy(&v, p, 4);
        return _mm512_set1_epi32(v);
    }
    static I set1(int32_t v) { return _mm512_set1_epi32(v); }
    static I set1_8(int8_t v) { return _mm512_set1_epi8(v); }
    // acc + sum of 4 products u8 x s8 per int32 lane (exact, no saturation).
    static I dot_u8s8(I acc, I u8, I s8) { return _mm512_dpbusd_epi32(acc, u8, s8); }
    // The same with s8 = the 4 bytes at p in every lane, as one vpdpbusd
    // with a broadcast memory operand. GCC keeps the broadcast of the
    // intrinsic form as a separate vpbroadcastd: a vector op per multiply-add
    // that took a tenth of Q4_K's matrix x vector throughput on Zen 4.
    HR_KERNEL_INLINE static I dot_u8s8_at(I acc, I u8, const void* p) {
        asm("vpdpbusd %[a]%{1to16%}, %[w], %[acc]"
            : [acc] "+v"(acc)
            : [w] "v"(u8), [a] "m"(*static_cast<const int32_t*>(p)));
        return acc;
    }
    // acc + sum of 2 products s16 x s16 per int32 lane.
    static I dot_s16(I acc, I a, I b) { return _mm512_dpwssd_epi32(acc, a, b); }
    static I add(I a, I b) { return _mm512_add_epi32(a, b); }
    static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
    static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
    static I and_(I a, I b) { return _mm512_and_si512(a, b); }
    static I or_(I a, I b) { return _mm512_or_si512(a, b); }
    static I xor_(I a, I b) { return _mm512_xor_si512(a, b); }
    template <int N>
    static I sll(I a) {
        return _mm512_slli_epi32(a, N);
    }
    template <int N>
    static I srl(I a) {
        return _mm512_srli_epi32(a, N);
    }
    template <int N>
    static I sra(I a) {
        return _mm512_srai_epi32(a, N);
    }
    static I srlv(I a, I n) { return _mm512_srlv_epi32(a, n); }
    // 16 bytes in each 128-bit quarter, for shuffle8.
    static I table16(const int8_t* t) {
        return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
    }
    // Byte i = table's byte idx[i] (idx in 0..15, within its 128-bit quarter).
    static I shuffle8(I table, I idx) { return _mm512_shuffle_epi8(table, idx); }
    // kLanes bytes at p, zero-extended to the int32 lanes; and back (each
    // lane's low byte, 0..255).
    static I load_u8(const void* p) {
        return _mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    }
    // kLanes int8 at p, sign-extended to the int32 lanes.
    static I load_s8(const void* p) {
        return _mm512_cvtepi8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    }
    static void store_u8(void* p, I a) {
        _mm_storeu_si128(static_cast<__m128i*>(p), _mm512_cvtepi32_epi8(a));
    }
    static int32_t reduce_add(I a) { return _mm512_reduce_add_epi32(a); }

    // ---- floats ----
    static F fzero() { return _mm512_setzero_ps(); }
    static F fload(const float* p) { return _mm512_loadu_ps(p); }
    static void fstore(float* p, F v) { _mm512_storeu_ps(p, v); }
    static F fset1(float v) { return _mm512_set1_ps(v); }
    static F fbcast(const float* p) { return _mm512_set1_ps(*p); }
    // The first n lanes (n < kLanes), zero elsewhere.
    static F fload_n(const float* p, int n) {
        return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
    }
    static void fstore_n(float* p, F v, int n) {
        _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
    }
    static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
    static F as_f(I a) { return _mm512_castsi512_ps(a); }
    static I as_i(F a) { return _mm512_castps_si512(a); }
    static I cvt_rne(F a) { return _mm512_cvtps_epi32(a); }
    static F fadd(F a, F b) { return _mm512_add_ps(a, b); }
    static F fsub(F a, F b) { return _mm512_sub_ps(a, b); }
    static F fmul(F a, F b) { return _mm512_mul_ps(a, b); }
    static F fdiv(F a, F b) { return _mm512_div_ps(a, b); }
    static F fmax(F a, F b) { return _mm512_max_ps(a, b); }
    static F fmin(F a, F b) { return _mm512_min_ps(a, b); }
    static F fabs(F a) { return _mm512_abs_ps(a); }
    // Lanes 2i and 2i + 1 swapped.
    static F fswap_pairs(F a) { return _mm512_permute_ps(a, 0xB1); }
    // a * b + c and c - a * b, each rounded once.
    static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
    static F fnma(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
    static float reduce_max(F a) { return _mm512_reduce_max_ps(a); }
    // Sum of the lanes by halving: l += l + 8, l += l + 4, l += l + 2, l += l + 1.
    static float reduce_halving(F a) {
        const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
        const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
        const __m128 e = _mm_add_ps(q, _mm_movehl_ps(q, q));
        return _mm_cvtss_f32(_mm_add_ss(e, _mm_movehdup_ps(e)));
    }
    // Lanes converted from 16 halves / bfloat16s at p.
    static F load_f16(const void* p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
    }
    // Lanes rounded to halves (to nearest, ties to even), stored at p.
    static void store_f16(void* p, F a) {
        _mm256_storeu_si256(static_cast<__m256i*>(p),
                            _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    static F load_bf16(const void* p) {
        const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    }
    static F load_f16_n(const void* p, int n) {
        const __m256i v = _mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << n) - 1), p);
        return _mm512_cvtph_ps(v);
    }
    static F load_bf16_n(const void* p, int n) {
        const __m256i h = _mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << n) - 1), p);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    // Low 16 bits of each int32 lane taken as a half.
    static F half_lo_to_f32(I a) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(a)); }
    static F half_hi_to_f32(I a) {
        return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(a, 16)));
    }

    // Stores the low 16 bits of each lane (kLanes u16).
    static void store_lo16(void* p, I a) {
        _mm256_storeu_si256(static_cast<__m256i*>(p), _mm512_cvtepi32_epi16(a));
    }

    // ---- gathering rows for the packers ----
    // int32 lane r = 4 bytes at base + idx[r].
    static I gather32(const uint8_t* base, I idx) { return _mm512_i32gather_epi32(idx, base, 1); }
    // x[i] lane r = dword i of the 16 bytes at rows[r] + off (a 16 x 4 dword transpose).
    static void transpose16(const uint8_t* const* rows, uint64_t off, I x[4]) {
        I v[4];
        for (int j = 0; j < 4; ++j) {
            __m512i t = _mm512_castsi128_si512(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j] + off)));
            t = _mm512_inserti32x4(
                t, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j + 4] + off)), 1);
            t = _mm512_inserti32x4(
                t, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j + 8] + off)), 2);
            t = _mm512_inserti32x4(
                t, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j + 12] + off)), 3);
            v[j] = t;
        }
        const I t0 = _mm512_unpacklo_epi32(v[0], v[1]), t1 = _mm512_unpackhi_epi32(v[0], v[1]);
        const I t2 = _mm512_unpacklo_epi32(v[2], v[3]), t3 = _mm512_unpackhi_epi32(v[2], v[3]);
        x[0] = _mm512_unpacklo_epi64(t0, t2);
        x[1] = _mm512_unpackhi_epi64(t0, t2);
        x[2] = _mm512_unpacklo_epi64(t1, t3);
        x[3] = _mm512_unpackhi_epi64(t1, t3);
    }
    template <int N>
    static I srl16(I a) {
        return _mm512_srli_epi16(a, N);
    }

    // ---- activations ----
    // Packs the 16 int32 lanes (each in [-128, 127]) to int8 at p.
    static void store_i8(void* p, I a) {
        _mm_storeu_si128(static_cast<__m128i*>(p), _mm512_cvtepi32_epi8(a));
    }
    // Sign-extends the low byte of each lane.
    static I low_byte_signed(I a) { return _mm512_srai_epi32(_mm512_slli_epi32(a, 24), 24); }

    // ---- attention ----
    // v with lanes outside [j0, j1) replaced by fill.
    static F fkeep(F v, int j0, int j1, float fill) {
        const auto m = static_cast<__mmask16>(((1u << j1) - 1) & ~((1u << j0) - 1));
        return _mm512_mask_blend_ps(m, _mm512_set1_ps(fill), v);
    }
    // 16 int8 at p as f32.
    static F load_i8(const void* p) {
        return _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))));
    }
    // Lane j = the sum of r[j]'s lanes: pairs of lanes, then pairs of
    // pairs, then the four 128-bit quarters.
    static F sum_rows(const F r[16]) {
        __m512 b[8], c[4];
        for (int i = 0; i < 8; ++i)
            b[i] = _mm512_add_ps(_mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]),
                                 _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]));
        for (int i = 0; i < 4; ++i) {
            const __m512d x = _mm512_castps_pd(b[2 * i]), y = _mm512_castps_pd(b[2 * i + 1]);
            c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
        }
        // c[i]'s quarter k: rows 4i..4i+3 summed over quarter k of each.
        const __m512 e0 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88),
                                        _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
        const __m512 e1 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], 0x88),
                                        _mm512_shuffle_f32x4(c[2], c[3], 0xDD));
        return _mm512_add_ps(_mm512_shuffle_f32x4(e0, e1, 0x88),
                             _mm512_shuffle_f32x4(e0, e1, 0xDD));
    }
    // In-place transpose of a 16 x 16 matrix of f32 (r[i] = row i).
    static void transpose_square(F r[16]) {
        __m512 t[16];
        for (int i = 0; i < 16; i += 2) {
            t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
            t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
        }
        // t[2k], t[2k+1]: rows 2k, 2k+1 interleaved (lo / hi pairs per 128-bit lane)
        __m512 u[16];
        for (int i = 0; i < 16; i += 4) {
            u[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
            u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
            u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
            u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
        }
        // u[4k + c] lane-block L holds column 4L + c of rows 4k..4k+3
        for (int i = 0; i < 4; ++i) {
            const __m512 a = _mm512_shuffle_f32x4(u[i], u[i + 4], _MM_SHUFFLE(2, 0, 2, 0));
            const __m512 b = _mm512_shuffle_f32x4(u[i], u[i + 4], _MM_SHUFFLE(3, 1, 3, 1));
            const __m512 c = _mm512_shuffle_f32x4(u[i + 8], u[i + 12], _MM_SHUFFLE(2, 0, 2, 0));
            const __m512 d = _mm512_shuffle_f32x4(u[i + 8], u[i + 12], _MM_SHUFFLE(3, 1, 3, 1));
            r[i] = _mm512_shuffle_f32x4(a, c, _MM_SHUFFLE(2, 0, 2, 0));
            r[i + 8] = _mm512_shuffle_f32x4(a, c, _MM_SHUFFLE(3, 1, 3, 1));
            r[i + 4] = _mm512_shuffle_f32x4(b, d, _MM_SHUFFLE(2, 0, 2, 0));
            r[i + 12] = _mm512_shuffle_f32x4(b, d, _MM_SHUFFLE(3, 1, 3, 1));
        }
    }

    // Always inlined: GCC finds a called prefetch free of side effects and
    // deletes the calls.
    HR_KERNEL_INLINE static void prefetch_l2(const void* p) {
        _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
    }
    HR_KERNEL_INLINE static void prefetch_l1(const void* p) {
        _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
    }
};

}  // namespace headroom::kernels::x86
