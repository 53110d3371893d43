#include "model/model.h"

#include <fmt/format.h>

#include <cmath>

#include "core/check.h"
#include "core/error.h"
#include "format/gguf-reader.h"
#include "kernels/cpu/ref/quant.h"
#include "shape/placement.h"

namespace headroom {

std::unique_ptr<Model> Model::load(const gguf::GgufFile& file, kernels::Backend& backend,
                                   kernels::Backend* cpu, uint32_t n_cpu_layers) {
    HParams hp = read_hparams(file, true);
    HR_CHECK(cpu || n_cpu_layers == 0);
    if (n_cpu_layers >= hp.n_layer && n_cpu_layers > 0)
        fail(
            "{} layers on the CPU leaves none of the model's {} layers on the GPU: run it on the "
            "CPU (--device cpu)",
            n_cpu_layers, hp.n_layer);
    if (hp.n_expert > 0 && (!backend.runs_experts() || n_cpu_layers > 0))
        fail(
            "{}: a mixture-of-experts model ({} experts), and the {} backend has no "
            "mixture-of-experts kernels yet: run it on the CPU (--device cpu)",
            file.path(), hp.n_expert, n_cpu_layers > 0 ? "GPU" : backend.name());
    if ((hp.yarn_factor > 0 || hp.arch == "gpt-oss") && !backend.runs_yarn_and_sinks())
        fail(
            "{}: {} uses {}, which the {} backend has no kernels for yet: run it on the CPU "
            "(--device cpu)",
            file.path(), hp.arch,
            hp.arch == "gpt-oss" ? "attention sinks and YaRN RoPE" : "YaRN RoPE scaling",
            backend.name());
    if (hp.n_expert == 0 && (hp.arch.ends_with("moe") || hp.arch == "gpt-oss"))
        fail("{}: a {} model without {}.expert_count", file.path(), hp.arch, hp.arch);
    backend.begin_weights(file.data_section(), file.is_mapped());
    if (n_cpu_layers) cpu->begin_weights(file.data_section(), file.is_mapped());
    std::unique_ptr<Model> m =
        hp.arch == "gemma3"    ? make_gemma3_model(file, std::move(hp), backend, cpu, n_cpu_layers)
        : hp.arch == "gpt-oss" ? make_gpt_oss_model(file, std::move(hp), backend, cpu, n_cpu_layers)
                               : make_llama_model(file, std::move(hp), backend, cpu, n_cpu_layers);
    if (n_cpu_layers) cpu->end_weights();
    backend.end_weights();
    return m;
}

Model::Model(const gguf::GgufFile& file, HParams hp, kernels::Backend& backend,
             kernels::Backend* cpu, uint32_t n_cpu_layers)
    : file_(file),
      hp_(std::move(hp)),
      backend_(backend),
      cpu_(n_cpu_layers ? cpu : nullptr),
      n_cpu_layers_(n_cpu_layers) {}

void Model::load_embedding_and_output() {
    const auto& h = hp_;
    w_.tok_embd =
        matrix("token_embd.weight", h.n_embd, h.n_vocab,
               h.tied_embeddings ? kernels::WeightUse::MatmulAndRows : kernels::WeightUse::Rows);
    w_.output = h.tied_embeddings ? tied_output() : matrix("output.weight", h.n_embd, h.n_vocab);
    w_.output_norm = vector("output_norm.weight", h.n_embd);
}

Weight Model::tied_output() {
    if (!cpu_) return w_.tok_embd;
    return matrix("token_embd.weight", hp_.n_embd, hp_.n_vocab, kernels::WeightUse::Matmul);
}

Weight Model::on_layer_device(const Weight& w, uint32_t il) const {
    if (!cpu_ || !w || il >= n_cpu_layers_) return w;
    for (const auto& [id, copy] : cpu_copies_)
        if (id == w.id) return copy;
    return w;
}

uint64_t Model::converted_bytes() const {
    uint64_t n = 0;
    for (const auto& v : converted_) n += v.size() * sizeof(float);
    return n;
}

Weight Model::matrix(const std::string& name, int64_t n_cols, int64_t n_rows,
                     kernels::WeightUse use) {
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
    const kernels::HostTensor host{t->data, t->type, n_rows, n_cols,
                                   row_bytes(t->type, static_cast<uint64_t>(n_cols))};
    if (!cpu_) return backend_.upload_matrix(host, use);
    // Split: where shape/placement.h puts it. The embedding is read by rows
    // on the CPU (tied_output() puts its copy for the output on the GPU).
    uint32_t layer = 0;
    const TensorRole role = tensor_role(name, &layer);
    if (role == TensorRole::Embedding && use != kernels::WeightUse::Matmul)
        return cpu_->upload_matrix(host, kernels::WeightUse::Rows);
    const Placement at = place_tensor(role, layer, n_cpu_layers_, hp_.tied_embeddings);
    if (!at.on_gpu) return cpu_->upload_matrix(host, use);
    if (at.on_cpu) backend_.keep_host_pages(host.data);
    return backend_.upload_matrix(host, use);
}

Weight Model::experts(const std::string& name, int64_t n_cols, int64_t n_rows) {
    const gguf::TensorInfo* t = file_.find_tensor(name);
    const int64_t n = hp_.n_expert;
    if (!t)
        fail("{}: tensor '{}' is missing, expected {} experts of {} × {} for {}", file_.path(),
             name, n, n_cols, n_rows, hp_.arch);
    if (t->n_dims != 3 || t->ne[0] != n_cols || t->ne[1] != n_rows || t->ne[2] != n)
        fail("{}: tensor '{}' has shape [{}], expected [{}, {}, {}]", file_.path(), name,
             fmt::join(t->shape(), ", "), n_cols, n_rows, n);
    if (!can_dequantize(t->type))
        fail("{}: tensor '{}' is {}, which headroom cannot compute with", file_.path(), name,
             headroom::name(t->type));
    kernels::HostTensor host{t->data, t->type, n_rows, n_cols,
                             row_bytes(t->type, static_cast<uint64_t>(n_cols))};
    host.n_expert = static_cast<uint32_t>(n);
    return backend_.upload_matrix(host, kernels::WeightUse::Matmul);
}

void Model::load_experts(const std::string& p, LayerWeights& l) {
    const auto& h = hp_;
    if (h.n_ff_exp == 0) fail("{}: {}.expert_feed_forward_length is missing", file_.path(), h.arch);
    l.router = matrix(p + "ffn_gate_inp.weight", h.n_embd, h.n_expert);
    l.gate_exps = experts(p + "ffn_gate_exps.weight", h.n_embd, h.n_ff_exp);
    l.up_exps = experts(p + "ffn_up_exps.weight", h.n_embd, h.n_ff_exp);
    l.down_exps = experts(p + "ffn_down_exps.weight", h.n_ff_exp, h.n_embd);
    if (l.gate_exps.type != l.up_exps.type)
        fail("{}: {}ffn_gate_exps is {} but ffn_up_exps is {}: headroom needs one type",
             file_.path(), p, headroom::name(l.gate_exps.type), headroom::name(l.up_exps.type));
    if (h.swiglu_oai) {
        l.router_b = vector(p + "ffn_gate_inp.bias", h.n_expert);
        l.gate_exps_b = vector(p + "ffn_gate_exps.bias", int64_t{h.n_expert} * h.n_ff_exp);
        l.up_exps_b = vector(p + "ffn_up_exps.bias", int64_t{h.n_expert} * h.n_ff_exp);
        l.down_exps_b = vector(p + "ffn_down_exps.bias", int64_t{h.n_expert} * h.n_embd);
    }
    if (h.n_ff_shexp == 0) return;
    l.gate_shexp = matrix(p + "ffn_gate_shexp.weight", h.n_embd, h.n_ff_shexp);
    l.up_shexp = matrix(p + "ffn_up_shexp.weight", h.n_embd, h.n_ff_shexp);
    l.down_shexp = matrix(p + "ffn_down_shexp.weight", h.n_ff_shexp, h.n_embd);
    l.shexp_gate = vector(p + "ffn_gate_inp_shexp.weight", h.n_embd, false);
}

// Shared expert first (its input xb is still whole), into xb once the
// routed rows are gathered; then the routed experts, combined into xb.
void Model::moe_ffn(const LayerWeights& l, const kernels::StepView& step, const ForwardBuffers& buf,
                    kernels::Backend& be) const {
    const auto& h = hp_;
    const int64_t T = step.n_tokens;
    const kernels::Routing r{buf.route, T, h.n_expert, h.n_expert_used};
    project(be, buf.xb, T, {&l.router}, {buf.router});
    if (l.router_b) be.add_bias(buf.router, l.router_b, T);
    be.route_experts(buf.router, r,
                     h.softmax_after_topk ? kernels::ExpertGating::SoftmaxOfTopK
                                          : kernels::ExpertGating::Softmax,
                     h.expert_weights_norm);
    be.gather_routed(buf.xb, h.n_embd, r, buf.moe_x);
    if (l.gate_shexp) {
        project(be, buf.xb, T, {&l.gate_shexp, &l.up_shexp}, {buf.gate, buf.up});
        if (l.shexp_gate) project(be, buf.xb, T, {&l.shexp_gate}, {buf.router});
        be.silu_mul(buf.gate, buf.up, T * h.n_ff_shexp);
        project(be, buf.gate, T, {&l.down_shexp}, {buf.xb});
        if (l.shexp_gate) be.sigmoid_scale(buf.xb, buf.router, T, h.n_embd);
        be.add(buf.x, buf.xb, T * h.n_embd);
    }
    const Weight* gate_up[] = {&l.gate_exps, &l.up_exps};
    const kernels::DevPtr gate_up_out[] = {buf.gate, buf.up};
    be.matmul_experts(gate_up, buf.moe_x, r, gate_up_out);
    const int64_t n_hidden = T * h.n_expert_used * h.n_ff_exp;
    if (h.swiglu_oai) {
        be.add_expert_bias(buf.gate, l.gate_exps_b, h.n_ff_exp, r);
        be.add_expert_bias(buf.up, l.up_exps_b, h.n_ff_exp, r);
        be.swiglu_oai(buf.gate, buf.up, n_hidden, kernels::kSwigluOaiAlpha,
                      kernels::kSwigluOaiLimit);
    } else {
        be.silu_mul(buf.gate, buf.up, n_hidden);
    }
    const Weight* down[] = {&l.down_exps};
    const kernels::DevPtr down_out[] = {buf.moe_x};
    be.matmul_experts(down, buf.gate, r, down_out);
    if (l.down_exps_b) be.add_expert_bias(buf.moe_x, l.down_exps_b, h.n_embd, r);
    be.combine_routed(buf.moe_x, h.n_embd, r, buf.xb);
    be.add(buf.x, buf.xb, T * h.n_embd);
}

Weight Model::upload_vector(const std::string& name, const float* values, int64_t n,
                            uint64_t stored_bytes) {
    if (!cpu_) return backend_.upload_vector(values, n, stored_bytes);
    uint32_t layer = 0;
    const TensorRole role = tensor_role(name, &layer);
    const Placement at = place_tensor(role, layer, n_cpu_layers_, hp_.tied_embeddings);
    if (!at.on_gpu) return cpu_->upload_vector(values, n, stored_bytes);
    if (at.on_cpu) backend_.keep_host_pages(values);
    const Weight w = backend_.upload_vector(values, n, stored_bytes);
    if (at.on_cpu) cpu_copies_.emplace_back(w.id, cpu_->upload_vector(values, n, stored_bytes));
    return w;
}

Weight Model::vector(const std::string& name, int64_t n, bool required) {
    const gguf::TensorInfo* t = file_.find_tensor(name);
    if (!t) {
        if (!required) return {};
        fail("{}: tensor '{}' is missing, expected {} values for {}", file_.path(), name, n,
             hp_.arch);
    }
    if (static_cast<int64_t>(t->n_elements) != n)
        fail("{}: tensor '{}' has {} elements, expected {}", file_.path(), name, t->n_elements, n);
    if (t->type == TensorType::F32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0)
        return upload_vector(name, reinterpret_cast<const float*>(t->data), n, t->size_bytes);
    if (!can_dequantize(t->type))
        fail("{}: tensor '{}' is {}, which headroom cannot read", file_.path(), name,
             headroom::name(t->type));
    std::vector<float> copy(static_cast<size_t>(n));
    ref::dequantize_row(t->type, t->data, copy.data(), n);
    converted_.push_back(std::move(copy));
    return upload_vector(name, converted_.back().data(), n, t->size_bytes);
}

void Model::project(kernels::Backend& be, kernels::DevPtr x, int64_t n_tokens,
                    std::initializer_list<const Weight*> ws,
                    std::initializer_list<kernels::DevPtr> ys) {
    be.matmul({ws.begin(), ws.size()}, x, n_tokens, {ys.begin(), ys.size()});
}

kernels::RopeArgs Model::rope_args(uint32_t n_head, float base) const {
    const auto& h = hp_;
    kernels::RopeArgs a;
    a.n_head = n_head;
    a.head_dim = h.head_dim_k;
    a.n_rot = h.n_rot;
    a.base = base;
    a.position_scale = h.rope_scale;
    a.mode = h.rope_style == RopeStyle::NeoX ? kernels::RopeMode::NeoX : kernels::RopeMode::Normal;
    a.yarn_factor = h.yarn_factor;
    a.yarn_orig_ctx = h.yarn_orig_ctx;
    a.yarn_beta_fast = h.yarn_beta_fast;
    a.yarn_beta_slow = h.yarn_beta_slow;
    a.yarn_truncate = h.yarn_truncate;
    return a;
}

kernels::AttentionOp Model::attention_op(const ForwardBuffers& buf) const {
    kernels::AttentionOp a;
    a.q = buf.q;
    a.out = buf.attn;
    a.n_head = hp_.n_head;
    a.n_head_kv = hp_.n_head_kv;
    a.head_dim_k = hp_.head_dim_k;
    a.head_dim_v = hp_.head_dim_v;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hp_.head_dim_k));
    return a;
}

// xb (n_rows, n_embd) = norm(x[logit_rows]); logits (n_rows, n_vocab) = xb @ output^T.
void Model::output_logits(const kernels::StepView& step, const ForwardBuffers& buf,
                          kernels::Backend& be, float norm_offset, const ForwardPart& part) const {
    const int64_t n_rows = step.n_logit_rows;
    if (n_rows == 0) return;
    be.gather_rows(buf.x, hp_.n_embd, step, buf.xb);
    be.rmsnorm(buf.xb, w_.output_norm, norm_offset, hp_.rms_eps, n_rows, hp_.n_embd,
               part.hidden ? buf.logits : buf.xb);
    if (!part.hidden) project(be, buf.xb, n_rows, {&w_.output}, {buf.logits});
}

}  // namespace headroom
