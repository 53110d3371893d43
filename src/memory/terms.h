// The byte accounting: the four memory terms of DESIGN.md computed from a
// model description and an engine configuration. This is the one function
// both the planner (`headroom plan`, `headroom doctor`) and the engine call:
// the planner prints what it returns, and the engine allocates exactly the
// sizes it returns (the KV pool's blocks, the activation arena, the runtime
// reservations), so prediction and allocation cannot drift apart.
//
//   weights      sum of the tensor table (mapped from the GGUF file)
//   kv_cache     per layer group: n_blocks × block_size × bytes per token;
//                sliding-window layers hold at most window + one step
//   activations  the arena for the largest step (memory/activation-layout.h)
//   runtime      worker stacks, tokenizer tables, per-sequence bookkeeping,
//                compiled grammars and each sequence's grammar state
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/kv-dtype.h"
#include "memory/activation-layout.h"
#include "shape/hparams.h"

namespace headroom {

namespace gguf {
class GgufFile;
}

enum class AttentionKind {
    Full,           // attends over the whole context
    SlidingWindow,  // attends over the last `window` tokens
    Latent,         // multi-head latent attention (caches one latent vector per token)
};

// What the accounting needs to know about a model.
struct ModelDesc {
    HParams hp;
    std::string source;         // file path, "hf-config FILE" or a built-in name
    uint64_t weight_bytes = 0;  // all tensors
    // The f32 copies the CPU backend makes of vectors stored in another type
    // (norms in f16...): weights in host memory beside the mapped file.
    uint64_t vector_copy_bytes = 0;
    uint64_t n_params = 0;
    bool weights_exact = false;  // from a tensor table, not an estimate
    std::string weight_type;     // dominant type, e.g. "Q4_1"
    uint64_t tokenizer_bytes = 0;
    // The file's header as mapped (read while loading, so resident) plus the
    // parsed metadata index (string views over every vocabulary entry...).
    uint64_t metadata_bytes = 0;
    // Per transformer block, for planning layers kept on the CPU; the rest of
    // weight_bytes is embeddings, output and final norm.
    std::vector<uint64_t> layer_weight_bytes;
    // What the tensors take in a GPU's memory: kernels::device_weight_slot()
    // of each as stored (vectors as f32). 0 when not known.
    uint64_t device_weight_bytes = 0;
    // The largest tensor's slot in a GPU's memory, and the largest but the
    // experts' (what --cpu-moe leaves on the device): one allocation each at
    // least. 0 when not known.
    uint64_t largest_device_tensor_bytes = 0;
    uint64_t largest_dense_device_tensor_bytes = 0;
    // The same by part (shape/placement.h), for a split between CPU and GPU:
    // each part's bytes on the host (as the CPU backend holds them: the
    // file's, plus an f32 copy of a 1-D tensor stored in another type) and on
    // a GPU. Empty layers: not known (an estimate), planned from
    // layer_weight_bytes.
    struct PartBytes {
        uint64_t host = 0;
        uint64_t device = 0;
    };
    std::vector<PartBytes> layer_parts;
    PartBytes embedding, output, output_norm, other;
    // Of each layer, its experts' tensors (*_exps): what --cpu-moe keeps in
    // host memory. Empty: a dense model, or not known.
    std::vector<PartBytes> layer_expert_parts;
};

// Exact weights from the tensor table; tokenizer bytes estimated from the
// vocabulary arrays. Throws headroom::Error for unreadable hyperparameters.
ModelDesc describe_gguf(const gguf::GgufFile& file);

// Heap an in-memory tokenizer of this vocabulary holds (estimate used before
// the tokenizer is loaded).
uint64_t estimate_tokenizer_bytes(uint64_t n_vocab, uint64_t vocab_text_bytes, uint64_t n_merges);

struct EngineConfig {
    uint32_t max_model_len = 0;  // 0: the model's trained context length
    uint32_t max_num_seqs = 1;
    uint32_t max_num_batched_tokens = 0;  // 0: default (512, at least max_num_seqs)
    uint32_t max_logit_rows = 0;          // 0: max_num_seqs
    KvDtype kv_dtype = KvDtype::F16;
    uint32_t block_size = 16;
    uint32_t n_threads = 1;
    // Cache the whole context for sliding-window layers too (their attention
    // still only looks at the window): what an engine without windowed KV pays.
    bool swa_full = false;
    // The first n_cpu_layers transformer blocks keep their weights and KV in
    // host memory (a GPU plan with layers left on the CPU). On headroom's own
    // GPU backend (device != "host") the plan has both devices' terms, placed
    // by shape/placement.h; for a GPU of the table the terms count only what
    // the device holds. 0 on a CPU-only engine.
    uint32_t n_cpu_layers = 0;
    // Every GPU layer's experts stay in host memory and run on the CPU; the
    // dense and attention weights go to the GPU (llama.cpp's --cpu-moe). A
    // decode step reads only the routed experts, so a mixture of experts runs
    // well this way on a GPU too small for it. GPU plans only.
    bool experts_on_cpu = false;
    // The device the backend runs on: "host" (the CPU backend) or a GPU
    // ("gpu0"). Off the host, the activation arena's staging part and the
    // runtime but the device context are host memory (device_terms()).
    std::string device = "host";
    // The cache of compiled grammars (response_format, tools: engine/grammar.h)
    // and, with it, each sequence's matcher and token mask. 0: no
    // constrained decoding (run, bench); serve's --grammar-cache.
    uint64_t grammar_cache_bytes = 0;
};

// Constrained decoding's per-sequence memory over a vocabulary of n_vocab:
// the token mask (a bit per token, in 32-bit words) and the matcher's stack
// of grammar states (bounded by the grammar's depth; counted generously).
uint64_t grammar_state_bytes(uint32_t n_vocab);
inline constexpr uint64_t kGrammarMatcherBytes = 16 * 1024;
inline constexpr uint64_t kDefaultGrammarCacheBytes = uint64_t{64} << 20;

// How much memory the engine may use.
struct BudgetSpec {
    // Total device memory (CPU: min(MemAvailable, cgroup limit) at start-up).
    uint64_t device_bytes = 0;
    // Fraction of device_bytes for everything (weights, KV, activations, runtime).
    double mem_fraction = 0.9;
    // If nonzero, the KV pool gets exactly this many bytes and the budget is
    // the sum of the four terms.
    uint64_t kv_cache_bytes = 0;
    // What the device's backend holds before the engine allocates anything
    // (a CUDA context and library workspaces), counted in the runtime term.
    // 0 on the CPU.
    uint64_t device_context_bytes = 0;
    // A split's host share (the CPU layers' weights, KV and arena) must fit
    // this × mem_fraction of host memory; 0: not checked.
    uint64_t host_bytes = 0;
    // The most one allocation may take on the device (a Vulkan driver's
    // limit); 0: none. The KV regions and the arena are taken in pieces no
    // larger (kernels::SplitBuffer), so this changes no term's bytes; a KV
    // block or an activation buffer larger than it does not fit.
    uint64_t max_allocation_bytes = 0;
};

// Layers whose KV shares one block geometry and one pool region.
struct KvGroupPlan {
    AttentionKind kind = AttentionKind::Full;
    uint32_t window = 0;              // tokens, sliding-window groups only
    std::vector<uint32_t> layers;     // layer indices in this group
    uint64_t bytes_per_token = 0;     // K and V of one token, all layers of the group
    uint64_t block_bytes = 0;         // bytes_per_token × block_size
    uint32_t max_blocks_per_seq = 0;  // blocks one sequence of max_model_len holds at once
    uint64_t n_blocks = 0;            // blocks in the pool
    // Its layers run on the CPU (a split model's first layers): the pool is
    // host memory, not the GPU's.
    bool on_host = false;
};

// KV blocks of one request in a layer group, at most: n_candidates samples
// or beams (1: a plain request) with K/V for up to n_kv_tokens positions
// each (a sequence of n tokens computes n - 1: its last token is sampled,
// never fed), sharing the n_prompt-token prompt. The prompt's full blocks count once, each
// candidate's own blocks (its copy of the prompt's partial block, its
// output) once per candidate:
//   S + n × (H − S),  H = blocks one sequence of n_kv_tokens holds at once,
//   S = the prompt's full blocks among them (floor(n_prompt / B) with full
//   attention). A sliding window holds the blocks the next query sees; with
//   several candidates each may also be computing a chunk of up to `step`
//   tokens (recomputing its tail after a preemption), so each counts the
//   window plus a step, and none is taken as shared.
// The scheduler's admission check and `plan --n` both use it.
uint32_t request_kv_blocks(const KvGroupPlan& g, uint32_t block_size, uint32_t n_prompt,
                           uint32_t n_kv_tokens, uint32_t n_candidates, uint32_t step = 1);

struct RuntimeBreakdown {
    uint64_t thread_stacks_bytes = 0;
    uint64_t tokenizer_bytes = 0;
    uint64_t metadata_bytes = 0;          // the model file's header and its parsed index
    uint64_t sequences_bytes = 0;         // token lists and block tables of max_num_seqs sequences
    uint64_t prefix_index_bytes = 0;      // the prefix cache's hash index over all blocks
    uint64_t step_view_bytes = 0;         // the largest step view (kernels/step-view.h)
    uint64_t device_context_bytes = 0;    // BudgetSpec::device_context_bytes
    uint64_t step_view_device_bytes = 0;  // a GPU's copy of the step view
    // Compiled-grammar cache and max_num_seqs matchers and masks.
    uint64_t grammar_bytes = 0;
    uint64_t total() const {
        return thread_stacks_bytes + tokenizer_bytes + metadata_bytes + sequences_bytes +
               prefix_index_bytes + step_view_bytes + device_context_bytes +
               step_view_device_bytes + grammar_bytes;
    }
    // What of it a GPU holds (0 on the CPU).
    uint64_t device_bytes() const { return device_context_bytes + step_view_device_bytes; }
};

// What one device holds of a plan, term by term.
struct DeviceTerms {
    std::string device;
    uint64_t weights_bytes = 0;
    uint64_t kv_cache_bytes = 0;
    uint64_t activations_bytes = 0;
    uint64_t runtime_bytes = 0;
    uint64_t total_bytes() const {
        return weights_bytes + kv_cache_bytes + activations_bytes + runtime_bytes;
    }
};

struct MemoryPlan {
    EngineConfig config;  // with defaults resolved
    BudgetSpec budget_spec;
    uint64_t budget_bytes = 0;

    uint64_t weights_bytes = 0;
    std::vector<KvGroupPlan> kv_groups;
    uint64_t kv_bytes_per_token = 0;  // all layers as if every layer were full attention
    uint64_t kv_bytes_per_seq = 0;    // one sequence of max_model_len (windows applied)
    uint64_t kv_cache_bytes = 0;      // the pool: Σ n_blocks × block_bytes (the device's groups)
    ActivationLayout activations;
    RuntimeBreakdown runtime;
    // A split (n_cpu_layers > 0 on headroom's GPU backend): what the CPU's
    // layers hold in host memory. The kv_groups on_host are theirs.
    uint64_t host_weights_bytes = 0;    // their weights and the embedding table
    uint64_t host_kv_cache_bytes = 0;   // their pool
    ActivationLayout host_activations;  // their arena (its device part)
    bool split() const { return config.n_cpu_layers > 0 && config.device != "host"; }

    // Allocations the device's KV groups take: one per group, or the pieces
    // of whole blocks a device's limit on one allocation cuts them into.
    uint64_t kv_allocations = 0;

    bool fits = false;              // the pool holds one sequence of max_model_len
    bool host_short = false;        // !fits because a split's host share exceeds host memory
    bool allocation_short = false;  // !fits because a block or buffer exceeds one allocation
    std::string refusal;            // when !fits: the numbers and each fix with its effect
    uint32_t fit_len = 0;  // when !fits: the longest context that would (whole blocks), or 0
    uint32_t max_num_seqs_at_max_model_len = 0;
    uint32_t max_model_len_at_max_num_seqs = 0;

    uint64_t activations_bytes() const { return activations.total_bytes; }
    uint64_t runtime_bytes() const { return runtime.total(); }
    uint64_t total_bytes() const {
        return weights_bytes + kv_cache_bytes + activations_bytes() + runtime_bytes() +
               host_weights_bytes + host_kv_cache_bytes + host_activations.device_bytes;
    }
    // The terms by device, the backend's device first: one entry ("host")
    // for the CPU backend; for a GPU, the GPU and the host.
    std::vector<DeviceTerms> device_terms() const;
    // What the budget holds: the total on the CPU, the GPU's terms on a GPU.
    uint64_t budgeted_bytes() const { return device_terms()[0].total_bytes(); }
};

// 32-bit words of the largest step view (kernels/step-view.h) a
// configuration (defaults resolved) makes: per token its id, position,
// sequence and a slot per group; the logit rows; per sequence a table start
// per group, a length and every block of every table.
uint64_t step_view_words(const EngineConfig& config, uint64_t n_groups);

// The KV layer groups of a model (without pool sizes). On headroom's GPU
// backend a split's first config.n_cpu_layers layers have groups of their
// own (on_host); for a GPU from the table those layers are left out (their
// KV is host memory, reported apart).
std::vector<KvGroupPlan> kv_groups_for(const HParams& hp, const EngineConfig& config);

// Whether the model's cached rows (keys and values, or MLA's latent) fit the
// blocks of `dtype`: what kv_groups_for checks before it sizes anything.
bool kv_dtype_fits(const HParams& hp, KvDtype dtype);

// Resolves defaults and computes every term. Never throws for a configuration
// that does not fit: `fits` is false and `refusal` says why and what to change.
// Throws headroom::Error for an invalid configuration (zero block size...).
MemoryPlan plan_memory(const ModelDesc& model, const EngineConfig& config,
                       const BudgetSpec& budget);

// With an explicit pool (--kv-cache-memory) a plan budgets its own terms
// and fits whatever the device: this refuses it, with the numbers, when
// they exceed mem_fraction of the device's memory.
void refuse_past_device(MemoryPlan& plan, std::string_view device);

// plan_memory, but a context that was not pinned (config.max_model_len 0)
// fits by itself: when the trained context does not fit the budget, the plan
// is for the longest context that does (whole blocks), and *note says so in
// one line (what was asked, what fits, why). A pinned length is planned as
// asked, and refused as plan_memory refuses it.
MemoryPlan plan_memory_fitting(const ModelDesc& model, const EngineConfig& config,
                               const BudgetSpec& budget, std::string* note);

}  // namespace headroom
