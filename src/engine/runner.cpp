#include "engine/runner.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "core/error.h"

namespace headroom {

namespace {

// The configuration with the backend's device and the model's split: what
// the plan places where.
EngineConfig on_device(EngineConfig c, kernels::Backend& backend, const Model& model) {
    c.device = backend.ledger().device();
    c.n_cpu_layers = model.n_cpu_layers();
    return c;
}

// The kernels' scratch in an arena laid out by `a`.
kernels::Workspace workspace_of(const kernels::SplitBuffer& arena, const ActivationLayout& a) {
    kernels::Workspace ws;
    ws.acts_q = arena.at(a.acts_q.offset);
    ws.acts_q_bytes = a.acts_q.size_bytes;
    ws.thread_scratch = arena.at(a.thread_scratch.offset);
    ws.scratch_per_thread_bytes = a.scratch_per_thread_bytes;
    return ws;
}

// The plan, its context fitted to the budget when not pinned (said on stderr).
MemoryPlan fitted_plan(const ModelDesc& desc, const EngineConfig& config,
                       const BudgetSpec& budget) {
    std::string note;
    MemoryPlan p = plan_memory_fitting(desc, config, budget, &note);
    if (!note.empty()) fmt::print(stderr, "note: {}\n", note);
    return p;
}

}  // namespace

Runner::Runner(const Model& model, const ModelDesc& desc, const RunnerOptions& options,
               kernels::Backend& backend, kernels::Backend* cpu)
    : Runner(model, fitted_plan(desc, on_device(options.config, backend, model), options.budget),
             options, backend, cpu) {}

Runner::Runner(const Model& model, MemoryPlan plan, const RunnerSettings& options,
               kernels::Backend& backend, kernels::Backend* cpu)
    : model_(model),
      plan_(std::move(plan)),
      backend_(backend),
      cpu_(model.n_cpu_layers() > 0 ? cpu : nullptr) {
    HR_CHECK_MSG(model.n_cpu_layers() == 0 || cpu_, "a split model needs the CPU's backend");
    HR_CHECK_MSG(plan_.config.device == backend.ledger().device() &&
                     plan_.config.n_cpu_layers == model.n_cpu_layers(),
                 "the plan is for another device or another split than the model's");
    if (!plan_.fits) throw Error(plan_.refusal);
    if (plan_.config.max_model_len > model.hparams().n_ctx_train && model.hparams().n_ctx_train > 0)
        fmt::print(stderr, "warning: --max-model-len {} exceeds the model's trained context {}\n",
                   plan_.config.max_model_len, model.hparams().n_ctx_train);
    const ActivationLayout& a = plan_.activations;
    cache_ =
        std::make_unique<KvCache>(plan_, model.hparams(), options.prefix_caching, backend_, cpu_);
    arena_ = kernels::SplitBuffer(backend_, Term::Activations, a.device_ends(), "activation arena");
    // Host staging but the logits readback, which a GPU backend takes itself.
    staging_ = Region(a.logits_host.offset, "activation staging");
    backend_.host_ledger().reserve(Term::Activations, a.logits_host.offset);
    buffers_ = carve(arena_, a);
    kernels::Workspace ws = workspace_of(arena_, a);
    if (cpu_) {
        HR_CHECK_MSG(cpu_->is_host(), "a split model's first layers run on the host");
        const ActivationLayout& h = plan_.host_activations;
        cpu_arena_ = kernels::SplitBuffer(*cpu_, Term::Activations, h.device_ends(),
                                          "activation arena (CPU layers)");
        cpu_buffers_ = carve(cpu_arena_, h);
        cpu_->set_workspace(workspace_of(cpu_arena_, h));
        cpu_->set_act_precision(options.act_precision);
    }
    // The step view, in the runtime term with the block tables it copies.
    const RuntimeBreakdown& rt = plan_.runtime;
    step_host_ = Region(rt.step_view_bytes, "step view");
    step_words_ = {reinterpret_cast<uint32_t*>(step_host_.data()), rt.step_view_bytes / 4};
    ws.kv_dtype = plan_.config.kv_dtype;
    if (!backend_.is_host()) {
        step_device_ =
            kernels::DeviceBuffer(backend_, backend_.allocate_step_view(rt.step_view_device_bytes),
                                  rt.step_view_device_bytes);
        ws.step_view = step_device_.ptr();
        ws.step_view_bytes = rt.step_view_device_bytes;
        ws.logits_host_bytes = a.logits_host.size_bytes;
    }
    backend_.set_workspace(ws);
    backend_.set_act_precision(options.act_precision);
    sampler_scratch_ = reinterpret_cast<float*>(staging_.data() + a.sampler.offset);

    // The host's runtime; a GPU's (its context, the step view's copy) is
    // counted by the backend as it takes it.
    Ledger& host = backend_.host_ledger();
    host.reserve(Term::Runtime, host_runtime_bytes());
    host.allocate(Term::Runtime, host_runtime_bytes());
    if (!backend_.is_host()) ledger().allocate(Term::Runtime, rt.step_view_device_bytes);
}

ForwardBuffers Runner::carve(const kernels::SplitBuffer& p, const ActivationLayout& a) const {
    return {p.at(a.x.offset),      p.at(a.xb.offset),    p.at(a.q.offset),
            p.at(a.k.offset),      p.at(a.v.offset),     p.at(a.attn.offset),
            p.at(a.gate.offset),   p.at(a.up.offset),    p.at(a.logits.offset),
            p.at(a.router.offset), p.at(a.route.offset), p.at(a.moe_x.offset)};
}

uint64_t Runner::host_runtime_bytes() const {
    return plan_.runtime_bytes() - (backend_.is_host() ? 0 : plan_.runtime.device_bytes());
}

Runner::~Runner() {
    Ledger& host = backend_.host_ledger();
    host.release(Term::Runtime, host_runtime_bytes());
    host.unreserve(Term::Runtime, host_runtime_bytes());
    if (!backend_.is_host()) ledger().release(Term::Runtime, plan_.runtime.step_view_device_bytes);
    host.unreserve(Term::Activations, plan_.activations.logits_host.offset);
}

float* Runner::forward(const Batch& batch, bool hidden) {
    const auto n_tokens = static_cast<uint32_t>(batch.n_tokens());
    const auto n_rows = static_cast<uint32_t>(batch.logit_tokens.size());
    HR_CHECK(n_tokens <= plan_.activations.n_tokens && n_rows <= plan_.activations.n_logit_rows);
    step_ = make_step_view(batch, *cache_, step_words_);
    // The part of the arena this step uses, by the same layout rule.
    const ActivationLayout in_use = plan_activations(model_.hparams(), n_tokens, n_rows,
                                                     plan_.config.n_threads, backend_.is_host());
    if (backend_.is_host()) {
        ledger().set_allocated(Term::Activations, in_use.total_bytes);
    } else {
        uint64_t host_bytes = in_use.staging_bytes;
        if (cpu_)
            host_bytes +=
                plan_activations(model_.hparams(), n_tokens, 0, plan_.config.n_threads, true)
                    .device_bytes;
        ledger().set_allocated(Term::Activations, in_use.device_bytes);
        backend_.host_ledger().set_allocated(Term::Activations, host_bytes);
    }
    const uint32_t n_layer = model_.hparams().n_layer;
    const kernels::KvLayout& kv = cache_->layout();
    if (cpu_) {
        // The CPU's layers first; their hidden state goes up to the GPU once.
        const uint32_t k = model_.n_cpu_layers();
        cpu_->begin_step(step_);
        model_.forward(step_, kv, cpu_buffers_, *cpu_, {0, k, true, false});
        backend_.begin_step(step_);
        backend_.upload_in_step(buffers_.x, cpu_->host_view(cpu_buffers_.x),
                                uint64_t{n_tokens} * model_.hparams().n_embd * sizeof(float));
        model_.forward(step_, kv, buffers_, backend_, {k, n_layer, false, true, hidden});
    } else {
        backend_.begin_step(step_);
        model_.forward(step_, kv, buffers_, backend_, hidden);
    }
    const uint64_t row = hidden ? model_.hparams().n_embd : model_.hparams().n_vocab;
    float* logits = backend_.end_step(buffers_.logits, uint64_t{n_rows} * row);
    count_kv();
    return logits;
}

void Runner::count_kv() {
    const uint64_t on_host = cache_->host_used_bytes();
    ledger().set_allocated(Term::KvCache, cache_->used_bytes() - on_host);
    if (cache_->host_capacity_bytes() > 0)
        backend_.host_ledger().set_allocated(Term::KvCache, on_host);
}

}  // namespace headroom
