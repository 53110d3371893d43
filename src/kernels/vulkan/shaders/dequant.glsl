// Dequantization of one element of a weight row, for the type the shader is
// compiled for (-DW_<TYPE>): element e of chunk j is element 32 j + e of
// the row. Each value is computed with the CPU
// reference's expression (kernels/cpu/ref/quant.cpp), so both give the same
// f32 weights bit for bit; only the order of the sums that use them differs.
//
// Block layouts (GGUF), bytes:
//   Q4_0 18  {f16 d; u8 qs[16]}                w = d * (q - 8)
//   Q4_1 20  {f16 d, m; u8 qs[16]}             w = d * q + m
//   Q5_0 22  {f16 d; u32 qh; u8 qs[16]}        w = d * (q | h << 4 - 16)
//   Q5_1 24  {f16 d, m; u32 qh; u8 qs[16]}     w = d * (q | h << 4) + m
//   Q8_0 34  {f16 d; i8 qs[32]}                w = d * q
//   Q4_K 144 {f16 d, dmin; u8 scales[12]; u8 qs[128]}            8 sub-blocks of 32
//   Q5_K 176 {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
//   Q6_K 210 {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}       16 sub-blocks of 16
// K-quant chunk j is sub-block j % 8 of super-block j / 8 (Q6_K: its two
// sub-blocks of 16).

// A row, read through one base pointer (the same for every invocation that
// reads the row) as 32-bit words: bytes and halves are cut out of them, as
// devices load words far better than bytes. `skew` is the row's start past
// the word boundary below it (0 or 2: blocks of 18, 22 or 34 bytes leave
// every other row on a half-word).
struct Row {
    Words w;
    uint skew;
};
Row row_at(uint64_t p) {
    return Row(Words(p & ~uint64_t(3)), uint(p & 3ul));
}
uint byte_at(Row r, uint off) {
    const uint o = off + r.skew;
    return (r.w.v[o >> 2] >> ((o & 3u) * 8u)) & 0xFFu;
}
// off is even.
uint half_at(Row r, uint off) {
    const uint o = off + r.skew;
    return (r.w.v[o >> 2] >> ((o & 2u) * 8u)) & 0xFFFFu;
}
int i8_at(Row r, uint off) {
    const int v = int(byte_at(r, off));
    return v > 127 ? v - 256 : v;
}
// The 4 bytes at an even offset, as one word (two loads when the offset is
// not a multiple of 4).
uint word_at(Row r, uint off) {
    const uint o = off + r.skew;
    const uint lo = r.w.v[o >> 2];
    return (o & 2u) == 0u ? lo : (lo >> 16) | (r.w.v[(o >> 2) + 1u] << 16);
}
// Byte k (0..3) of a word, as an int8.
int i8_of(uint word, uint k) {
    const int v = int((word >> (8u * k)) & 0xFFu);
    return v > 127 ? v - 256 : v;
}

#if defined(W_Q4_K) || defined(W_Q5_K)
// Sub-block j's 6-bit scale and min from the 12 scale bytes at offset s.
void scale_min_k4(Row r, uint s, uint j, out uint sc, out uint m) {
    if (j < 4u) {
        sc = byte_at(r, s + j) & 63u;
        m = byte_at(r, s + j + 4u) & 63u;
    } else {
        sc = (byte_at(r, s + j + 4u) & 0xFu) | ((byte_at(r, s + j - 4u) >> 6) << 4);
        m = (byte_at(r, s + j + 4u) >> 4) | ((byte_at(r, s + j) >> 6) << 4);
    }
}
#endif

// Element 32 j + e of the row at `row` (n_cols elements; zero past the
// end). Invocations that take consecutive e read consecutive bytes (and the
// same scales): a workgroup reads a chunk in one sweep.
float dequant(Row row, uint j, uint e, uint n_cols) {
    const uint i = 32u * j + e;
#if defined(W_F32)
    return i < n_cols ? uintBitsToFloat(row.w.v[i]) : 0.0;
#elif defined(W_F16)
    return i < n_cols ? half_to_float(half_at(row, 2u * i)) : 0.0;
#elif defined(W_BF16)
    return i < n_cols ? bf16_to_float(half_at(row, 2u * i)) : 0.0;
#elif defined(W_Q4_0) || defined(W_Q4_1)
#if defined(W_Q4_0)
    const uint b = j * 18u;
    const uint q = byte_at(row, b + 2u + e % 16u);
#else
    const uint b = j * 20u;
    const uint q = byte_at(row, b + 4u + e % 16u);
#endif
    const float d = half_to_float(half_at(row, b));
    const uint x = e < 16u ? q & 15u : q >> 4;
#if defined(W_Q4_0)
    precise float w = d * float(int(x) - 8);
#else
    const float m = half_to_float(half_at(row, b + 2u));
    precise float w = d * float(x) + m;
#endif
    return w;
#elif defined(W_Q5_0) || defined(W_Q5_1)
#if defined(W_Q5_0)
    const uint b = j * 22u;
    const uint qh = half_at(row, b + 2u) | (half_at(row, b + 4u) << 16);
    const uint q = byte_at(row, b + 6u + e % 16u);
#else
    const uint b = j * 24u;
    const uint qh = half_at(row, b + 4u) | (half_at(row, b + 6u) << 16);
    const uint q = byte_at(row, b + 8u + e % 16u);
#endif
    const float d = half_to_float(half_at(row, b));
    // Element e's fifth bit is bit e of qh.
    const uint x = (e < 16u ? q & 15u : q >> 4) | (((qh >> e) & 1u) << 4);
#if defined(W_Q5_0)
    precise float w = d * float(int(x) - 16);
#else
    const float m = half_to_float(half_at(row, b + 2u));
    precise float w = d * float(x) + m;
#endif
    return w;
#elif defined(W_Q8_0)
    const uint b = j * 34u;
    precise float w = half_to_float(half_at(row, b)) * float(i8_at(row, b + 2u + e));
    return w;
#elif defined(W_Q4_K) || defined(W_Q5_K)
#if defined(W_Q4_K)
    const uint b = (j / 8u) * 144u;
#else
    const uint b = (j / 8u) * 176u;
#endif
    const uint sub = j % 8u, pair = sub / 2u;
    const float d = half_to_float(half_at(row, b)), dmin = half_to_float(half_at(row, b + 2u));
    uint sc, mn;
    scale_min_k4(row, b + 4u, sub, sc, mn);
    precise float d1 = d * float(sc);
    precise float m1 = dmin * float(mn);
#if defined(W_Q4_K)
    const uint q = byte_at(row, b + 16u + 32u * pair + e);
    const uint x = (sub & 1u) != 0u ? q >> 4 : q & 15u;
#else
    const uint q = byte_at(row, b + 48u + 32u * pair + e);
    const uint x = ((sub & 1u) != 0u ? q >> 4 : q & 15u) +
                   (((byte_at(row, b + 16u + e) >> sub) & 1u) != 0u ? 16u : 0u);
#endif
    precise float w = d1 * float(x) - m1;
    return w;
#elif defined(W_Q6_K)
    const uint b = (j / 8u) * 210u;
    const uint sub = j % 8u, h = sub / 4u, qq = sub % 4u;
    const uint lo = byte_at(row, b + 64u * h + ((qq & 1u) != 0u ? 32u : 0u) + e);
    const uint nib = qq >= 2u ? lo >> 4 : lo & 15u;
    const uint hb = (byte_at(row, b + 128u + 32u * h + e) >> (2u * qq)) & 3u;
    const int q = int(nib | (hb << 4)) - 32;
    const float d = half_to_float(half_at(row, b + 208u));
    const int s = i8_at(row, b + 192u + 8u * h + e / 16u + 2u * qq);
    precise float ds = d * float(s);
    precise float w = ds * float(q);
    return w;
#else
#error "compile with -DW_<TYPE>"
#endif
}

// Bytes [off, off + 4 N) of a row (off even) as N words: N loads (one
// more where the row's skew puts off on a half-word), then funnel shifts.
#define FETCH_WORDS(row, off, N, dst)                                        \
    {                                                                         \
        const uint o_ = (off) + (row).skew;                                  \
        const uint base_ = o_ >> 2;                                          \
        uint raw_[N + 1];                                                     \
        [[unroll]] for (uint k_ = 0u; k_ < N; ++k_) raw_[k_] = (row).w.v[base_ + k_]; \
        raw_[N] = 0u;                                                         \
        if ((o_ & 2u) != 0u) raw_[N] = (row).w.v[base_ + N];                 \
        [[unroll]] for (uint k_ = 0u; k_ < N; ++k_)                          \
            dst[k_] = (o_ & 2u) != 0u ? (raw_[k_] >> 16) | (raw_[k_ + 1u] << 16) : raw_[k_]; \
    }

// The whole chunk j (elements 32 j .. 32 j + 31) at once, its bytes read as
// words: what the matrix kernels take (a few wide loads instead of a load
// per element). The values are dequant()'s, element for element.
void dequant_block(Row row, uint j, uint n_cols, out float w[32]) {
#if defined(W_F32) || defined(W_F16) || defined(W_BF16)
    [[unroll]] for (uint e = 0u; e < 32u; ++e) w[e] = dequant(row, j, e, n_cols);
#elif defined(W_Q4_0) || defined(W_Q4_1)
#if defined(W_Q4_0)
    uint q[5];  // {d, qs[0..1]}, qs[2..5], ... (18 bytes, then 2 of the next block)
    FETCH_WORDS(row, j * 18u, 5u, q)
    const float d = half_to_float(q[0] & 0xFFFFu);
#else
    uint q[5];  // {d, m}, qs[0..3], ..., qs[12..15]
    FETCH_WORDS(row, j * 20u, 5u, q)
    const float d = half_to_float(q[0] & 0xFFFFu), m = half_to_float(q[0] >> 16);
#endif
    [[unroll]] for (uint e = 0u; e < 16u; ++e) {
#if defined(W_Q4_0)
        // qs[e] is byte 2 + e of the block.
        const uint v = (q[(2u + e) / 4u] >> (8u * ((2u + e) % 4u))) & 0xFFu;
        precise float lo = d * float(int(v & 15u) - 8);
        precise float hi = d * float(int(v >> 4) - 8);
#else
        const uint v = (q[1u + e / 4u] >> (8u * (e % 4u))) & 0xFFu;
        precise float lo = d * float(v & 15u) + m;
        precise float hi = d * float(v >> 4) + m;
#endif
        w[e] = lo;
        w[e + 16u] = hi;
    }
#elif defined(W_Q5_0) || defined(W_Q5_1)
#if defined(W_Q5_0)
    uint q[6];  // {d, qh lo}, {qh hi, qs[0..1]}, ... (22 bytes)
    FETCH_WORDS(row, j * 22u, 6u, q)
    const uint qh = (q[0] >> 16) | (q[1] << 16);
    const float d = half_to_float(q[0] & 0xFFFFu);
#define QS_BYTE(e) ((q[(6u + (e)) / 4u] >> (8u * ((6u + (e)) % 4u))) & 0xFFu)
#else
    uint q[6];  // {d, m}, qh, qs[0..3], ...
    FETCH_WORDS(row, j * 24u, 6u, q)
    const uint qh = q[1];
    const float d = half_to_float(q[0] & 0xFFFFu), m = half_to_float(q[0] >> 16);
#define QS_BYTE(e) ((q[2u + (e) / 4u] >> (8u * ((e) % 4u))) & 0xFFu)
#endif
    [[unroll]] for (uint e = 0u; e < 16u; ++e) {
        const uint v = QS_BYTE(e);
        const uint x0 = (v & 15u) | (((qh >> e) & 1u) << 4);
        const uint x1 = (v >> 4) | (((qh >> (e + 16u)) & 1u) << 4);
#if defined(W_Q5_0)
        precise float lo = d * float(int(x0) - 16);
        precise float hi = d * float(int(x1) - 16);
#else
        precise float lo = d * float(x0) + m;
        precise float hi = d * float(x1) + m;
#endif
        w[e] = lo;
        w[e + 16u] = hi;
    }
#undef QS_BYTE
#elif defined(W_Q8_0)
    uint q[9];  // {d, qs[0..1]}, qs[2..5], ... (34 bytes, then 2 of the next block)
    FETCH_WORDS(row, j * 34u, 9u, q)
    const float d = half_to_float(q[0] & 0xFFFFu);
    [[unroll]] for (uint e = 0u; e < 32u; ++e) {
        precise float v = d * float(i8_of(q[(2u + e) / 4u], (2u + e) % 4u));
        w[e] = v;
    }
#elif defined(W_Q4_K) || defined(W_Q5_K)
#if defined(W_Q4_K)
    const uint b = (j / 8u) * 144u;
#else
    const uint b = (j / 8u) * 176u;
#endif
    const uint sub = j % 8u, pair = sub / 2u, shift = (sub & 1u) * 4u;
    uint hd[4];  // {d, dmin}, scales[0..11]
    FETCH_WORDS(row, b, 4u, hd)
    const float d = half_to_float(hd[0] & 0xFFFFu), dmin = half_to_float(hd[0] >> 16);
    // scale_min_k4 on the scale words: byte k of the 12 is byte k % 4 of hd[1 + k / 4].
#define SC_BYTE(k) ((hd[1u + (k) / 4u] >> (8u * ((k) % 4u))) & 0xFFu)
    uint sc, mn;
    if (sub < 4u) {
        sc = SC_BYTE(sub) & 63u;
        mn = SC_BYTE(sub + 4u) & 63u;
    } else {
        sc = (SC_BYTE(sub + 4u) & 0xFu) | ((SC_BYTE(sub - 4u) >> 6) << 4);
        mn = (SC_BYTE(sub + 4u) >> 4) | ((SC_BYTE(sub) >> 6) << 4);
    }
#undef SC_BYTE
    precise float d1 = d * float(sc);
    precise float m1 = dmin * float(mn);
    uint q[8];
#if defined(W_Q4_K)
    FETCH_WORDS(row, b + 16u + 32u * pair, 8u, q)
#else
    FETCH_WORDS(row, b + 48u + 32u * pair, 8u, q)
    uint h[8];
    FETCH_WORDS(row, b + 16u, 8u, h)
#endif
    [[unroll]] for (uint e = 0u; e < 32u; ++e) {
        uint x = (q[e / 4u] >> (8u * (e % 4u) + shift)) & 15u;
#if defined(W_Q5_K)
        x += ((h[e / 4u] >> (8u * (e % 4u) + sub)) & 1u) != 0u ? 16u : 0u;
#endif
        precise float v = d1 * float(x) - m1;
        w[e] = v;
    }
#elif defined(W_Q6_K)
    const uint b = (j / 8u) * 210u;
    const uint sub = j % 8u, h = sub / 4u, qq = sub % 4u;
    const uint nib_shift = qq >= 2u ? 4u : 0u;
    uint lo[8], hi[8];
    FETCH_WORDS(row, b + 64u * h + ((qq & 1u) != 0u ? 32u : 0u), 8u, lo)
    FETCH_WORDS(row, b + 128u + 32u * h, 8u, hi)
    const float d = half_to_float(half_at(row, b + 208u));
    // The chunk's two sub-blocks of 16 take scales is and is + 1.
    const uint sw = half_at(row, b + 192u + 8u * h + 2u * qq);
    precise float ds0 = d * float(i8_of(sw, 0u));
    precise float ds1 = d * float(i8_of(sw, 1u));
    [[unroll]] for (uint e = 0u; e < 32u; ++e) {
        const uint nib = (lo[e / 4u] >> (8u * (e % 4u) + nib_shift)) & 15u;
        const uint hb = (hi[e / 4u] >> (8u * (e % 4u) + 2u * qq)) & 3u;
        const int q = int(nib | (hb << 4)) - 32;
        precise float v = (e < 16u ? ds0 : ds1) * float(q);
        w[e] = v;
    }
#else
#error "compile with -DW_<TYPE>"
#endif
}
