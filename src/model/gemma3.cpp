// Gemma 3: embeddings scaled by sqrt(n_embd); RMSNorm before and after both
// attention and FFN (the GGUF stores the norm weights with Gemma's +1
// already added); per-head q/k RMSNorm; NeoX RoPE with one base for
// sliding-window (local) layers and another for global layers; GELU-tanh
// gated FFN; tied embeddings.
//
// Per layer, for tokens x (T, n_embd):
//   q = rope(qnorm(Wq · norm(x))), k = rope(knorm(Wk · norm(x))), v = Wv · norm(x)
//   h = x + post_attn_norm(Wo · attention(q, k, v))
//   x = h + post_ffn_norm(Wdown · (gelu(Wgate · ffn_norm(h)) ⊙ Wup · ffn_norm(h)))
#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "format/gguf-reader.h"
#include "model/model.h"

namespace headroom {

namespace {

class Gemma3Model final : public Model {
  public:
    Gemma3Model(const gguf::GgufFile& file, HParams hp, kernels::Backend& backend,
                kernels::Backend* cpu, uint32_t n_cpu_layers)
        : Model(file, std::move(hp), backend, cpu, n_cpu_layers) {
        const auto& h = hp_;
        const int64_t q_dim = int64_t{h.n_head} * h.head_dim_k;
        const int64_t k_dim = int64_t{h.n_head_kv} * h.head_dim_k;
        const int64_t v_dim = int64_t{h.n_head_kv} * h.head_dim_v;
        const int64_t attn_dim = int64_t{h.n_head} * h.head_dim_v;
        load_embedding_and_output();
        for (uint32_t il = 0; il < h.n_layer; ++il) {
            const std::string p = fmt::format("blk.{}.", il);
            LayerWeights l;
            l.attn_norm = vector(p + "attn_norm.weight", h.n_embd);
            l.wq = matrix(p + "attn_q.weight", h.n_embd, q_dim);
            l.wk = matrix(p + "attn_k.weight", h.n_embd, k_dim);
            l.wv = matrix(p + "attn_v.weight", h.n_embd, v_dim);
            l.q_norm = vector(p + "attn_q_norm.weight", h.head_dim_k);
            l.k_norm = vector(p + "attn_k_norm.weight", h.head_dim_k);
            l.wo = matrix(p + "attn_output.weight", attn_dim, h.n_embd);
            l.post_attn_norm = vector(p + "post_attention_norm.weight", h.n_embd);
            l.ffn_norm = vector(p + "ffn_norm.weight", h.n_embd);
            l.w_gate = matrix(p + "ffn_gate.weight", h.n_embd, h.n_ff);
            l.w_up = matrix(p + "ffn_up.weight", h.n_embd, h.n_ff);
            l.w_down = matrix(p + "ffn_down.weight", h.n_ff, h.n_embd);
            l.post_ffn_norm = vector(p + "post_ffw_norm.weight", h.n_embd);
            w_.layers.push_back(l);
        }
    }

    using Model::forward;
    void forward(const kernels::StepView& step, const kernels::KvLayout& kv,
                 const ForwardBuffers& buf, kernels::Backend& be,
                 const ForwardPart& part) const override {
        const auto& h = hp_;
        const int64_t T = step.n_tokens;
        kernels::AttentionOp attn = attention_op(buf);

        if (part.embed)
            be.get_rows(w_.tok_embd, step, std::sqrt(static_cast<float>(h.n_embd)), buf.x);
        for (uint32_t il = part.first_layer; il < part.end_layer; ++il) {
            const LayerWeights& l = w_.layers[il];
            const bool local = h.layer_is_swa[il];
            kernels::RopeArgs rope_q{h.n_head,
                                     h.head_dim_k,
                                     h.n_rot,
                                     local ? h.rope_base_local : h.rope_base,
                                     local ? 1.0f : h.rope_scale,
                                     nullptr,
                                     kernels::RopeMode::NeoX};
            kernels::RopeArgs rope_k = rope_q;
            rope_k.n_head = h.n_head_kv;

            be.rmsnorm(buf.x, l.attn_norm, 0.0f, h.rms_eps, T, h.n_embd, buf.xb);
            project(be, buf.xb, T, {&l.wq, &l.wk, &l.wv}, {buf.q, buf.k, buf.v});
            be.rmsnorm(buf.q, l.q_norm, 0.0f, h.rms_eps, T * h.n_head, h.head_dim_k, buf.q);
            be.rmsnorm(buf.k, l.k_norm, 0.0f, h.rms_eps, T * h.n_head_kv, h.head_dim_k, buf.k);
            be.rope(buf.q, step, rope_q, {});
            be.rope(buf.k, step, rope_k, {});
            be.store_kv(kv, il, step, buf.k, buf.v);
            attn.layer = il;
            attn.window = local ? h.sliding_window : 0;
            be.attention(kv, step, attn);
            project(be, buf.attn, T, {&l.wo}, {buf.xb});
            be.rmsnorm(buf.xb, l.post_attn_norm, 0.0f, h.rms_eps, T, h.n_embd, buf.xb);
            be.add(buf.x, buf.xb, T * h.n_embd);

            be.rmsnorm(buf.x, l.ffn_norm, 0.0f, h.rms_eps, T, h.n_embd, buf.xb);
            project(be, buf.xb, T, {&l.w_gate, &l.w_up}, {buf.gate, buf.up});
            be.gelu_mul(buf.gate, buf.up, T * h.n_ff);
            project(be, buf.gate, T, {&l.w_down}, {buf.xb});
            be.rmsnorm(buf.xb, l.post_ffn_norm, 0.0f, h.rms_eps, T, h.n_embd, buf.xb);
            be.add(buf.x, buf.xb, T * h.n_embd);
        }
        if (part.output) output_logits(step, buf, be, 0.0f, part);
    }
};

}  // namespace

std::unique_ptr<Model> make_gemma3_model(const gguf::GgufFile& file, HParams hp,
                                         kernels::Backend& backend, kernels::Backend* cpu,
                                         uint32_t n_cpu_layers) {
    return std::make_unique<Gemma3Model>(file, std::move(hp), backend, cpu, n_cpu_layers);
}

}  // namespace headroom
