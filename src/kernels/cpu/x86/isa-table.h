// One x86 instruction set's table of ops: the shared kernels of this directory
// instantiated with the vector traits V. Each instruction set's translation unit
// (compiled with its instruction set's flags) includes this once and names
// its table, e.g. IsaTable<Avx512>::ops().
#pragma once

#include "kernels/cpu/x86/attention.h"
#include "kernels/cpu/x86/elementwise.h"
#include "kernels/cpu/x86/gemm-f32.h"
#include "kernels/cpu/x86/gemm.h"
#include "kernels/cpu/x86/tables.h"

namespace headroom::kernels::x86 {

template <class V>
struct IsaTable {
    static const Ops& ops() {
        static const Ops kOps = {V::kName,        prepare<V>,  matmul,     matmul_n,
                                 matmul_experts,  attend,      rmsnorm<V>, rope<V>,
                                 silu_mul<V>,     gelu_mul<V>, add<V>,     store_row<V>,
                                 packed_bytes<V>, repack<V>,   V::kLanes};
        return kOps;
    }

    // w.packed holds this table's repacked copy (made through its table).
    static bool is_packed(const Matrix& w) { return w.packed && w.packed_for == &ops(); }

    static void matmul(const Matrix& w, const Acts& x, float* y, const Context& ctx) {
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

    static void matmul_n(const Matrix* const* ws, float* const* ys, int n, const Acts& x,
                         const Context& ctx) {
        if (!x.quantized) {
            for (int i = 0; i < n; ++i) matmul(*ws[i], x, ys[i], ctx);
            return;
        }
        bool packed[4];
        for (int i = 0; i < n; ++i) packed[i] = is_packed(*ws[i]);
        matmul_int<V>(ws, ys, n, x, ctx, packed);
    }

    static void matmul_experts(const ExpertGroup* gs, int n_groups, int n_ws, const Acts& x,
                               float* const* ys, const Context& ctx) {
        if (x.quantized) return matmul_experts_int<V>(gs, n_groups, n_ws, x, ys, ctx, is_packed);
        matmul_experts_one_by_one(gs, n_groups, n_ws, x, ys, ctx, matmul);
    }

    static void attend(const AttentionArgs& a, const Context& ctx) {
        if (a.head_dim_k % V::kLanes || a.head_dim_v % V::kLanes)
            ref_ops().attention(a, ctx);
        else
            attention<V>(a, ctx);
    }
};

}  // namespace headroom::kernels::x86
