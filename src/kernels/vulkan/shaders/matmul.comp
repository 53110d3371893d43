#version 450
// y (n_tokens, n_rows) [t, r] = sum_k x (n_tokens, x_stride) [t, k] * W (n_rows, n_cols) [r, k]
// for up to 3 matrices of one type and width that read the same x (q, k and v; gate and up),
// in one dispatch: workgroups [0, end0) are matrix 0's, [end0, end1) matrix 1's, the rest
// matrix 2's.
//
// One source for every weight type (-DW_<TYPE>, dequant.glsl) and two
// kernels: matrix × vector (-DNT=1 for decode, -DNT=4 for a few tokens) and
// tiled matrix × matrix (-DTILED, for prefill).
//
// The order of the sum, the same in both: a row's chunks of 32 elements (a
// block, or a K-quant sub-block) are cut into SLICES = 16 contiguous slices,
// slice s being chunks [s n_chunks / 16, (s + 1) n_chunks / 16). A slice's
// partial sum starts at 0 and takes fma(w, x, p) for its elements in order;
// y is then ((0 + p_0) + p_1) + ... + p_15. It depends on the row's length
// alone, never on the kernel, its tile or how many tokens the call has: a
// token gets the same bits alone or in a batch (batch invariance). The sums
// are `precise`, so every fma is fused and nothing is reassociated.
//
// Matrix × vector: a workgroup is 16 slices × (16 / RPL) row lanes and owns
// 16 rows × NT tokens; invocation (s, lane) computes slice s of RPL rows for
// NT tokens, each chunk dequantized once into registers for all its tokens;
// the slices' partials meet in shared memory and invocation s = 0 adds them.
//
// Tiled: a workgroup of 64 invocations owns a tile of 64 rows × 64 tokens.
// For KC = 2 chunks at a time, invocation i dequantizes row i's chunks and
// loads token i's activations into shared memory (24 KiB); after a barrier
// each invocation multiplies its register block of 8 rows × 8 tokens out
// of shared memory: 64 fmas for every 16 values read. A weight is
// dequantized once per 64 tokens (the matrix × vector kernel: once per NT).
#include "common.glsl"
#include "dequant.glsl"

#define SLICES 16u

layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4s { vec4 v[]; };

layout(push_constant) uniform Args {
    uint64_t w0, w1, w2;  // row 0 of each W
    uint64_t x;           // token 0 of x
    uint64_t y0, y1, y2;  // token 0, row 0 of each y
    uint n_rows0, n_rows1, n_rows2;
    uint end0, end1;  // the workgroups of matrices 0 and 1 end there
    uint n_cols;
    uint n_tokens;
    uint row_bytes;
    uint x_stride;  // floats
} a;

// The first chunk of slice s (s = SLICES: the end of the row).
uint slice_begin(uint s, uint n_chunks) {
    return (s * n_chunks) / SLICES;
}

// The matrix a workgroup's rows belong to; g becomes its row tile there.
void pick_matrix(inout uint g, out uint64_t w_at, out uint64_t y_at, out uint n_rows) {
    w_at = a.w0;
    y_at = a.y0;
    n_rows = a.n_rows0;
    if (g >= a.end1) {
        g -= a.end1;
        w_at = a.w2;
        y_at = a.y2;
        n_rows = a.n_rows2;
    } else if (g >= a.end0) {
        g -= a.end0;
        w_at = a.w1;
        y_at = a.y1;
        n_rows = a.n_rows1;
    }
}

// x a vec4 at a time where every chunk starts on 16 bytes (quantized
// weights: n_cols is a multiple of 32), else a float at a time, zero past
// n_cols.
bool x_wide() {
    return (a.x_stride & 3u) == 0u && (a.n_cols & 31u) == 0u && (a.x & 15ul) == 0ul;
}
void load_x(uint token, uint j, bool wide, out float xv[32]) {
    const uint x0 = token * a.x_stride + 32u * j;
    if (wide) {
        Vec4s xq = Vec4s(a.x + 4ul * x0);
        [[unroll]] for (uint q = 0u; q < 8u; ++q) {
            const vec4 v = xq.v[q];
            xv[4u * q] = v.x;
            xv[4u * q + 1u] = v.y;
            xv[4u * q + 2u] = v.z;
            xv[4u * q + 3u] = v.w;
        }
    } else {
        Floats xf = Floats(a.x + 4ul * x0);
        [[unroll]] for (uint e = 0u; e < 32u; ++e) xv[e] = 32u * j + e < a.n_cols ? xf.v[e] : 0.0;
    }
}

#ifndef TILED
// ---- matrix × vector ------------------------------------------------------

#ifndef NT
#define NT 1
#endif
#ifndef RPL
#define RPL 4u  // rows per invocation
#endif
#define ROWS 16u
layout(local_size_x = 16, local_size_y = ROWS / RPL) in;

shared float red[ROWS * NT * SLICES];

void main() {
    uint g = gl_WorkGroupID.x;
    uint64_t w_at, y_at;
    uint n_rows;
    pick_matrix(g, w_at, y_at, n_rows);
    const uint s = gl_LocalInvocationID.x, lane = gl_LocalInvocationID.y;
    const uint r0 = g * ROWS + lane * RPL;
    const uint t0 = gl_WorkGroupID.y * NT;
    const uint n_chunks = (a.n_cols + 31u) / 32u;
    const uint n_t = min(NT, a.n_tokens - t0);
    const bool wide = x_wide();
    Row rows[RPL];
    [[unroll]] for (uint i = 0u; i < RPL; ++i)  // past the end: computed, not stored
        rows[i] = row_at(w_at + uint64_t(min(r0 + i, n_rows - 1u)) * a.row_bytes);
    precise float acc[RPL][NT];
    [[unroll]] for (uint i = 0u; i < RPL; ++i)
        [[unroll]] for (uint t = 0u; t < NT; ++t) acc[i][t] = 0.0;
    float w[RPL][32];
    float xv[32];
    const uint j_end = slice_begin(s + 1u, n_chunks);
    for (uint j = slice_begin(s, n_chunks); j < j_end; ++j) {
        [[unroll]] for (uint i = 0u; i < RPL; ++i) dequant_block(rows[i], j, a.n_cols, w[i]);
        [[unroll]] for (uint t = 0u; t < NT; ++t) {
            if (t >= n_t) break;
            load_x(t0 + t, j, wide, xv);
            [[unroll]] for (uint i = 0u; i < RPL; ++i)
                [[unroll]] for (uint e = 0u; e < 32u; ++e)
                    acc[i][t] = fma(w[i][e], xv[e], acc[i][t]);
        }
    }
    [[unroll]] for (uint i = 0u; i < RPL; ++i)
        [[unroll]] for (uint t = 0u; t < NT; ++t)
            red[((lane * RPL + i) * NT + t) * SLICES + s] = acc[i][t];
    barrier();
    if (s != 0u) return;
    [[unroll]] for (uint i = 0u; i < RPL; ++i) {
        const uint r = r0 + i;
        if (r >= n_rows) continue;
        for (uint t = 0u; t < n_t; ++t) {
            const uint k = ((lane * RPL + i) * NT + t) * SLICES;
            precise float sum = 0.0;
            [[unroll]] for (uint q = 0u; q < SLICES; ++q) sum += red[k + q];
            Floats(y_at + 4ul * (uint64_t(t0 + t) * n_rows + r)).v[0] = sum;
        }
    }
}

#else
// ---- tiled matrix × matrix ------------------------------------------------

#define BM 64u  // rows of a tile: invocation i dequantizes row i
#define BN 64u  // tokens of a tile: invocation i loads token i
#define TM 8u   // rows of an invocation's block: rb, rb + 8, ..., rb + 56
#define TN 8u   // tokens of its block: tb, tb + 8, ..., tb + 56
#define KC 2u   // chunks staged at once
layout(local_size_x = 64) in;

shared float ws[KC * 32u * BM];  // [element][row]: the tile's rows' chunks
shared float xs[KC * 32u * BN];  // [element][token]: its tokens' activations

void main() {
    uint g = gl_WorkGroupID.x;
    uint64_t w_at, y_at;
    uint n_rows;
    pick_matrix(g, w_at, y_at, n_rows);
    const uint id = gl_LocalInvocationID.x;
    const uint row0 = g * BM, tok0 = gl_WorkGroupID.y * BN;
    const uint n_chunks = (a.n_cols + 31u) / 32u;
    const bool wide = x_wide();
    Row row = row_at(w_at + uint64_t(min(row0 + id, n_rows - 1u)) * a.row_bytes);
    const uint rb = id % 8u, tb = id / 8u;

    precise float total[TM][TN];
    precise float part[TM][TN];
    [[unroll]] for (uint i = 0u; i < TM; ++i)
        [[unroll]] for (uint t = 0u; t < TN; ++t) total[i][t] = 0.0;
    [[unroll]] for (uint i = 0u; i < TM; ++i)
        [[unroll]] for (uint t = 0u; t < TN; ++t) part[i][t] = 0.0;
    // The current slice ends at chunk slice_end (empty slices add +0 to a
    // total that is never -0: skipping them changes no bit).
    uint s = 1u, slice_end = slice_begin(1u, n_chunks);
    while (slice_end == 0u && s < SLICES) slice_end = slice_begin(++s, n_chunks);
    float wv[32];
    float xv[32];
    for (uint j0 = 0u; j0 < n_chunks; j0 += KC) {
        [[unroll]] for (uint c = 0u; c < KC; ++c) {
            const uint j = j0 + c;
            if (j >= n_chunks) break;
            dequant_block(row, j, a.n_cols, wv);
            load_x(min(tok0 + id, a.n_tokens - 1u), j, wide, xv);
            [[unroll]] for (uint e = 0u; e < 32u; ++e) xs[(32u * c + e) * BN + id] = xv[e];
            [[unroll]] for (uint e = 0u; e < 32u; ++e) ws[(32u * c + e) * BM + id] = wv[e];
        }
        barrier();
        [[unroll]] for (uint c = 0u; c < KC; ++c) {
            const uint j = j0 + c;
            if (j >= n_chunks) break;
            [[unroll]] for (uint e = 32u * c; e < 32u * c + 32u; ++e) {
                float wr[TM], xr[TN];
                [[unroll]] for (uint i = 0u; i < TM; ++i) wr[i] = ws[e * BM + rb + 8u * i];
                [[unroll]] for (uint t = 0u; t < TN; ++t) xr[t] = xs[e * BN + tb + 8u * t];
                [[unroll]] for (uint i = 0u; i < TM; ++i)
                    [[unroll]] for (uint t = 0u; t < TN; ++t)
                        part[i][t] = fma(wr[i], xr[t], part[i][t]);
            }
            if (j + 1u == slice_end) {
                [[unroll]] for (uint i = 0u; i < TM; ++i)
                    [[unroll]] for (uint t = 0u; t < TN; ++t) {
                        total[i][t] += part[i][t];
                        part[i][t] = 0.0;
                    }
                while (slice_end == j + 1u && s < SLICES) slice_end = slice_begin(++s, n_chunks);
            }
        }
        barrier();
    }
    [[unroll]] for (uint i = 0u; i < TM; ++i) {
        const uint r = row0 + rb + 8u * i;
        if (r >= n_rows) continue;
        [[unroll]] for (uint t = 0u; t < TN; ++t) {
            const uint tok = tok0 + tb + 8u * t;
            if (tok < a.n_tokens) Floats(y_at + 4ul * (uint64_t(tok) * n_rows + r)).v[0] = total[i][t];
        }
    }
}
#endif
