// Loading a model for the commands that run one: the backend that will run
// it (with the host's ledger), the mapped file, the forward pass with its
// weights uploaded, the tokenizer, and the description the byte accounting
// uses (with the loaded tokenizer's real size).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/ledger.h"
#include "engine/runner.h"
#include "format/gguf-reader.h"
#include "kernels/backend.h"
#include "memory/terms.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace headroom::cli {

enum class DeviceKind { Cpu, Vulkan };

struct DeviceChoice {
    DeviceKind kind = DeviceKind::Cpu;
    std::optional<uint32_t> index;  // vulkan:N; none: the best device (vk::best_device)
};

// "cpu" (or "host"), "vulkan", "vulkan:N". Throws headroom::Error naming --device.
DeviceChoice parse_device(const std::string& text);
// The Vulkan device a choice means: N for vulkan:N, else the best one of
// this machine (a GPU before a CPU-type device; `say`: a line on stderr
// when only a CPU-type device is there). Throws when there is none.
uint32_t vulkan_index(const DeviceChoice& choice, bool say);

struct BackendOptions {
    uint32_t n_threads = 0;  // CPU workers; 0: one per physical core
    DeviceChoice device;
    uint64_t device_memory_bytes = 0;  // a GPU's memory in place of its heap's
    uint64_t reserve_bytes = 0;        // a GPU's memory left to others
    double mem_fraction = 0.9;
    bool progress = true;
    GpuLayers gpu_layers;  // --n-gpu-layers (auto by default)
};

// "auto", "all" or a count. Throws headroom::Error naming --n-gpu-layers.
GpuLayers parse_gpu_layers(const std::string& text);

// Members are destroyed in reverse order: the model before the backends it
// holds weights in, the backends before the ledger they count in.
struct LoadedModel {
    std::unique_ptr<Ledger> host_ledger;
    std::unique_ptr<kernels::Backend> backend;
    std::unique_ptr<kernels::Backend> cpu;  // a split model's CPU part, else null
    std::unique_ptr<gguf::GgufFile> file;
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tokenizer;
    ModelDesc desc;
};

// Throws headroom::Error (a build without Vulkan, a device that is not there).
std::unique_ptr<kernels::Backend> make_backend(const BackendOptions& options, Ledger& host);

// What a GPU backend's budget is a fraction of (its heap, less --reserve, or
// --device-memory); 0 for the CPU.
uint64_t device_budget_bytes(const kernels::Backend& backend);

// Opens the backend, the file and the tokenizer, and describes the model
// (no weights loaded yet). Throws headroom::Error with one clear line for
// any problem.
LoadedModel open_model(const std::string& path_or_name, const BackendOptions& options);

// Loads the weights for the runner `ro` configures. On a GPU: the device's
// budget in place of the host's, one host thread unless layers stay on the
// CPU, and the layers placed by options.gpu_layers (place_layers, said in
// one line when not all go to the GPU; every layer on the CPU, said too,
// when auto finds none that fits). Throws headroom::Error with the numbers
// when an explicit --n-gpu-layers does not fit.
void load_weights(LoadedModel& m, RunnerOptions& ro, const BackendOptions& options);

// Brings the weights of every backend the model runs on into memory.
void make_resident(LoadedModel& m, bool progress);

// Both, every layer on the one backend.
LoadedModel load_model(const std::string& path_or_name, const BackendOptions& options = {});

}  // namespace headroom::cli
