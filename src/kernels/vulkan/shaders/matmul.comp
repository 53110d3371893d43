#version 450
// y (n_tokens, y_stride) [t, r] = sum_k x (n_tokens, x_stride) [t, k] * W (n_rows, n_cols) [r, k]
//
// One source for every weight type (-DW_<TYPE>, dequant.glsl) and both
// shapes: NT tokens per workgroup, 1 for decode (matrix × vector) and 8 for
// prefill (a tile of 16 rows × 8 tokens: each weight chunk is dequantized
// once into registers and used for all 8 tokens, whose activations the 8
// row lanes read through the cache).
//
// Work split: a workgroup is 32 K-slices × 8 row lanes and owns 16 rows
// (2 per lane) × NT tokens. The row is read in chunks of 32 elements; slice
// s takes chunks s, s + 32, s + 64, ... and accumulates w * x with fma in
// element order; the 32 slices' partial sums are then added by a fixed tree
// in shared memory (TREE_SUM). So every output's reduction order depends on
// its row's length alone, never on NT or on how many tokens the call has:
// a token gets the same bits alone or in a batch.
#include "common.glsl"
#include "dequant.glsl"

#ifndef NT
#define NT 1
#endif
#define SLICES 32u
#define LANES 8u
#define RPL 2u  // rows per lane
layout(local_size_x = 32, local_size_y = 8) in;

layout(push_constant) uniform Args {
    uint64_t w;  // row 0 of W
    uint64_t x;  // token 0 of x
    uint64_t y;  // token 0, row 0 of y
    uint n_rows;
    uint n_cols;
    uint n_tokens;
    uint row_bytes;
    uint x_stride;  // floats
    uint y_stride;  // floats
} a;

shared float red[LANES * RPL * NT * SLICES];

void main() {
    const uint s = gl_LocalInvocationID.x, lane = gl_LocalInvocationID.y;
    const uint r0 = gl_WorkGroupID.x * (LANES * RPL) + lane * RPL;
    const uint t0 = gl_WorkGroupID.y * NT;
    const uint n_chunks = (a.n_cols + 31u) / 32u;
    float acc[RPL][NT];
    for (uint i = 0u; i < RPL; ++i)
        for (uint t = 0u; t < NT; ++t) acc[i][t] = 0.0;
    float w[32];
    for (uint j = s; j < n_chunks; j += SLICES) {
        for (uint i = 0u; i < RPL; ++i) {
            const uint r = r0 + i;
            if (r >= a.n_rows) continue;
            dequant_chunk(a.w + uint64_t(r) * a.row_bytes, j, a.n_cols, w);
            for (uint t = 0u; t < NT; ++t) {
                if (t0 + t >= a.n_tokens) break;
                Floats xt = Floats(a.x + 4ul * (uint64_t(t0 + t) * a.x_stride + 32u * j));
                const uint n = min(32u, a.n_cols - 32u * j);
                for (uint e = 0u; e < n; ++e) acc[i][t] = fma(w[e], xt.v[e], acc[i][t]);
            }
        }
    }
    for (uint i = 0u; i < RPL; ++i)
        for (uint t = 0u; t < NT; ++t) red[((lane * RPL + i) * NT + t) * SLICES + s] = acc[i][t];
    barrier();
    for (uint stride = SLICES / 2u; stride > 0u; stride >>= 1u) {
        if (s < stride)
            for (uint i = 0u; i < RPL; ++i)
                for (uint t = 0u; t < NT; ++t) {
                    const uint k = ((lane * RPL + i) * NT + t) * SLICES + s;
                    red[k] += red[k + stride];
                }
        barrier();
    }
    if (s != 0u) return;
    for (uint i = 0u; i < RPL; ++i) {
        const uint r = r0 + i;
        if (r >= a.n_rows) continue;
        for (uint t = 0u; t < NT; ++t) {
            if (t0 + t >= a.n_tokens) break;
            Floats(a.y + 4ul * (uint64_t(t0 + t) * a.y_stride + r)).v[0] =
                red[((lane * RPL + i) * NT + t) * SLICES];
        }
    }
}
