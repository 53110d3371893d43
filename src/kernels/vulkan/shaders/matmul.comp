#version 450
// y (n_tokens, n_rows) [t, r] = sum_k x (n_tokens, x_stride) [t, k] * W (n_rows, n_cols) [r, k]
// for up to 3 matrices of one type and width that read the same x (q, k and v; gate and up),
// in one dispatch: workgroups [0, end0) are matrix 0's, [end0, end1) matrix 1's, the rest
// matrix 2's.
//
// One source for every weight type (-DW_<TYPE>, dequant.glsl) and both
// shapes (-DNT, -DRPL): NT tokens per workgroup, 1 for decode (matrix ×
// vector, RPL = 4 rows an invocation) and 4 for prefill (a tile of 16 rows ×
// 4 tokens, 2 rows an invocation): each weight chunk is dequantized once
// into registers and used for every token of the tile, each chunk of
// activations loaded once for every row of the invocation.
//
// Work split: a workgroup is 16 K-slices × (16 / RPL) row lanes and owns 16
// rows × NT tokens. A row is read in chunks of 32 elements (a block, or a
// K-quant sub-block), each as a few word loads; slice s takes chunks s,
// s + 16, s + 32, ... and accumulates w * x with fma in element order. The
// 16 slices' partial sums are then added by a fixed tree in shared memory.
// So every output's reduction order depends on its row's length alone,
// never on NT, RPL or on how many tokens the call has: a token gets the same
// bits alone or in a batch.
#include "common.glsl"
#include "dequant.glsl"

#ifndef NT
#define NT 1
#endif
#ifndef RPL
#define RPL 4u  // rows per invocation
#endif
#define SLICES 16u
#define ROWS 16u
#define ROW_LANES (ROWS / RPL)
layout(local_size_x = 16, local_size_y = ROWS / RPL) in;

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

shared float red[ROWS * NT * SLICES];

void main() {
    uint g = gl_WorkGroupID.x;
    uint64_t w_at = a.w0, y_at = a.y0;
    uint n_rows = a.n_rows0;
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
    const uint s = gl_LocalInvocationID.x, lane = gl_LocalInvocationID.y;
    const uint r0 = g * ROWS + lane * RPL;
    const uint t0 = gl_WorkGroupID.y * NT;
    const uint n_chunks = (a.n_cols + 31u) / 32u;
    const uint n_t = min(NT, a.n_tokens - t0);
    // x a vec4 at a time where every chunk starts on 16 bytes (quantized
    // weights: n_cols is a multiple of 32), else a float at a time.
    const bool wide = (a.x_stride & 3u) == 0u && (a.n_cols & 31u) == 0u && (a.x & 15ul) == 0ul;
    Row rows[RPL];
    [[unroll]] for (uint i = 0u; i < RPL; ++i)  // past the end: computed, not stored
        rows[i] = row_at(w_at + uint64_t(min(r0 + i, n_rows - 1u)) * a.row_bytes);
    float acc[RPL][NT];
    [[unroll]] for (uint i = 0u; i < RPL; ++i)
        [[unroll]] for (uint t = 0u; t < NT; ++t) acc[i][t] = 0.0;
    float w[RPL][32];
    float xv[32];
    for (uint j = s; j < n_chunks; j += SLICES) {
        [[unroll]] for (uint i = 0u; i < RPL; ++i) dequant_block(rows[i], j, a.n_cols, w[i]);
        [[unroll]] for (uint t = 0u; t < NT; ++t) {
            if (t >= n_t) break;
            const uint x0 = (t0 + t) * a.x_stride + 32u * j;
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
                [[unroll]] for (uint e = 0u; e < 32u; ++e)
                    xv[e] = 32u * j + e < a.n_cols ? xf.v[e] : 0.0;
            }
            [[unroll]] for (uint i = 0u; i < RPL; ++i)
                [[unroll]] for (uint e = 0u; e < 32u; ++e)
                    acc[i][t] = fma(w[i][e], xv[e], acc[i][t]);
        }
    }
    [[unroll]] for (uint i = 0u; i < RPL; ++i)
        [[unroll]] for (uint t = 0u; t < NT; ++t)
            red[((lane * RPL + i) * NT + t) * SLICES + s] = acc[i][t];
    barrier();
    for (uint stride = SLICES / 2u; stride > 0u; stride >>= 1u) {
        if (s < stride)
            [[unroll]] for (uint i = 0u; i < RPL; ++i)
                [[unroll]] for (uint t = 0u; t < NT; ++t) {
                    const uint k = ((lane * RPL + i) * NT + t) * SLICES + s;
                    red[k] += red[k + stride];
                }
        barrier();
    }
    if (s != 0u) return;
    [[unroll]] for (uint i = 0u; i < RPL; ++i) {
        const uint r = r0 + i;
        if (r >= n_rows) continue;
        for (uint t = 0u; t < n_t; ++t)
            Floats(y_at + 4ul * (uint64_t(t0 + t) * n_rows + r)).v[0] =
                red[((lane * RPL + i) * NT + t) * SLICES];
    }
}
