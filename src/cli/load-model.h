// Loading a model for the commands that run one: the backend that will run
// it (with the host's ledger), the mapped file, the forward pass with its
// weights uploaded, the tokenizer, and the description the byte accounting
// uses (with the loaded tokenizer's real size).
#pragma once

#include <memory>
#include <string>

#include "core/ledger.h"
#include "format/gguf-reader.h"
#include "kernels/backend.h"
#include "memory/terms.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace headroom::cli {

enum class DeviceKind { Cpu, Vulkan };

struct DeviceChoice {
    DeviceKind kind = DeviceKind::Cpu;
    uint32_t index = 0;  // vulkan:N
};

// "cpu" (or "host"), "vulkan", "vulkan:N". Throws headroom::Error naming --device.
DeviceChoice parse_device(const std::string& text);

struct BackendOptions {
    uint32_t n_threads = 0;  // CPU workers; 0: one per physical core
    DeviceChoice device;
    uint64_t device_memory_bytes = 0;  // a GPU's memory in place of its heap's
    uint64_t reserve_bytes = 0;        // a GPU's memory left to others
    double mem_fraction = 0.9;
    bool progress = true;
};

// Members are destroyed in reverse order: the model before the backend it
// holds weights in, the backend before the ledger it counts in.
struct LoadedModel {
    std::unique_ptr<Ledger> host_ledger;
    std::unique_ptr<kernels::Backend> backend;
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

// Throws headroom::Error with one clear line for any problem.
LoadedModel load_model(const std::string& path_or_name, const BackendOptions& options = {});

}  // namespace headroom::cli
