// Reading and writing one row of the KV cache in its dtype (-DKV_<TYPE>):
// a row is one head's K or V of one token, head_dim elements: f32, f16,
// bf16, or Q8_0 blocks of 32 ({f16 d; i8 q[32]}, 34 bytes).
//
// Where a row is (kernels/kv-layout.h): a layer's rows of block b start at
// layer_base + b × block_bytes; in them, head h's K rows are at
// h × block_size × k_row_bytes, its V rows after all K rows at
// v_start + h × block_size × v_row_bytes; slot r of the block is row r.

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
