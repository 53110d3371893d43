// Dequantization of one 32-element chunk of a weight row, for the type the
// shader is compiled for (-DW_<TYPE>): chunk j holds elements
// [32 j, 32 j + 32) of the row. Each value is computed with the CPU
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

#if defined(W_Q4_0) || defined(W_Q4_1) || defined(W_Q5_0) || defined(W_Q5_1) || defined(W_Q8_0) || \
    defined(W_Q4_K) || defined(W_Q5_K) || defined(W_Q6_K)
#define W_QUANTIZED 1
#endif

uint byte_at(uint64_t p) {
    return uint(Bytes(p).v[0]);
}
uint half_at(uint64_t p) {
    return uint(Halves(p).v[0]);
}
int i8_at(uint64_t p) {
    const int v = int(byte_at(p));
    return v > 127 ? v - 256 : v;
}

#if defined(W_Q4_K) || defined(W_Q5_K)
// Sub-block j's 6-bit scale and min from the 12 scale bytes at s.
void scale_min_k4(uint64_t s, uint j, out uint sc, out uint m) {
    if (j < 4u) {
        sc = byte_at(s + j) & 63u;
        m = byte_at(s + j + 4u) & 63u;
    } else {
        sc = (byte_at(s + j + 4u) & 0xFu) | ((byte_at(s + j - 4u) >> 6) << 4);
        m = (byte_at(s + j + 4u) >> 4) | ((byte_at(s + j) >> 6) << 4);
    }
}
#endif

// w[e] = element 32 j + e of the row at `row` (n_cols elements; zero past the end).
void dequant_chunk(uint64_t row, uint j, uint n_cols, inout float w[32]) {
#if defined(W_F32)
    Floats r = Floats(row);
    for (uint e = 0u; e < 32u; ++e) w[e] = 32u * j + e < n_cols ? r.v[32u * j + e] : 0.0;
#elif defined(W_F16) || defined(W_BF16)
    Halves r = Halves(row);
    for (uint e = 0u; e < 32u; ++e) {
        const uint i = 32u * j + e;
#if defined(W_F16)
        w[e] = i < n_cols ? half_to_float(uint(r.v[i])) : 0.0;
#else
        w[e] = i < n_cols ? bf16_to_float(uint(r.v[i])) : 0.0;
#endif
    }
#elif defined(W_Q4_0)
    const uint64_t b = row + uint64_t(j) * 18u;
    const float d = half_to_float(half_at(b));
    Bytes q = Bytes(b + 2u);
    for (uint e = 0u; e < 16u; ++e) {
        const uint v = uint(q.v[e]);
        precise float lo = d * float(int(v & 15u) - 8);
        precise float hi = d * float(int(v >> 4) - 8);
        w[e] = lo;
        w[e + 16u] = hi;
    }
#elif defined(W_Q4_1)
    const uint64_t b = row + uint64_t(j) * 20u;
    const float d = half_to_float(half_at(b)), m = half_to_float(half_at(b + 2u));
    Bytes q = Bytes(b + 4u);
    for (uint e = 0u; e < 16u; ++e) {
        const uint v = uint(q.v[e]);
        precise float lo = d * float(v & 15u) + m;
        precise float hi = d * float(v >> 4) + m;
        w[e] = lo;
        w[e + 16u] = hi;
    }
#elif defined(W_Q5_0) || defined(W_Q5_1)
#if defined(W_Q5_0)
    const uint64_t b = row + uint64_t(j) * 22u;
    const float d = half_to_float(half_at(b));
    const uint qh = half_at(b + 2u) | (half_at(b + 4u) << 16);
    Bytes q = Bytes(b + 6u);
#else
    const uint64_t b = row + uint64_t(j) * 24u;
    const float d = half_to_float(half_at(b)), m = half_to_float(half_at(b + 2u));
    const uint qh = half_at(b + 4u) | (half_at(b + 6u) << 16);
    Bytes q = Bytes(b + 8u);
#endif
    for (uint e = 0u; e < 16u; ++e) {
        const uint v = uint(q.v[e]);
        const uint h0 = ((qh >> e) << 4) & 0x10u;
        const uint h1 = (qh >> (e + 12u)) & 0x10u;
#if defined(W_Q5_0)
        precise float lo = d * float(int((v & 15u) | h0) - 16);
        precise float hi = d * float(int((v >> 4) | h1) - 16);
#else
        precise float lo = d * float((v & 15u) | h0) + m;
        precise float hi = d * float((v >> 4) | h1) + m;
#endif
        w[e] = lo;
        w[e + 16u] = hi;
    }
#elif defined(W_Q8_0)
    const uint64_t b = row + uint64_t(j) * 34u;
    const float d = half_to_float(half_at(b));
    for (uint e = 0u; e < 32u; ++e) {
        precise float v = d * float(i8_at(b + 2u + e));
        w[e] = v;
    }
#elif defined(W_Q4_K) || defined(W_Q5_K)
#if defined(W_Q4_K)
    const uint64_t b = row + uint64_t(j / 8u) * 144u;
#else
    const uint64_t b = row + uint64_t(j / 8u) * 176u;
#endif
    const uint sub = j % 8u, pair = sub / 2u;
    const float d = half_to_float(half_at(b)), dmin = half_to_float(half_at(b + 2u));
    uint sc, mn;
    scale_min_k4(b + 4u, sub, sc, mn);
    precise float d1 = d * float(sc);
    precise float m1 = dmin * float(mn);
#if defined(W_Q4_K)
    Bytes q = Bytes(b + 16u + 32u * pair);
#else
    Bytes q = Bytes(b + 48u + 32u * pair);
    Bytes qh = Bytes(b + 16u);
#endif
    for (uint l = 0u; l < 32u; ++l) {
        const uint v = uint(q.v[l]);
        uint x = (sub & 1u) != 0u ? v >> 4 : v & 15u;
#if defined(W_Q5_K)
        x += ((uint(qh.v[l]) >> sub) & 1u) != 0u ? 16u : 0u;
#endif
        precise float y = d1 * float(x) - m1;
        w[l] = y;
    }
#elif defined(W_Q6_K)
    const uint64_t b = row + uint64_t(j / 8u) * 210u;
    const uint sub = j % 8u, h = sub / 4u, qq = sub % 4u;
    const float d = half_to_float(half_at(b + 208u));
    Bytes ql = Bytes(b + 64u * h + ((qq & 1u) != 0u ? 32u : 0u));
    Bytes qh = Bytes(b + 128u + 32u * h);
    for (uint l = 0u; l < 32u; ++l) {
        const uint lo = uint(ql.v[l]);
        const uint nib = qq >= 2u ? lo >> 4 : lo & 15u;
        const uint hb = (uint(qh.v[l]) >> (2u * qq)) & 3u;
        const int q = int(nib | (hb << 4)) - 32;
        const int s = i8_at(b + 192u + 8u * h + l / 16u + 2u * qq);
        precise float ds = d * float(s);
        precise float y = ds * float(q);
        w[l] = y;
    }
#else
#error "compile with -DW_<TYPE>"
#endif
}
