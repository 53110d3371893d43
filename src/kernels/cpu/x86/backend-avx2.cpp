// The AVX2 backend (AVX2, FMA, F16C): the shared x86 kernels instantiated
// with 8-lane vectors; u8 x s8 products through vpmaddubsw + vpmaddwd (see
// simd-avx2.h for the saturation rules), the same tiling as AVX-512.
#include "kernels/cpu/x86/attention.h"
#include "kernels/cpu/x86/backends.h"
#include "kernels/cpu/x86/elementwise.h"
#include "kernels/cpu/x86/gemm-f32.h"
#include "kernels/cpu/x86/gemm.h"
#include "kernels/cpu/x86/simd-avx2.h"

namespace headroom::kernels::x86 {

namespace {

using V = Avx2;

bool is_packed(const Matrix& w) {
    return w.packed && w.packed_for == &avx2_table();
}

void matmul(const Matrix& w, const Acts& x, float* y, const Context& ctx) {
    const bool packed = is_packed(w);
    if (x.quantized) {
        const Matrix* ws[1] = {&w};
        float* ys[1] = {y};
        matmul_int<V>(ws, ys, 1, x, ctx, &packed);
    } else if (is_int_type(w.type)) {
        matmul_dequant<V>(w, x, y, ctx, packed);
    } else if (w.type == TensorType::F32 || w.type == TensorType::F16 ||
               w.type == TensorType::BF16) {
        matmul_float<V>(w, x, y, ctx);
    } else {
        ref_ops().matmul(w, x, y, ctx);
    }
}

void matmul_n(const Matrix* const* ws, float* const* ys, int n, const Acts& x, const Context& ctx) {
    if (!x.quantized) {
        for (int i = 0; i < n; ++i) matmul(*ws[i], x, ys[i], ctx);
        return;
    }
    bool packed[4];
    for (int i = 0; i < n; ++i) packed[i] = is_packed(*ws[i]);
    matmul_int<V>(ws, ys, n, x, ctx, packed);
}

void attend(const AttentionArgs& a, const Context& ctx) {
    if (a.head_dim_k % V::kLanes || a.head_dim_v % V::kLanes)
        ref_ops().attention(a, ctx);
    else
        attention<V>(a, ctx);
}

}  // namespace

const Ops& avx2_table() {
    static const Ops kOps = {"avx2",      prepare<V>, matmul,          matmul_n,
                             attend,      rmsnorm<V>, rope<V>,         silu_mul<V>,
                             gelu_mul<V>, add<V>,     packed_bytes<V>, repack<V>};
    return kOps;
}

}  // namespace headroom::kernels::x86
