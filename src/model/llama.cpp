// The llama family: Llama 2/3, TinyLlama, SmolLM2, Mistral (llama), Qwen2
// (NeoX RoPE, q/k/v biases) and Qwen3 (NeoX RoPE, per-head q/k RMSNorm), and
// their mixtures of experts: Mixtral (llama with experts), Qwen2-MoE (with a
// gated shared expert) and Qwen3-MoE.
//
// Per layer, for tokens x (T, n_embd):
//   h = x + Wo · attention(rope(Wq · norm(x)), rope(Wk · norm(x)), Wv · norm(x))
//   x = h + Wdown · (silu(Wgate · norm(h)) ⊙ Wup · norm(h))
// or, with experts, x = h + moe(norm(h)) (kernels/moe.h).
#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "format/gguf-reader.h"
#include "model/model.h"

namespace headroom {

namespace {

class LlamaModel final : public Model {
  public:
    LlamaModel(const gguf::GgufFile& file, HParams hp, kernels::Backend& backend,
               kernels::Backend* cpu, uint32_t n_cpu_layers)
        : Model(file, std::move(hp), backend, cpu, n_cpu_layers) {
        const auto& h = hp_;
        const int64_t q_dim = int64_t{h.n_head} * h.head_dim_k;
        const int64_t k_dim = int64_t{h.n_head_kv} * h.head_dim_k;
        const int64_t v_dim = int64_t{h.n_head_kv} * h.head_dim_v;
        const int64_t attn_dim = int64_t{h.n_head} * h.head_dim_v;
        if (h.n_ff == 0) fail("{}: {}.feed_forward_length is missing", file.path(), h.arch);
        load_embedding_and_output();
        w_.rope_freqs = vector("rope_freqs.weight", h.n_rot / 2, false);
        for (uint32_t il = 0; il < h.n_layer; ++il) {
            const std::string p = fmt::format("blk.{}.", il);
            LayerWeights l;
            l.attn_norm = vector(p + "attn_norm.weight", h.n_embd);
            l.wq = matrix(p + "attn_q.weight", h.n_embd, q_dim);
            l.wk = matrix(p + "attn_k.weight", h.n_embd, k_dim);
            l.wv = matrix(p + "attn_v.weight", h.n_embd, v_dim);
            l.wo = matrix(p + "attn_output.weight", attn_dim, h.n_embd);
            const bool biases = h.arch == "qwen2" || h.arch == "qwen2moe";
            l.bq = vector(p + "attn_q.bias", q_dim, biases);
            l.bk = vector(p + "attn_k.bias", k_dim, biases);
            l.bv = vector(p + "attn_v.bias", v_dim, biases);
            l.q_norm = vector(p + "attn_q_norm.weight", h.head_dim_k, h.qk_norm);
            l.k_norm = vector(p + "attn_k_norm.weight", h.head_dim_k, h.qk_norm);
            l.ffn_norm = vector(p + "ffn_norm.weight", h.n_embd);
            if (h.n_expert > 0) {
                load_experts(p, l);
            } else {
                l.w_gate = matrix(p + "ffn_gate.weight", h.n_embd, h.n_ff);
                l.w_up = matrix(p + "ffn_up.weight", h.n_embd, h.n_ff);
                l.w_down = matrix(p + "ffn_down.weight", h.n_ff, h.n_embd);
            }
            l.rope_freqs = on_layer_device(w_.rope_freqs, il);
            w_.layers.push_back(l);
        }
    }

    using Model::forward;
    void forward(const kernels::StepView& step, const kernels::KvLayout& kv,
                 const ForwardBuffers& buf, kernels::Backend& be,
                 const ForwardPart& part) const override {
        const auto& h = hp_;
        const int64_t T = step.n_tokens;
        const kernels::RopeArgs rope_q = rope_args(h.n_head, h.rope_base);
        const kernels::RopeArgs rope_k = rope_args(h.n_head_kv, h.rope_base);
        kernels::AttentionOp attn = attention_op(buf);

        if (part.embed) be.get_rows(w_.tok_embd, step, 1.0f, buf.x);
        for (uint32_t il = part.first_layer; il < part.end_layer; ++il) {
            const LayerWeights& l = w_.layers[il];
            be.rmsnorm(buf.x, l.attn_norm, 0.0f, h.rms_eps, T, h.n_embd, buf.xb);
            project(be, buf.xb, T, {&l.wq, &l.wk, &l.wv}, {buf.q, buf.k, buf.v});
            if (l.bq) {
                be.add_bias(buf.q, l.bq, T);
                be.add_bias(buf.k, l.bk, T);
                be.add_bias(buf.v, l.bv, T);
            }
            if (l.q_norm) {
                be.rmsnorm(buf.q, l.q_norm, 0.0f, h.rms_eps, T * h.n_head, h.head_dim_k, buf.q);
                be.rmsnorm(buf.k, l.k_norm, 0.0f, h.rms_eps, T * h.n_head_kv, h.head_dim_k, buf.k);
            }
            be.rope(buf.q, step, rope_q, l.rope_freqs);
            be.rope(buf.k, step, rope_k, l.rope_freqs);
            be.store_kv(kv, il, step, buf.k, buf.v);
            attn.layer = il;
            be.attention(kv, step, attn);
            project(be, buf.attn, T, {&l.wo}, {buf.xb});
            be.add(buf.x, buf.xb, T * h.n_embd);

            be.rmsnorm(buf.x, l.ffn_norm, 0.0f, h.rms_eps, T, h.n_embd, buf.xb);
            if (l.router) {
                moe_ffn(l, step, buf, be);
                continue;
            }
            project(be, buf.xb, T, {&l.w_gate, &l.w_up}, {buf.gate, buf.up});
            be.silu_mul(buf.gate, buf.up, T * h.n_ff);
            project(be, buf.gate, T, {&l.w_down}, {buf.xb});
            be.add(buf.x, buf.xb, T * h.n_embd);
        }
        if (part.output) output_logits(step, buf, be, 0.0f, part);
    }
};

}  // namespace

std::unique_ptr<Model> make_llama_model(const gguf::GgufFile& file, HParams hp,
                                        kernels::Backend& backend, kernels::Backend* cpu,
                                        uint32_t n_cpu_layers) {
    return std::make_unique<LlamaModel>(file, std::move(hp), backend, cpu, n_cpu_layers);
}

}  // namespace headroom
