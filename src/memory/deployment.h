// The deployment decision: from a model's description and the device and
// limits asked for, where the model runs and with what. `headroom plan`
// prints it; `run`, `serve`, `bench` and `eval` build an engine instance
// from it (engine/instance.h). It is the one place that decides:
//
//   budget      (device memory - --reserve) × --mem-fraction, or the four
//               terms around an explicit --kv-cache-memory (budget_for)
//   placement   which layers run on a GPU and which on the CPU
//               (--n-gpu-layers: auto, all or N; place_layers), and every
//               layer on the CPU when not one fits the GPU
//   threads     the CPU engine's; one host thread drives a GPU holding every
//               layer, a split's CPU part runs on the CPU engine's
//   context     an unpinned --max-model-len is the trained context, or the
//               longest that fits (plan_memory_fitting)
//   terms       the MemoryPlan with every term per device (memory/terms.h)
//
// It computes no term itself: every configuration it tries is one call of
// plan_memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/units.h"
#include "memory/device-table.h"
#include "memory/terms.h"

namespace headroom {

// A CUDA context with lazy module loading (CUDA >= 11.7) holds about 300 MiB
// (pytorch/pytorch#107667); it grows with the SM count, 555 MiB on a 188-SM
// card (ggml-org/llama.cpp#23604). 512 MiB covers current data-center GPUs
// and leaves cuBLAS a workspace.
inline constexpr uint64_t kCudaContextBytes = 512 * MiB;

// The limits asked for: the engine's configuration and the budget's knobs.
struct PlanSettings {
    // Zeros are resolved: max_model_len (the trained context, or the longest
    // that fits), n_threads (one per physical core for a CPU engine).
    EngineConfig config;
    double mem_fraction = 0.9;
    uint64_t kv_cache_bytes = 0;  // --kv-cache-memory
    uint64_t reserve_bytes = 0;   // --reserve
};

// The budget a device gives these settings (on a GPU the runtime term holds
// the driver's context; headroom's own GPU checks a split's host share
// against host memory).
BudgetSpec budget_for(const Device& device, const PlanSettings& settings);

// The weights of the first k layers (those a split leaves on the CPU).
uint64_t first_layers_bytes(const ModelDesc& model, uint32_t k);
// Host bytes of the experts of layers [first, n_layer): what --cpu-moe keeps
// on the CPU.
uint64_t experts_from(const ModelDesc& model, uint32_t first);

// One configuration as asked, on one device.
struct Plan {
    PlanSettings settings;  // as planned: config.device, n_threads resolved
    MemoryPlan mem;
    // Set when the trained context did not fit and mem is for the longest
    // that does (the context was not pinned): the line that says so.
    std::string context_note;
    uint64_t host_bytes = 0;  // layers left on the CPU: their weights and KV
    // Every one of max_num_seqs sequences at max_model_len at once (mem.fits
    // needs only one; the others would wait for KV blocks).
    bool fits_all() const {
        return mem.fits && mem.max_num_seqs_at_max_model_len >= mem.config.max_num_seqs;
    }
    // What the budget has left (on a GPU, of the GPU's terms).
    uint64_t free_bytes() const {
        const uint64_t used = mem.budgeted_bytes();
        return mem.budget_bytes > used ? mem.budget_bytes - used : 0;
    }
};

// Plans the settings on the device as they are (the layers on the CPU are
// settings.config.n_cpu_layers; nothing is placed): what plan_deployment
// ends with, and what the planner's searches try.
Plan evaluate(const ModelDesc& model, const Device& device, const PlanSettings& settings);

// --n-gpu-layers: how many of the model's layers run on the GPU.
struct GpuLayers {
    enum class Kind { Auto, All, Count };
    Kind kind = Kind::Auto;
    uint32_t count = 0;  // Kind::Count
};

struct LayerPlacement {
    uint32_t n_cpu_layers = 0;
    // false: every layer runs on the CPU (auto found no layer that fits the
    // GPU, or --n-gpu-layers 0).
    bool on_gpu = true;
    MemoryPlan plan;   // the placement's plan (on the GPU); !plan.fits: refused
    std::string note;  // one line: what went where and why (empty: all on the GPU)
};

// Places a model's layers for a GPU (config.device, budget the device's;
// config.n_threads the host threads a CPU part would run with). Auto: the
// most layers whose plan fits, the plan that sizes the engine: room on the
// device for their weights, the KV of at least one sequence of
// max_model_len (pinned, or the trained context), the activations and the
// runtime; the other layers on the CPU. When not even one layer fits, every
// layer on the CPU (on_gpu false). A count, or all, is planned as asked (an
// unpinned context fitting by itself) and refused with the plan's numbers
// when it does not fit. Throws headroom::Error for a count above the
// model's layers.
// `gpu`: the device's name in the note (default config.device).
LayerPlacement place_layers(const ModelDesc& model, const EngineConfig& config,
                            const BudgetSpec& budget, GpuLayers layers, std::string_view gpu = {});

// What is asked of a deployment.
struct DeploymentRequest {
    // Where: this machine (host_device()), a GPU of the table or one
    // detected (planned, not run), or headroom's own Vulkan device
    // (device.vulkan_index: what its backend allocates).
    Device device;
    PlanSettings settings;
    // --n-gpu-layers. Unset: headroom's own GPU places the layers by auto; a
    // GPU of the table keeps settings.config.n_cpu_layers.
    std::optional<GpuLayers> gpu_layers;
    // settings.config.n_cpu_layers was given (plan --cpu-layers): nothing
    // is placed.
    bool cpu_layers_pinned = false;
    // The KV pool holds exactly one sequence of max_model_len rather than
    // what the budget leaves (bench), unless --kv-cache-memory is given.
    bool one_sequence_pool = false;
};

struct Deployment {
    // Where the model runs: the device asked for, or this machine when not
    // one layer fits the GPU (or --n-gpu-layers 0).
    Device device;
    bool on_cpu_instead = false;  // that fallback happened
    Plan plan;                    // settings.config.n_cpu_layers: the placement
    // One line on the placement when it is not every layer on the device
    // asked for; empty otherwise.
    std::string placement_note;
    // A GPU plan whose layers were not pinned: where auto puts them, and
    // the plan of that placement (when it puts any on the GPU).
    struct Auto {
        LayerPlacement placed;
        Plan plan;
        uint32_t n_layer = 0;
        uint32_t n_gpu_layers() const { return placed.on_gpu ? n_layer - placed.n_cpu_layers : 0; }
    };
    std::optional<Auto> auto_layers;

    const MemoryPlan& mem() const { return plan.mem; }
    // Threads of the CPU engine's part: all of the model on the CPU, or a
    // split's first layers; 0 when a GPU holds every layer.
    uint32_t cpu_threads() const;
};

// The decision. Throws headroom::Error for a request that cannot be
// planned (a count of layers above the model's, --n-gpu-layers without a
// GPU, an invalid configuration); a deployment that does not fit is
// returned with plan.mem.fits false and the refusal's numbers.
Deployment plan_deployment(const ModelDesc& model, const DeploymentRequest& request);

}  // namespace headroom
