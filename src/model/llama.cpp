// The llama family: Llama 2/3, TinyLlama, SmolLM2, Mistral (llama), Qwen2
// (NeoX RoPE, q/k/v biases) and Qwen3 (NeoX RoPE, per-head q/k RMSNorm).
//
// Per layer, for tokens x (T, n_embd):
//   h = x + Wo · attention(rope(Wq · norm(x)), rope(Wk · norm(x)), Wv · norm(x))
//   x = h + Wdown · (silu(Wgate · norm(h)) ⊙ Wup · norm(h))
#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "format/gguf-reader.h"
#include "memory/kv-cache.h"
#include "model/model.h"

namespace headroom {

namespace {

class LlamaModel final : public Model {
  public:
    LlamaModel(const gguf::GgufFile& file, HParams hp) : Model(file, std::move(hp)) {
        const auto& h = hp_;
        const int64_t q_dim = int64_t{h.n_head} * h.head_dim_k;
        const int64_t k_dim = int64_t{h.n_head_kv} * h.head_dim_k;
        const int64_t v_dim = int64_t{h.n_head_kv} * h.head_dim_v;
        const int64_t attn_dim = int64_t{h.n_head} * h.head_dim_v;
        if (h.n_ff == 0) fail("{}: {}.feed_forward_length is missing", file.path(), h.arch);
        w_.tok_embd = matrix("token_embd.weight", h.n_embd, h.n_vocab);
        w_.output = h.tied_embeddings ? w_.tok_embd : matrix("output.weight", h.n_embd, h.n_vocab);
        w_.output_norm = vector("output_norm.weight", h.n_embd);
        w_.rope_freqs = vector("rope_freqs.weight", h.n_rot / 2, false);
        for (uint32_t il = 0; il < h.n_layer; ++il) {
            const std::string p = fmt::format("blk.{}.", il);
            LayerWeights l;
            l.attn_norm = vector(p + "attn_norm.weight", h.n_embd);
            l.wq = matrix(p + "attn_q.weight", h.n_embd, q_dim);
            l.wk = matrix(p + "attn_k.weight", h.n_embd, k_dim);
            l.wv = matrix(p + "attn_v.weight", h.n_embd, v_dim);
            l.wo = matrix(p + "attn_output.weight", attn_dim, h.n_embd);
            l.bq = vector(p + "attn_q.bias", q_dim, h.arch == "qwen2");
            l.bk = vector(p + "attn_k.bias", k_dim, h.arch == "qwen2");
            l.bv = vector(p + "attn_v.bias", v_dim, h.arch == "qwen2");
            l.q_norm = vector(p + "attn_q_norm.weight", h.head_dim_k, h.arch == "qwen3");
            l.k_norm = vector(p + "attn_k_norm.weight", h.head_dim_k, h.arch == "qwen3");
            l.ffn_norm = vector(p + "ffn_norm.weight", h.n_embd);
            l.w_gate = matrix(p + "ffn_gate.weight", h.n_embd, h.n_ff);
            l.w_up = matrix(p + "ffn_up.weight", h.n_embd, h.n_ff);
            l.w_down = matrix(p + "ffn_down.weight", h.n_ff, h.n_embd);
            w_.layers.push_back(l);
        }
    }

    void forward(const Batch& batch, const KvCache& cache, const ForwardBuffers& buf,
                 const kernels::Ops& ops) const override {
        const auto& h = hp_;
        const auto T = static_cast<int64_t>(batch.n_tokens());
        const int64_t q_dim = int64_t{h.n_head} * h.head_dim_k;
        const int64_t k_dim = int64_t{h.n_head_kv} * h.head_dim_k;
        const int64_t v_dim = int64_t{h.n_head_kv} * h.head_dim_v;
        const int64_t attn_dim = int64_t{h.n_head} * h.head_dim_v;
        kernels::RopeArgs rope_q{
            h.n_head,
            h.head_dim_k,
            h.n_rot,
            h.rope_base,
            h.rope_scale,
            w_.rope_freqs,
            h.rope_style == RopeStyle::NeoX ? kernels::RopeMode::NeoX : kernels::RopeMode::Normal};
        kernels::RopeArgs rope_k = rope_q;
        rope_k.n_head = h.n_head_kv;
        kernels::AttentionArgs attn = attention_args(batch, cache, buf);

        embed(batch, buf.x, 1.0f);
        for (uint32_t il = 0; il < h.n_layer; ++il) {
            const LayerWeights& l = w_.layers[il];
            ops.rmsnorm(buf.x, l.attn_norm, 0.0f, h.rms_eps, T, h.n_embd, buf.xb, buf.ctx);
            project(buf.xb, T, h.n_embd, {&l.wq, &l.wk, &l.wv}, {buf.q, buf.k, buf.v}, ops,
                    buf.ctx);
            if (l.bq) {
                for (int64_t t = 0; t < T; ++t) {
                    ops.add(buf.q + t * q_dim, l.bq, q_dim, buf.ctx);
                    ops.add(buf.k + t * k_dim, l.bk, k_dim, buf.ctx);
                    ops.add(buf.v + t * v_dim, l.bv, v_dim, buf.ctx);
                }
            }
            if (l.q_norm) {
                ops.rmsnorm(buf.q, l.q_norm, 0.0f, h.rms_eps, T * h.n_head, h.head_dim_k, buf.q,
                            buf.ctx);
                ops.rmsnorm(buf.k, l.k_norm, 0.0f, h.rms_eps, T * h.n_head_kv, h.head_dim_k, buf.k,
                            buf.ctx);
            }
            ops.rope(buf.q, T, batch.positions.data(), rope_q, buf.ctx);
            ops.rope(buf.k, T, batch.positions.data(), rope_k, buf.ctx);
            write_kv(batch, cache, il, buf.k, buf.v, ops);
            attn.layer = il;
            ops.attention(attn, buf.ctx);
            project(buf.attn, T, attn_dim, {&l.wo}, {buf.xb}, ops, buf.ctx);
            ops.add(buf.x, buf.xb, T * h.n_embd, buf.ctx);

            ops.rmsnorm(buf.x, l.ffn_norm, 0.0f, h.rms_eps, T, h.n_embd, buf.xb, buf.ctx);
            project(buf.xb, T, h.n_embd, {&l.w_gate, &l.w_up}, {buf.gate, buf.up}, ops, buf.ctx);
            ops.silu_mul(buf.gate, buf.up, T * h.n_ff, buf.ctx);
            project(buf.gate, T, h.n_ff, {&l.w_down}, {buf.xb}, ops, buf.ctx);
            ops.add(buf.x, buf.xb, T * h.n_embd, buf.ctx);
        }
        output_logits(batch, buf, ops, 0.0f);
    }
};

}  // namespace

std::unique_ptr<Model> make_llama_model(const gguf::GgufFile& file, HParams hp) {
    return std::make_unique<LlamaModel>(file, std::move(hp));
}

}  // namespace headroom
