#version 450
// Flash attention over the paged KV cache, decode and prefill alike. For a
// token at position pos of sequence s and query head h (KV head h / group,
// group = n_head / n_head_kv):
//   keys p in [first, pos], first = max(0, pos + 1 - window) (0: no window)
//   s_p = scale × q · k_p,  out = sum_p e^(s_p - m) v_p / sum_p e^(s_p - m)
// with an online softmax over tiles of 64 keys (tile i holds positions
// [64 i, 64 i + 64), whatever the block size): m' = max(m, max_tile s),
// c = e^(m - m'), l = l c + sum_tile e^(s - m'), acc = acc c + sum_tile
// e^(s - m') v, the tile's sums in key order. No n² buffer: one tile of weights in shared memory, and
// where each of its keys is (its block looked up once, for K and V).
//
// Work split: one workgroup of 64 invocations per token and `heads` query
// heads of one KV head (the largest divisor of the group up to GROUP = 8):
// x = head / heads, y = token. Each K and V row is read once for those heads. Invocation j scores key 64 i + j of
// each tile for every head (dot products in dimension order); every
// invocation takes the tile's max itself from shared memory (a max is
// exact in any order); invocation j owns output dims j, j + 64, ... (up to
// 256) of each head, adding the tile's keys in order. Three barriers a
// tile. A query's result depends only on its own position, window and the
// cached K/V, never on the other tokens of the step.
#include "common.glsl"
#include "kv.glsl"

layout(local_size_x = 64) in;
#define TILE 64u
#define MAX_HEAD 256u
#define GROUP 8u  // query heads of a workgroup at most
#define DIMS (MAX_HEAD / TILE)

layout(push_constant) uniform Args {
    uint64_t q;           // (n_tokens, n_head, head_dim_k)
    uint64_t out_;        // (n_tokens, n_head, head_dim_v)
    uint64_t pieces;      // the group's piece addresses (kv.glsl)
    uint64_t step;        // the step view's words
    uint piece_blocks;
    uint layer_offset;
    uint at_positions;    // word offsets in the step view
    uint at_seq_of_token;
    uint at_table_start;  // + group × n_seqs
    uint at_tables;
    uint block_bytes;
    uint block_size;
    uint k_row_bytes;
    uint v_row_bytes;
    uint v_start;
    uint n_head;
    uint n_head_kv;
    uint head_dim_k;
    uint head_dim_v;
    uint window;
    float scale;
    uint heads;  // query heads of a workgroup: a divisor of the group, at most GROUP
} a;

shared float qs[GROUP * MAX_HEAD];  // [head][dim]
shared float sc[GROUP * TILE];      // [head][key]: scores, then weights e^(s - m')
shared uint64_t base[TILE];  // where each key's block of this layer starts, once per tile

// q_g · k for the workgroup's heads g < ng, k the K row at `row`, each in
// dimension order (f16 rows two elements a word where aligned).
void score(uint64_t row, uint ng, inout float dot[GROUP]) {
#if defined(KV_F16)
    if ((a.head_dim_k & 1u) == 0u && (row & 3ul) == 0ul) {
        Words w = Words(row);
        for (uint d2 = 0u; d2 < a.head_dim_k / 2u; ++d2) {
            const vec2 k = unpackHalf2x16(w.v[d2]);
            [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
                if (g >= ng) break;
                dot[g] = fma(qs[g * MAX_HEAD + 2u * d2], k.x, dot[g]);
                dot[g] = fma(qs[g * MAX_HEAD + 2u * d2 + 1u], k.y, dot[g]);
            }
        }
        return;
    }
#endif
    for (uint d = 0u; d < a.head_dim_k; ++d) {
        const float k = kv_at(row, d);
        [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
            if (g >= ng) break;
            dot[g] = fma(qs[g * MAX_HEAD + d], k, dot[g]);
        }
    }
}

void main() {
    const uint j = gl_LocalInvocationID.x, t = gl_WorkGroupID.y;
    const uint ng = a.heads;
    const uint h0 = gl_WorkGroupID.x * ng;  // the workgroup's first query head
    const uint kv_h = h0 / (a.n_head / a.n_head_kv);
    Words step = Words(a.step);
    const uint pos = step.v[a.at_positions + t];
    const uint seq = step.v[a.at_seq_of_token + t];
    const uint first = a.window != 0u && pos + 1u > a.window ? pos + 1u - a.window : 0u;
    const uint table = a.at_tables + step.v[a.at_table_start + seq];
    // Offsets of the KV head's rows within a layer's part of a block.
    const uint64_t k_head = uint64_t(kv_h * a.block_size) * a.k_row_bytes;
    const uint64_t v_head = a.v_start + uint64_t(kv_h * a.block_size) * a.v_row_bytes;

    for (uint g = 0u; g < ng; ++g) {
        Floats q = Floats(a.q + 4ul * (uint64_t(t) * a.n_head + h0 + g) * a.head_dim_k);
        for (uint d = j; d < a.head_dim_k; d += TILE) qs[g * MAX_HEAD + d] = q.v[d];
    }
    float acc[GROUP][DIMS];
    float m[GROUP], l[GROUP];
    [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
        [[unroll]] for (uint k = 0u; k < DIMS; ++k) acc[g][k] = 0.0;
        m[g] = -1.0 / 0.0;
        l[g] = 0.0;
    }
    barrier();

    for (uint t0 = first / TILE * TILE; t0 <= pos; t0 += TILE) {
        const uint p = t0 + j;
        const bool valid = p >= first && p <= pos;
        float s[GROUP];
        [[unroll]] for (uint g = 0u; g < GROUP; ++g) s[g] = 0.0;
        if (valid) {
            const uint block = step.v[table + p / a.block_size];
            base[j] = kv_block(a.pieces, a.piece_blocks, a.block_bytes, a.layer_offset, block);
            score(base[j] + k_head + uint64_t(p % a.block_size) * a.k_row_bytes, ng, s);
        }
        [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
            if (g >= ng) break;
            sc[g * TILE + j] = valid ? a.scale * s[g] : -1.0 / 0.0;
        }
        barrier();  // scores and bases written
        const uint n_keys = min(TILE, pos + 1u - t0);
        float c[GROUP];
        [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
            c[g] = 0.0;
            if (g >= ng) continue;
            float mt = -1.0 / 0.0;
            for (uint i = 0u; i < n_keys; ++i) mt = max(mt, sc[g * TILE + i]);
            const float m_new = max(m[g], mt);
            c[g] = m[g] == -1.0 / 0.0 ? 0.0 : exp(m[g] - m_new);
            m[g] = m_new;
            s[g] = valid ? exp(sc[g * TILE + j] - m_new) : 0.0;
        }
        barrier();  // every invocation has read the scores
        [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
            if (g >= ng) break;
            sc[g * TILE + j] = s[g];
        }
        barrier();  // weights written
        // l = l c + the tile's weights in key order, by every invocation alike.
        [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
            if (g >= ng) break;
            float lt = 0.0;
            for (uint i = 0u; i < n_keys; ++i) lt += sc[g * TILE + i];
            l[g] = l[g] * c[g] + lt;
        }
        [[unroll]] for (uint k = 0u; k < DIMS; ++k) {
            const uint d = j + k * TILE;
            if (d >= a.head_dim_v) break;
            float o[GROUP];
            [[unroll]] for (uint g = 0u; g < GROUP; ++g) o[g] = acc[g][k] * c[g];
            for (uint i = first > t0 ? first - t0 : 0u; i < n_keys; ++i) {
                const uint pi = t0 + i;
                const float v =
                    kv_at(base[i] + v_head + uint64_t(pi % a.block_size) * a.v_row_bytes, d);
                [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
                    if (g >= ng) break;
                    o[g] = fma(sc[g * TILE + i], v, o[g]);
                }
            }
            [[unroll]] for (uint g = 0u; g < GROUP; ++g) acc[g][k] = o[g];
        }
        barrier();  // sc and base are rewritten by the next tile
    }
    [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
        if (g >= ng) break;
        Floats o = Floats(a.out_ + 4ul * (uint64_t(t) * a.n_head + h0 + g) * a.head_dim_v);
        [[unroll]] for (uint k = 0u; k < DIMS; ++k) {
            const uint d = j + k * TILE;
            if (d < a.head_dim_v) o.v[d] = acc[g][k] / l[g];
        }
    }
}
