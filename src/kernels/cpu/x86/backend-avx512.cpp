// The AVX-512 backend (F, BW, VL, DQ and VNNI, as on Zen 4 and Ice Lake
// onwards): the shared x86 kernels instantiated with 16-lane vectors.
// vpdpbusd does the u8 x s8 multiply-adds of the integer matmuls, 64 per
// instruction; see gemm.h for the tiling and pack.h for the panel layout.
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its
// -W(maybe-)uninitialized reports at every inlined use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/x86/attention.h"
#include "kernels/cpu/x86/backends.h"
#include "kernels/cpu/x86/elementwise.h"
#include "kernels/cpu/x86/gemm-f32.h"
#include "kernels/cpu/x86/gemm.h"
#include "kernels/cpu/x86/simd-avx512.h"

namespace headroom::kernels::x86 {

namespace {

using V = Avx512;

bool is_packed(const Matrix& w) {
    return w.packed && w.packed_for == &avx512_table();
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

const Ops& avx512_table() {
    static const Ops kOps = {"avx512",    prepare<V>, matmul,          matmul_n,
                             attend,      rmsnorm<V>, rope<V>,         silu_mul<V>,
                             gelu_mul<V>, add<V>,     packed_bytes<V>, repack<V>};
    return kOps;
}

}  // namespace headroom::kernels::x86
