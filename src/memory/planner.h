// The planner behind `headroom plan`: "will this model fit, and if not,
// what does?" It never computes a memory term itself. Every configuration it
// reports, tries or ranks is one call of plan_memory (memory/terms.h), the
// function the engine sizes its KV pool, arena and runtime with; the planner
// only chooses the inputs (which weight bytes, which device budget, which
// knobs) and explains the result. The deployment it starts from (budget,
// placement, threads, fitted context) is plan_deployment's, the same
// decision run and serve execute (memory/deployment.h).
//
// Budget on a device: (memory - reserve) × mem_fraction. --reserve keeps
// memory for other processes and comes off before the fraction; the fraction
// then covers all four terms, as vLLM's --gpu-memory-utilization does. On a
// GPU the runtime term includes the CUDA context (kCudaContextBytes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/units.h"
#include "memory/deployment.h"
#include "memory/device-table.h"
#include "memory/terms.h"
#include "memory/weight-estimate.h"
#include "shape/model-shape.h"

namespace headroom {

// What is planned: a model and the weight bytes of one weight type.
struct PlanModel {
    std::string source;  // what the user named: a path, a config.json, a table name
    std::string name;    // for people
    std::string kind;    // "gguf", "folder" (Hugging Face), "hf-config" or "builtin"
    ModelShape shape;    // hyperparameters (GGUF: shape.hp only)
    std::vector<WeightTensor> tensors;
    std::string file_type;                  // GGUF: the dominant tensor type ("Q4_1")
    std::optional<WeightType> weight_type;  // unset: a GGUF file's own weights, exact
    ModelDesc desc;                         // what plan_memory reads
    std::string weights_basis;              // where the weight bytes come from, one line
    std::string hf_repo;                    // "meta-llama/Meta-Llama-3-8B" when known
    bool runnable = false;                  // headroom's engine can load it as is
};

// Reads the header and tensor table only (and the vocabulary, for the
// tokenizer's exact size). Throws headroom::Error for an unreadable file or
// an architecture whose attention layout the planner does not know.
PlanModel plan_model_from_gguf(const std::string& path);
PlanModel plan_model_from_shape(const ModelShape& shape, const std::string& source,
                                const std::string& kind, WeightType type);
// The same model in another weight type (an estimate from its tensors).
PlanModel requantized(const PlanModel& model, WeightType type);

// One configuration of the model on the device (memory/deployment.h).
inline Plan evaluate(const PlanModel& model, const Device& device, const PlanSettings& settings) {
    return evaluate(model.desc, device, settings);
}

// What the budget allows around a configuration, each found by planning
// the neighbours (so more sequences also cost their logits and tables):
// the most sequences of max_model_len that all fit at once, and the longest
// context max_num_seqs sequences can all have (at most the trained context).
struct Capacity {
    uint32_t max_num_seqs_at_max_model_len = 0;
    uint32_t max_model_len_at_max_num_seqs = 0;
    bool len_is_trained_context = false;  // the search stopped at the trained context
};
Capacity capacity(const PlanModel& model, const Device& device, const PlanSettings& settings);

// One line per term with the numbers behind it, e.g. "2 × 32 layers × 8 KV
// heads × 128 × 2 B = 128 KiB per token".
struct TermFormulas {
    std::string weights;
    std::vector<std::string> kv_groups;  // one per layer group
    std::string kv_pool;
    std::string activations;
    std::string runtime;
};
TermFormulas formulas(const PlanModel& model, const Plan& plan);

// Knobs the user set on the command line; --fit changes only the others.
struct Pins {
    bool max_model_len = false;
    bool max_num_seqs = false;
    bool kv_dtype = false;
    bool weight_type = false;
    bool cpu_layers = false;
    bool cpu_moe = false;
};

struct Suggestion {
    Plan plan;
    std::optional<WeightType> weight_type;  // unset: the model's own weights
    std::vector<std::string> changes;       // "--kv-dtype q8_0", "max_model_len 32768 -> 8192"
    double cost = 0;                        // lower is better: quality, context, speed given up
    std::string headroom_cmd, vllm_cmd, llama_cpp_cmd;
};

// Configurations that hold every sequence at full length, best first, at
// most `max_results`. Empty when nothing unpinned helps.
std::vector<Suggestion> fit_search(const PlanModel& model, const Device& device,
                                   const PlanSettings& settings, const Pins& pins,
                                   size_t max_results = 6);

// The equivalent command lines for one configuration. Empty when the tool
// cannot run it (vLLM on a CPU plan; llama.cpp with a non-GGUF weight type).
std::string headroom_command(const PlanModel& model, const Device& device, const Plan& plan);
std::string vllm_command(const PlanModel& model, const Device& device, const Plan& plan);
std::string llama_cpp_command(const PlanModel& model, const Device& device, const Plan& plan);

struct QuantRow {
    std::string label;  // "BF16", "Q4_K_M", "Q4_1 (this file)"
    std::string bits;   // "16-bit"
    std::optional<WeightType> type;
    PlanModel model;
    Plan plan;                        // within the budget
    uint64_t kv_needed_bytes = 0;     // every sequence at full length
    uint64_t total_needed_bytes = 0;  // the four terms with that KV cache
};

// The model in each weight type at the same configuration (KV, total,
// verdict), largest first. A GGUF file's own weights come first, exact.
std::vector<QuantRow> compare_quant(const PlanModel& model, const Device& device,
                                    const PlanSettings& settings);

}  // namespace headroom
