// An engine instance: one model built as its deployment says. It opens
// the model (the mapped file, its tokenizer, its description), asks
// plan_deployment (memory/deployment.h) where and how to run it, and builds
// exactly that: the backends (a GPU's, a split's CPU part, or the CPU alone
// when no layer fits the GPU), the weights, the runner sized by the
// deployment's plan, and on request the engine. `run`, `serve`, `bench` and
// `eval` open one; `plan` prints the same decision without loading.
//
// Members are destroyed in reverse order: the engine before the runner, the
// runner before the model, the model before the backends it holds weights
// in, the backends before the ledger they count in.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/ledger.h"
#include "engine/engine.h"
#include "engine/metrics.h"
#include "engine/runner.h"
#include "format/gguf-reader.h"
#include "kernels/backend.h"
#include "memory/deployment.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace headroom {

enum class DeviceKind { Cpu, Vulkan };

struct DeviceChoice {
    DeviceKind kind = DeviceKind::Cpu;
    std::optional<uint32_t> index;  // vulkan:N; none: the best device (vk::best_device)
};

// "cpu" (or "host"), "vulkan", "vulkan:N". Throws headroom::Error naming --device.
DeviceChoice parse_device(const std::string& text);
// "auto", "all" or a count. Throws headroom::Error naming --n-gpu-layers.
GpuLayers parse_gpu_layers(const std::string& text);
// The Vulkan device a choice means: N for vulkan:N, else the best one of
// this machine (a GPU before a CPU-type device; `say`: a line on stderr
// when only a CPU-type device is there). Throws when there is none.
uint32_t vulkan_index(const DeviceChoice& choice, bool say);

// What a command asks of its instance.
struct InstanceOptions {
    DeviceChoice device;
    uint64_t device_memory_bytes = 0;  // a GPU's memory in place of its heap's
    uint64_t reserve_bytes = 0;        // a GPU's memory left to others
    // The limits: config.n_threads the CPU engine's (resolved, not 0);
    // reserve_bytes is the field above, for a GPU.
    PlanSettings settings;
    std::optional<GpuLayers> gpu_layers;  // --n-gpu-layers; unset: auto
    bool one_sequence_pool = false;       // DeploymentRequest::one_sequence_pool
    RunnerSettings runner;
    bool progress = true;  // loading progress and notes on stderr
    // Quantize the weights before loading (--quantization): a GGUF file type
    // ("q4_k_m"), or "auto": the best type whose deployment fits the budget
    // (the weights as stored first, then llama.cpp's types from Q8_0 down),
    // said in one line. Empty: as stored.
    std::string quantization;
    // Where quantized models are kept and found again (--quantized-cache);
    // empty: a temporary file, gone when the process ends.
    std::string quantized_cache;
};

class Instance {
  public:
    // Maps the file and reads its tokenizer and description; nothing is
    // planned or allocated for running yet. Throws headroom::Error with one
    // clear line (a missing file, an unreadable header).
    explicit Instance(const std::string& path_or_name);
    ~Instance();
    Instance(const Instance&) = delete;
    Instance& operator=(const Instance&) = delete;

    // Opens the backend options.device names, asks plan_deployment where
    // and how to run (deployment_request), and builds that. Throws
    // headroom::Error with the plan's refusal when it does not fit, or for a
    // device that is not there. Once.
    void load(const InstanceOptions& options);
    // The two halves of load(), for a caller that decides otherwise: the
    // backend of options.device, then a deployment built on it: the CPU's
    // backend in its place when the deployment runs on the CPU instead, a
    // CPU part for a split, the weights uploaded and made resident, the
    // runner sized by deployment.plan. The deployment's notes (the
    // placement, a fitted context) go to stderr.
    kernels::Backend& open_backend(const InstanceOptions& options);
    void build(const Deployment& deployment, const InstanceOptions& options);

    const gguf::GgufFile& file() const { return *file_; }
    const Tokenizer& tokenizer() const { return *tokenizer_; }
    const ModelDesc& desc() const { return desc_; }
    // After load():
    const Deployment& deployment() const { return deployment_; }
    const Model& model() const { return *model_; }
    kernels::Backend& backend() { return *backend_; }
    kernels::Backend* cpu_part() { return cpu_.get(); }
    Runner& runner() { return *runner_; }
    const Runner& runner() const { return *runner_; }
    EngineMetrics& metrics() { return metrics_; }
    // The engine over the runner, made on the first call (not started).
    Engine& engine();

  private:
    std::unique_ptr<Ledger> host_ledger_;
    std::unique_ptr<kernels::Backend> backend_;
    std::unique_ptr<kernels::Backend> cpu_;  // a split model's CPU part, else null
    // Replaces file_ and desc_ by the model quantized as options.quantization says.
    void quantize_weights(const DeploymentRequest& request, const InstanceOptions& options);

    std::unique_ptr<gguf::GgufFile> source_;  // what -m named, when file_ is its quantized copy
    std::unique_ptr<gguf::GgufFile> file_;
    std::unique_ptr<Tokenizer> tokenizer_;
    ModelDesc desc_;
    Deployment deployment_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<Runner> runner_;
    EngineMetrics metrics_;
    std::unique_ptr<Engine> engine_;
};

// The request a device choice and options make, with the device as its
// backend reports it (a GPU's memory, its limit on one allocation).
DeploymentRequest deployment_request(kernels::Backend& backend, const InstanceOptions& options);

// Throws headroom::Error (a build without Vulkan, a device that is not there).
std::unique_ptr<kernels::Backend> make_backend(const InstanceOptions& options, Ledger& host);

}  // namespace headroom
