#include "cli/engine-flags.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread-pool.h"
#include "core/units.h"

namespace headroom::cli {

void add_engine_flags(CLI::App* cmd, EngineFlags& f, uint32_t default_num_seqs) {
    cmd->add_option("-m,--model", f.model,
                    "GGUF file, Hugging Face checkpoint folder (config.json, *.safetensors, "
                    "tokenizer.json) or short model name (smollm2-135m, gemma3-270m)")
        ->capture_default_str();
    auto* mem =
        cmd->add_option("--mem-fraction", f.mem_fraction,
                        "Fraction of device memory (CPU: min(MemAvailable, cgroup limit)) for "
                        "weights, KV cache, activations and runtime together")
            ->capture_default_str()
            ->check(CLI::Range(0.01, 1.0));
    cmd->add_option("--kv-cache-memory", f.kv_cache_memory,
                    "Give the KV cache exactly this much (512MiB, 2GiB...) instead of what "
                    "--mem-fraction leaves")
        ->excludes(mem);
    cmd->add_option("--max-model-len", f.max_model_len,
                    "Longest sequence, prompt plus output (default: the model's trained context)");
    cmd->add_option(
        "--max-num-seqs", f.max_num_seqs,
        "Most sequences running at once (default: " + std::to_string(default_num_seqs) + ")");
    cmd->add_option("--max-num-batched-tokens", f.max_num_batched_tokens,
                    "Most tokens in one forward step; sizes the activation arena (default: 512)");
    cmd->add_option("--block-size", f.block_size, "Tokens per KV block")->capture_default_str();
    cmd->add_option("--kv-dtype", f.kv_dtype, "KV cache element type: f16, bf16, f32 or q8_0")
        ->capture_default_str();
    cmd->add_option("-t,--threads", f.threads, "Worker threads (default: physical cores)");
    cmd->add_option("--act-precision", f.act_precision,
                    "How matmuls take activations against quantized weights: int8 (as llama.cpp, "
                    "fastest), int16 (15 bits, 2x the multiply-adds) or f32 (exact, f32 speed)")
        ->default_str(f.act_precision.empty()
                          ? std::string(kernels::name(kernels::default_act_precision()))
                          : f.act_precision);
    cmd->add_flag("--swa-full", f.swa_full,
                  "Cache the whole context for sliding-window layers too (attention still uses the "
                  "window): more memory, as engines without windowed KV need");
    cmd->add_option("--device", f.device,
                    "Where the model runs: cpu, or vulkan (vulkan:N for the Nth device of "
                    "`headroom devices`)")
        ->capture_default_str();
    cmd->add_option("--device-memory", f.device_memory,
                    "The device's memory to budget from, in place of its heap's (a GPU) or of "
                    "MemAvailable (the CPU), e.g. 8GiB: stands in for a smaller GPU or machine");
    cmd->add_option("--reserve", f.reserve,
                    "A GPU's memory to leave to other programs before --mem-fraction (1GiB...)");
    cmd->add_option("--n-gpu-layers", f.n_gpu_layers,
                    "Layers on the GPU (-ngl, as llama.cpp), the rest (the first ones) on the CPU "
                    "with their weights and "
                    "KV in host memory: auto (default: the most whose weights, KV for one "
                    "max-model-len sequence, activations and runtime fit the GPU's budget; every "
                    "layer on the CPU if none does), all, or a number");
    cmd->add_flag("--enable-prefix-caching,!--no-prefix-caching", f.prefix_caching,
                  "Prefix caching (on by default): requests sharing a prompt prefix reuse its KV "
                  "blocks");
    cmd->add_option("--quantization", f.quantization,
                    "Quantize the weights at load, tensor by tensor on all threads: a GGUF file "
                    "type (q8_0, q6_k, q5_k_m, q4_k_m, q4_0...) with llama.cpp's per-tensor rules, "
                    "or auto: the best type whose plan fits the budget with this context and "
                    "these sequences (the weights as stored first), said before loading");
    cmd->add_option("--quantized-cache", f.quantized_cache,
                    "Folder to keep quantized models in and map them from on the next start "
                    "(default: a temporary file, removed at exit)");
}

int thread_count(int requested, const char* flag) {
    if (requested < 0)
        fail("{} {}: expected a count of threads (0: one per physical core)", flag, requested);
    if (requested == 0) return physical_core_count();
    const int cpus = usable_cpu_count();
    if (requested > cpus) {
        fmt::print(stderr,
                   "warning: {} {} is more than the {} CPUs this process may run on: using {}\n",
                   flag, requested, cpus, cpus);
        return cpus;
    }
    return requested;
}

InstanceOptions instance_options(const EngineFlags& f, uint32_t default_num_seqs) {
    InstanceOptions o;
    EngineConfig& c = o.settings.config;
    c.max_model_len = f.max_model_len;
    c.max_num_seqs = f.max_num_seqs ? f.max_num_seqs : default_num_seqs;
    c.max_num_batched_tokens = f.max_num_batched_tokens;
    c.block_size = f.block_size;
    const auto dtype = kv_dtype_from_name(f.kv_dtype);
    if (!dtype) fail("--kv-dtype '{}': expected f16, bf16, f32 or q8_0", f.kv_dtype);
    c.kv_dtype = *dtype;
    c.n_threads = static_cast<uint32_t>(thread_count(f.threads, "--threads"));
    c.swa_full = f.swa_full;
    o.runner.prefix_caching = f.prefix_caching;
    if (!f.act_precision.empty()) {
        const auto p = kernels::act_precision_from_name(f.act_precision);
        if (!p) fail("--act-precision '{}': expected int8, int16 or f32", f.act_precision);
        o.runner.act_precision = *p;
    }
    if (!f.kv_cache_memory.empty()) {
        o.settings.kv_cache_bytes = parse_bytes_or_throw(f.kv_cache_memory, "--kv-cache-memory");
        if (o.settings.kv_cache_bytes == 0) fail("--kv-cache-memory must be more than 0");
    }
    o.settings.mem_fraction = f.mem_fraction;
    o.device = parse_device(f.device);
    if (!f.device_memory.empty()) {
        o.device_memory_bytes = parse_bytes_or_throw(f.device_memory, "--device-memory");
        if (o.device_memory_bytes == 0) fail("--device-memory must be more than 0");
    }
    if (!f.reserve.empty()) o.reserve_bytes = parse_bytes_or_throw(f.reserve, "--reserve");
    if (o.device.kind == DeviceKind::Cpu && o.reserve_bytes)
        fail(
            "--reserve is for a GPU (--device vulkan); on the CPU, --mem-fraction of host memory "
            "(or --device-memory in its place) is the budget");
    o.quantization = f.quantization;
    o.quantized_cache = f.quantized_cache;
    if (!f.quantized_cache.empty() && f.quantization.empty())
        fail("--quantized-cache {} needs --quantization (a type, or auto)", f.quantized_cache);
    if (!f.n_gpu_layers.empty()) {
        o.gpu_layers = parse_gpu_layers(f.n_gpu_layers);
        const bool none = o.gpu_layers->kind == GpuLayers::Kind::Count && o.gpu_layers->count == 0;
        if (o.device.kind == DeviceKind::Cpu && !none)
            fail(
                "--n-gpu-layers {} needs a GPU: add --device vulkan (`headroom devices` lists "
                "them)",
                f.n_gpu_layers);
    }
    return o;
}

}  // namespace headroom::cli
