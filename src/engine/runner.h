// The runner: everything one model needs to run, sized once at start-up
// from the byte accounting (memory/terms.h) and never resized: the KV pool,
// the activation arena (its device part in the backend, its host staging
// here), the step view's storage. It turns a batch into one step of the
// backend and keeps the ledgers current. It decides nothing: which tokens
// run is the scheduler's business.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/ledger.h"
#include "core/region.h"
#include "engine/batch.h"
#include "kernels/backend.h"
#include "memory/kv-cache.h"
#include "memory/terms.h"
#include "model/model.h"

namespace headroom {

// What the runner chooses beyond the plan's sizes.
struct RunnerSettings {
    bool prefix_caching = true;
    // How matmuls against quantized weights take activations (kernels/op-args.h).
    kernels::ActPrecision act_precision = kernels::default_act_precision();
};

// A configuration and budget for the runner to plan itself (tests, tools
// that place nothing); the commands run a deployment's plan instead.
struct RunnerOptions : RunnerSettings {
    EngineConfig config;
    BudgetSpec budget;
};

class Runner {
  public:
    // Takes the KV region and the arena from `backend` as `plan` sizes them
    // (a deployment's, memory/deployment.h: its config.device is the
    // backend's and its config.n_cpu_layers the model's split), reserves the
    // runtime in the host ledger, and refuses a plan that does not fit
    // (headroom::Error carrying its refusal). A split model
    // (model.n_cpu_layers() > 0) runs its first layers on `cpu`, which holds
    // their weights, KV groups and an arena of their own.
    Runner(const Model& model, MemoryPlan plan, const RunnerSettings& settings,
           kernels::Backend& backend, kernels::Backend* cpu = nullptr);
    // Plans memory with `desc` (whose tokenizer_bytes should be the loaded
    // tokenizer's), refuses a configuration that cannot serve one sequence
    // of max_model_len (headroom::Error carrying the plan's refusal), then
    // then runs that plan on `backend` (which holds the model's weights).
    Runner(const Model& model, const ModelDesc& desc, const RunnerOptions& options,
           kernels::Backend& backend, kernels::Backend* cpu = nullptr);
    ~Runner();

    const MemoryPlan& plan() const { return plan_; }
    KvCache& cache() { return *cache_; }
    const KvCache& cache() const { return *cache_; }
    const Model& model() const { return model_; }
    kernels::Backend& backend() { return backend_; }
    // The device's ledger (the host's on the CPU).
    Ledger& ledger() { return backend_.ledger(); }

    // Runs one forward pass. Returns the logits, (batch.logit_tokens.size(),
    // n_vocab) in host memory, valid until the next call. Precondition: the
    // batch fits the arena (n_tokens <= max_num_batched_tokens, logit rows <=
    // max_logit_rows) and the cache has grown for its tokens.
    // hidden: the rows' final hidden states instead, (rows, n_embd): what
    // embeddings pool.
    float* forward(const Batch& batch, bool hidden = false);
    float* sampler_scratch() const { return sampler_scratch_; }
    // Sets the KV term's allocated bytes in each device's ledger from the
    // blocks in use.
    void count_kv();
    // The view the last forward() ran (tests).
    const kernels::StepView& last_step() const { return step_; }

  private:
    uint64_t host_runtime_bytes() const;
    ForwardBuffers carve(const kernels::SplitBuffer& arena, const ActivationLayout& a) const;

    const Model& model_;
    MemoryPlan plan_;
    kernels::Backend& backend_;
    kernels::Backend* cpu_ = nullptr;  // a split's CPU part, else null
    std::unique_ptr<KvCache> cache_;
    kernels::SplitBuffer arena_;  // the device part
    Region staging_;              // host staging
    ForwardBuffers buffers_;
    kernels::SplitBuffer cpu_arena_;  // a split's CPU part
    ForwardBuffers cpu_buffers_;
    float* sampler_scratch_ = nullptr;
    Region step_host_;                   // room for the largest step view
    kernels::DeviceBuffer step_device_;  // a GPU's copy of it
    std::span<uint32_t> step_words_;
    kernels::StepView step_;
};

}  // namespace headroom
