#include "engine/runner.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/units.h"

namespace headroom {

Runner::Runner(const Model& model, const ModelDesc& desc, const RunnerOptions& options,
               Ledger& ledger)
    : model_(model),
      plan_(plan_memory(desc, options.config, options.budget)),
      ledger_(ledger),
      ops_(kernels::ops()),
      pool_(static_cast<int>(plan_.config.n_threads)) {
    if (!plan_.fits) throw Error(plan_.refusal);
    if (plan_.config.max_model_len > model.hparams().n_ctx_train && model.hparams().n_ctx_train > 0)
        fmt::print(stderr, "warning: --max-model-len {} exceeds the model's trained context {}\n",
                   plan_.config.max_model_len, model.hparams().n_ctx_train);
    cache_ = std::make_unique<KvCache>(plan_, model.hparams(), options.prefix_caching);
    arena_ = Region(plan_.activations.total_bytes, "activation arena");
    buffers_ = carve_buffers(plan_.activations, arena_.data(), &pool_);
    buffers_.ctx.act_precision = options.act_precision;
    sampler_scratch_ = reinterpret_cast<float*>(arena_.data() + plan_.activations.sampler.offset);

    ledger_.reserve(Term::Weights, plan_.weights_bytes);
    ledger_.allocate(Term::Weights, plan_.weights_bytes);
    ledger_.reserve(Term::KvCache, plan_.kv_cache_bytes);
    ledger_.reserve(Term::Activations, plan_.activations_bytes());
    ledger_.reserve(Term::Runtime, plan_.runtime_bytes());
    ledger_.allocate(Term::Runtime, plan_.runtime_bytes());
}

float* Runner::forward(const Batch& batch) {
    const auto n_tokens = static_cast<uint32_t>(batch.n_tokens());
    const auto n_rows = static_cast<uint32_t>(batch.logit_tokens.size());
    HR_CHECK(n_tokens <= plan_.activations.n_tokens && n_rows <= plan_.activations.n_logit_rows);
    // The part of the arena this step uses, by the same layout rule.
    const uint64_t in_use =
        plan_activations(model_.hparams(), n_tokens, n_rows, plan_.config.n_threads).total_bytes;
    ledger_.set_allocated(Term::Activations, in_use);
    model_.forward(batch, *cache_, buffers_, ops_);
    ledger_.set_allocated(Term::KvCache, cache_->used_bytes());
    return buffers_.logits;
}

void Runner::prefault_weights(const Model& model, bool progress) {
    // The tensors of one file are contiguous in its data section: walk from
    // the lowest to the highest tensor address, skipping matrices the backend
    // repacked at load (their copies are resident; their file pages stay out).
    const auto& w = model.weights();
    const uint8_t* lo = w.tok_embd.data;
    const uint8_t* hi =
        w.tok_embd.data + w.tok_embd.row_bytes * static_cast<uint64_t>(w.tok_embd.n_rows);
    std::vector<std::pair<const uint8_t*, const uint8_t*>> skip;
    auto extend = [&](const kernels::Matrix& m) {
        const uint8_t* end = m.data + m.row_bytes * static_cast<uint64_t>(m.n_rows);
        lo = std::min(lo, m.data);
        hi = std::max(hi, end);
        if (m.packed) skip.emplace_back(m.data, end);
    };
    extend(w.output);
    for (const auto& l : w.layers)
        for (const auto* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
            extend(*m);
    std::sort(skip.begin(), skip.end());
    const uint64_t n_bytes = static_cast<uint64_t>(hi - lo);
    constexpr uint64_t kPage = 4096;
    constexpr uint64_t kChunk = 64ull << 20;
    Progress bar("loading weights", n_bytes, progress && n_bytes > (256ull << 20));
    volatile uint8_t sink = 0;
    size_t next_skip = 0;
    for (uint64_t off = 0; off < n_bytes; off += kChunk) {
        const uint64_t n = std::min(kChunk, n_bytes - off);
        const auto* base = lo + off;
        uint8_t acc = 0;
        for (uint64_t i = 0; i < n; i += kPage) {
            const uint8_t* p = base + i;
            while (next_skip < skip.size() && skip[next_skip].second <= p) ++next_skip;
            if (next_skip < skip.size() && skip[next_skip].first <= p) continue;
            acc ^= *p;
        }
        sink = sink ^ acc;
        bar.update(off + n, format_bytes(off + n));
    }
    if (progress && n_bytes > (256ull << 20)) bar.finish(format_bytes(n_bytes));
}

}  // namespace headroom
