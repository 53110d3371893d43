#version 450
// Rows of a matrix, by index (-D<OP>):
//   GET_ROWS     out (n_tokens, n_cols) [t] = table[tokens[t]] × scale, the
//                table in the type the shader is compiled for (-DW_<TYPE>):
//                the embedding lookup. One invocation per element.
//   GATHER_ROWS  out (n_rows, n_cols) [r] = x[rows[r]], f32: the rows that
//                need logits. One invocation per element.
// x = chunk (or element), y = token (or row).
#include "common.glsl"
#if defined(GET_ROWS)
#include "dequant.glsl"
#endif

layout(local_size_x = 64) in;

layout(push_constant) uniform Args {
    uint64_t src;    // the table, or x
    uint64_t index;  // (n) u32 token ids, or row indices
    uint64_t out_;
    uint n_cols;
    uint row_bytes;  // of src
    float scale;
} a;

void main() {
    const uint r = gl_WorkGroupID.y;
    const uint src_row = Words(a.index).v[r];
#if defined(GET_ROWS)
    const uint c = gl_GlobalInvocationID.x;
    if (c >= a.n_cols) return;
    const float w = dequant(row_at(a.src + uint64_t(src_row) * a.row_bytes), c / 32u, c % 32u,
                            a.n_cols);
    precise float v = a.scale != 1.0 ? w * a.scale : w;
    Floats(a.out_ + 4ul * uint64_t(r) * a.n_cols).v[c] = v;
#elif defined(GATHER_ROWS)
    const uint c = gl_GlobalInvocationID.x;
    if (c >= a.n_cols) return;
    Floats(a.out_ + 4ul * uint64_t(r) * a.n_cols).v[c] =
        Floats(a.src + 4ul * uint64_t(src_row) * a.n_cols).v[c];
#else
#error "compile with -D<OP>"
#endif
}
