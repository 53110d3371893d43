#include "engine/runner.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "core/error.h"

namespace headroom {

namespace {

// The configuration with the backend's device: what the plan places where.
EngineConfig on_device(EngineConfig c, kernels::Backend& backend) {
    c.device = backend.ledger().device();
    return c;
}

}  // namespace

Runner::Runner(const Model& model, const ModelDesc& desc, const RunnerOptions& options,
               kernels::Backend& backend)
    : model_(model),
      plan_(plan_memory(desc, on_device(options.config, backend), options.budget)),
      backend_(backend) {
    if (!plan_.fits) throw Error(plan_.refusal);
    if (plan_.config.max_model_len > model.hparams().n_ctx_train && model.hparams().n_ctx_train > 0)
        fmt::print(stderr, "warning: --max-model-len {} exceeds the model's trained context {}\n",
                   plan_.config.max_model_len, model.hparams().n_ctx_train);
    const ActivationLayout& a = plan_.activations;
    cache_ = std::make_unique<KvCache>(plan_, model.hparams(), options.prefix_caching, backend_);
    arena_ = kernels::DeviceBuffer(backend_, Term::Activations, a.device_bytes, "activation arena");
    staging_ = Region(a.staging_bytes, "activation staging");
    backend_.host_ledger().reserve(Term::Activations, a.staging_bytes);
    const kernels::DevPtr p = arena_.ptr();
    buffers_ = {p + a.x.offset,    p + a.xb.offset, p + a.q.offset,
                p + a.k.offset,    p + a.v.offset,  p + a.attn.offset,
                p + a.gate.offset, p + a.up.offset, p + a.logits.offset};
    backend_.set_workspace({p + a.acts_q.offset, a.acts_q.size_bytes, p + a.thread_scratch.offset,
                            a.scratch_per_thread_bytes});
    backend_.set_act_precision(options.act_precision);
    sampler_scratch_ = reinterpret_cast<float*>(staging_.data() + a.sampler.offset);

    // The step view's words for the largest step: per token id, position,
    // sequence and one slot per group; logit rows; per sequence a table
    // start per group and a length; every table of every sequence.
    const auto& c = plan_.config;
    const uint64_t n_groups = plan_.kv_groups.size();
    const uint64_t table_words = (c.max_model_len + c.block_size - 1) / c.block_size + 1;
    step_words_.reserve(a.n_tokens * (3 + n_groups) + a.n_logit_rows +
                        c.max_num_seqs * (n_groups * (1 + table_words) + 1));

    Ledger& host = backend_.host_ledger();
    host.reserve(Term::Runtime, plan_.runtime_bytes());
    host.allocate(Term::Runtime, plan_.runtime_bytes());
}

Runner::~Runner() {
    Ledger& host = backend_.host_ledger();
    host.release(Term::Runtime, plan_.runtime_bytes());
    host.unreserve(Term::Runtime, plan_.runtime_bytes());
    host.unreserve(Term::Activations, plan_.activations.staging_bytes);
}

float* Runner::forward(const Batch& batch) {
    const auto n_tokens = static_cast<uint32_t>(batch.n_tokens());
    const auto n_rows = static_cast<uint32_t>(batch.logit_tokens.size());
    HR_CHECK(n_tokens <= plan_.activations.n_tokens && n_rows <= plan_.activations.n_logit_rows);
    const size_t capacity = step_words_.capacity();
    step_ = make_step_view(batch, *cache_, step_words_);
    HR_CHECK(step_words_.capacity() == capacity);  // reserved for the largest step: never grows
    // The part of the arena this step uses, by the same layout rule.
    const ActivationLayout in_use = plan_activations(model_.hparams(), n_tokens, n_rows,
                                                     plan_.config.n_threads, backend_.is_host());
    if (backend_.is_host()) {
        ledger().set_allocated(Term::Activations, in_use.total_bytes);
    } else {
        ledger().set_allocated(Term::Activations, in_use.device_bytes);
        backend_.host_ledger().set_allocated(Term::Activations, in_use.staging_bytes);
    }
    backend_.begin_step(step_);
    model_.forward(step_, cache_->layout(), buffers_, backend_);
    float* logits = backend_.end_step(buffers_.logits, uint64_t{n_rows} * model_.hparams().n_vocab);
    ledger().set_allocated(Term::KvCache, cache_->used_bytes());
    return logits;
}

}  // namespace headroom
