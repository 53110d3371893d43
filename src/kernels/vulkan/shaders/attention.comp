#version 450
// Flash attention over the paged KV cache, decode and prefill alike. For a
// token at position pos of sequence s and query head h (KV head h / group):
//   keys p in [first, pos], first = max(0, pos + 1 - window) (0: no window)
//   s_p = scale × q · k_p,  out = sum_p e^(s_p - m) v_p / sum_p e^(s_p - m)
// with an online softmax over tiles of 64 keys (tile i holds positions
// [64 i, 64 i + 64), whatever the block size): m' = max(m, max_tile s),
// c = e^(m - m'), l = l c + sum_tile e^(s - m'), acc = acc c + sum_tile
// e^(s - m') v. No n² buffer: one tile of scores in shared memory, and
// where each of its keys is (its block looked up once, for K and V).
//
// Work split: one workgroup of 64 invocations per (query head, token):
// x = head, y = token. Invocation j scores key 64 i + j of each tile (a
// dot product in dimension order), the tile's max and sum are fixed trees,
// and invocation j owns output dims j, j + 64, ... (up to 256), adding the
// tile's keys in order. A query's result depends only on its own position,
// window and the cached K/V, never on the other tokens of the step.
#include "common.glsl"
#include "kv.glsl"

layout(local_size_x = 64) in;
#define TILE 64u
#define MAX_HEAD 256u

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
} a;

shared float qs[MAX_HEAD];
shared float sc[TILE];  // scores, then weights e^(s - m')
shared float red[TILE];
shared uint64_t base[TILE];  // where each key's block of this layer starts, once per tile

void main() {
    const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, j = gl_LocalInvocationID.x;
    Words step = Words(a.step);
    const uint pos = step.v[a.at_positions + t];
    const uint seq = step.v[a.at_seq_of_token + t];
    const uint first = a.window != 0u && pos + 1u > a.window ? pos + 1u - a.window : 0u;
    const uint table = a.at_tables + step.v[a.at_table_start + seq];
    const uint kv_h = h / (a.n_head / a.n_head_kv);
    // Offsets of the KV head's rows within a layer's part of a block.
    const uint64_t k_head = uint64_t(kv_h * a.block_size) * a.k_row_bytes;
    const uint64_t v_head = a.v_start + uint64_t(kv_h * a.block_size) * a.v_row_bytes;

    Floats q = Floats(a.q + 4ul * (uint64_t(t) * a.n_head + h) * a.head_dim_k);
    for (uint d = j; d < a.head_dim_k; d += TILE) qs[d] = q.v[d];
    float acc[MAX_HEAD / TILE];
    for (uint k = 0u; k < MAX_HEAD / TILE; ++k) acc[k] = 0.0;
    float m = -1.0 / 0.0, l = 0.0;
    barrier();

    for (uint t0 = first / TILE * TILE; t0 <= pos; t0 += TILE) {
        const uint p = t0 + j;
        const bool valid = p >= first && p <= pos;
        float s = -1.0 / 0.0;
        if (valid) {
            const uint block = step.v[table + p / a.block_size];
            base[j] = kv_block(a.pieces, a.piece_blocks, a.block_bytes, a.layer_offset, block);
            const uint64_t row = base[j] + k_head + uint64_t(p % a.block_size) * a.k_row_bytes;
            float dot = 0.0;
            for (uint d = 0u; d < a.head_dim_k; ++d) dot = fma(qs[d], kv_at(row, d), dot);
            s = a.scale * dot;
        }
        red[j] = s;
        barrier();
        for (uint stride = TILE / 2u; stride > 0u; stride >>= 1u) {
            if (j < stride) red[j] = max(red[j], red[j + stride]);
            barrier();
        }
        const float m_new = max(m, red[0]);
        const float c = m == -1.0 / 0.0 ? 0.0 : exp(m - m_new);
        const float w = valid ? exp(s - m_new) : 0.0;
        barrier();  // every invocation has read red[0]
        sc[j] = w;
        red[j] = w;
        barrier();
        TREE_SUM(red, 0u, TILE, j)
        l = l * c + red[0];
        m = m_new;
        const uint n_keys = min(TILE, pos + 1u - t0);
        for (uint k = 0u; k < MAX_HEAD / TILE; ++k) {
            const uint d = j + k * TILE;
            if (d >= a.head_dim_v) break;
            float o = acc[k] * c;
            for (uint i = 0u; i < n_keys; ++i) {
                const uint pi = t0 + i;
                if (pi < first) continue;
                const uint64_t row =
                    base[i] + v_head + uint64_t(pi % a.block_size) * a.v_row_bytes;
                o = fma(sc[i], kv_at(row, d), o);
            }
            acc[k] = o;
        }
        barrier();  // sc and red are rewritten by the next tile
    }
    Floats o = Floats(a.out_ + 4ul * (uint64_t(t) * a.n_head + h) * a.head_dim_v);
    for (uint k = 0u; k < MAX_HEAD / TILE; ++k) {
        const uint d = j + k * TILE;
        if (d < a.head_dim_v) o.v[d] = acc[k] / l;
    }
}
