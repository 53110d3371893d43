// The memory and engine flags `run`, `serve`, `bench` and `eval` share, and
// how they become what an engine instance is asked (engine/instance.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "engine/instance.h"

namespace headroom::cli {

struct EngineFlags {
    std::string model = "smollm2-135m";
    double mem_fraction = 0.9;
    std::string kv_cache_memory;  // e.g. "512MiB"; empty: use --mem-fraction
    uint32_t max_model_len = 0;
    uint32_t max_num_seqs = 0;  // 0: the command's default
    uint32_t max_num_batched_tokens = 0;
    uint32_t block_size = 16;
    std::string kv_dtype = "f16";
    int threads = 0;  // 0: physical cores
    bool prefix_caching = true;
    bool swa_full = false;
    std::string act_precision;    // empty: kernels::default_act_precision()
    std::string device = "cpu";   // cpu, vulkan, vulkan:N
    std::string device_memory;    // a GPU's memory in place of its heap's (tests, smaller GPUs)
    std::string reserve;          // a GPU's memory left to others
    std::string n_gpu_layers;     // auto, all or N; empty: auto
    std::string quantization;     // a GGUF file type or auto; empty: as stored
    std::string quantized_cache;  // folder of quantized copies; empty: a temporary file
};

// Registers the flags on `cmd`; `default_num_seqs` is shown as the default of --max-num-seqs.
void add_engine_flags(CLI::App* cmd, EngineFlags& flags, uint32_t default_num_seqs);

// The threads to run with for a --threads value: 0 means one per physical
// core; more than the CPUs this process may use is cut to that many with a
// warning (waiting workers spin, so extra threads only take turns); a
// negative count is an error naming `flag`.
int thread_count(int requested, const char* flag);

// Resolves the flags into what an instance is asked (the thread count
// resolved, the budget's knobs, the device and its memory). Throws
// headroom::Error for a bad value, naming the flag.
InstanceOptions instance_options(const EngineFlags& flags, uint32_t default_num_seqs);

}  // namespace headroom::cli
