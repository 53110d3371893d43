#version 450
// K and V rows of a step's tokens into the cache (kv.glsl), at the slot the
// step view maps each token to (block × block_size + position % block_size):
//   K (n_tokens, n_head_kv, head_dim_k), V (n_tokens, n_head_kv, head_dim_v), f32
// converted to the KV dtype exactly as the CPU's store_row does (f16 and
// bf16 round to nearest even; Q8_0 as quant_q8_0: d = amax / 127, q =
// round(x / d) half away from zero, d stored as f16).
//
// Work split: x = element (f32 / f16 / bf16) or 32-element block (Q8_0) of
// a head's row, y = KV head, z = token; each invocation writes K and V.
#include "common.glsl"
#include "kv.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform Args {
    uint64_t k;
    uint64_t v;
    uint64_t pieces;  // the group's piece addresses (kv.glsl)
    uint64_t slots;   // (n_tokens) u32: this layer group's slots
    uint piece_blocks;
    uint layer_offset;
    uint block_bytes;
    uint block_size;
    uint k_row_bytes;
    uint v_row_bytes;
    uint v_start;  // n_head_kv × block_size × k_row_bytes
    uint n_head_kv;
    uint head_dim_k;
    uint head_dim_v;
} a;

void store(Floats src, uint64_t dst, uint i, uint n) {
#if defined(KV_Q8_0)
    if (32u * i >= n) return;
    float amax = 0.0;
    for (uint e = 0u; e < 32u; ++e) amax = max(amax, abs(src.v[32u * i + e]));
    const float d = div_rn(amax, 127.0);
    const float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
    const uint64_t b = dst + 34u * i;
    Halves(b).v[0] = uint16_t(float_to_half(d));
    Bytes q = Bytes(b + 2u);
    for (uint e = 0u; e < 32u; ++e) {
        precise float x = src.v[32u * i + e] * id;
        q.v[e] = uint8_t(uint(int(round_away(x))) & 0xFFu);
    }
#else
    if (i >= n) return;
#if defined(KV_F32)
    Floats(dst).v[i] = src.v[i];
#elif defined(KV_F16)
    Halves(dst).v[i] = uint16_t(float_to_half(src.v[i]));
#else
    Halves(dst).v[i] = uint16_t(float_to_bf16(src.v[i]));
#endif
#endif
}

void main() {
    const uint i = gl_GlobalInvocationID.x, h = gl_WorkGroupID.y, t = gl_WorkGroupID.z;
    const uint slot = Words(a.slots).v[t];
    const uint block = slot / a.block_size, r = slot % a.block_size;
    const uint64_t base = kv_block(a.pieces, a.piece_blocks, a.block_bytes, a.layer_offset, block);
    const uint64_t k_row = base + uint64_t(h * a.block_size + r) * a.k_row_bytes;
    const uint64_t v_row = base + a.v_start + uint64_t(h * a.block_size + r) * a.v_row_bytes;
    store(Floats(a.k + 4ul * (uint64_t(t) * a.n_head_kv + h) * a.head_dim_k), k_row, i,
          a.head_dim_k);
    store(Floats(a.v + 4ul * (uint64_t(t) * a.n_head_kv + h) * a.head_dim_v), v_row, i,
          a.head_dim_v);
}
