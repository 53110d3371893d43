// The vector operations of the shared x86 kernels for AVX2 + FMA + F16C: 8
// int32 or f32 lanes. Include only from files compiled with the AVX2 flags
// (and, for AvxVnni, AVX-VNNI's).
//
// Avx2 has no vpdpbusd: u8 x s8 products go through vpmaddubsw, whose int16
// pair sums saturate past 32767. Every packed level is at most 63 except Q8_0,
// so Q8_0 weights stay signed and multiply as |w| x (a signed as w): at most
// 128 x 127 per product, 32512 a pair, exact for every s8 weight against
// Int8 activations (|a| <= 127). Int16's low halves, which reach -128, take
// the other form, with w clamped to -127 (gemm.h, dot4).
//
// AvxVnni is the same 8 lanes with AVX-VNNI's vpdpbusd and vpdpwssd (VEX
// encoded: Intel's cores from Alder Lake on, most without AVX-512): u8 x s8
// products summed into int32 exactly, as AVX-512 VNNI does, so its kernels
// take AVX-512's exact paths (u8 Q8_0 weights, the high nibbles of Q4_0,
// Q4_1 and Q4_K in place, Q5_K's five vectors) at half the width. It has no
// broadcast memory operand: the 4 activation bytes are a vpbroadcastd, which
// is a load alone.
//
// The two are one template, so that no function is shared between the
// translation units compiled with and without AVX-VNNI.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/x86/tables.h"

namespace headroom::kernels::x86 {

template <bool kVnni>
struct Avx2Ops {
    static constexpr const char* kName = kVnni ? "avxvnni" : "avx2";
    static constexpr int kLanes = 8;
    static constexpr int kBytes = 32;
    // With vpdpbusd, Q8_0 weights are packed as u8 = w + 128 (simd-avx512.h).
    static constexpr bool kQ8Unsigned = kVnni;
    // Without it dot_u8s8 goes through vpmaddubsw, which saturates pairs at
    // 16 bits: exact only for small weights (4- to 6-bit levels).
    static constexpr bool kExactU8Dot = kVnni;
    // Without vpdpbusd, Q5_K's copy keeps the GGUF order: 8 x a 5-bit level
    // would saturate vpmaddubsw's pair sums (simd-avx512.h).
    static constexpr bool kQ5KFiveVectors = kVnni;
    // 16 scales do not fit the 16 registers: loaded where their sub-blocks
    // need them (simd-avx512.h). First, on Zen 4, Q6_K decode's products ran
    // at 0.61-0.63 of a plain read's rate against 0.65-0.68.
    static constexpr bool kQ6KScalesFirst = false;
    // Tokens per micro-kernel call (register budget: 16 vectors) and the
    // float kernels' rows x tokens tile.
    // kNr32Int8Small: Q4_0 and Q4_1, whose block sums stay in one int16
    // register per token until the block ends (kPairSums16), leaving room
    // for more tokens. AvxVnni keeps one int32 sum a token instead, and
    // keeps 6 too: 4 made a 512-token Q4_0 batch no faster (Intel Xeon).
    static constexpr int kNr32Int8 = 4, kNr32Int8Small = 6, kNr32Int16 = 3, kNrKInt8 = 3,
                         kNrKInt16 = 2;
    static constexpr int kFloatMr = 2, kFloatNr = 4;
    // A batch's quantized activations are taken a tile of tokens at a time,
    // this many bytes, so they stay in L2 (512 KiB a core on Zen 3) while
    // every row group passes over them (gemm.h, matmul_int). On Zen 3 a
    // 512-token batch read them from L3 for each group; in tiles, a Q4_0
    // 2048 x 2048 product of 512 tokens on one thread ran 1.2 times as fast.
    static constexpr uint64_t kActTileBytes = 160 * 1024;
    using I = __m256i;
    using F = __m256;

    // ---- integers ----
    static I zero() { return _mm256_setzero_si256(); }
    static I load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
    // A load the compiler may not fold into the instructions using it (see
    // simd-avx512.h).
    static I load_once(const void* p) {
        I v = load(p);
        asm("" : "+x"(v));
        return v;
    }
    // v, opaque to the optimizer: a sum chain built with it is computed in
    // the order written. (GCC otherwise regroups integer sums into a tree
    // whose partial products outnumber the registers and spill.)
    static I pin(I v) {
        asm("" : "+x"(v));
        return v;
    }
    static void store(void* p, I v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
    static I bcast32(const void* p) {
        int32_t v;
        std::memcpy(&v, p, 4);
        return _mm256_set1_epi32(v);
    }
    static I set1(int32_t v) { return _mm256_set1_epi32(v); }
    static I set1_8(int8_t v) { return _mm256_set1_epi8(v); }
    // acc + sum of 4 products u8 x s8 per int32 lane (saturating pairs
    // through vpmaddubsw; exact with vpdpbusd).
    static I dot_u8s8(I acc, I u8, I s8) {
        if constexpr (kVnni)
            return _mm256_dpbusd_avx_epi32(acc, u8, s8);
        else
            return _mm256_add_epi32(
                acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u8, s8), _mm256_set1_epi16(1)));
    }
    // The same with s8 = the 4 bytes at p in every lane.
    static I dot_u8s8_at(I acc, I u8, const void* p) { return dot_u8s8(acc, u8, bcast32(p)); }
    // vpmaddubsw alone (int16 pair sums, saturating), their int16 sum, and
    // acc + the int32 sums of pairs of them. For small levels (gemm.h:
    // block_32, sub_q45) several pair sums add up exactly in int16 and are
    // widened once: about half the multiplies of dot_u8s8 per vector. With
    // vpdpbusd, one instruction a vector already.
    static constexpr bool kPairSums16 = !kVnni;
    static I pairs16(I u8, I s8) {
        static_assert(!kVnni, "AvxVnni's kernels take the exact path");
        return _mm256_maddubs_epi16(u8, s8);
    }
    static I add16(I a, I b) { return _mm256_add_epi16(a, b); }
    static I widen16(I acc, I s16) {
        return _mm256_add_epi32(acc, _mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
    }
    // acc + the products of s8 w and a: as |w| x (a signed as w), abs_w = |w|
    // (abs8), for |a| <= 127; as |a| x (w signed as a) for |w| <= 127.
    static I dot_s8s8(I acc, I w, I abs_w, I a) {
        static_assert(!kVnni, "AvxVnni's Q8_0 weights are unsigned");
        return _mm256_add_epi32(
            acc, _mm256_madd_epi16(_mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(a, w)),
                                   _mm256_set1_epi16(1)));
    }
    static I dot_s8s8_any_a(I acc, I w, I a) {
        static_assert(!kVnni, "AvxVnni's Q8_0 weights are unsigned");
        return _mm256_add_epi32(
            acc, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(a), _mm256_sign_epi8(w, a)),
                                   _mm256_set1_epi16(1)));
    }
    static I abs8(I a) { return _mm256_abs_epi8(a); }
    static I clamp_q8(I w) { return _mm256_max_epi8(w, _mm256_set1_epi8(-127)); }
    static I dot_s16(I acc, I a, I b) {
        if constexpr (kVnni)
            return _mm256_dpwssd_avx_epi32(acc, a, b);
        else
            return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
    }
    static I add(I a, I b) { return _mm256_add_epi32(a, b); }
    static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
    static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
    static I and_(I a, I b) { return _mm256_and_si256(a, b); }
    static I or_(I a, I b) { return _mm256_or_si256(a, b); }
    static I xor_(I a, I b) { return _mm256_xor_si256(a, b); }
    template <int N>
    static I sll(I a) {
        return _mm256_slli_epi32(a, N);
    }
    template <int N>
    static I srl(I a) {
        return _mm256_srli_epi32(a, N);
    }
    template <int N>
    static I sra(I a) {
        return _mm256_srai_epi32(a, N);
    }
    template <int N>
    static I srl16(I a) {
        return _mm256_srli_epi16(a, N);
    }
    static I srlv(I a, I n) { return _mm256_srlv_epi32(a, n); }
    // 16 bytes in each 128-bit half, for shuffle8.
    static I table16(const int8_t* t) {
        return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
    }
    // Byte i = table's byte idx[i] (idx in 0..15, within its 128-bit half).
    static I shuffle8(I table, I idx) { return _mm256_shuffle_epi8(table, idx); }
    // kLanes bytes at p, zero-extended to the int32 lanes; and back (each
    // lane's low byte, 0..255).
    static I load_u8(const void* p) {
        return _mm256_cvtepu8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p)));
    }
    // kLanes int8 at p, sign-extended to the int32 lanes.
    static I load_s8(const void* p) {
        return _mm256_cvtepi8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p)));
    }
    static void store_u8(void* p, I a) {
        const __m256i w = _mm256_packus_epi32(a, a);
        const __m256i b = _mm256_packus_epi16(w, w);
        const __m128i r =
            _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
        _mm_storel_epi64(static_cast<__m128i*>(p), r);
    }
    static int32_t reduce_add(I a) {
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
        return _mm_cvtsi128_si32(s);
    }

    // ---- floats ----
    static F fzero() { return _mm256_setzero_ps(); }
    static F fload(const float* p) { return _mm256_loadu_ps(p); }
    static void fstore(float* p, F v) { _mm256_storeu_ps(p, v); }
    static F fset1(float v) { return _mm256_set1_ps(v); }
    static F fbcast(const float* p) { return _mm256_broadcast_ss(p); }
    static I first_n(int n) {
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    static F fload_n(const float* p, int n) { return _mm256_maskload_ps(p, first_n(n)); }
    static void fstore_n(float* p, F v, int n) { _mm256_maskstore_ps(p, first_n(n), v); }
    static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
    static I cvt_rne(F a) { return _mm256_cvtps_epi32(a); }
    static F as_f(I a) { return _mm256_castsi256_ps(a); }
    static I as_i(F a) { return _mm256_castps_si256(a); }
    static F fadd(F a, F b) { return _mm256_add_ps(a, b); }
    static F fsub(F a, F b) { return _mm256_sub_ps(a, b); }
    static F fmul(F a, F b) { return _mm256_mul_ps(a, b); }
    static F fdiv(F a, F b) { return _mm256_div_ps(a, b); }
    static F fmax(F a, F b) { return _mm256_max_ps(a, b); }
    static F fmin(F a, F b) { return _mm256_min_ps(a, b); }
    static F fabs(F a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
    // Lanes 2i and 2i + 1 swapped.
    static F fswap_pairs(F a) { return _mm256_permute_ps(a, 0xB1); }
    static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    static F fnma(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
    static float reduce_max(F a) {
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    }
    // Sum of the lanes by halving: l += l + 4, l += l + 2, l += l + 1.
    static float reduce_halving(F a) {
        const __m128 q = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        const __m128 e = _mm_add_ps(q, _mm_movehl_ps(q, q));
        return _mm_cvtss_f32(_mm_add_ss(e, _mm_movehdup_ps(e)));
    }
    static F load_f16(const void* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    }
    static void store_f16(void* p, F a) {
        _mm_storeu_si128(static_cast<__m128i*>(p),
                         _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    static F load_bf16(const void* p) {
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    static F load_f16_n(const void* p, int n) {
        alignas(16) uint16_t h[8] = {};
        std::memcpy(h, p, static_cast<size_t>(n) * 2);
        return load_f16(h);
    }
    static F load_bf16_n(const void* p, int n) {
        alignas(16) uint16_t h[8] = {};
        std::memcpy(h, p, static_cast<size_t>(n) * 2);
        return load_bf16(h);
    }
    static F half_lo_to_f32(I a) {
        const __m256i p = _mm256_packus_epi32(_mm256_and_si256(a, _mm256_set1_epi32(0xFFFF)),
                                              _mm256_setzero_si256());
        const __m256i q = _mm256_permute4x64_epi64(p, _MM_SHUFFLE(3, 1, 2, 0));
        return _mm256_cvtph_ps(_mm256_castsi256_si128(q));
    }
    static F half_hi_to_f32(I a) { return half_lo_to_f32(_mm256_srli_epi32(a, 16)); }

    // Stores the low 16 bits of each lane (kLanes u16).
    static void store_lo16(void* p, I a) {
        const __m256i q = _mm256_permute4x64_epi64(
            _mm256_packus_epi32(_mm256_and_si256(a, _mm256_set1_epi32(0xFFFF)),
                                _mm256_setzero_si256()),
            _MM_SHUFFLE(3, 1, 2, 0));
        _mm_storeu_si128(static_cast<__m128i*>(p), _mm256_castsi256_si128(q));
    }

    // ---- gathering rows for the packers ----
    static I gather32(const uint8_t* base, I idx) {
        return _mm256_i32gather_epi32(reinterpret_cast<const int*>(base), idx, 1);
    }
    // x[i] lane r = dword i of the 16 bytes at rows[r] + off.
    static void transpose16(const uint8_t* const* rows, uint64_t off, I x[4]) {
        I v[4];
        for (int j = 0; j < 4; ++j)
            v[j] = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(rows[j + 4] + off),
                                       reinterpret_cast<const __m128i*>(rows[j] + off));
        const I t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
        const I t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
        x[0] = _mm256_unpacklo_epi64(t0, t2);
        x[1] = _mm256_unpackhi_epi64(t0, t2);
        x[2] = _mm256_unpacklo_epi64(t1, t3);
        x[3] = _mm256_unpackhi_epi64(t1, t3);
    }

    // ---- activations ----
    static void store_i8(void* p, I a) {
        const __m256i w = _mm256_packs_epi32(a, a);
        const __m256i b = _mm256_packs_epi16(w, w);
        const __m128i r =
            _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
        _mm_storel_epi64(static_cast<__m128i*>(p), r);
    }
    static I low_byte_signed(I a) { return _mm256_srai_epi32(_mm256_slli_epi32(a, 24), 24); }

    // ---- attention ----
    static F fkeep(F v, int j0, int j1, float fill) {
        const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i in = _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(j1), idx),
                                            _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(j0 - 1)));
        return _mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(in));
    }
    static F load_i8(const void* p) {
        return _mm256_cvtepi32_ps(
            _mm256_cvtepi8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p))));
    }
    // Lane j = the sum of r[j]'s lanes: pairs of lanes, then pairs of
    // pairs, then the two 128-bit halves.
    static F sum_rows(const F r[8]) {
        __m256 b[4], c[2];
        for (int i = 0; i < 4; ++i)
            b[i] = _mm256_add_ps(_mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]),
                                 _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]));
        for (int i = 0; i < 2; ++i) {
            const __m256d x = _mm256_castps_pd(b[2 * i]), y = _mm256_castps_pd(b[2 * i + 1]);
            c[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)),
                                 _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
        }
        return _mm256_add_ps(_mm256_permute2f128_ps(c[0], c[1], 0x20),
                             _mm256_permute2f128_ps(c[0], c[1], 0x31));
    }
    static void transpose_square(F r[8]) {
        const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
        const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
        const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
        const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
        const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
        const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
        const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
        const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
        const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
        const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
        const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
        const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
        r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
        r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
        r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
        r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
        r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
        r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
        r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
        r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
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

using Avx2 = Avx2Ops<false>;
using AvxVnni = Avx2Ops<true>;

}  // namespace headroom::kernels::x86
