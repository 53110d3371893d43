// Reading and writing one row of the KV cache in its dtype (-DKV_<TYPE>):
// a row is one head's K or V of one token, head_dim elements: f32, f16,
// bf16, or Q8_0 blocks of 32 ({f16 d; i8 q[32]}, 34 bytes).
//
// Where a row is (kernels/kv-layout.h): a group's region is in pieces of
// piece_blocks whole blocks, `pieces` a table of their addresses; block b
// starts at pieces[b / piece_blocks] + (b % piece_blocks) × block_bytes, and
// a layer's rows of it layer_offset after that; in them, head h's K rows are
// at h × block_size × k_row_bytes, its V rows after all K rows at
// v_start + h × block_size × v_row_bytes; slot r of the block is row r.

uint64_t kv_block(uint64_t pieces, uint piece_blocks, uint block_bytes, uint layer_offset,
                  uint block) {
    return Addresses(pieces).v[block / piece_blocks] +
           uint64_t(block % piece_blocks) * block_bytes + layer_offset;
}

float kv_at(uint64_t row, uint d) {
#if defined(KV_F32)
    return Floats(row).v[d];
#elif defined(KV_F16)
    return half_to_float(uint(Halves(row).v[d]));
#elif defined(KV_BF16)
    return bf16_to_float(uint(Halves(row).v[d]));
#elif defined(KV_Q8_0)
    const uint64_t b = row + 34u * (d / 32u);
    const float scale = half_to_float(uint(Halves(b).v[0]));
    int q = int(uint(Bytes(b + 2u).v[d % 32u]));
    q = q > 127 ? q - 256 : q;
    precise float v = scale * float(q);
    return v;
#else
#error "compile with -DKV_<TYPE>"
#endif
}
