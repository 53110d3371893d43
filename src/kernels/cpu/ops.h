// The CPU's kernel tables, behind the CPU backend (kernels/cpu/cpu-backend.h).
// Each instruction set (the scalar reference in cpu/ref; AVX2, AVX-VNNI and
// AVX-512 in cpu/x86) fills one table of functions; ops() picks the best one
// this CPU supports at start-up (HEADROOM_ISA=ref|avx2|avxvnni|avx512
// overrides). The reference is the spec: every fast kernel is tested
// against it.
//
// Conventions: activations are f32 and row-major, one row per token;
// weights are rows of a GGUF tensor (ne[0] = n_cols contiguous elements in
// the tensor's type, ne[1] = n_rows). Kernels never allocate: scratch comes
// from the activation arena through Context.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "format/tensor-type.h"
#include "kernels/kv-dtype.h"
#include "kernels/kv-layout.h"
#include "kernels/op-args.h"
#include "kernels/step-view.h"

namespace headroom {
class ThreadPool;
}  // namespace headroom

namespace headroom::kernels {

struct Ops;

// A repacked copy cut into parts, one per thread of a pool: part t holds
// rows [row0[t], row0[t + 1]) (whole row groups; row0[n] covers the padded
// last group) at data[t]. The CPU backend lays part t of every matrix after
// one another in thread t's own stream of memory, in the order the model
// reads them, and a decode matmul hands thread t part t of each of its
// matrices: each thread then reads its weights as one sequential stream from
// matmul to matmul, which the hardware prefetchers follow without restarting.
struct PackedParts {
    std::vector<int64_t> row0;         // n + 1
    std::vector<const uint8_t*> data;  // n

    int n() const { return static_cast<int>(data.size()); }
    // The part holding row r (< row0[n]).
    int part_of(int64_t r) const {
        return static_cast<int>(std::upper_bound(row0.begin() + 1, row0.end() - 1, r) -
                                (row0.begin() + 1));
    }
};

// W (n_rows, n_cols) in `type`.
struct Matrix {
    const uint8_t* data = nullptr;
    TensorType type = TensorType::F32;
    int64_t n_rows = 0;
    int64_t n_cols = 0;
    uint64_t row_bytes = 0;
    // A copy of the weights in the layout `packed_for` reads fastest (made by
    // its repack at load time), or null. Other tables read `data`.
    const uint8_t* packed = nullptr;
    const Ops* packed_for = nullptr;
    // Where the copy is cut into parts (packed is then part 0's start), or
    // null: one piece at packed.
    const PackedParts* parts = nullptr;
};

// The repacked copy's rows from r on (r a row group's first row), in its
// part: repack writes and the kernels read a row group there.
inline const uint8_t* packed_rows(const Matrix& w, int64_t r) {
    if (!w.parts) return w.packed + static_cast<uint64_t>(r) * w.row_bytes;
    const int t = w.parts->part_of(r);
    return w.parts->data[t] + static_cast<uint64_t>(r - w.parts->row0[t]) * w.row_bytes;
}

struct Context {
    ThreadPool* pool = nullptr;
    uint8_t* scratch = nullptr;  // n_threads × scratch_per_thread_bytes
    uint64_t scratch_per_thread_bytes = 0;
    uint8_t* acts_q = nullptr;  // quantized activations
    uint64_t acts_q_bytes = 0;
    ActPrecision act_precision = ActPrecision::Int8;
    // How far past the block it works on a decode matmul asks for the
    // repacked weights (0: the hardware prefetchers alone fetch them);
    // decode_prefetch_bytes() chooses it for the CPU.
    uint64_t decode_prefetch_bytes = 0;
    uint8_t* thread_scratch(int i) const {
        return scratch + scratch_per_thread_bytes * static_cast<uint64_t>(i);
    }
};

// Activations x (n_tokens, n) prepared for matmuls against weights of one
// type: the fast kernels quantize x into Context::acts_q (Int8, Int16;
// layouts in kernels/cpu/act-format.h); the reference, the F32 precision and the
// float-weight kernels read f32.
struct Acts {
    const float* f32 = nullptr;  // (n_tokens, n)
    int64_t n_tokens = 0;
    int64_t n = 0;
    TensorType w_type = TensorType::F32;  // the weights these were prepared for
    bool quantized = false;               // q holds them
    ActPrecision quant = ActPrecision::Int8;
    const uint8_t* q = nullptr;  // (n_tokens, q_row_bytes)
    uint64_t q_row_bytes = 0;
};

// One expert's share of a grouped matmul (Ops::matmul_experts): rows
// [row0, row0 + n_tok) of the sorted activations times the expert's matrices.
struct ExpertGroup {
    const Matrix* ws[2] = {nullptr, nullptr};  // n_ws of them, one type and width
    int64_t row0 = 0;
    int64_t n_tok = 0;
};

// Rows [row0, row0 + n) of prepared activations.
inline Acts acts_rows(const Acts& x, int64_t row0, int64_t n) {
    Acts a = x;
    if (x.f32) a.f32 = x.f32 + row0 * x.n;
    if (x.q) a.q = x.q + static_cast<uint64_t>(row0) * x.q_row_bytes;
    a.n_tokens = n;
    return a;
}

// One forward call's attention for one layer: every token of the step
// attends, causally, to its own sequence's cached keys and values, found
// through the step's block tables in the layer's KV region at kv_base.
struct AttentionArgs : AttentionShape {
    const float* q = nullptr;  // (n_tokens, n_head, head_dim_k)
    float* out = nullptr;      // (n_tokens, n_head, head_dim_v)
    int64_t n_tokens = 0;
    const uint32_t* positions = nullptr;     // (n_tokens) step->positions()
    const uint32_t* seq_of_token = nullptr;  // (n_tokens) step->seq_of_token()
    const StepView* step = nullptr;
    const KvLayout* kv = nullptr;
    const uint8_t* kv_base = nullptr;  // host address of kv->base_of_layer(layer)
    // Attention sinks (gpt-oss), (n_head) or null: head h's softmax has one
    // more logit, sinks[h], that takes weight but carries no value:
    //   out = sum_j e^(s_j - m) v_j / (sum_j e^(s_j - m) + e^(sinks[h] - m)),
    //   m = max(max_j s_j, sinks[h]).
    const float* sinks = nullptr;
};

struct Ops {
    const char* name;
    // Prepares x (n_tokens, n) for weights of type `wtype`.
    Acts (*prepare)(const float* x, int64_t n_tokens, int64_t n, TensorType wtype,
                    const Context& ctx);
    // y (n_tokens, w.n_rows) = x (n_tokens, w.n_cols) @ W^T. Each y element's
    // reduction order depends only on its row and column, never on n_tokens
    // (batch invariance).
    void (*matmul)(const Matrix& w, const Acts& x, float* y, const Context& ctx);
    // ys[i] = x @ ws[i]^T for n <= 4 matrices of one type and width (a
    // layer's Q, K and V; gate and up), as one piece of work for the pool.
    void (*matmul_n)(const Matrix* const* ws, float* const* ys, int n, const Acts& x,
                     const Context& ctx);
    // For each group g and matrix i < n_ws: rows [g.row0, g.row0 + g.n_tok)
    // of ys[i] (n_tokens, n_rows) = those rows of x @ g.ws[i]^T, as one piece
    // of work for the pool. Every group's matrices have one type and shape;
    // x was prepared for that type. Batch invariant as matmul.
    void (*matmul_experts)(const ExpertGroup* groups, int n_groups, int n_ws, const Acts& x,
                           float* const* ys, const Context& ctx);
    // Flash-style attention over KV blocks: online softmax over tiles of keys.
    // Each (token, head) is computed independently of the batch's other tokens.
    void (*attention)(const AttentionArgs& args, const Context& ctx);

    // Elementwise ops, parallel over the pool; each output row depends only
    // on its own input row.
    // out[t] = x[t] / rms(x[t]) * (w + weight_offset); out may equal x.
    void (*rmsnorm)(const float* x, const float* w, float weight_offset, float eps,
                    int64_t n_tokens, int64_t n, float* out, const Context& ctx);
    // Rotates x (n_tokens, n_head, head_dim) in place at each token's position.
    void (*rope)(float* x, int64_t n_tokens, const uint32_t* positions, const RopeArgs& args,
                 const Context& ctx);
    // gate = silu(gate) * up (SwiGLU), n elements.
    void (*silu_mul)(float* gate, const float* up, int64_t n, const Context& ctx);
    // gate = gelu_tanh(gate) * up (GeGLU, Gemma), n elements.
    void (*gelu_mul)(float* gate, const float* up, int64_t n, const Context& ctx);
    // x += y, n elements.
    void (*add)(float* x, const float* y, int64_t n, const Context& ctx);
    // As kernels::store_row (a K or V row into the cache), on the calling thread.
    void (*store_row)(const float* x, int64_t n, KvDtype dtype, uint8_t* dst);

    // Bytes of w's repacked copy in this table's layout, or 0 if it reads
    // w as stored. The copy replaces the stored weights in memory, and is
    // their size rounded up to whole row groups (16 rows at most).
    uint64_t (*packed_bytes)(const Matrix& w);
    // Writes the copy (packed_bytes(w) bytes) to dst, or, where w.parts is
    // set, each row group r into its part (packed_rows(w, r); dst unused);
    // then set w.packed = dst (part 0's start) and w.packed_for = this table.
    void (*repack)(const Matrix& w, uint8_t* dst, const Context& ctx);
    // Rows of a repacked copy's row group: parts are cut at multiples of it.
    int packed_group_rows = 1;
};

// Ops::matmul_experts as one `matmul` call per group and matrix: the
// reference's way, and a fast table's for activations it did not quantize.
inline void matmul_experts_one_by_one(const ExpertGroup* gs, int n_groups, int n_ws, const Acts& x,
                                      float* const* ys, const Context& ctx,
                                      void (*matmul)(const Matrix&, const Acts&, float*,
                                                     const Context&)) {
    for (int g = 0; g < n_groups; ++g)
        for (int i = 0; i < n_ws; ++i)
            matmul(*gs[g].ws[i], acts_rows(x, gs[g].row0, gs[g].n_tok),
                   ys[i] + gs[g].row0 * gs[g].ws[i]->n_rows, ctx);
}

// Best table for this CPU (or HEADROOM_ISA).
const Ops& ops();
const Ops& ref_ops();
// nullptr when the CPU lacks the ISA or it is not built.
const Ops* avx2_ops();
const Ops* avxvnni_ops();
const Ops* avx512_ops();

// Context::decode_prefetch_bytes for `ops` on this CPU, or
// HEADROOM_DECODE_PREFETCH (bytes, 0 to 65536, a multiple of 64).
uint64_t decode_prefetch_bytes(const Ops& ops);

// ---- scalar elementwise ops (the reference implementations) ----

void rmsnorm(const float* x, const float* w, float weight_offset, float eps, int64_t n_tokens,
             int64_t n, float* out);
void rope(float* x, int64_t n_tokens, const uint32_t* positions, const RopeArgs& args);
// Attention's last step for one (token, head): out = acc / l, or with a
// sink logit (AttentionArgs::sinks) folded into the running max m and sum l.
inline void attention_finish(const float* acc, float m, float l, const float* sink, uint32_t n,
                             float* out) {
    if (!sink) {
        for (uint32_t i = 0; i < n; ++i) out[i] = acc[i] / l;
        return;
    }
    const float m_new = std::max(m, *sink);
    const float c = std::exp(m - m_new);
    const float scale = c / (l * c + std::exp(*sink - m_new));
    for (uint32_t i = 0; i < n; ++i) out[i] = acc[i] * scale;
}
void silu_mul(float* gate, const float* up, int64_t n);
void gelu_mul(float* gate, const float* up, int64_t n);
void add(float* x, const float* y, int64_t n);
// Stores one row (n floats) as `dtype` (K/V into the cache).
void store_row(const float* x, int64_t n, KvDtype dtype, uint8_t* dst);

}  // namespace headroom::kernels
