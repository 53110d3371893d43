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
shared float part[GROUP * TILE * 8u];  // [key set][head][dim]: the key sets' partial outputs

// DW elements of a row read together: 16 bytes where the row allows (f16
// and bf16: 8, f32: 4), else one at a time (Q8_0 rows, odd alignments).
#if defined(KV_F32)
#define DW 4u
#else
#define DW 8u
#endif
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Quads { uvec4 v[]; };

// Elements [d0, d0 + DW) of the row at `row` (zero past n); `wide`: the row
// and its first n elements sit on 16 bytes.
void load_part(uint64_t row, uint d0, uint n, bool wide, out float v[DW]) {
#if defined(KV_F16) || defined(KV_BF16) || defined(KV_F32)
    if (wide) {
        const uvec4 u = Quads(row + uint64_t(d0) * (DW == 8u ? 2u : 4u)).v[0];
        [[unroll]] for (uint w = 0u; w < 4u; ++w) {
#if defined(KV_F16)
            const vec2 h = unpackHalf2x16(u[w]);
            v[2u * w] = h.x;
            v[2u * w + 1u] = h.y;
#elif defined(KV_BF16)
            v[2u * w] = bf16_to_float(u[w] & 0xFFFFu);
            v[2u * w + 1u] = bf16_to_float(u[w] >> 16);
#else
            v[w] = uintBitsToFloat(u[w]);
#endif
        }
        return;
    }
#endif
    [[unroll]] for (uint e = 0u; e < DW; ++e) v[e] = d0 + e < n ? kv_at(row, d0 + e) : 0.0;
}

// q_g · k for the workgroup's heads g < ng, k the K row at `row`, each in
// dimension order.
void score(uint64_t row, uint ng, bool wide, inout float dot[GROUP]) {
    for (uint d0 = 0u; d0 < a.head_dim_k; d0 += DW) {
        float k[DW];
        load_part(row, d0, a.head_dim_k, wide, k);
        [[unroll]] for (uint e = 0u; e < DW; ++e) {
            if (d0 + e >= a.head_dim_k) break;
            [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
                if (g >= ng) break;
                dot[g] = fma(qs[g * MAX_HEAD + d0 + e], k[e], dot[g]);
            }
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
    // Rows on 16 bytes: every offset that makes a row's address is a
    // multiple of 16 (the pieces' addresses are).
    const bool wide = ((a.block_bytes | a.layer_offset | a.k_row_bytes | a.v_row_bytes |
                        a.v_start | a.head_dim_k * 16u / DW | a.head_dim_v * 16u / DW) & 15u) == 0u;
    // V: lane dl of key set ks reads elements [DW dl, DW dl + DW) of keys
    // ks, ks + n_sets, ... of each tile (lanes past n_sets × lanes idle).
    const uint lanes = (a.head_dim_v + DW - 1u) / DW, n_sets = TILE / lanes;
    const uint ks = j / lanes, dl = j % lanes;
    float acc[GROUP][DW];
    float m[GROUP], l[GROUP];
    [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
        [[unroll]] for (uint e = 0u; e < DW; ++e) acc[g][e] = 0.0;
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
            score(base[j] + k_head + uint64_t(p % a.block_size) * a.k_row_bytes, ng, wide, s);
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
        [[unroll]] for (uint g = 0u; g < GROUP; ++g)
            [[unroll]] for (uint e = 0u; e < DW; ++e) acc[g][e] *= c[g];
        if (ks < n_sets) {
            const uint i0 = first > t0 ? first - t0 : 0u;
            for (uint i = ks + (i0 > ks ? (i0 - ks + n_sets - 1u) / n_sets * n_sets : 0u);
                 i < n_keys; i += n_sets) {
                const uint pi = t0 + i;
                float v[DW];
                load_part(base[i] + v_head + uint64_t(pi % a.block_size) * a.v_row_bytes, DW * dl,
                          a.head_dim_v, wide, v);
                [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
                    if (g >= ng) break;
                    const float w = sc[g * TILE + i];
                    [[unroll]] for (uint e = 0u; e < DW; ++e) acc[g][e] = fma(w, v[e], acc[g][e]);
                }
            }
        }
        barrier();  // sc and base are rewritten by the next tile
    }
    // out = (0 + the key sets' partials in turn) / l, through shared memory.
    if (ks < n_sets)
        [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
            if (g >= ng) break;
            [[unroll]] for (uint e = 0u; e < DW; ++e)
                if (DW * dl + e < a.head_dim_v)
                    part[(ks * ng + g) * a.head_dim_v + DW * dl + e] = acc[g][e];
        }
    barrier();
    for (uint g = 0u; g < ng; ++g) {
        Floats o = Floats(a.out_ + 4ul * (uint64_t(t) * a.n_head + h0 + g) * a.head_dim_v);
        for (uint d = j; d < a.head_dim_v; d += TILE) {
            float sum = 0.0;
            for (uint k = 0u; k < n_sets; ++k) sum += part[(k * ng + g) * a.head_dim_v + d];
            o.v[d] = sum / l[g];
        }
    }
}
