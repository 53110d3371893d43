// gpt-oss (OpenAI's open-weight mixture of experts, llama.cpp's "gpt-oss"):
// a llama-like block with biases on q, k, v and o, attention sinks, layers
// alternating between a sliding window (even layers, by default) and the
// whole context, YaRN RoPE (NeoX pairs), and a MoE feed-forward whose router
// takes a softmax of the k chosen logits and whose experts have biases and a
// clamped SwiGLU (kernels/moe.h).
//
// Per layer, for tokens x (T, n_embd):
//   q, k, v = Wq · n + bq, Wk · n + bk, Wv · n + bv     n = norm(x)
//   h = x + Wo · attention_with_sinks(yarn(q), yarn(k), v) + bo
//   x = h + moe(post_attention_norm(h))
#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "format/gguf-reader.h"
#include "model/model.h"

namespace headroom {

namespace {

class GptOssModel final : public Model {
  public:
    GptOssModel(const gguf::GgufFile& file, HParams hp, kernels::Backend& backend,
                kernels::Backend* cpu, uint32_t n_cpu_layers)
        : Model(file, std::move(hp), backend, cpu, n_cpu_layers) {
        const auto& h = hp_;
        const int64_t q_dim = int64_t{h.n_head} * h.head_dim_k;
        const int64_t k_dim = int64_t{h.n_head_kv} * h.head_dim_k;
        const int64_t v_dim = int64_t{h.n_head_kv} * h.head_dim_v;
        const int64_t attn_dim = int64_t{h.n_head} * h.head_dim_v;
        if (h.n_expert == 0) fail("{}: a gpt-oss model without gpt-oss.expert_count", file.path());
        load_embedding_and_output();
        for (uint32_t il = 0; il < h.n_layer; ++il) {
            const std::string p = fmt::format("blk.{}.", il);
            LayerWeights l;
            l.attn_norm = vector(p + "attn_norm.weight", h.n_embd);
            l.wq = matrix(p + "attn_q.weight", h.n_embd, q_dim);
            l.wk = matrix(p + "attn_k.weight", h.n_embd, k_dim);
            l.wv = matrix(p + "attn_v.weight", h.n_embd, v_dim);
            l.wo = matrix(p + "attn_output.weight", attn_dim, h.n_embd);
            l.bq = vector(p + "attn_q.bias", q_dim);
            l.bk = vector(p + "attn_k.bias", k_dim);
            l.bv = vector(p + "attn_v.bias", v_dim);
            l.bo = vector(p + "attn_output.bias", h.n_embd);
            l.sinks = vector(p + "attn_sinks.weight", h.n_head);
            l.ffn_norm = vector(p + "post_attention_norm.weight", h.n_embd);
            load_experts(p, l);
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

        if (part.embed) be.get_rows(w_.tok_embd, step, 1.0f, buf.x);
        for (uint32_t il = part.first_layer; il < part.end_layer; ++il) {
            const LayerWeights& l = w_.layers[il];
            const bool local = h.layer_is_swa[il];
            const kernels::RopeArgs rope_q =
                rope_args(h.n_head, local ? h.rope_base_local : h.rope_base);
            const kernels::RopeArgs rope_k =
                rope_args(h.n_head_kv, local ? h.rope_base_local : h.rope_base);

            be.rmsnorm(buf.x, l.attn_norm, 0.0f, h.rms_eps, T, h.n_embd, buf.xb);
            project(be, buf.xb, T, {&l.wq, &l.wk, &l.wv}, {buf.q, buf.k, buf.v});
            be.add_bias(buf.q, l.bq, T);
            be.add_bias(buf.k, l.bk, T);
            be.add_bias(buf.v, l.bv, T);
            be.rope(buf.q, step, rope_q, {});
            be.rope(buf.k, step, rope_k, {});
            be.store_kv(kv, il, step, buf.k, buf.v);
            attn.layer = il;
            attn.window = local ? h.sliding_window : 0;
            attn.sinks = l.sinks;
            be.attention(kv, step, attn);
            project(be, buf.attn, T, {&l.wo}, {buf.xb});
            be.add_bias(buf.xb, l.bo, T);
            be.add(buf.x, buf.xb, T * h.n_embd);

            be.rmsnorm(buf.x, l.ffn_norm, 0.0f, h.rms_eps, T, h.n_embd, buf.xb);
            moe_ffn(l, step, buf, be);
        }
        if (part.output) output_logits(step, buf, be, 0.0f, part);
    }
};

}  // namespace

std::unique_ptr<Model> make_gpt_oss_model(const gguf::GgufFile& file, HParams hp,
                                          kernels::Backend& backend, kernels::Backend* cpu,
                                          uint32_t n_cpu_layers) {
    return std::make_unique<GptOssModel>(file, std::move(hp), backend, cpu, n_cpu_layers);
}

}  // namespace headroom
