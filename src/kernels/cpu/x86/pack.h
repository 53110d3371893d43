// Packing quantized weights into panels, shared by the AVX2 and AVX-512
// backends (templates over the vector traits V, instantiated in each ISA's
// file).
//
// A panel holds V::kLanes consecutive weight rows ("a row group") for a range
// of blocks, interleaved so that one vector holds 4 consecutive weights of
// every row: lane r of vector j = weights 4j..4j+3 of row r, as u8. One u8 x s8
// multiply-add of that vector with 4 activations broadcast to every lane then
// advances all rows' dot products at once, and each row's block sum lands in
// its own lane, where the block's scale is applied without any horizontal
// reduction. The same code packs for a single token (decode) and for a batch,
// so every row's arithmetic is the same in both.
//
// Panel layout per block (L = kLanes, vectors of 4L bytes):
//   32-element types: w[8] (u8), d f32[L], then m f32[L] for Q4_1 / Q5_1
//   Q4_K / Q5_K:      w[64], sc i32[8][L], min pairs i16[4][L][2], d f32[L], dmin f32[L]
//   Q6_K:             w[64], sc i32[16][L], d f32[L]
// Stored levels: Q4_0 nibble (w + 8), Q5_0 5 bits (w + 16), Q8_0 w + 128 when
// V::kQ8Unsigned else w as s8, Q4_1/Q5_1/Q4_K/Q5_K the unsigned level,
// Q6_K w + 32. The activation side subtracts offset * sum(a).
#pragma once

#include <cstdint>

#include "format/tensor-type.h"

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

// Bytes of one packed block and elements it covers.
template <class V>
constexpr uint64_t panel_block_bytes(TensorType t) {
    constexpr uint64_t vb = 4 * V::kLanes;
    switch (t) {
        case TensorType::Q4_1:
        case TensorType::Q5_1:
            return 10 * vb;
        case TensorType::Q4_K:
        case TensorType::Q5_K:
            return (64 + 8 + 4 + 2) * vb;
        case TensorType::Q6_K:
            return (64 + 16 + 1) * vb;
        default:
            return 9 * vb;
    }
}

// ---- 32-element types ---------------------------------------------------

// Q4_0 {f16 d; u8 qs[16]}, Q4_1 {f16 d, m; u8 qs[16]}: weights 0..15 are the
// low nibbles, 16..31 the high ones.
template <class V, bool kMin>
void pack_q4(const RowGroup<V>& g, int64_t b0, int64_t nb, uint8_t* panel) {
    using I = typename V::I;
    constexpr uint64_t bb = kMin ? 20 : 18;
    const I low4 = V::set1_8(0x0F);
    for (int64_t b = 0; b < nb;
         ++b, panel += panel_block_bytes<V>(kMin ? TensorType::Q4_1 : TensorType::Q4_0)) {
        const uint64_t off = static_cast<uint64_t>(b0 + b) * bb;
        I x[4];
        V::transpose16(g.rows, off + (kMin ? 4 : 2), x);
        for (int j = 0; j < 4; ++j) {
            V::store(panel + j * V::kBytes, V::and_(x[j], low4));
            V::store(panel + (j + 4) * V::kBytes, V::and_(V::template srl16<4>(x[j]), low4));
        }
        const I head = V::gather32(g.rows[0] + off, g.idx);
        V::fstore(reinterpret_cast<float*>(panel + 8 * V::kBytes), V::half_lo_to_f32(head));
        if (kMin)
            V::fstore(reinterpret_cast<float*>(panel + 9 * V::kBytes), V::half_hi_to_f32(head));
    }
}

// Spreads bits 0..3 of each lane to bit 4 of bytes 0..3.
template <class V>
typename V::I spread_nibble_to_bit4(typename V::I t) {
    // t * (2^4 + 2^11 + 2^18 + 2^25) puts bit k at 8k + 4 (and nowhere it collides).
    return V::and_(V::mullo(t, V::set1(0x02040810)), V::set1(0x10101010));
}

// Q5_0 {f16 d; u32 qh; u8 qs[16]}, Q5_1 {f16 d, m; u32 qh; u8 qs[16]}:
// weight j = nibble | bit j of qh << 4.
template <class V, bool kMin>
void pack_q5(const RowGroup<V>& g, int64_t b0, int64_t nb, uint8_t* panel) {
    using I = typename V::I;
    constexpr uint64_t bb = kMin ? 24 : 22;
    const I low4 = V::set1_8(0x0F);
    const I nib = V::set1(0xF);
    for (int64_t b = 0; b < nb;
         ++b, panel += panel_block_bytes<V>(kMin ? TensorType::Q5_1 : TensorType::Q5_0)) {
        const uint64_t off = static_cast<uint64_t>(b0 + b) * bb;
        I x[4];
        V::transpose16(g.rows, off + (kMin ? 8 : 6), x);
        const I qh = V::gather32(g.rows[0] + off + (kMin ? 4 : 2), g.idx);
        for (int j = 0; j < 4; ++j) {
            const I hl = spread_nibble_to_bit4<V>(V::and_(V::srlv(qh, V::set1(4 * j)), nib));
            const I hh = spread_nibble_to_bit4<V>(V::and_(V::srlv(qh, V::set1(16 + 4 * j)), nib));
            V::store(panel + j * V::kBytes, V::or_(V::and_(x[j], low4), hl));
            V::store(panel + (j + 4) * V::kBytes,
                     V::or_(V::and_(V::template srl16<4>(x[j]), low4), hh));
        }
        const I head = V::gather32(g.rows[0] + off, g.idx);
        V::fstore(reinterpret_cast<float*>(panel + 8 * V::kBytes), V::half_lo_to_f32(head));
        if (kMin)
            V::fstore(reinterpret_cast<float*>(panel + 9 * V::kBytes), V::half_hi_to_f32(head));
    }
}

// Q8_0 {f16 d; i8 qs[32]}.
template <class V>
void pack_q8_0(const RowGroup<V>& g, int64_t b0, int64_t nb, uint8_t* panel) {
    using I = typename V::I;
    const I flip = V::set1_8(static_cast<int8_t>(0x80));
    for (int64_t b = 0; b < nb; ++b, panel += panel_block_bytes<V>(TensorType::Q8_0)) {
        const uint64_t off = static_cast<uint64_t>(b0 + b) * 34;
        I x[4], y[4];
        V::transpose16(g.rows, off + 2, x);
        V::transpose16(g.rows, off + 18, y);
        for (int j = 0; j < 4; ++j) {
            if constexpr (V::kQ8Unsigned) {
                V::store(panel + j * V::kBytes, V::xor_(x[j], flip));
                V::store(panel + (j + 4) * V::kBytes, V::xor_(y[j], flip));
            } else {
                V::store(panel + j * V::kBytes, V::clamp_q8(x[j]));
                V::store(panel + (j + 4) * V::kBytes, V::clamp_q8(y[j]));
            }
        }
        const I head = V::gather32(g.rows[0] + off, g.idx);
        V::fstore(reinterpret_cast<float*>(panel + 8 * V::kBytes), V::half_lo_to_f32(head));
    }
}

// ---- K types --------------------------------------------------------------

// Q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]}, Q5_K {...; u8 qh[32]; u8 qs[128]}:
// sub-block s (32 weights) takes the low (s even) or high nibbles of qs bytes
// 32 (s / 2) .. +31, plus for Q5_K bit s of qh[l] as 16; 6-bit scales and mins.
template <class V, bool kFive>
void pack_q45_k(const RowGroup<V>& g, int64_t b0, int64_t nb, uint8_t* panel) {
    using I = typename V::I;
    constexpr uint64_t bb = kFive ? 176 : 144;
    constexpr uint64_t vb = V::kBytes;
    const I low4 = V::set1_8(0x0F);
    const I bit0 = V::set1_8(0x01), bit1 = V::set1_8(0x02);
    for (int64_t b = 0; b < nb; ++b, panel += panel_block_bytes<V>(TensorType::Q4_K)) {
        const uint64_t off = static_cast<uint64_t>(b0 + b) * bb;
        I h[8];
        if (kFive) {
            V::transpose16(g.rows, off + 16, h);
            V::transpose16(g.rows, off + 32, h + 4);
        }
        for (int c = 0; c < 4; ++c) {
            I x[8];
            const uint64_t qs = off + (kFive ? 48 : 16) + 32 * static_cast<uint64_t>(c);
            V::transpose16(g.rows, qs, x);
            V::transpose16(g.rows, qs + 16, x + 4);
            for (int k = 0; k < 8; ++k) {
                I lo = V::and_(x[k], low4);
                I hi = V::and_(V::template srl16<4>(x[k]), low4);
                if (kFive) {
                    // bit 2c (low sub-block) and 2c + 1 (high) of each qh byte, moved to bit 4
                    const I hb = V::srlv(h[k], V::set1(2 * c));
                    lo = V::or_(lo, V::template sll<4>(V::and_(hb, bit0)));
                    hi = V::or_(hi, V::template sll<3>(V::and_(hb, bit1)));
                }
                V::store(panel + (16 * c + k) * vb, lo);
                V::store(panel + (16 * c + 8 + k) * vb, hi);
            }
        }
        // scales: A = bytes 0..3, B = 4..7, C = 8..11 of scales[12]
        const I A = V::gather32(g.rows[0] + off + 4, g.idx);
        const I B = V::gather32(g.rows[0] + off + 8, g.idx);
        const I C = V::gather32(g.rows[0] + off + 12, g.idx);
        const I m6 = V::set1(63), m4 = V::set1(0xF), m2 = V::set1(3);
        I sc[8], mn[8];
        for (int s = 0; s < 4; ++s) {
            const I sh = V::set1(8 * s);
            sc[s] = V::and_(V::srlv(A, sh), m6);
            mn[s] = V::and_(V::srlv(B, sh), m6);
            const I sh6 = V::set1(8 * s + 6), sh4 = V::set1(8 * s + 4);
            sc[s + 4] = V::or_(V::and_(V::srlv(C, sh), m4),
                               V::template sll<4>(V::and_(V::srlv(A, sh6), m2)));
            mn[s + 4] = V::or_(V::and_(V::srlv(C, sh4), m4),
                               V::template sll<4>(V::and_(V::srlv(B, sh6), m2)));
        }
        uint8_t* p = panel + 64 * vb;
        for (int s = 0; s < 8; ++s) V::store(p + s * vb, sc[s]);
        p += 8 * vb;
        for (int j = 0; j < 4; ++j)
            V::store(p + j * vb, V::or_(mn[2 * j], V::template sll<16>(mn[2 * j + 1])));
        p += 4 * vb;
        const I head = V::gather32(g.rows[0] + off, g.idx);
        V::fstore(reinterpret_cast<float*>(p), V::half_lo_to_f32(head));
        V::fstore(reinterpret_cast<float*>(p + vb), V::half_hi_to_f32(head));
    }
}

// Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: in half h, group g of 32
// weights takes the low (g = 0, 1) or high (g = 2, 3) nibbles of
// ql[64h + 32 (g % 2) + l] and bits 2g, 2g + 1 of qh[32h + l] as bits 4, 5.
template <class V>
void pack_q6_k(const RowGroup<V>& g, int64_t b0, int64_t nb, uint8_t* panel) {
    using I = typename V::I;
    constexpr uint64_t vb = V::kBytes;
    const I low4 = V::set1_8(0x0F);
    const I m30 = V::set1_8(0x30);
    for (int64_t b = 0; b < nb; ++b, panel += panel_block_bytes<V>(TensorType::Q6_K)) {
        const uint64_t off = static_cast<uint64_t>(b0 + b) * 210;
        for (int h = 0; h < 2; ++h) {
            I la[8], lb[8], qh[8];
            V::transpose16(g.rows, off + 64 * h, la);
            V::transpose16(g.rows, off + 64 * h + 16, la + 4);
            V::transpose16(g.rows, off + 64 * h + 32, lb);
            V::transpose16(g.rows, off + 64 * h + 48, lb + 4);
            V::transpose16(g.rows, off + 128 + 32 * h, qh);
            V::transpose16(g.rows, off + 128 + 32 * h + 16, qh + 4);
            uint8_t* p = panel + 32 * h * vb;
            for (int k = 0; k < 8; ++k) {
                V::store(p + k * vb,
                         V::or_(V::and_(la[k], low4), V::and_(V::template sll<4>(qh[k]), m30)));
                V::store(p + (8 + k) * vb,
                         V::or_(V::and_(lb[k], low4), V::and_(V::template sll<2>(qh[k]), m30)));
                V::store(p + (16 + k) * vb,
                         V::or_(V::and_(V::template srl16<4>(la[k]), low4), V::and_(qh[k], m30)));
                V::store(p + (24 + k) * vb, V::or_(V::and_(V::template srl16<4>(lb[k]), low4),
                                                   V::and_(V::template srl<2>(qh[k]), m30)));
            }
        }
        uint8_t* p = panel + 64 * vb;
        for (int q = 0; q < 4; ++q) {
            const I s4 = V::gather32(g.rows[0] + off + 192 + 4 * q, g.idx);
            V::store(p + (4 * q + 0) * vb, V::template sra<24>(V::template sll<24>(s4)));
            V::store(p + (4 * q + 1) * vb, V::template sra<24>(V::template sll<16>(s4)));
            V::store(p + (4 * q + 2) * vb, V::template sra<24>(V::template sll<8>(s4)));
            V::store(p + (4 * q + 3) * vb, V::template sra<24>(s4));
        }
        // d sits at 208..209, the block's last bytes: gather the dword at 206.
        const I tail = V::gather32(g.rows[0] + off + 206, g.idx);
        V::fstore(reinterpret_cast<float*>(p + 16 * vb), V::half_hi_to_f32(tail));
    }
}

}  // namespace headroom::kernels::x86
