#include "model/model.h"

#include <fmt/format.h>

#include <sys/mman.h>

#include <cmath>

#include "core/check.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "format/gguf-reader.h"
#include "kernels/cpu/ref/quant.h"
#include "memory/kv-cache.h"

namespace headroom {

ForwardBuffers carve_buffers(const ActivationLayout& l, uint8_t* arena, ThreadPool* pool) {
    auto f = [&](const ArenaBuffer& b) { return reinterpret_cast<float*>(arena + b.offset); };
    ForwardBuffers buf{f(l.x),    f(l.xb),   f(l.q),  f(l.k),      f(l.v),
                       f(l.attn), f(l.gate), f(l.up), f(l.logits), {}};
    buf.ctx.pool = pool;
    buf.ctx.scratch = arena + l.thread_scratch.offset;
    buf.ctx.scratch_per_thread_bytes = l.scratch_per_thread_bytes;
    buf.ctx.acts_q = arena + l.acts_q.offset;
    buf.ctx.acts_q_bytes = l.acts_q.size_bytes;
    return buf;
}

std::unique_ptr<Model> Model::load(const gguf::GgufFile& file) {
    HParams hp = read_hparams(file, true);
    std::unique_ptr<Model> m = hp.arch == "gemma3" ? make_gemma3_model(file, std::move(hp))
                                                   : make_llama_model(file, std::move(hp));
    m->pack_weights(kernels::ops());
    return m;
}

void Model::pack_weights(const kernels::Ops& ops) {
    std::vector<kernels::Matrix*> todo;
    for (auto& l : w_.layers)
        for (auto* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
            todo.push_back(m);
    if (!hp_.tied_embeddings) todo.push_back(&w_.output);
    constexpr uint64_t kAlign = 64;
    uint64_t total = 0;
    for (const auto* m : todo) total += (ops.packed_bytes(*m) + kAlign - 1) / kAlign * kAlign;
    if (total == 0) return;
    packed_ = Region(total, "repacked weights");
    ThreadPool pool(physical_core_count());
    kernels::Context ctx;
    ctx.pool = &pool;
    constexpr uint64_t kPage = 4096;
    uint64_t at = 0;
    for (auto* m : todo) {
        const uint64_t n = ops.packed_bytes(*m);
        if (n == 0) continue;
        ops.repack(*m, packed_.data() + at, ctx);
        m->packed = packed_.data() + at;
        m->packed_for = &ops;
        at += (n + kAlign - 1) / kAlign * kAlign;
        // The file's pages of this matrix are not read again: drop them from
        // this process (whole pages inside the matrix only).
        const auto begin = (reinterpret_cast<uintptr_t>(m->data) + kPage - 1) & ~(kPage - 1);
        const auto end =
            (reinterpret_cast<uintptr_t>(m->data) + m->row_bytes * m->n_rows) & ~(kPage - 1);
        if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    }
}

Model::Model(const gguf::GgufFile& file, HParams hp) : file_(file), hp_(std::move(hp)) {}

uint64_t Model::converted_bytes() const {
    uint64_t n = 0;
    for (const auto& v : converted_) n += v.size() * sizeof(float);
    return n;
}

kernels::Matrix Model::matrix(const std::string& name, int64_t n_cols, int64_t n_rows) const {
    const gguf::TensorInfo* t = file_.find_tensor(name);
    if (!t)
        fail("{}: tensor '{}' is missing, expected a {} × {} matrix for {}", file_.path(), name,
             n_cols, n_rows, hp_.arch);
    if (t->n_dims != 2 || t->ne[0] != n_cols || t->ne[1] != n_rows)
        fail("{}: tensor '{}' has shape [{}], expected [{}, {}]", file_.path(), name,
             fmt::join(t->shape(), ", "), n_cols, n_rows);
    if (!can_dequantize(t->type))
        fail("{}: tensor '{}' is {}, which headroom cannot compute with", file_.path(), name,
             headroom::name(t->type));
    return {t->data, t->type, n_rows, n_cols, row_bytes(t->type, static_cast<uint64_t>(n_cols))};
}

const float* Model::vector(const std::string& name, int64_t n, bool required) {
    const gguf::TensorInfo* t = file_.find_tensor(name);
    if (!t) {
        if (!required) return nullptr;
        fail("{}: tensor '{}' is missing, expected {} values for {}", file_.path(), name, n,
             hp_.arch);
    }
    if (static_cast<int64_t>(t->n_elements) != n)
        fail("{}: tensor '{}' has {} elements, expected {}", file_.path(), name, t->n_elements, n);
    if (t->type == TensorType::F32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0)
        return reinterpret_cast<const float*>(t->data);
    if (!can_dequantize(t->type))
        fail("{}: tensor '{}' is {}, which headroom cannot read", file_.path(), name,
             headroom::name(t->type));
    std::vector<float> copy(static_cast<size_t>(n));
    ref::dequantize_row(t->type, t->data, copy.data(), n);
    converted_.push_back(std::move(copy));
    return converted_.back().data();
}

void Model::embed(const Batch& batch, float* x, float scale) const {
    const auto& e = w_.tok_embd;
    for (size_t t = 0; t < batch.n_tokens(); ++t) {
        const int32_t id = batch.tokens[t];
        HR_CHECK(id >= 0 && id < e.n_rows);
        float* row = x + t * static_cast<size_t>(hp_.n_embd);
        ref::dequantize_row(e.type, e.data + static_cast<uint64_t>(id) * e.row_bytes, row,
                            e.n_cols);
        if (scale != 1.0f)
            for (uint32_t i = 0; i < hp_.n_embd; ++i) row[i] *= scale;
    }
}

void Model::write_kv(const Batch& batch, const KvCache& cache, uint32_t layer, const float* k,
                     const float* v, const kernels::Ops& ops) const {
    for (size_t t = 0; t < batch.n_tokens(); ++t) {
        const SeqKv& seq = *batch.seqs[batch.seq_of_token[t]];
        for (uint32_t h = 0; h < hp_.n_head_kv; ++h) {
            ops.store_row(k + (t * hp_.n_head_kv + h) * hp_.head_dim_k, hp_.head_dim_k,
                          cache.dtype(), cache.k_row(seq, layer, h, batch.positions[t]));
            ops.store_row(v + (t * hp_.n_head_kv + h) * hp_.head_dim_v, hp_.head_dim_v,
                          cache.dtype(), cache.v_row(seq, layer, h, batch.positions[t]));
        }
    }
}

void Model::project(const float* x, int64_t n_tokens, int64_t n_in,
                    std::initializer_list<const kernels::Matrix*> ws_list,
                    std::initializer_list<float*> ys_list, const kernels::Ops& ops,
                    const kernels::Context& ctx) const {
    HR_CHECK(ws_list.size() == ys_list.size() && ws_list.size() <= 4);
    const kernels::Matrix* const* ws = ws_list.begin();
    float* const* ys = ys_list.begin();
    const int n = static_cast<int>(ws_list.size());
    kernels::Acts acts;
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && ws[j]->type == ws[i]->type) ++j;
        if (i == 0 || ws[i]->type != acts.w_type)
            acts = ops.prepare(x, n_tokens, n_in, ws[i]->type, ctx);
        if (j - i == 1)
            ops.matmul(*ws[i], acts, ys[i], ctx);
        else
            ops.matmul_n(ws + i, ys + i, j - i, acts, ctx);
        i = j;
    }
}

kernels::AttentionArgs Model::attention_args(const Batch& batch, const KvCache& cache,
                                             const ForwardBuffers& buf) const {
    kernels::AttentionArgs a;
    a.q = buf.q;
    a.out = buf.attn;
    a.n_tokens = static_cast<int64_t>(batch.n_tokens());
    a.positions = batch.positions.data();
    a.seq_of_token = batch.seq_of_token.data();
    a.seqs = batch.seqs;
    a.cache = &cache;
    a.n_head = hp_.n_head;
    a.n_head_kv = hp_.n_head_kv;
    a.head_dim_k = hp_.head_dim_k;
    a.head_dim_v = hp_.head_dim_v;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hp_.head_dim_k));
    return a;
}

// Gathers the rows that need logits into xb, normalizes them, and projects
// onto the vocabulary: logits (n_rows, n_vocab).
void Model::output_logits(const Batch& batch, const ForwardBuffers& buf, const kernels::Ops& ops,
                          float norm_offset) const {
    const int64_t n_rows = static_cast<int64_t>(batch.logit_tokens.size());
    if (n_rows == 0) return;
    for (int64_t r = 0; r < n_rows; ++r) {
        const float* src = buf.x + static_cast<size_t>(batch.logit_tokens[r]) * hp_.n_embd;
        std::copy(src, src + hp_.n_embd, buf.xb + static_cast<size_t>(r) * hp_.n_embd);
    }
    ops.rmsnorm(buf.xb, w_.output_norm, norm_offset, hp_.rms_eps, n_rows, hp_.n_embd, buf.xb,
                buf.ctx);
    const auto acts = ops.prepare(buf.xb, n_rows, hp_.n_embd, w_.output.type, buf.ctx);
    ops.matmul(w_.output, acts, buf.logits, buf.ctx);
}

}  // namespace headroom
