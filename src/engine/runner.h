// The runner: everything one model needs to run, sized once at start-up
// from the byte accounting (memory/terms.h) and never resized: the KV pool,
// the activation arena, the worker threads. It turns a batch into one
// forward pass and keeps the ledger current. It decides nothing: which
// tokens run is the scheduler's business.
#pragma once

#include <memory>

#include "core/region.h"
#include "core/thread-pool.h"
#include "kernels/kernels.h"
#include "memory/kv-cache.h"
#include "memory/ledger.h"
#include "memory/terms.h"
#include "model/batch.h"
#include "model/model.h"

namespace headroom {

struct RunnerOptions {
    EngineConfig config;
    BudgetSpec budget;
    bool prefix_caching = true;
    // How matmuls against quantized weights take activations (kernels.h).
    kernels::ActPrecision act_precision = kernels::default_act_precision();
};

class Runner {
  public:
    // Plans memory with `desc` (whose tokenizer_bytes should be the loaded
    // tokenizer's), refuses a configuration that cannot serve one sequence
    // of max_model_len (headroom::Error carrying the plan's refusal), then
    // reserves every term in the ledger and allocates the pool and arena.
    Runner(const Model& model, const ModelDesc& desc, const RunnerOptions& options, Ledger& ledger);

    const MemoryPlan& plan() const { return plan_; }
    KvCache& cache() { return *cache_; }
    const KvCache& cache() const { return *cache_; }
    ThreadPool& pool() { return pool_; }
    const Model& model() const { return model_; }
    const kernels::Ops& ops() const { return ops_; }
    Ledger& ledger() { return ledger_; }

    // Runs one forward pass. Returns the logits, (batch.logit_tokens.size(),
    // n_vocab), valid until the next call. Precondition: the batch fits the
    // arena (n_tokens <= max_num_batched_tokens, logit rows <= max_logit_rows)
    // and the cache has grown for its tokens.
    float* forward(const Batch& batch);
    float* sampler_scratch() const { return sampler_scratch_; }

    // Touches every page of the weights so they are resident before the
    // first request (and RSS shows them). Reports progress on stderr if asked.
    static void prefault_weights(const Model& model, bool progress);

  private:
    const Model& model_;
    MemoryPlan plan_;
    Ledger& ledger_;
    const kernels::Ops& ops_;
    ThreadPool pool_;
    std::unique_ptr<KvCache> cache_;
    Region arena_;
    ForwardBuffers buffers_;
    float* sampler_scratch_ = nullptr;
};

}  // namespace headroom
