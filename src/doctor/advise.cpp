// Ranked fixes, in the order a careful engineer tries them: measure when the
// message leaves the cause open; then the fix for the term that does not fit
// (quantize the weights, shorten the context or quantize the KV cache, let
// the allocator reuse its cache, shrink the batch, free the GPU or change
// the memory setting); then the fallbacks. Each fix names the exact flag,
// variable or command for the engine the log came from, and what it buys,
// with numbers wherever the log or the model gives them.
//
// Weight sizes at other quantizations are the planner's (ModelFacts::
// weight_bytes_as, filled by `doctor -m`): one accounting with `plan`.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>

#include "core/units.h"
#include "doctor/advisor.h"

namespace headroom::doctor {

namespace {

std::string b(uint64_t n) {
    return bytes_text(n);
}

// A weight type the advice can name, and the planner's name for it
// (WeightType, memory/weight-estimate.h): its bytes for the model come from
// ModelFacts::weight_bytes_as, which `doctor -m` fills from the planner, so
// the doctor and `plan --compare-quant` say the same size.
struct Quant {
    std::string_view name;
    std::string_view type;  // the planner's weight type name
    std::string_view command;
};
// GGUF types: llama.cpp's mixes, largest first.
constexpr Quant kGgufQuants[] = {
    {"Q8_0", "q8_0", "llama-quantize model.gguf model-Q8_0.gguf Q8_0"},
    {"Q6_K", "q6_k", "llama-quantize model.gguf model-Q6_K.gguf Q6_K"},
    {"Q5_K_M", "q5_k_m", "llama-quantize model.gguf model-Q5_K_M.gguf Q5_K_M"},
    {"Q4_K_M", "q4_k_m", "llama-quantize model.gguf model-Q4_K_M.gguf Q4_K_M"},
    {"Q4_0", "q4_0", "llama-quantize model.gguf model-Q4_0.gguf Q4_0"},
};
// Serving engines load pre-quantized checkpoints.
constexpr Quant kServingQuants[] = {
    {"FP8", "fp8", "--quantization fp8"},
    {"AWQ 4-bit", "awq", "--quantization awq (an AWQ checkpoint of the model)"},
};
// bitsandbytes. LLM.int8 stores what FP8 does (a byte per weight and a scale
// per output row, embeddings and lm_head in 16 bits), so it takes FP8's bytes.
constexpr Quant kBitsandbytesQuants[] = {
    {"8-bit (bitsandbytes)", "fp8", "BitsAndBytesConfig(load_in_8bit=True)"},
    {"4-bit NF4 (bitsandbytes)", "nf4",
     "BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"nf4\")"},
};

// The model's weights in q's type, as the planner estimates them.
std::optional<uint64_t> weights_as(const ModelFacts& m, const Quant& q) {
    for (const auto& [type, bytes] : m.weight_bytes_as)
        if (type == q.type) return bytes;
    return std::nullopt;
}

// The type that holds most of the weights, e.g. "F16" or "Q4_K".
std::string dominant_type(const ModelFacts& m) {
    std::string name = "as stored";
    uint64_t most = 0;
    for (const auto& [type, bytes] : m.weight_bytes_by_type) {
        if (bytes > most) {
            most = bytes;
            name = type;
        }
    }
    return name;
}

// A memory fraction rounded down to two decimals, as the flags take it.
double round_fraction(double v) {
    return std::clamp(std::floor(v * 100) / 100, 0.05, 0.99);
}

std::string fraction(double v) {
    return fmt::format("{:.2f}", round_fraction(v));
}

class Advice {
  public:
    Advice(const Finding& f, const Evidence& e)
        : f_(f),
          e_(e),
          n_(e.numbers),
          model_(e.options && e.options->model ? &*e.options->model : nullptr) {}

    std::vector<Fix> build() {
        if (needs_measuring()) measure();
        switch (f_.oom_class) {
            case OomClass::WeightsTooLarge:
                weights();
                break;
            case OomClass::KvCacheTooLarge:
                kv_cache();
                break;
            case OomClass::ActivationsOrBatch:
                activations();
                break;
            case OomClass::Fragmentation:
                fragmentation();
                break;
            case OomClass::OtherProcess:
                other_processes();
                break;
            case OomClass::UtilizationSetting:
                utilization();
                break;
            case OomClass::CpuRam:
                cpu_ram();
                break;
            case OomClass::NotOom:
                not_oom();
                break;
            case OomClass::Unrecognised:
                unrecognised();
                break;
        }
        return std::move(fixes_);
    }

  private:
    const Finding& f_;
    const Evidence& e_;
    const Numbers& n_;
    const ModelFacts* model_;
    std::vector<Fix> fixes_;

    void add(std::string action, std::string command, std::string effect) {
        fixes_.push_back({std::move(action), std::move(command), std::move(effect)});
    }

    Framework fw() const { return f_.framework; }
    bool ggml() const { return fw() == Framework::LlamaCpp || fw() == Framework::Ollama; }
    bool torch_like() const {
        return fw() == Framework::PyTorch || fw() == Framework::Transformers ||
               fw() == Framework::Unknown;
    }
    bool rocm() const { return f_.message.find("HIP") != std::string::npos; }

    bool needs_measuring() const {
        switch (f_.oom_class) {
            case OomClass::Unrecognised:
            case OomClass::OtherProcess:
                return true;
            case OomClass::NotOom:
            case OomClass::CpuRam:
            case OomClass::UtilizationSetting:
                return false;
            default:
                // The message leaves the cause open: no size, no device, no phase.
                return !f_.requested_bytes && !f_.total_bytes && f_.phase == Phase::Unknown &&
                       !f_.max_model_len_tokens && !f_.prefill_tokens && !f_.total_tokens &&
                       !f_.n_sequences && e_.wording != Wording::BnbDispatchedToCpu &&
                       e_.wording != Wording::VllmNoCacheBlocks;
        }
    }

    void measure() {
        if (f_.framework == Framework::Unknown && e_.wording == Wording::Unknown) {
            add("Measure who holds the device memory",
                "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv",
                "shows each process's share of the GPU, so the numbers this message lacks are "
                "known before anything is changed");
            return;
        }
        if (ggml()) {
            if (e_.has_buffers) return;
            add("Measure what the model needs per device",
                "read the 'model buffer size', 'KV buffer size' and 'compute buffer size' lines "
                "of the same log, and nvidia-smi for what else is on the GPU",
                "weights + KV cache + compute buffers must fit the device with about 0.5 GiB "
                "to spare");
            return;
        }
        const std::string smi = rocm() ? "rocm-smi --showpids --showmeminfo vram"
                                       : "nvidia-smi --query-compute-apps=pid,process_name,"
                                         "used_memory --format=csv";
        if (!e_.has_gpu_reading)
            add("Measure who holds the GPU", smi,
                f_.other_processes_bytes
                    ? fmt::format("names the processes holding the other {}",
                                  b(*f_.other_processes_bytes))
                    : "shows each process's share of the GPU before anything is changed");
        if (torch_like() && !e_.has_summary && e_.wording != Wording::TorchMemorySummary)
            add("Measure PyTorch's own use at the failure",
                "print(torch.cuda.memory_summary()) in an except torch.OutOfMemoryError block",
                "splits this process's memory into allocated, cached and fragmented blocks");
    }

    std::span<const Quant> quants() const {
        if (ggml()) return kGgufQuants;
        if (fw() == Framework::Vllm || fw() == Framework::Sglang || fw() == Framework::Tgi)
            return kServingQuants;
        return kBitsandbytesQuants;
    }

    // The largest quantization, smaller than the weights now, whose weights
    // leave about a quarter of the usable memory for the KV cache, the
    // compute buffers and the runtime.
    std::optional<std::pair<Quant, uint64_t>> fitting_quant(uint64_t usable) const {
        if (!model_) return std::nullopt;
        for (const auto& q : quants()) {
            const auto bytes = weights_as(*model_, q);
            if (!bytes || *bytes >= model_->weight_bytes) continue;
            if (static_cast<double>(*bytes) <= 0.75 * static_cast<double>(usable))
                return std::pair{q, *bytes};
        }
        return std::nullopt;
    }

    // The smallest quantization the planner sized, if any.
    std::optional<std::pair<Quant, uint64_t>> smallest_quant() const {
        std::optional<std::pair<Quant, uint64_t>> out;
        for (const auto& q : quants())
            if (const auto bytes = weights_as(*model_, q); bytes && (!out || *bytes < out->second))
                out = std::pair{q, *bytes};
        return out;
    }

    uint64_t usable_bytes() const {
        const uint64_t total = f_.total_bytes.value_or(0);
        const uint64_t others = f_.other_processes_bytes.value_or(0);
        return total > others ? total - others : 0;
    }

    void quantize_weights() {
        const uint64_t usable = usable_bytes();
        if (model_ && usable) {
            const std::string needs =
                fmt::format("{} in {} needs {} of weights; this GPU has {}", model_->name,
                            dominant_type(*model_), b(model_->weight_bytes), b(usable));
            if (const auto q = fitting_quant(usable)) {
                add("Quantize the weights", std::string(q->first.command),
                    fmt::format("{}: use {}, {}", needs, q->first.name, b(q->second)));
            } else if (const auto smallest = smallest_quant()) {
                add("Use a smaller model or more GPUs", "",
                    fmt::format("{}: even {} ({}) leaves too little for the KV cache", needs,
                                smallest->first.name, b(smallest->second)));
            } else {
                add("Use a smaller model or more GPUs", "", needs);
            }
            return;
        }
        if (ggml())
            add("Quantize the weights",
                "use a Q4_K_M file (llama-quantize model.gguf model-Q4_K_M.gguf Q4_K_M)",
                "4.85 bits per weight: about 30% of F16, 57% of Q8_0");
        else if (fw() == Framework::Vllm || fw() == Framework::Sglang || fw() == Framework::Tgi)
            add("Serve a 4-bit checkpoint",
                fw() == Framework::Tgi ? "--quantize awq" : "--quantization awq",
                "4-bit weights take about a quarter of FP16");
        else
            add("Load the weights in 4 bits",
                "from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit=True, "
                "bnb_4bit_quant_type=\"nf4\"), torch_dtype=torch.float16)",
                "the linear layers in about a quarter of FP16 (embeddings stay 16-bit)");
    }

    void weights() {
        if (e_.wording == Wording::BnbDispatchedToCpu) {
            add("Load in 4 bits instead of 8",
                "BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"nf4\")",
                "halves the quantized weights, so all layers can stay on the GPU");
            add("Or allow the CPU-offloaded layers",
                "BitsAndBytesConfig(load_in_8bit=True, llm_int8_enable_fp32_cpu_offload=True) "
                "with device_map=\"auto\"",
                "the layers that do not fit run on the CPU in FP32: it loads, but slower");
            return;
        }
        quantize_weights();
        if (ggml())
            add("Offload fewer layers to the GPU",
                f_.requested_bytes ? "-ngl N (fewer than now; Ollama: num_gpu)" : "-ngl N",
                "each layer left on the CPU frees its share of the weights on the GPU; "
                "decoding slows down");
        else if (fw() == Framework::Vllm)
            add("Split the model over GPUs", "--tensor-parallel-size 2",
                "each GPU holds half of the weights");
        else if (torch_like())
            add("Let accelerate place layers on the CPU",
                "from_pretrained(..., device_map=\"auto\", max_memory={0: \"<GPU GiB>\", "
                "\"cpu\": \"<RAM GiB>\"})",
                "what does not fit runs from RAM; slower but it loads");
    }

    void kv_cache() {
        const auto kvpt = model_ ? model_->kv_bytes_per_token : 0;
        if (e_.wording == Wording::VllmMaxSeqLen && n_.kv_tokens && n_.max_model_len) {
            add("Shorten the context", fmt::format("--max-model-len {}", *n_.kv_tokens),
                fmt::format("one request of up to {} tokens fits the KV cache that is there{}",
                            format_count(*n_.kv_tokens),
                            kvpt ? fmt::format(" ({})", b(*n_.kv_tokens * kvpt)) : ""));
            add("Quantize the KV cache", "--kv-cache-dtype fp8",
                fmt::format("halves the bytes per token: about {} tokens fit",
                            format_count(*n_.kv_tokens * 2)));
            gpu_utilization_up("the KV cache gets the extra memory");
            quantize_weights();
            return;
        }
        if (e_.wording == Wording::VllmServeOneRequest) {
            if (n_.estimated_max_len)
                add("Shorten the context", fmt::format("--max-model-len {}", *n_.estimated_max_len),
                    fmt::format("{} tokens need at most the {} available",
                                format_count(*n_.estimated_max_len), b(f_.free_bytes.value_or(0))));
            add("Quantize the KV cache", "--kv-cache-dtype fp8",
                fmt::format("one request of {} tokens needs {} instead of {}",
                            format_count(n_.max_model_len.value_or(0)),
                            b(f_.requested_bytes.value_or(0) / 2),
                            b(f_.requested_bytes.value_or(0))));
            gpu_utilization_up("the KV cache gets the extra memory");
            return;
        }
        if (e_.wording == Wording::TgiTotalTokens && n_.total_tokens) {
            add("Fewer tokens in flight",
                fmt::format("--max-batch-total-tokens {}", *n_.total_tokens / 2),
                "half the KV cache: fewer concurrent requests, each as long as before");
            add("Shorter requests", "--max-total-tokens <smaller> --max-input-tokens <smaller>",
                "each request reserves less KV cache");
            quantize_weights();
            return;
        }
        if (ggml()) {
            const auto n_ctx = e_.context.n_ctx;
            if (fw() == Framework::Ollama)
                add("Shorten the context",
                    n_ctx ? fmt::format("OLLAMA_CONTEXT_LENGTH={} (or num_ctx)", *n_ctx / 2)
                          : std::string("OLLAMA_CONTEXT_LENGTH=8192 (or num_ctx)"),
                    "the KV cache shrinks in proportion");
            else
                add("Shorten the context",
                    n_ctx ? fmt::format("-c {}", *n_ctx / 2) : std::string("-c 8192"),
                    n_ctx && kvpt
                        ? fmt::format("the KV cache for {} tokens is {} instead of {}",
                                      format_count(*n_ctx / 2), b(*n_ctx / 2 * kvpt),
                                      b(*n_ctx * kvpt))
                        : std::string("the KV cache shrinks in proportion to the context"));
            if (fw() == Framework::Ollama)
                add("Quantize the KV cache", "OLLAMA_FLASH_ATTENTION=1 OLLAMA_KV_CACHE_TYPE=q8_0",
                    "halves the KV cache");
            else
                add("Quantize the KV cache", "-fa on -ctk q8_0 -ctv q8_0", "halves the KV cache");
            if (e_.host_memory)
                add("Or give the KV cache more RAM", "close other programs, add RAM or swap",
                    f_.requested_bytes ? fmt::format("the {} buffer must fit in free host memory",
                                                     b(*f_.requested_bytes))
                                       : std::string("the KV cache lives in host memory here"));
            else if (fw() == Framework::LlamaCpp)
                add("Keep the KV cache in RAM", "--no-kv-offload",
                    "the GPU keeps the weights; attention runs slower");
            return;
        }
        if (fw() == Framework::Vllm) {
            add("Shorten the context", "--max-model-len <shorter>",
                "KV cache per request shrinks in proportion");
            add("Fewer sequences at once", "--max-num-seqs 64",
                "fewer requests share the KV cache");
            add("Quantize the KV cache", "--kv-cache-dtype fp8", "halves the KV cache");
            return;
        }
        add("Generate fewer tokens or shorten the prompt", "max_new_tokens=<smaller>",
            "the KV cache grows by one token's K and V per layer for every token kept");
        add("Keep the KV cache off the GPU",
            "model.generate(..., cache_implementation=\"offloaded\")",
            "layers' caches wait in CPU memory; slower but long contexts fit");
    }

    void activations() {
        if ((e_.wording == Wording::TgiPrefill && n_.prefill_tokens) || fw() == Framework::Tgi) {
            add("Smaller prefill batches",
                n_.prefill_tokens
                    ? fmt::format("--max-batch-prefill-tokens {}", *n_.prefill_tokens / 2)
                    : std::string("--max-batch-prefill-tokens <half of now>"),
                "halves the activation peak of the warm-up's prefill step");
            add("Give the forward pass more room", "--cuda-memory-fraction 0.9",
                "leaves memory outside the KV cache for activations");
            return;
        }
        if (fw() == Framework::Vllm || f_.phase == Phase::Profiling) {
            add("Smaller prefill chunks", "--max-num-batched-tokens 2048",
                "the activation peak scales with the tokens in one step");
            gpu_utilization_down("leaves more memory outside the KV cache for activations");
            return;
        }
        if (ggml()) {
            if (e_.context.n_pipeline_copies > 1)
                add("Keep one copy of the compute buffers",
                    "build with -DGGML_SCHED_MAX_COPIES=1, or run on one GPU",
                    fmt::format("pipeline parallelism keeps {} copies of the compute buffers",
                                e_.context.n_pipeline_copies));
            add("Smaller micro-batches", "-ub 256 -b 256",
                f_.requested_bytes
                    ? fmt::format("the compute buffer scales with the micro-batch: about {} "
                                  "instead of {} at half the default",
                                  b(*f_.requested_bytes / 2), b(*f_.requested_bytes))
                    : std::string("the compute buffer scales with the micro-batch"));
            add("Use flash attention", "-fa on",
                "no attention-score buffer that grows with the context");
            add("Shorten the context", "-c <smaller>",
                "both the KV cache and the compute buffers shrink");
            return;
        }
        if (fw() == Framework::Sglang) {
            add("Smaller prefill chunks", "--chunked-prefill-size 2048",
                "the activation peak scales with the chunk");
            add("Fewer requests at once", "--max-running-requests 32", "smaller batches");
            return;
        }
        add("Halve the batch (or the sequence length or image size)",
            "batch_size = batch_size // 2",
            f_.requested_bytes
                ? fmt::format("the failing {} buffer and its neighbours shrink with it",
                              b(*f_.requested_bytes))
                : std::string("activation memory scales with the batch"));
        add("Keep no autograd state during inference", "with torch.inference_mode(): ...",
            "activations are freed as soon as they are used");
        if (f_.reserved_unallocated_bytes && *f_.reserved_unallocated_bytes >= 64 * MiB)
            fragmentation_env();
    }

    void fragmentation_env() {
        const std::string var = rocm() ? "PYTORCH_HIP_ALLOC_CONF" : "PYTORCH_CUDA_ALLOC_CONF";
        const uint64_t cached = f_.reserved_unallocated_bytes.value_or(0);
        add("Let the allocator grow segments instead of splitting them",
            var + "=expandable_segments:True",
            cached ? fmt::format("the {} reserved but unallocated becomes usable for new "
                                 "tensors of any size",
                                 b(cached))
                   : std::string("fewer unusable gaps in PyTorch's cache"));
    }

    void fragmentation() {
        if (e_.wording == Wording::GgmlCudaVmmReserve) {
            add("Build llama.cpp without the virtual-memory pool",
                "cmake -DGGML_CUDA_NO_VMM=ON ...",
                "the pool allocates with cudaMalloc as it grows and reserves no address range");
            add("Update the GPU driver", "",
                "the reservation limit is the driver's; newer drivers reserve larger ranges");
            return;
        }
        const uint64_t cached = f_.reserved_unallocated_bytes.value_or(0);
        if (f_.requested_bytes && cached < *f_.requested_bytes) {
            // The device had the bytes, PyTorch's cache did not: the free
            // memory is in pieces. Expandable segments map pages instead of
            // asking the driver for one contiguous block.
            const std::string var = rocm() ? "PYTORCH_HIP_ALLOC_CONF" : "PYTORCH_CUDA_ALLOC_CONF";
            add("Map memory in pages instead of one block", var + "=expandable_segments:True",
                fmt::format("a {} tensor no longer needs one contiguous free block",
                            b(*f_.requested_bytes)));
        } else {
            fragmentation_env();
        }
        add("Return cached blocks between requests", "torch.cuda.empty_cache()",
            "releases whole free segments to the driver; helps when sizes vary between batches");
        if (f_.free_bytes && f_.requested_bytes && *f_.free_bytes >= *f_.requested_bytes)
            add("Restart the process", "",
                fmt::format("the device reported {} free but not in one {} piece: a fresh "
                            "process starts with unfragmented memory",
                            b(*f_.free_bytes), b(*f_.requested_bytes)));
    }

    void other_processes() {
        // Several processes of about one size on one GPU: the ranks of one
        // job that all see the same device.
        if (n_.n_listed_processes && *n_.n_listed_processes >= 3)
            add("Give each rank its own GPU",
                "CUDA_VISIBLE_DEVICES per rank, or torch.cuda.set_device(local_rank) before "
                "the model is built",
                fmt::format("{} processes share this GPU; if they are the ranks of one job, "
                            "each should hold only its own device",
                            format_count(*n_.n_listed_processes)));
        const std::string freed =
            f_.other_processes_bytes ? b(*f_.other_processes_bytes) : std::string("their memory");
        add("Stop the other processes or use an idle GPU",
            "kill <pid> (from the list above), or CUDA_VISIBLE_DEVICES=<idle GPU index>",
            f_.deficit_bytes && *f_.deficit_bytes > 0
                ? fmt::format("frees {}; this request was short by {}", freed,
                              b(static_cast<uint64_t>(*f_.deficit_bytes)))
                : fmt::format("frees {}", freed));
        if (fw() == Framework::Vllm && f_.free_bytes && f_.total_bytes && *f_.total_bytes)
            add("Or ask vLLM for what is free",
                fmt::format("--gpu-memory-utilization {}",
                            fraction(static_cast<double>(*f_.free_bytes) /
                                         static_cast<double>(*f_.total_bytes) -
                                     0.01)),
                "fits beside the other processes with a smaller KV cache");
    }

    void gpu_utilization_up(std::string_view effect) {
        const double u = e_.context.utilization.value_or(0.9);
        if (u >= 0.95) return;
        add("Give vLLM more of the GPU",
            fmt::format("--gpu-memory-utilization {}", fraction(std::min(0.95, u + 0.05))),
            std::string(effect));
    }

    void gpu_utilization_down(std::string_view effect) {
        const double u = e_.context.utilization.value_or(0.9);
        add("Leave more of the GPU outside vLLM's pool",
            fmt::format("--gpu-memory-utilization {}", fraction(u - 0.05)), std::string(effect));
    }

    void utilization() {
        // Warm-up and graph capture run after the KV cache took its share.
        if (f_.phase == Phase::SamplerWarmup) {
            const uint64_t seqs = n_.n_sequences.value_or(256);
            add("Fewer sequences at once",
                fmt::format("--max-num-seqs {}", std::max<uint64_t>(1, seqs / 4)),
                "the sampler's warm-up buffers scale with the number of sequences");
            gpu_utilization_down("leaves more memory outside the KV cache for sampling");
            return;
        }
        if (f_.phase == Phase::CudaGraph) {
            add("Run without CUDA graphs", "--enforce-eager",
                "saves the graphs' memory (often 1-3 GiB per GPU); decoding is slower");
            gpu_utilization_down("leaves room for the graphs outside the KV cache");
            add("Capture fewer batch sizes", "--max-num-seqs 64",
                "graphs are captured for batch sizes up to max_num_seqs");
            return;
        }
        switch (e_.wording) {
            case Wording::VllmFreeMemoryStartup:
                if (f_.free_bytes && f_.total_bytes && *f_.total_bytes) {
                    const double u = round_fraction(static_cast<double>(*f_.free_bytes) /
                                                        static_cast<double>(*f_.total_bytes) -
                                                    0.01);
                    const auto asked =
                        static_cast<uint64_t>(u * static_cast<double>(*f_.total_bytes));
                    add("Ask for what is free", fmt::format("--gpu-memory-utilization {:.2f}", u),
                        fmt::format("vLLM asks for {} of the {} free", b(asked),
                                    b(*f_.free_bytes)));
                }
                add("Or free the GPU", "nvidia-smi, then stop what holds memory",
                    f_.other_processes_bytes
                        ? fmt::format("{} is held outside vLLM", b(*f_.other_processes_bytes))
                        : std::string("the whole GPU becomes available"));
                return;
            case Wording::VllmProfileNoKv:
                if (f_.deficit_bytes && *f_.deficit_bytes >= 0 && f_.total_bytes &&
                    *f_.total_bytes) {
                    // What the missing bytes plus a block's worth (1 GiB) of KV cost in
                    // utilization.
                    const double need = static_cast<double>(*f_.deficit_bytes + (1ll << 30)) /
                                        static_cast<double>(*f_.total_bytes);
                    const double u =
                        std::min(0.98, e_.context.utilization.value_or(0.9) + need + 0.005);
                    add("Raise the budget past what profiling took",
                        fmt::format("--gpu-memory-utilization {:.2f}", u),
                        fmt::format("covers the {} missing and leaves about 1 GiB for the KV "
                                    "cache",
                                    b(static_cast<uint64_t>(*f_.deficit_bytes))));
                }
                add("Smaller activation peak", "--max-num-batched-tokens 2048 --max-num-seqs 64",
                    n_.activation_peak
                        ? fmt::format("the profiled peak ({}) scales with the tokens of one step",
                                      b(*n_.activation_peak))
                        : std::string("profiling reserves less for activations"));
                quantize_weights();
                return;
            case Wording::VllmNoCacheBlocks:
                gpu_utilization_up(
                    "what is left after weights and activations goes to the KV cache");
                add("Smaller activation peak", "--max-num-batched-tokens 2048 --max-num-seqs 64",
                    "profiling reserves less for activations, more for the KV cache");
                quantize_weights();
                return;
            case Wording::SglangNotEnoughMemory:
                add("Give the static pool more of the GPU", "--mem-fraction-static 0.9",
                    "the pool is weights + KV cache; a bigger fraction leaves room for the KV "
                    "cache after the weights");
                add("Shorten the context", "--context-length 8192",
                    "each request needs less KV cache");
                quantize_weights();
                return;
            default:
                add("Lift the cap", "torch.cuda.set_per_process_memory_fraction(1.0)",
                    f_.total_bytes ? fmt::format("PyTorch may use the whole {}", b(*f_.total_bytes))
                                   : std::string("PyTorch may use the whole GPU"));
                return;
        }
    }

    void cpu_ram() {
        if (e_.wording == Wording::OllamaSystemMemory) {
            add("Use a smaller model or quantization",
                "ollama run <model>:<smaller tag, e.g. q4_K_M>",
                f_.free_bytes
                    ? fmt::format("a model that needs at most {} fits the RAM that is free",
                                  b(*f_.free_bytes))
                    : std::string("a smaller model fits the RAM that is free"));
            add("Shorten the context", "OLLAMA_CONTEXT_LENGTH=4096", "the KV cache in RAM shrinks");
            add("Free RAM", "close other programs or add swap",
                f_.deficit_bytes && *f_.deficit_bytes > 0
                    ? fmt::format("{} more is needed", b(static_cast<uint64_t>(*f_.deficit_bytes)))
                    : std::string("more RAM available"));
            return;
        }
        if (e_.wording == Wording::HostMmapFailed) {
            add("Check the limits on address space and mappings",
                "ulimit -v; cat /proc/sys/vm/overcommit_memory /proc/sys/vm/max_map_count",
                "ulimit -v must be unlimited (or above the file's size); overcommit 2 refuses "
                "large maps; many small maps hit max_map_count");
            add("Raise what refused it",
                "ulimit -v unlimited; sysctl vm.overcommit_memory=0 (or docker run "
                "--memory=<more>)",
                f_.requested_bytes
                    ? fmt::format("lets the {} mapping through", b(*f_.requested_bytes))
                    : std::string("lets the mapping through"));
            add("Add swap or RAM for a checkpoint near the RAM's size",
                "fallocate -l 32G /swapfile && mkswap /swapfile && swapon /swapfile",
                "a private copy of a mapped shard needs backing memory");
            return;
        }
        if (e_.wording == Wording::LinuxOomKiller || e_.wording == Wording::CgroupOomKiller ||
            e_.wording == Wording::OomKilled || e_.wording == Wording::ShellKilled) {
            add("Confirm the kill and its size", "dmesg -T | grep -i 'killed process'",
                "shows the process and its resident memory when it was killed");
            add("Load weights without a full copy in RAM",
                "from_pretrained(..., low_cpu_mem_usage=True, device_map=\"auto\") or a "
                "memory-mapped GGUF",
                "peak RAM is about one shard instead of the whole model");
            if (e_.wording != Wording::LinuxOomKiller)
                add("Raise the container's memory limit",
                    "docker run --memory=<more> / resources.limits.memory",
                    "the limit, not the machine, ran out");
            else
                add("Add swap",
                    "fallocate -l 16G /swapfile && mkswap /swapfile && swapon /swapfile",
                    "survives a loading peak; slow if used in steady state");
            return;
        }
        if (ggml()) {
            if (f_.phase == Phase::KvCache) {
                const auto n_ctx = e_.context.n_ctx;
                add("Shorten the context", n_ctx ? fmt::format("-c {}", *n_ctx / 8) : "-c 8192",
                    n_ctx && f_.requested_bytes
                        ? fmt::format("the KV cache for {} tokens is {} instead of {}",
                                      format_count(*n_ctx / 8), b(*f_.requested_bytes / 8),
                                      b(*f_.requested_bytes))
                        : std::string("the KV cache shrinks in proportion to the context"));
            }
            if (f_.phase == Phase::KvCache) {
                add("Quantize the KV cache", "-fa on -ctk q8_0 -ctv q8_0", "halves the KV cache");
                return;
            }
            add("Memory-map the weights", "drop --no-mmap (Ollama: use_mmap true)",
                "weights are paged from the file instead of copied into RAM");
            add("Use a smaller quantization", "a Q4_K_M file", "fewer bytes of weights to hold");
            return;
        }
        add("Smaller batch or input", "batch_size = batch_size // 2",
            f_.requested_bytes
                ? fmt::format("the {} allocation shrinks with it", b(*f_.requested_bytes))
                : std::string("less host memory per step"));
        add("Load weights without a full copy in RAM",
            "from_pretrained(..., low_cpu_mem_usage=True)",
            "peak RAM during loading is about one shard");
    }

    void not_oom() {
        if (e_.wording == Wording::TfBfcNotFailure) {
            add("Nothing to fix for this warning; to let TensorFlow take memory as it needs it",
                "TF_FORCE_GPU_ALLOW_GROWTH=true (or tf.config.experimental.set_memory_growth(gpu, "
                "True))",
                "the allocator grows its pool instead of retrying smaller buffers");
            add("If it is slow, use a smaller batch", "batch_size = <half>",
                "the buffers it wanted fit at their full size");
            return;
        }
        add("Find the failing kernel", "CUDA_LAUNCH_BLOCKING=1 <your command>",
            "errors are reported where they happen, so the traceback names the kernel");
        add("Check the inputs", "compute-sanitizer <your command> (or TORCH_USE_CUDA_DSA=1 builds)",
            "out-of-range token ids and indices are the usual cause; memory settings are not");
    }

    void unrecognised() {
        if (f_.phase == Phase::Unknown && fw() == Framework::Ollama)
            add("Reduce the context and the layers on the GPU",
                "OLLAMA_CONTEXT_LENGTH=4096 and a smaller num_gpu",
                "lowers the KV cache and the weights on the GPU until it fits");
        else if (f_.phase == Phase::Unknown && ggml())
            add("Reduce the context and the layers on the GPU", "-c 4096 -ngl <fewer>",
                "lowers the KV cache and the weights on the GPU until it fits");
        else if (f_.phase == Phase::Unknown && fw() == Framework::Vllm)
            add("Leave more headroom", "--gpu-memory-utilization 0.85 --max-num-seqs 64",
                "smaller KV pool and batches");
    }
};

}  // namespace

std::vector<Fix> advise(const Finding& f, const Evidence& e) {
    return Advice(f, e).build();
}

}  // namespace headroom::doctor
