// Reading quantized weights as interleaved vectors; repacking them at load
// time; packing panels for a batch. Shared by the x86 tables (templates
// over the vector traits V, instantiated in each ISA's file).
//
// A row group is V::kLanes (L) consecutive weight rows. The readers turn one
// block of a row group into vectors where lane r holds 4 consecutive weights
// of row r, as u8: vector k = weights 4k..4k+3 of the block. One u8 x s8
// multiply-add of such a vector with 4 activations broadcast to every lane
// advances all rows' dot products at once, and each row's block sum lands in
// its own lane, where the block's scale is applied without any horizontal
// reduction.
//
// Readers take the block's fields from a source. RowsSrc reads the GGUF rows
// as they are: 16 bytes of every row transposed to 4 vectors of dwords, f16
// scales gathered; the hardware prefetchers follow these interleaved streams
// poorly and the transposes cost about as much as the arithmetic. PackedSrc
// reads a copy made at load time (repack) in which each block of a row group
// stores exactly those vectors, one after another (block_fields<T>, scales
// first; Q8_0 weights already as the multiply-adds take them, q8_ready;
// Q4_K / Q5_K scale bits rearranged to unpack cheaply, repack_scales; Q6_K
// weight bits likewise, ReadQ6K::repack_weights, Q3_K's weight and scale
// bits, ReadQ3K::repack_weights and repack_scales, and Q5_K's where the
// table multiplies any u8, ReadQ45K::repack_levels):
// a decode step then streams forward through one run of plain loads.
// The copy has the original's size, rounded up to whole row groups.
//
// A decode step consumes the vectors straight from the readers; a batch packs
// them once into a panel and reads it for every token. Both feed the same
// integer sums to the same f32 epilogue (gemm.h), so a row's result does not
// depend on the path.
//
// Panel layout per block (vectors of 4L bytes):
//   32-element types: w[8] (u8), d f32[L], then m f32[L] for Q4_1 / Q5_1
//   Q4_K / Q5_K:      w[64], sc i32[8][L], min pairs i16[4][L][2], d f32[L], dmin f32[L]
//   Q6_K, Q3_K:       w[64], sc i32[16][L], d f32[L]
//   Q2_K:             w[64], sc i32[16][L], min pairs i16[8][L][2], d f32[L], dmin f32[L]
//   IQ4_XS:           w[64], sc i32[8][L] (ls - 32), d f32[L]
// Weight levels: Q4_0 nibble (w + 8), Q5_0 5 bits (w + 16), Q8_0 w + 128 when
// V::kQ8Unsigned else w as s8, IQ4_NL, MXFP4 and IQ4_XS their table's level as
// Q8_0's w (the repacked copy keeps their nibbles; a byte shuffle looks the
// levels up), Q4_1/Q5_1/Q2_K/Q4_K/Q5_K the unsigned level, Q6_K w + 32, Q3_K w + 4.
// The activation side subtracts offset * sum(a).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "format/tensor-type.h"
#include "kernels/cpu/act-format.h"
#include "kernels/cpu/ref/quant.h"
#include "kernels/cpu/x86/tables.h"

namespace headroom::kernels::x86 {

template <class V>
struct RowGroup {
    const uint8_t* rows[V::kLanes];  // the last valid row repeats past n_valid
    typename V::I idx;               // rows[r] - rows[0], for gathers
    int n_valid = 0;
};

template <class V>
RowGroup<V> make_row_group(const uint8_t* first, uint64_t row_bytes, int n_valid) {
    RowGroup<V> g;
    g.n_valid = n_valid;
    alignas(64) int32_t off[V::kLanes];
    for (int r = 0; r < V::kLanes; ++r) {
        const int rr = r < n_valid ? r : n_valid - 1;
        g.rows[r] = first + static_cast<uint64_t>(rr) * row_bytes;
        off[r] = static_cast<int32_t>(static_cast<uint64_t>(rr) * row_bytes);
    }
    g.idx = V::load(off);
    return g;
}

// ---- the fields of a block, and the repacked layout ------------------------

constexpr uint64_t block_bytes_of(TensorType t) {
    switch (t) {
        case TensorType::Q4_0:
            return 18;
        case TensorType::Q4_1:
            return 20;
        case TensorType::Q5_0:
            return 22;
        case TensorType::Q5_1:
            return 24;
        case TensorType::Q8_0:
            return 34;
        case TensorType::IQ4_NL:
            return 18;
        case TensorType::MXFP4:
            return 17;
        case TensorType::Q4_K:
            return 144;
        case TensorType::Q5_K:
            return 176;
        case TensorType::Q6_K:
            return 210;
        case TensorType::Q3_K:
            return 110;
        case TensorType::Q2_K:
            return 84;
        case TensorType::IQ4_XS:
            return 136;
        default:
            return 0;
    }
}

enum class FieldKind : uint8_t { Dw4, Dword, Half, Byte };
struct Field {
    FieldKind kind;
    uint16_t off;  // in the GGUF block
};
constexpr uint64_t field_bytes(FieldKind k) {
    return k == FieldKind::Dw4 ? 16 : k == FieldKind::Dword ? 4 : k == FieldKind::Half ? 2 : 1;
}

// The fields the readers take from a block, in repacked order; their sizes add
// up to the block's size. The order is the one a decode step reads them in:
// scales first, then the weights as the multiply-adds consume them. A stream
// read strictly forward keeps the hardware prefetcher ahead; reading a
// block's scale after its weights (a step back every block) cost Q8_0 about
// a fifth of one core's read rate.
// kFiveVectors: the table's Q5_K copy holds the levels sub-block by
// sub-block (ReadQ45K::repack_levels), in the place of qh and qs, so each
// sub-block's bits are read in one forward run.
template <TensorType T, bool kFiveVectors = false>
constexpr auto block_fields() {
    using K = FieldKind;
    if constexpr (T == TensorType::Q4_0 || T == TensorType::IQ4_NL)
        return std::array<Field, 2>{{{K::Half, 0}, {K::Dw4, 2}}};
    if constexpr (T == TensorType::MXFP4) return std::array<Field, 2>{{{K::Byte, 0}, {K::Dw4, 1}}};
    if constexpr (T == TensorType::Q4_1)
        return std::array<Field, 3>{{{K::Half, 0}, {K::Half, 2}, {K::Dw4, 4}}};
    if constexpr (T == TensorType::Q5_0)
        return std::array<Field, 3>{{{K::Half, 0}, {K::Dword, 2}, {K::Dw4, 6}}};
    if constexpr (T == TensorType::Q5_1)
        return std::array<Field, 4>{{{K::Half, 0}, {K::Half, 2}, {K::Dword, 4}, {K::Dw4, 8}}};
    if constexpr (T == TensorType::Q8_0)
        return std::array<Field, 3>{{{K::Half, 0}, {K::Dw4, 2}, {K::Dw4, 18}}};
    if constexpr (T == TensorType::Q4_K || T == TensorType::Q5_K) {
        // d, dmin, scales, then (Q5_K) the high bits, then the nibbles. With
        // kFiveVectors, Q5_K's 160 bytes of qh and qs are one run of the
        // same size, re-encoded (ReadQ45K::repack_levels).
        constexpr bool five = T == TensorType::Q5_K;
        std::array<Field, five ? 15 : 13> f{};
        int i = 0;
        f[i++] = {K::Half, 0};
        f[i++] = {K::Half, 2};
        for (int k = 0; k < 3; ++k) f[i++] = {K::Dword, static_cast<uint16_t>(4 + 4 * k)};
        if (five && !kFiveVectors) {
            f[i++] = {K::Dw4, 16};
            f[i++] = {K::Dw4, 32};
        }
        for (int k = 0; k < (five && kFiveVectors ? 10 : 8); ++k)
            f[i++] = {K::Dw4, static_cast<uint16_t>((five && !kFiveVectors ? 48 : 16) + 16 * k)};
        return f;
    }
    if constexpr (T == TensorType::Q2_K) {
        // The scales and mins, d, dmin, then the bits.
        std::array<Field, 10> f{};
        for (int k = 0; k < 4; ++k) f[k] = {K::Dword, static_cast<uint16_t>(4 * k)};
        f[4] = {K::Half, 80};
        f[5] = {K::Half, 82};
        for (int k = 0; k < 4; ++k) f[6 + k] = {K::Dw4, static_cast<uint16_t>(16 + 16 * k)};
        return f;
    }
    if constexpr (T == TensorType::Q3_K) {
        // The scales and d, then the 96 bytes of hmask and qs, which the
        // copy holds re-encoded two sub-blocks at a time
        // (ReadQ3K::repack_weights).
        std::array<Field, 10> f{};
        for (int k = 0; k < 3; ++k) f[k] = {K::Dword, static_cast<uint16_t>(96 + 4 * k)};
        f[3] = {K::Half, 108};
        for (int k = 0; k < 6; ++k) f[4 + k] = {K::Dw4, static_cast<uint16_t>(16 * k)};
        return f;
    }
    if constexpr (T == TensorType::IQ4_XS) {
        // d with scales_h, scales_l, then the nibbles of each sub-block.
        std::array<Field, 10> f{};
        f[0] = {K::Dword, 0};
        f[1] = {K::Dword, 4};
        for (int s = 0; s < 8; ++s) f[2 + s] = {K::Dw4, static_cast<uint16_t>(8 + 16 * s)};
        return f;
    }
    if constexpr (T == TensorType::Q6_K) {
        // The scales, each one byte per row, and d, then the 192 bytes of ql
        // and qh, which the copy holds re-encoded sub-block by sub-block
        // (ReadQ6K::repack_weights).
        std::array<Field, 29> f{};
        int i = 0;
        for (int k = 0; k < 16; ++k) f[i++] = {K::Byte, static_cast<uint16_t>(192 + k)};
        f[i++] = {K::Half, 208};
        for (int k = 0; k < 12; ++k) f[i++] = {K::Dw4, static_cast<uint16_t>(16 * k)};
        return f;
    }
}

// Offset of each field in a repacked block of kLanes rows, indexed by the
// field's offset in the GGUF block. A table, not a search over the fields:
// the readers index it with constants, so each load's address folds to
// base + b * block + constant. (GCC did not fold such a search for the K
// types: their matrix x vector ran at three quarters of the speed from cache.)
template <TensorType T, int kLanes, bool kFiveVectors>
inline constexpr auto kPackedOffsets = [] {
    std::array<uint32_t, block_bytes_of(T)> at{};
    std::array<bool, block_bytes_of(T)> taken{};
    uint32_t pos = 0;
    for (const Field& f : block_fields<T, kFiveVectors>()) {
        if (taken[f.off]) throw "two fields at one offset";  // stops compilation
        taken[f.off] = true;
        at[f.off] = pos;
        pos += static_cast<uint32_t>(field_bytes(f.kind)) * kLanes;
    }
    return at;
}();

// ---- sources --------------------------------------------------------------

// The GGUF rows of a row group.
template <class V, TensorType T>
struct RowsSrc {
    using I = typename V::I;
    using F = typename V::F;
    static constexpr uint64_t kBlockBytes = block_bytes_of(T);
    static constexpr bool kRepacked = false;  // fields as GGUF stores them
    const RowGroup<V>& g;

    HR_KERNEL_INLINE void dw4(int64_t b, int off, I x[4]) const {
        V::transpose16(g.rows, static_cast<uint64_t>(b) * kBlockBytes + off, x);
    }
    HR_KERNEL_INLINE I dword(int64_t b, int off) const {
        return V::gather32(g.rows[0] + static_cast<uint64_t>(b) * kBlockBytes + off, g.idx);
    }
    // The f16 at `off` of every row, in the low 16 bits of each lane (reads
    // stay inside the block).
    HR_KERNEL_INLINE I half_bits(int64_t b, int off) const {
        if (static_cast<uint64_t>(off) + 4 <= kBlockBytes) return dword(b, off);
        return V::template srl<16>(dword(b, off - 2));
    }
    HR_KERNEL_INLINE F half(int64_t b, int off) const {
        return V::half_lo_to_f32(half_bits(b, off));
    }
    // The byte at `off` of every row, zero-extended (MXFP4's exponent: its
    // 17-byte block holds the dword read).
    HR_KERNEL_INLINE I byte(int64_t b, int off) const {
        return V::and_(dword(b, off), V::set1(0xFF));
    }
};

// A row group of the repacked copy.
template <class V, TensorType T>
struct PackedSrc {
    using I = typename V::I;
    using F = typename V::F;
    static constexpr uint64_t kGroupBlockBytes = block_bytes_of(T) * V::kLanes;
    // Fields as repack_group wrote them: Q8_0 weights as the multiply-adds
    // take them (q8_ready), so a decode step feeds its loads straight to
    // them; Q4_K / Q5_K scales re-encoded (ReadQ45K::repack_scales).
    static constexpr bool kRepacked = true;
    const uint8_t* base;  // the group's first block
    uint64_t ahead = 0;   // a decode step asks for the bytes this far ahead (gemm.h)

    HR_KERNEL_INLINE const uint8_t* at(int64_t b, int off) const {
        return base + static_cast<uint64_t>(b) * kGroupBlockBytes +
               kPackedOffsets<T, V::kLanes, V::kQ5KFiveVectors>[static_cast<size_t>(off)];
    }
    HR_KERNEL_INLINE void dw4(int64_t b, int off, I x[4]) const {
        const uint8_t* p = at(b, off);
        for (int j = 0; j < 4; ++j) x[j] = V::load_once(p + j * V::kBytes);
    }
    HR_KERNEL_INLINE I dword(int64_t b, int off) const { return V::load(at(b, off)); }
    HR_KERNEL_INLINE F half(int64_t b, int off) const { return V::load_f16(at(b, off)); }
    HR_KERNEL_INLINE I byte(int64_t b, int off) const { return V::load_u8(at(b, off)); }
};

// Q8_0 weights (s8) as the multiply-adds take them: w + 128 as u8 where the
// table multiplies u8 weights (V::kQ8Unsigned), else w as it is.
template <class V>
HR_KERNEL_INLINE typename V::I q8_ready(typename V::I w) {
    if constexpr (V::kQ8Unsigned)
        return V::xor_(w, V::set1_8(static_cast<int8_t>(0x80)));
    else
        return w;
}

template <class V, bool kFive>
struct ReadQ45K;
template <class V>
struct ReadQ6K;
template <class V>
struct ReadQ3K;

// Writes the repacked copy of one row group: every field of every block, as
// PackedSrc reads it.
template <class V, TensorType T>
void repack_group(const RowGroup<V>& g, int64_t n_blocks, uint8_t* dst) {
    const RowsSrc<V, T> src{g};
    for (int64_t b = 0; b < n_blocks; ++b) {
        for (const Field& f : block_fields<T, V::kQ5KFiveVectors>()) {
            if constexpr (T == TensorType::Q6_K || T == TensorType::Q3_K ||
                          (T == TensorType::Q5_K && V::kQ5KFiveVectors)) {
                // The weights (Q6_K's offsets 0..191, Q3_K's 0..95, Q5_K's
                // 16..175, stored one after another) are re-encoded together.
                if (f.kind == FieldKind::Dw4) {
                    if constexpr (T == TensorType::Q6_K) {
                        if (f.off == 0) ReadQ6K<V>::repack_weights(g, b, dst);
                    } else if constexpr (T == TensorType::Q3_K) {
                        if (f.off == 0) ReadQ3K<V>::repack_weights(g, b, dst);
                    } else {
                        if (f.off == 16) ReadQ45K<V, true>::repack_levels(g, b, dst);
                    }
                    dst += field_bytes(f.kind) * V::kLanes;
                    continue;
                }
            }
            if (f.kind == FieldKind::Dw4) {
                typename V::I x[4];
                src.dw4(b, f.off, x);
                for (int j = 0; j < 4; ++j) {
                    if constexpr (T == TensorType::Q8_0) x[j] = q8_ready<V>(x[j]);
                    V::store(dst + j * V::kBytes, x[j]);
                }
            } else if (f.kind == FieldKind::Dword) {
                if constexpr (T == TensorType::Q4_K || T == TensorType::Q5_K) {
                    // The three scale dwords (offsets 4, 8, 12, stored one
                    // after another) are re-encoded together.
                    if (f.off == 4) ReadQ45K<V, T == TensorType::Q5_K>::repack_scales(src, b, dst);
                } else if constexpr (T == TensorType::Q3_K) {
                    // Likewise Q3_K's (offsets 96, 100, 104).
                    if (f.off == 96) ReadQ3K<V>::repack_scales(g, b, dst);
                } else {
                    V::store(dst, src.dword(b, f.off));
                }
            } else if (f.kind == FieldKind::Byte) {
                // One byte of every row, read as a byte: a dword read (RowsSrc::byte)
                // at one of Q6_K's last scales would leave the block.
                for (int r = 0; r < V::kLanes; ++r)
                    dst[r] = g.rows[r][static_cast<uint64_t>(b) * block_bytes_of(T) + f.off];
            } else {
                V::store_lo16(dst, src.half_bits(b, f.off));
            }
            dst += field_bytes(f.kind) * V::kLanes;
        }
    }
}

// ---- readers ----------------------------------------------------------------

// Spreads bits 0..3 of each lane to bit 4 of bytes 0..3.
template <class V>
HR_KERNEL_INLINE typename V::I spread_nibble_to_bit4(typename V::I t) {
    // t * (2^4 + 2^11 + 2^18 + 2^25) puts bit k at 8k + 4 (and nowhere it collides).
    return V::and_(V::mullo(t, V::set1(0x02040810)), V::set1(0x10101010));
}

// MXFP4's half scale 2^(e - 128) (ref::mxfp4_half_scale) from its exponent
// byte e, as f32 bits: (e - 1) << 23 for e >= 2, the subnormals 2^-128 and
// 2^-127 (bits 21 and 22) for e = 0 and 1. Shift counts past 31 give 0, which
// selects between the two without a compare.
template <class V>
HR_KERNEL_INLINE typename V::F mxfp4_half_scale(typename V::I e) {
    using I = typename V::I;
    const I one = V::set1(1);
    const I normal = V::template sll<23>(V::sub(e, one));
    const I keep = V::srlv(V::set1(-1), V::template sll<5>(V::srlv(V::set1(3), e)));  // e >= 2
    const I subnormal = V::srlv(V::set1(1 << 22), V::sub(one, e));                    // e < 2
    return V::as_f(V::or_(V::and_(normal, keep), subnormal));
}

// Q4_0 {f16 d; u8 qs[16]}, Q4_1 {f16 d, m; u8 qs[16]}, Q5_0 {f16 d; u32 qh;
// u8 qs[16]}, Q5_1 {f16 d, m; u32 qh; u8 qs[16]}: weights 0..15 are the low
// nibbles, 16..31 the high ones; Q5 adds bit j of qh as 16. Q8_0 {f16 d; i8 qs[32]}.
// IQ4_NL {f16 d; u8 qs[16]} and MXFP4 {u8 e; u8 qs[16]}: nibbles as Q4_0's,
// each an index into the type's table of levels.
template <class V, TensorType T>
struct Read32 {
    using I = typename V::I;
    using F = typename V::F;
    static constexpr bool kMin = T == TensorType::Q4_1 || T == TensorType::Q5_1;
    static constexpr bool kFive = T == TensorType::Q5_0 || T == TensorType::Q5_1;
    static constexpr bool kTable = T == TensorType::IQ4_NL || T == TensorType::MXFP4;
    static constexpr int kQs = T == TensorType::MXFP4 ? 1 : (kMin ? 4 : 2) + (kFive ? 4 : 0);

    // The 4-bit types: the nibble bytes (qs), unsplit, and the scale and min.
    template <class Src>
    HR_KERNEL_INLINE static void nibbles(const Src& src, int64_t b, I x[4], F& d, F& m) {
        src.dw4(b, kQs, x);
        if constexpr (T == TensorType::MXFP4)
            d = mxfp4_half_scale<V>(src.byte(b, 0));
        else
            d = src.half(b, 0);
        if constexpr (kMin) m = src.half(b, 2);
    }

    template <class Src>
    HR_KERNEL_INLINE static void read(const Src& src, int64_t b, I w[8], F& d, F& m) {
        if constexpr (T == TensorType::Q8_0) {
            src.dw4(b, 2, w);
            src.dw4(b, 18, w + 4);
            if constexpr (!Src::kRepacked)
                for (int j = 0; j < 8; ++j) w[j] = q8_ready<V>(w[j]);
            d = src.half(b, 0);
            return;
        }
        const I low4 = V::set1_8(0x0F);
        I x[4];
        nibbles(src, b, x, d, m);
        for (int j = 0; j < 4; ++j) {
            w[j] = V::and_(x[j], low4);
            w[j + 4] = V::and_(V::template srl16<4>(x[j]), low4);
        }
        if constexpr (kTable) {
            // Each index to its level, as Q8_0's weights are taken.
            const I table = q8_ready<V>(
                V::table16(T == TensorType::MXFP4 ? ref::kMxfp4Levels : ref::kIq4Levels));
            for (int j = 0; j < 8; ++j) w[j] = V::shuffle8(table, w[j]);
        }
        if constexpr (kFive) {
            const I qh = src.dword(b, kMin ? 4 : 2);
            const I nib = V::set1(0xF);
            for (int j = 0; j < 4; ++j) {
                w[j] = V::or_(w[j],
                              spread_nibble_to_bit4<V>(V::and_(V::srlv(qh, V::set1(4 * j)), nib)));
                w[j + 4] = V::or_(w[j + 4], spread_nibble_to_bit4<V>(
                                                V::and_(V::srlv(qh, V::set1(16 + 4 * j)), nib)));
            }
        }
    }
};

// Q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]}, Q5_K {...; u8 qh[32]; u8 qs[128]}:
// sub-block s (32 weights) takes the low (s even) or high nibbles of qs bytes
// 32 (s / 2) .. +31, plus for Q5_K bit s of qh[l] as 16; 6-bit scales and mins.
template <class V, bool kFive>
struct ReadQ45K {
    using I = typename V::I;
    using F = typename V::F;

    // The GGUF scale bytes, dwords A = [0..3], B = [4..7], C = [8..11] of
    // each lane, as 6-bit scales sc[s] and mins mn[s].
    HR_KERNEL_INLINE static void gguf_scales(I A, I B, I C, I sc[8], I mn[8]) {
        const I m6 = V::set1(63), m4 = V::set1(0xF), m2 = V::set1(3);
        for (int s = 0; s < 4; ++s) {
            const I sh = V::set1(8 * s), sh4 = V::set1(8 * s + 4), sh6 = V::set1(8 * s + 6);
            sc[s] = V::and_(V::srlv(A, sh), m6);
            mn[s] = V::and_(V::srlv(B, sh), m6);
            sc[s + 4] = V::or_(V::and_(V::srlv(C, sh), m4),
                               V::template sll<4>(V::and_(V::srlv(A, sh6), m2)));
            mn[s + 4] = V::or_(V::and_(V::srlv(C, sh4), m4),
                               V::template sll<4>(V::and_(V::srlv(B, sh6), m2)));
        }
    }

    // The repacked copy holds the same 96 bits per row as dwords
    //   P = m0 | m2 << 6 | (sc4 & 15) << 12 | m1 << 16 | m3 << 22 | (sc5 & 15) << 28
    //   Q = m4 | m6 << 6 | (sc6 & 15) << 12 | m5 << 16 | m7 << 22 | (sc7 & 15) << 28
    //   R = sc0 | sc1 << 8 | sc2 << 16 | sc3 << 24, and sc4..sc7 >> 4 in bits
    //       6-7 of bytes 0..3
    // so that each min pair is one mask of P or Q and every scale a shift and
    // a mask or two: 31 vector operations a superblock instead of 72, which
    // mattered for Q4_K's decode once two cores read faster than its
    // arithmetic kept up.
    template <class Src>
    HR_KERNEL_INLINE static void repack_scales(const Src& src, int64_t b, uint8_t* dst) {
        I sc[8], mn[8];
        gguf_scales(src.dword(b, 4), src.dword(b, 8), src.dword(b, 12), sc, mn);
        const I lo4 = V::set1(0xF);
        const auto low = [&](int s) { return V::and_(sc[s], lo4); };
        const auto high = [&](int s) { return V::template srl<4>(sc[s]); };
        const I P =
            V::or_(V::or_(V::or_(mn[0], V::template sll<6>(mn[2])), V::template sll<12>(low(4))),
                   V::or_(V::or_(V::template sll<16>(mn[1]), V::template sll<22>(mn[3])),
                          V::template sll<28>(low(5))));
        const I Q =
            V::or_(V::or_(V::or_(mn[4], V::template sll<6>(mn[6])), V::template sll<12>(low(6))),
                   V::or_(V::or_(V::template sll<16>(mn[5]), V::template sll<22>(mn[7])),
                          V::template sll<28>(low(7))));
        const I R =
            V::or_(V::or_(V::or_(sc[0], V::template sll<6>(high(4))),
                          V::or_(V::template sll<8>(sc[1]), V::template sll<14>(high(5)))),
                   V::or_(V::or_(V::template sll<16>(sc[2]), V::template sll<22>(high(6))),
                          V::or_(V::template sll<24>(sc[3]), V::template sll<30>(high(7)))));
        V::store(dst, P);
        V::store(dst + 4 * V::kLanes, Q);
        V::store(dst + 8 * V::kLanes, R);
    }

    // sc[s] and the mins as pairs (m[2j] | m[2j + 1] << 16), both per lane.
    template <class Src>
    HR_KERNEL_INLINE static void scales(const Src& src, int64_t b, I sc[8], I mp[4], F& d,
                                        F& dmin) {
        if constexpr (Src::kRepacked) {
            const I P = src.dword(b, 4), Q = src.dword(b, 8), R = src.dword(b, 12);
            const I pair = V::set1(0x003F003F), m6 = V::set1(63), lo4 = V::set1(0xF),
                    hi2 = V::set1(0x30);
            mp[0] = V::and_(P, pair);
            mp[1] = V::and_(V::template srl<6>(P), pair);
            mp[2] = V::and_(Q, pair);
            mp[3] = V::and_(V::template srl<6>(Q), pair);
            sc[0] = V::and_(R, m6);
            sc[1] = V::and_(V::template srl<8>(R), m6);
            sc[2] = V::and_(V::template srl<16>(R), m6);
            sc[3] = V::and_(V::template srl<24>(R), m6);
            sc[4] =
                V::or_(V::and_(V::template srl<12>(P), lo4), V::and_(V::template srl<2>(R), hi2));
            sc[5] = V::or_(V::template srl<28>(P), V::and_(V::template srl<10>(R), hi2));
            sc[6] =
                V::or_(V::and_(V::template srl<12>(Q), lo4), V::and_(V::template srl<18>(R), hi2));
            sc[7] = V::or_(V::template srl<28>(Q), V::and_(V::template srl<26>(R), hi2));
        } else {
            I mn[8];
            gguf_scales(src.dword(b, 4), src.dword(b, 8), src.dword(b, 12), sc, mn);
            for (int j = 0; j < 4; ++j)
                mp[j] = V::or_(mn[2 * j], V::template sll<16>(mn[2 * j + 1]));
        }
        d = src.half(b, 0);
        dmin = src.half(b, 2);
    }

    // Q5_K's levels in the copy of a table with kQ5KFiveVectors. The 32
    // levels of sub-block s (vectors 0..7 of 4 each) are 5 vectors P_4,
    // P_0, ..., P_3 (in that order, as sub_x8 reads them), byte i of lane r
    // (row r) holding, with L_k the level of byte i of vector k,
    //   P_m = L_m | (L_{m+4} >> 2) << 5                  (m < 4)
    //   P_4 = sum_m (L_{m+4} & 3) << 2m
    // so that vector m is P_m & 31 and 8 x vector m + 4 is the top 3 bits
    // of P_m and 2 bits of P_4 shifted in beside them (sub_x8): 16 vector
    // operations a sub-block where the high bits kept apart as byte masks
    // took 28, a third more matrix x vector throughput from cache on 2 Zen 4
    // cores. 8 x 31 = 248 still fits a u8. Same size: the 160 bytes of qh and
    // qs, in their place.
    static void repack_levels(const RowGroup<V>& g, int64_t b, uint8_t* dst) {
        static_assert(kFive);
        for (int r = 0; r < V::kLanes; ++r) {
            const uint8_t* blk =
                g.rows[r] + static_cast<uint64_t>(b) * block_bytes_of(TensorType::Q5_K);
            for (int s = 0; s < 8; ++s) {
                // level(e), e < 32: the low (s even) or high nibble of qs
                // byte 32 (s / 2) + e, plus bit s of qh[e] as 16.
                const auto level = [&](int e) {
                    const int nib = blk[48 + 32 * (s / 2) + e] >> (4 * (s % 2)) & 0xF;
                    return nib | (blk[16 + e] >> s & 1) << 4;
                };
                uint8_t* out = dst + 5 * s * V::kBytes + 4 * r;
                for (int i = 0; i < 4; ++i) {
                    int p4 = 0;
                    for (int m = 0; m < 4; ++m) {
                        const int hi = level(4 * (m + 4) + i);
                        out[(1 + m) * V::kBytes + i] =
                            static_cast<uint8_t>(level(4 * m + i) | (hi >> 2) << 5);
                        p4 |= (hi & 3) << (2 * m);
                    }
                    out[i] = static_cast<uint8_t>(p4);
                }
            }
        }
    }

    // Sub-block s of that copy: w[0..4) the levels of vectors 0..3, w[4..8)
    // 8 x the levels of vectors 4..7.
    HR_KERNEL_INLINE static void sub_x8(const PackedSrc<V, TensorType::Q5_K>& src, int64_t b, int s,
                                        I w[8]) {
        const uint8_t* p = src.at(b, 16) + 5 * s * V::kBytes;
        const I p4 = V::load_once(p);
        const I low5 = V::set1_8(0x1F), top3 = V::set1_8(static_cast<int8_t>(0xE0)),
                bits34 = V::set1_8(0x18);
        // Bits 2m, 2m + 1 of P_4 to bits 3, 4 (each from its own byte).
        const I q[4] = {V::template sll<3>(p4), V::template sll<1>(p4), V::template srl<1>(p4),
                        V::template srl<3>(p4)};
        for (int m = 0; m < 4; ++m) {
            const I x = V::load_once(p + (1 + m) * V::kBytes);
            w[m] = V::and_(x, low5);
            w[m + 4] = V::or_(V::and_(x, top3), V::and_(q[m], bits34));
        }
    }

    // Sub-blocks 2c (w[0..8)) and 2c + 1 (w[8..16)).
    template <class Src>
    HR_KERNEL_INLINE static void pair(const Src& src, int64_t b, int c, I w[16]) {
        const int qs = (kFive ? 48 : 16) + 32 * c;
        const I low4 = V::set1_8(0x0F);
        if constexpr (kFive && Src::kRepacked && V::kQ5KFiveVectors) {
            // The levels, the scaled ones divided by 8 (each byte's top 5 bits).
            const I low5 = V::set1_8(0x1F);
            for (int h = 0; h < 2; ++h) {
                sub_x8(src, b, 2 * c + h, w + 8 * h);
                for (int k = 4; k < 8; ++k)
                    w[8 * h + k] = V::and_(V::template srl<3>(w[8 * h + k]), low5);
            }
            return;
        }
        I x[8], h[8];
        if constexpr (kFive) {  // the high bits sit before the nibbles
            src.dw4(b, 16, h);
            src.dw4(b, 32, h + 4);
        }
        src.dw4(b, qs, x);
        src.dw4(b, qs + 16, x + 4);
        for (int k = 0; k < 8; ++k) {
            w[k] = V::and_(x[k], low4);
            w[k + 8] = V::and_(V::template srl16<4>(x[k]), low4);
        }
        if constexpr (kFive) {
            const I bit0 = V::set1_8(0x01), bit1 = V::set1_8(0x02);
            for (int k = 0; k < 8; ++k) {
                // bits 2c (low sub-block) and 2c + 1 (high) of each qh byte, to bit 4
                const I hb = V::srlv(h[k], V::set1(2 * c));
                w[k] = V::or_(w[k], V::template sll<4>(V::and_(hb, bit0)));
                w[k + 8] = V::or_(w[k + 8], V::template sll<3>(V::and_(hb, bit1)));
            }
        }
    }
};

// Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: in half h, group q of 32
// weights takes the low (q = 0, 1) or high (q = 2, 3) nibbles of
// ql[64h + 32 (q % 2) + l] and bits 2q, 2q + 1 of qh[32h + l] as bits 4, 5.
// 16 weights share a scale.
//
// The repacked copy holds the same 6 bits a weight in another order, so that
// a sub-block's 4 vectors take 3 loads and 11 operations instead of 17:
// sub-block s (elements 16s .. 16s + 15) is 3 vectors of dwords A, B, C
// whose byte i holds the levels of elements 16s + i, 16s + 4 + i and
// 16s + 8 + i in bits 0..5, and in bits 6..7 bits 0..1, 2..3 and 4..5 of
// the level of element 16s + 12 + i.
template <class V>
struct ReadQ6K {
    using I = typename V::I;
    using F = typename V::F;

    // Scale s (int8) of every row of the repacked copy: one sign-extending
    // load, where the GGUF order takes two shifts per scale (3-7% more
    // matrix x vector throughput from cache on Zen 4, AVX-512 and AVX2, than
    // the GGUF order's 16 scales kept on the stack).
    HR_KERNEL_INLINE static I scale(const PackedSrc<V, TensorType::Q6_K>& src, int64_t b, int s) {
        return V::load_s8(src.at(b, 192 + s));
    }

    template <class Src>
    HR_KERNEL_INLINE static void scales(const Src& src, int64_t b, I sc[16], F& d) {
        d = src.half(b, 208);
        if constexpr (Src::kRepacked) {
            for (int s = 0; s < 16; ++s) sc[s] = scale(src, b, s);
        } else {
            for (int q = 0; q < 4; ++q) {
                const I s4 = src.dword(b, 192 + 4 * q);
                sc[4 * q + 0] = V::template sra<24>(V::template sll<24>(s4));
                sc[4 * q + 1] = V::template sra<24>(V::template sll<16>(s4));
                sc[4 * q + 2] = V::template sra<24>(V::template sll<8>(s4));
                sc[4 * q + 3] = V::template sra<24>(s4);
            }
        }
    }

    // Writes block b of every row of g in the repacked order (3 × 16
    // vectors), at dst.
    static void repack_weights(const RowGroup<V>& g, int64_t b, uint8_t* dst) {
        for (int r = 0; r < V::kLanes; ++r) {
            const uint8_t* blk = g.rows[r] + static_cast<uint64_t>(b) * 210;
            uint8_t level[256];  // 0..63
            for (int e = 0; e < 256; ++e) {
                const int h = e / 128, q = e % 128 / 32, l = e % 32;
                const uint8_t ql = blk[64 * h + 32 * (q % 2) + l];
                const int low = q < 2 ? ql & 0xF : ql >> 4;
                const int high = (blk[128 + 32 * h + l] >> (2 * q)) & 3;
                level[e] = static_cast<uint8_t>(low | high << 4);
            }
            for (int s = 0; s < 16; ++s) {
                uint8_t* out = dst + 3 * s * V::kBytes + 4 * r;
                for (int i = 0; i < 4; ++i) {
                    const int top = level[16 * s + 12 + i];
                    out[i] = static_cast<uint8_t>(level[16 * s + i] | (top & 3) << 6);
                    out[V::kBytes + i] =
                        static_cast<uint8_t>(level[16 * s + 4 + i] | (top >> 2 & 3) << 6);
                    out[2 * V::kBytes + i] =
                        static_cast<uint8_t>(level[16 * s + 8 + i] | (top >> 4) << 6);
                }
            }
        }
    }

    // Sub-block s's 4 vectors from the repacked copy.
    HR_KERNEL_INLINE static void sub(const PackedSrc<V, TensorType::Q6_K>& src, int64_t b, int s,
                                     I w[4]) {
        const uint8_t* p = src.at(b, 0) + 3 * s * V::kBytes;
        const I a = V::load_once(p), bb = V::load_once(p + V::kBytes);
        const I c = V::load_once(p + 2 * V::kBytes);
        const I m6 = V::set1_8(0x3F);
        w[0] = V::and_(a, m6);
        w[1] = V::and_(bb, m6);
        w[2] = V::and_(c, m6);
        w[3] = V::or_(V::or_(V::and_(V::template srl16<6>(a), V::set1_8(0x03)),
                             V::and_(V::template srl16<4>(bb), V::set1_8(0x0C))),
                      V::and_(V::template srl16<2>(c), V::set1_8(0x30)));
    }

    // From the GGUF rows: half h, weights l in [16 part, 16 part + 16) of
    // each group q: sub-block 8h + 2q + part, its 4 vectors at w[4q .. 4q + 4).
    template <class Src>
    HR_KERNEL_INLINE static void quarter(const Src& src, int64_t b, int h, int part, I w[16]) {
        I la[4], lb[4], qh[4];
        src.dw4(b, 64 * h + 16 * part, la);
        src.dw4(b, 64 * h + 32 + 16 * part, lb);
        src.dw4(b, 128 + 32 * h + 16 * part, qh);
        const I low4 = V::set1_8(0x0F), m30 = V::set1_8(0x30);
        for (int k = 0; k < 4; ++k) {
            w[k] = V::or_(V::and_(la[k], low4), V::and_(V::template sll<4>(qh[k]), m30));
            w[4 + k] = V::or_(V::and_(lb[k], low4), V::and_(V::template sll<2>(qh[k]), m30));
            w[8 + k] = V::or_(V::and_(V::template srl16<4>(la[k]), low4), V::and_(qh[k], m30));
            w[12 + k] = V::or_(V::and_(V::template srl16<4>(lb[k]), low4),
                               V::and_(V::template srl<2>(qh[k]), m30));
        }
    }
};

// Q3_K {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}: element e = 128 n +
// 32 j + l (n < 2, j < 4, l < 32) is bits 2j, 2j + 1 of qs[32 n + l] with bit
// 4n + j of hmask[l] as 4 (a level 0..7, offset 4); its sub-block of 16,
// 8n + 2j + l / 16, has a 6-bit scale, stored + 32: the low nibble in byte
// s % 8 (the high nibble for s >= 8), the high 2 bits at 2 (s / 4) of byte
// 8 + s % 4.
template <class V>
struct ReadQ3K {
    using I = typename V::I;
    using F = typename V::F;

    // The repacked copy holds the 16 scales of a row, as s - 32 in 6-bit
    // two's complement, in three dwords: scales 5f .. 5f + 4 at bits 0, 6,
    // .., 24 of dword f, and scale 15's bits 4-5, 2-3 and 0-1 at bits 30-31
    // of dwords 0, 1 and 2. Two shifts give each of the first 15 (the GGUF
    // bits take seven operations a scale).
    // Writes block b's three dwords of every row of g in this layout (3
    // vectors) at dst.
    static void repack_scales(const RowGroup<V>& g, int64_t b, uint8_t* dst) {
        for (int r = 0; r < V::kLanes; ++r) {
            const uint8_t* sb = g.rows[r] + static_cast<uint64_t>(b) * 110 + 96;
            uint32_t f[3] = {0, 0, 0};
            for (int s = 0; s < 16; ++s) {
                const int lo = sb[s % 8] >> (s < 8 ? 0 : 4) & 0xF;
                const int hi = sb[8 + s % 4] >> (2 * (s / 4)) & 3;
                const auto v = static_cast<uint32_t>((lo | hi << 4) - 32) & 63;
                if (s < 15)
                    f[s / 5] |= v << (6 * (s % 5));
                else
                    for (int k = 0; k < 3; ++k) f[k] |= (v >> (4 - 2 * k) & 3) << 30;
            }
            for (int k = 0; k < 3; ++k) std::memcpy(dst + k * V::kBytes + 4 * r, &f[k], 4);
        }
    }

    // Field k (bits 6k .. 6k + 5) of every lane, sign-extended.
    template <int k>
    HR_KERNEL_INLINE static I field6(I x) {
        return V::template sra<26>(V::template sll<26 - 6 * k>(x));
    }

    // sc[s] = the scale - 32, per lane.
    template <class Src>
    HR_KERNEL_INLINE static void scales(const Src& src, int64_t b, I sc[16], F& d) {
        d = src.half(b, 108);
        if constexpr (Src::kRepacked) {
            const uint8_t* at = src.at(b, 96);
            const I f[3] = {V::load(at), V::load(at + V::kBytes), V::load(at + 2 * V::kBytes)};
            for (int k = 0; k < 3; ++k) {
                sc[5 * k] = field6<0>(f[k]);
                sc[5 * k + 1] = field6<1>(f[k]);
                sc[5 * k + 2] = field6<2>(f[k]);
                sc[5 * k + 3] = field6<3>(f[k]);
                sc[5 * k + 4] = field6<4>(f[k]);
            }
            const I top2 = V::set1(static_cast<int32_t>(0xC0000000u));
            sc[15] = V::template sra<26>(
                V::or_(V::or_(V::and_(f[0], top2), V::template srl<2>(V::and_(f[1], top2))),
                       V::template srl<4>(f[2])));
            return;
        }
        const I A = src.dword(b, 96), B = src.dword(b, 100), C = src.dword(b, 104);
        const I m4 = V::set1(0xF), m2 = V::set1(3), bias = V::set1(32);
        for (int s = 0; s < 16; ++s) {
            const I lo_src = (s % 8) < 4 ? A : B;
            const int lo_shift = 8 * (s % 4) + (s < 8 ? 0 : 4);
            const I lo = V::and_(V::srlv(lo_src, V::set1(lo_shift)), m4);
            const I hi = V::and_(V::srlv(C, V::set1(8 * (s % 4) + 2 * (s / 4))), m2);
            sc[s] = V::sub(V::or_(lo, V::template sll<4>(hi)), bias);
        }
    }

    // The hmask bytes (h[0..4): l < 16, h[4..8): l >= 16), and half n's qs bytes.
    template <class Src>
    HR_KERNEL_INLINE static void high_bits(const Src& src, int64_t b, I h[8]) {
        src.dw4(b, 0, h);
        src.dw4(b, 16, h + 4);
    }
    template <class Src>
    HR_KERNEL_INLINE static void low_bits(const Src& src, int64_t b, int n, I q[8]) {
        src.dw4(b, 32 + 32 * n, q);
        src.dw4(b, 48 + 32 * n, q + 4);
    }

    // The levels of sub-blocks 8n + 2j (w[0..4)) and 8n + 2j + 1 (w[4..8)).
    HR_KERNEL_INLINE static void levels(const I q[8], const I h[8], int n, int j, I w[8]) {
        const I m3 = V::set1_8(3), m1 = V::set1_8(1);
        const I qshift = V::set1(2 * j), hshift = V::set1(4 * n + j);
        for (int k = 0; k < 8; ++k)
            w[k] = V::or_(V::and_(V::srlv(q[k], qshift), m3),
                          V::template sll<2>(V::and_(V::srlv(h[k], hshift), m1)));
    }

    // The repacked copy holds sub-blocks 2p and 2p + 1 (the 8 vectors of
    // levels W0..W7 that levels() gives, 3 bits a byte) as 3 vectors whose
    // bytes are
    //   A = W0 | W1 << 3 | (W6 & 3) << 6
    //   B = W2 | W3 << 3 | (W7 & 3) << 6
    //   C = W4 | W5 << 3 | (W6 >> 2) << 6 | (W7 >> 2) << 7,
    // the same 96 bytes a row as hmask and qs: 17 operations unpack 8
    // vectors, where the GGUF bits take 48. (From the GGUF bits, Q3_K's
    // matrix x vector ran at 0.6-0.7 of one Zen 4 core's read rate even from
    // cache; with these and repack_scales' it runs at 1.3 from cache, and a
    // decode step on one core reads 88% of the bandwidth, against 58%.)
    // Writes block b of every row of g in this layout (8 x 3 vectors) at dst.
    static void repack_weights(const RowGroup<V>& g, int64_t b, uint8_t* dst) {
        for (int r = 0; r < V::kLanes; ++r) {
            const uint8_t* blk = g.rows[r] + static_cast<uint64_t>(b) * 110;
            uint8_t level[256];  // 0..7, as ref::dequantize_row reads them
            for (int e = 0; e < 256; ++e) {
                const int n = e / 128, j = e % 128 / 32, l = e % 32;
                const int low = blk[32 + 32 * n + l] >> (2 * j) & 3;
                const int high = blk[l] >> (4 * n + j) & 1;
                level[e] = static_cast<uint8_t>(low | high << 2);
            }
            for (int p = 0; p < 8; ++p) {
                uint8_t* out = dst + 3 * p * V::kBytes + 4 * r;
                for (int i = 0; i < 4; ++i) {
                    // W_k: vector k % 4 of sub-block 2p + k / 4, weight i.
                    uint8_t W[8];
                    for (int k = 0; k < 8; ++k)
                        W[k] = level[16 * (2 * p + k / 4) + 4 * (k % 4) + i];
                    out[i] = static_cast<uint8_t>(W[0] | W[1] << 3 | (W[6] & 3) << 6);
                    out[V::kBytes + i] = static_cast<uint8_t>(W[2] | W[3] << 3 | (W[7] & 3) << 6);
                    out[2 * V::kBytes + i] = static_cast<uint8_t>(
                        W[4] | W[5] << 3 | (W[6] >> 2) << 6 | (W[7] >> 2) << 7);
                }
            }
        }
    }

    // fn(p, w) for p = 0..7: sub-blocks 2p (w[0..4)) and 2p + 1 (w[4..8)) of
    // block b, from the repacked copy (pair) or the GGUF bits (levels).
    template <class Src, class Fn>
    HR_KERNEL_INLINE static void pairs(const Src& src, int64_t b, Fn&& fn) {
        I w[8];
        if constexpr (Src::kRepacked) {
            for (int p = 0; p < 8; ++p) {
                pair(src, b, p, w);
                fn(p, w);
            }
        } else {
            I h[8], q[8];
            high_bits(src, b, h);
            for (int n = 0; n < 2; ++n) {
                low_bits(src, b, n, q);
                for (int j = 0; j < 4; ++j) {
                    levels(q, h, n, j, w);
                    fn(4 * n + j, w);  // sub-blocks 8n + 2j, 8n + 2j + 1
                }
            }
        }
    }

    // Sub-blocks 2p (w[0..4)) and 2p + 1 (w[4..8)) from the repacked copy.
    // (Shifts within 16-bit lanes: each mask keeps bits of the byte itself.)
    HR_KERNEL_INLINE static void pair(const PackedSrc<V, TensorType::Q3_K>& src, int64_t b, int p,
                                      I w[8]) {
        const uint8_t* at = src.at(b, 0) + 3 * p * V::kBytes;
        const I a = V::load_once(at), bb = V::load_once(at + V::kBytes);
        const I c = V::load_once(at + 2 * V::kBytes);
        const I m7 = V::set1_8(7), m3 = V::set1_8(3), m4 = V::set1_8(4);
        w[0] = V::and_(a, m7);
        w[1] = V::and_(V::template srl16<3>(a), m7);
        w[2] = V::and_(bb, m7);
        w[3] = V::and_(V::template srl16<3>(bb), m7);
        w[4] = V::and_(c, m7);
        w[5] = V::and_(V::template srl16<3>(c), m7);
        w[6] = V::or_(V::and_(V::template srl16<6>(a), m3), V::and_(V::template srl16<4>(c), m4));
        w[7] = V::or_(V::and_(V::template srl16<6>(bb), m3), V::and_(V::template srl16<5>(c), m4));
    }
};

// Q2_K {u8 scales[16]; u8 qs[64]; f16 d, dmin}: element e's level (0..3) in
// qs as Q3_K's low bits; sub-block s (16 elements, 8n + 2j + l / 16) has
// scale scales[s] & 15 and min scales[s] >> 4.
template <class V>
struct ReadQ2K {
    using I = typename V::I;
    using F = typename V::F;

    // sc[s] per lane, and the mins as pairs mp[j] = m[2j] | m[2j + 1] << 16.
    template <class Src>
    HR_KERNEL_INLINE static void scales(const Src& src, int64_t b, I sc[16], I mp[8], F& d,
                                        F& dmin) {
        const I m4 = V::set1(0xF);
        for (int k = 0; k < 4; ++k) {
            const I D = src.dword(b, 4 * k);  // scales[4k .. 4k + 4)
            for (int i = 0; i < 4; ++i) sc[4 * k + i] = V::and_(V::srlv(D, V::set1(8 * i)), m4);
            const I mins = V::and_(V::template srl<4>(D), V::set1(0x0F0F0F0F));
            // bytes m0 m1 m2 m3 -> pairs m0 | m1 << 16 and m2 | m3 << 16
            mp[2 * k] = V::or_(V::and_(mins, V::set1(0xFF)),
                               V::template sll<8>(V::and_(mins, V::set1(0xFF00))));
            mp[2 * k + 1] = V::or_(V::and_(V::template srl<16>(mins), V::set1(0xFF)),
                                   V::and_(V::template srl<8>(mins), V::set1(0xFF0000)));
        }
        d = src.half(b, 80);
        dmin = src.half(b, 82);
    }

    // Half n's qs bytes, and the levels of sub-blocks 8n + 2j (w[0..4)) and
    // 8n + 2j + 1 (w[4..8)).
    template <class Src>
    HR_KERNEL_INLINE static void low_bits(const Src& src, int64_t b, int n, I q[8]) {
        src.dw4(b, 16 + 32 * n, q);
        src.dw4(b, 32 + 32 * n, q + 4);
    }
    HR_KERNEL_INLINE static void levels(const I q[8], int j, I w[8]) {
        const I m3 = V::set1_8(3), shift = V::set1(2 * j);
        for (int k = 0; k < 8; ++k) w[k] = V::and_(V::srlv(q[k], shift), m3);
    }
};

// IQ4_XS {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}: sub-block s (32
// weights) has the 6-bit scale ls = nibble s of scales_l | bits 2s, 2s + 1 of
// scales_h << 4, and takes the low and high nibbles of qs[16s .. 16s + 16)
// as IQ4_NL's block does, each an index into ref::kIq4Levels.
template <class V>
struct ReadIq4Xs {
    using I = typename V::I;
    using F = typename V::F;

    // sc[s] = ls_s - 32, per lane.
    template <class Src>
    HR_KERNEL_INLINE static void scales(const Src& src, int64_t b, I sc[8], F& d) {
        const I head = src.dword(b, 0);  // d | scales_h << 16
        const I low = src.dword(b, 4);   // scales_l: nibble s at bit 4s
        const I m4 = V::set1(0xF), m2 = V::set1(3), bias = V::set1(32);
        for (int s = 0; s < 8; ++s) {
            const I ls =
                V::or_(V::and_(V::srlv(low, V::set1(4 * s)), m4),
                       V::template sll<4>(V::and_(V::srlv(head, V::set1(16 + 2 * s)), m2)));
            sc[s] = V::sub(ls, bias);
        }
        d = V::half_lo_to_f32(head);
    }

    // Sub-block s's levels, as Q8_0's weights are taken: w[0..8).
    template <class Src>
    HR_KERNEL_INLINE static void sub(const Src& src, int64_t b, int s, I w[8]) {
        const I low4 = V::set1_8(0x0F);
        const I table = q8_ready<V>(V::table16(ref::kIq4Levels));
        I x[4];
        src.dw4(b, 8 + 16 * s, x);
        for (int j = 0; j < 4; ++j) {
            w[j] = V::shuffle8(table, V::and_(x[j], low4));
            w[j + 4] = V::shuffle8(table, V::and_(V::template srl16<4>(x[j]), low4));
        }
    }
};

// ---- panels ---------------------------------------------------------------

// One packed panel block, in vectors of V::kBytes: the weights from vector
// 0, then the scales, the min pairs (Q4_K, Q5_K), d, and m (dmin of the K
// types, the min of Q4_1 and Q5_1). pack_panel writes this layout and the
// GEMM's micro_panel reads it.
//   Q4_K, Q5_K  64 weight vectors, 8 scale, 4 min-pair, d, dmin   (78)
//   Q6_K, Q3_K  64 weight vectors, 16 scale, d                    (81)
//   Q2_K        64 weight vectors, 16 scale, 8 min-pair, d, dmin  (90)
//   IQ4_XS      64 weight vectors, 8 scale, d                     (73)
//   Q4_1, Q5_1  8 weight vectors, d, m                            (10)
//   others      8 weight vectors, d                               (9)
struct PanelLayout {
    uint32_t scales, mins, d, m, n_vectors;
};

constexpr PanelLayout panel_layout(TensorType t) {
    switch (t) {
        case TensorType::Q4_K:
        case TensorType::Q5_K:
            return {64, 72, 76, 77, 78};
        case TensorType::Q6_K:
        case TensorType::Q3_K:
            return {64, 0, 80, 0, 81};
        case TensorType::Q2_K:
            return {64, 80, 88, 89, 90};
        case TensorType::IQ4_XS:
            return {64, 0, 72, 0, 73};
        case TensorType::Q4_1:
        case TensorType::Q5_1:
            return {0, 0, 8, 9, 10};
        default:
            return {0, 0, 8, 0, 9};
    }
}

// Bytes of one packed panel block.
template <class V>
constexpr uint64_t panel_block_bytes(TensorType t) {
    return panel_layout(t).n_vectors * V::kBytes;
}

// Blocks [b0, b0 + nb) of a row group into a panel.
template <class V, TensorType T, class Src>
void pack_panel(const Src& src, int64_t b0, int64_t nb, uint8_t* panel) {
    using I = typename V::I;
    using F = typename V::F;
    constexpr uint64_t vb = V::kBytes;
    constexpr PanelLayout L = panel_layout(T);
    for (int64_t b = b0; b < b0 + nb; ++b, panel += panel_block_bytes<V>(T)) {
        if constexpr (T == TensorType::Q4_K || T == TensorType::Q5_K) {
            using R = ReadQ45K<V, T == TensorType::Q5_K>;
            I w[16], sc[8], mp[4];
            F d, dmin;
            for (int c = 0; c < 4; ++c) {
                R::pair(src, b, c, w);
                for (int k = 0; k < 16; ++k) V::store(panel + (16 * c + k) * vb, w[k]);
            }
            R::scales(src, b, sc, mp, d, dmin);
            for (int s = 0; s < 8; ++s) V::store(panel + (L.scales + s) * vb, sc[s]);
            for (int j = 0; j < 4; ++j) V::store(panel + (L.mins + j) * vb, mp[j]);
            V::fstore(reinterpret_cast<float*>(panel + L.d * vb), d);
            V::fstore(reinterpret_cast<float*>(panel + L.m * vb), dmin);
        } else if constexpr (T == TensorType::Q2_K) {
            using R = ReadQ2K<V>;
            I q[8], w[8], sc[16], mp[8];
            F d, dmin;
            for (int n = 0; n < 2; ++n) {
                R::low_bits(src, b, n, q);
                for (int j = 0; j < 4; ++j) {
                    R::levels(q, j, w);
                    const int s = 8 * n + 2 * j;  // vectors 4s .. 4s + 8
                    for (int k = 0; k < 8; ++k) V::store(panel + (4 * s + k) * vb, w[k]);
                }
            }
            R::scales(src, b, sc, mp, d, dmin);
            for (int s = 0; s < 16; ++s) V::store(panel + (L.scales + s) * vb, sc[s]);
            for (int j = 0; j < 8; ++j) V::store(panel + (L.mins + j) * vb, mp[j]);
            V::fstore(reinterpret_cast<float*>(panel + L.d * vb), d);
            V::fstore(reinterpret_cast<float*>(panel + L.m * vb), dmin);
        } else if constexpr (T == TensorType::Q3_K) {
            using R = ReadQ3K<V>;
            I sc[16];
            F d;
            // Sub-blocks 2p, 2p + 1: vectors 8p .. 8p + 8.
            R::pairs(
                src, b, [&](int p, const I* w) __attribute__((always_inline)) {
                    for (int k = 0; k < 8; ++k) V::store(panel + (8 * p + k) * vb, w[k]);
                });
            R::scales(src, b, sc, d);
            for (int s = 0; s < 16; ++s) V::store(panel + (L.scales + s) * vb, sc[s]);
            V::fstore(reinterpret_cast<float*>(panel + L.d * vb), d);
        } else if constexpr (T == TensorType::IQ4_XS) {
            using R = ReadIq4Xs<V>;
            I w[8], sc[8];
            F d;
            for (int s = 0; s < 8; ++s) {
                R::sub(src, b, s, w);
                for (int k = 0; k < 8; ++k) V::store(panel + (8 * s + k) * vb, w[k]);
            }
            R::scales(src, b, sc, d);
            for (int s = 0; s < 8; ++s) V::store(panel + (L.scales + s) * vb, sc[s]);
            V::fstore(reinterpret_cast<float*>(panel + L.d * vb), d);
        } else if constexpr (T == TensorType::Q6_K) {
            using R = ReadQ6K<V>;
            I w[16], sc[16];
            F d;
            if constexpr (Src::kRepacked) {
                for (int s = 0; s < 16; ++s) {
                    R::sub(src, b, s, w);
                    for (int k = 0; k < 4; ++k) V::store(panel + (4 * s + k) * vb, w[k]);
                }
            } else {
                for (int h = 0; h < 2; ++h) {
                    for (int part = 0; part < 2; ++part) {
                        R::quarter(src, b, h, part, w);
                        for (int q = 0; q < 4; ++q) {
                            const int s = 8 * h + 2 * q + part;  // sub-block: vectors 4s .. 4s + 4
                            for (int k = 0; k < 4; ++k)
                                V::store(panel + (4 * s + k) * vb, w[4 * q + k]);
                        }
                    }
                }
            }
            R::scales(src, b, sc, d);
            for (int s = 0; s < 16; ++s) V::store(panel + (L.scales + s) * vb, sc[s]);
            V::fstore(reinterpret_cast<float*>(panel + L.d * vb), d);
        } else {
            using R = Read32<V, T>;
            I w[8];
            F d, m;
            R::read(src, b, w, d, m);
            for (int k = 0; k < 8; ++k) V::store(panel + k * vb, w[k]);
            V::fstore(reinterpret_cast<float*>(panel + L.d * vb), d);
            if constexpr (R::kMin) V::fstore(reinterpret_cast<float*>(panel + L.m * vb), m);
        }
    }
}

}  // namespace headroom::kernels::x86
