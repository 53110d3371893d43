// The reference table: plain loops, f32 everywhere, weights dequantized a
// row at a time. Slow and obviously right; the fast tables are tested
// against it.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/thread-pool.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/ref/quant.h"

namespace headroom::kernels {

namespace {

Acts ref_prepare(const float* x, int64_t n_tokens, int64_t n, TensorType wtype, const Context&) {
    Acts a;
    a.w_type = wtype;
    a.f32 = x;
    a.n_tokens = n_tokens;
    a.n = n;
    return a;
}

// y[t, r] = sum_i x[t, i] * W[r, i], W's row dequantized to f32 first.
void ref_matmul(const Matrix& w, const Acts& x, float* y, const Context& ctx) {
    ctx.pool->parallel_for(w.n_rows, [&](int64_t begin, int64_t end, int thread) {
        auto* row = reinterpret_cast<float*>(ctx.thread_scratch(thread));  // (n_cols)
        for (int64_t r = begin; r < end; ++r) {
            ref::dequantize_row(w.type, w.data + static_cast<uint64_t>(r) * w.row_bytes, row,
                                w.n_cols);
            for (int64_t t = 0; t < x.n_tokens; ++t) {
                const float* xt = x.f32 + t * x.n;
                float sum = 0;
                for (int64_t i = 0; i < w.n_cols; ++i) sum += xt[i] * row[i];
                y[t * w.n_rows + r] = sum;
            }
        }
    });
}

// For one (token, head): keys p0..p of the token's sequence, visited block by
// block; s = scale * q·k; online softmax: m = running max, l = running sum
// of e^(s - m), acc = running sum of e^(s - m) * v.
void ref_attention(const AttentionArgs& a, const Context& ctx) {
    const uint32_t group = a.n_head / a.n_head_kv;
    const KvLayout& kv = *a.kv;
    const uint32_t bs = kv.block_size;
    const TensorType kv_type = tensor_type(kv.dtype);
    const uint32_t g = kv.group_of_layer[a.layer];
    ctx.pool->parallel_for(a.n_tokens * a.n_head, [&](int64_t begin, int64_t end, int thread) {
        auto* k = reinterpret_cast<float*>(ctx.thread_scratch(thread));  // (head_dim_k)
        float* v = k + a.head_dim_k;                                     // (head_dim_v)
        float* acc = v + a.head_dim_v;                                   // (head_dim_v)
        for (int64_t job = begin; job < end; ++job) {
            const int64_t t = job / a.n_head;
            const uint32_t h = static_cast<uint32_t>(job % a.n_head);
            const uint32_t kv_h = h / group;
            const uint32_t pos = a.positions[t];
            const int32_t* table = a.step->table(g, a.seq_of_token[t]);
            const uint32_t first = first_visible(pos, a.window);
            const float* q = a.q + (t * a.n_head + h) * a.head_dim_k;
            float m = -std::numeric_limits<float>::infinity(), l = 0;
            std::fill(acc, acc + a.head_dim_v, 0.0f);
            for (uint32_t p = first; p <= pos; ++p) {
                const int32_t block = table[p / bs];
                const uint32_t slot = p % bs;
                ref::dequantize_row(
                    kv_type, a.kv_base + kv.k_offset(a.layer, block, kv_h) + slot * kv.k_row_bytes,
                    k, a.head_dim_k);
                float s = 0;
                for (uint32_t i = 0; i < a.head_dim_k; ++i) s += q[i] * k[i];
                s *= a.scale;
                const float m_new = std::max(m, s);
                const float correction = std::exp(m - m_new);
                const float weight = std::exp(s - m_new);
                ref::dequantize_row(
                    kv_type, a.kv_base + kv.v_offset(a.layer, block, kv_h) + slot * kv.v_row_bytes,
                    v, a.head_dim_v);
                for (uint32_t i = 0; i < a.head_dim_v; ++i)
                    acc[i] = acc[i] * correction + weight * v[i];
                l = l * correction + weight;
                m = m_new;
            }
            attention_finish(acc, m, l, a.sinks ? a.sinks + h : nullptr, a.head_dim_v,
                             a.out + (t * a.n_head + h) * a.head_dim_v);
        }
    });
}

void ref_rmsnorm(const float* x, const float* w, float weight_offset, float eps, int64_t n_tokens,
                 int64_t n, float* out, const Context&) {
    rmsnorm(x, w, weight_offset, eps, n_tokens, n, out);
}
void ref_rope(float* x, int64_t n_tokens, const uint32_t* positions, const RopeArgs& args,
              const Context&) {
    rope(x, n_tokens, positions, args);
}
void ref_silu_mul(float* gate, const float* up, int64_t n, const Context&) {
    silu_mul(gate, up, n);
}
void ref_gelu_mul(float* gate, const float* up, int64_t n, const Context&) {
    gelu_mul(gate, up, n);
}
void ref_add(float* x, const float* y, int64_t n, const Context&) {
    add(x, y, n);
}

void ref_matmul_n(const Matrix* const* ws, float* const* ys, int n, const Acts& x,
                  const Context& ctx) {
    for (int i = 0; i < n; ++i) ref_matmul(*ws[i], x, ys[i], ctx);
}

void ref_matmul_experts(const ExpertGroup* groups, int n_groups, int n_ws, const Acts& x,
                        float* const* ys, const Context& ctx) {
    matmul_experts_one_by_one(groups, n_groups, n_ws, x, ys, ctx, ref_matmul);
}

uint64_t ref_packed_bytes(const Matrix&) {
    return 0;
}
void ref_repack(const Matrix&, uint8_t*, const Context&) {}

}  // namespace

const Ops& ref_ops() {
    static const Ops kOps = {
        "ref",         ref_prepare, ref_matmul,       ref_matmul_n, ref_matmul_experts,
        ref_attention, ref_rmsnorm, ref_rope,         ref_silu_mul, ref_gelu_mul,
        ref_add,       store_row,   ref_packed_bytes, ref_repack,   1};
    return kOps;
}

}  // namespace headroom::kernels
