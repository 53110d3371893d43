// Numbers, class and cause of one failure.
//
// The derived numbers follow the allocator's own accounting:
//   this process   = "this process has M in use" (2.1+), else the listed
//                    process that holds at least PyTorch's reservation (a
//                    container hides the PID), else PyTorch's reservation
//   other processes = total - free - this process
//   reserved unallocated = U (2.1+), R - A (pre-2.1), the "cached" amount (oldest)
//   deficit        = requested - (free + reserved unallocated)
//
// The class is decided in the order a person reading the message would:
// what the engine says it was doing first (its own wording, then the phase),
// then what the numbers rule out. A single request larger than the device
// is a tensor too big for any setting; other processes holding a large share
// of the device come before fragmentation, because freeing them is the
// cheaper fix; a request that free plus cached memory would have covered is
// fragmentation only when those bytes are a real share of the device.
#include <fmt/format.h>

#include <algorithm>

#include "core/units.h"
#include "doctor/advisor.h"

namespace headroom::doctor {

namespace {

// One request this large exceeds all but the largest GPUs (80 GB cards).
constexpr uint64_t kLargestCommonGpu = 80 * GiB;

uint64_t sat_sub(uint64_t a, uint64_t b) {
    return a > b ? a - b : 0;
}

std::string b(uint64_t n) {
    return bytes_text(n);
}

std::string b(const std::optional<uint64_t>& n) {
    return n ? bytes_text(*n) : std::string("?");
}

// Share of the device other processes must hold before they are the cause.
// Without "this process has" the remainder also holds this process's CUDA
// context and libraries (0.3-1.5 GiB), hence the higher bar.
// The allowed-memory form (cudaMallocAsync) counts only live tensors: the
// remainder also holds the pool's freed-but-kept memory, hence a bar higher still.
bool others_dominate(const Finding& f, bool exact_this_process, bool async_pool = false) {
    if (!f.other_processes_bytes || !f.total_bytes) return false;
    const uint64_t others = *f.other_processes_bytes, total = *f.total_bytes;
    const uint64_t bar = async_pool           ? std::max<uint64_t>(2 * GiB, total / 5 * 2)
                         : exact_this_process ? std::max<uint64_t>(GiB, total / 10)
                                              : std::max<uint64_t>(2 * GiB, total / 5);
    if (others < bar) return false;
    // Freeing them must be enough for the request.
    if (f.requested_bytes && f.free_bytes) {
        const uint64_t could_have =
            *f.free_bytes + f.reserved_unallocated_bytes.value_or(0) + others;
        return *f.requested_bytes <= could_have;
    }
    return true;
}

// Fragmentation is the cause when the request would have fitted in free plus
// cached memory and those bytes matter:
//  - the device itself reported the request free, and free plus cached is a
//    real share of it (the driver's memory is in pieces); or
//  - PyTorch's cache covers what free memory lacked (1.96 GiB asked, 1.08 GiB
//    free, 1.83 GiB cached on an 80 GB card), unless the card is full (under
//    2% free) and the cache is a few hundred MiB (under 1 GiB, or a tenth of a
//    small card): then live tensors fill the card and that slack happens to
//    exceed a small request. Capacity is the cause; the cache is a secondary
//    note in the fixes.
bool fragmented(const Finding& f) {
    if (!f.requested_bytes || !f.free_bytes) return false;
    const uint64_t requested = *f.requested_bytes, free = *f.free_bytes;
    const uint64_t cached = f.reserved_unallocated_bytes.value_or(0);
    const uint64_t total = f.total_bytes.value_or(0);
    if (free + cached < requested) return false;
    if (free >= requested) return free + cached >= std::max<uint64_t>(256 * MiB, total / 20);
    const bool full = total && free < total / 50;
    const bool slack = cached < std::min<uint64_t>(GiB, total ? total / 10 : GiB);
    if (full && slack) return false;
    return cached >= 64 * MiB;
}

// vLLM and SGLang size the KV cache from what the memory fraction leaves
// after the weights; when the weights alone exceed that, no setting helps.
bool weights_exceed_budget(const Finding& f, const Evidence& e) {
    const auto& c = e.context;
    if (!c.weights_bytes || !f.total_bytes) return false;
    const double fraction = c.utilization.value_or(0.9);
    return static_cast<double>(*c.weights_bytes) >= fraction * static_cast<double>(*f.total_bytes);
}

OomClass by_phase(Phase p) {
    switch (p) {
        case Phase::Weights:
            return OomClass::WeightsTooLarge;
        case Phase::KvCache:
            return OomClass::KvCacheTooLarge;
        case Phase::Compute:
        case Phase::Profiling:
            return OomClass::ActivationsOrBatch;
        // What an engine runs after sizing its KV cache from the memory
        // setting: the setting left it too little.
        case Phase::SamplerWarmup:
        case Phase::CudaGraph:
            return OomClass::UtilizationSetting;
        case Phase::Unknown:
            break;
    }
    return OomClass::Unrecognised;
}

std::string_view phase_words(Phase p) {
    switch (p) {
        case Phase::Weights:
            return "while loading the weights";
        case Phase::KvCache:
            return "while allocating the KV cache";
        case Phase::Compute:
            return "for the compute buffers";
        case Phase::Profiling:
            return "while profiling a forward pass";
        case Phase::SamplerWarmup:
            return "while warming up the sampler";
        case Phase::CudaGraph:
            return "while capturing CUDA graphs";
        case Phase::Unknown:
            break;
    }
    return "";
}

}  // namespace

bool is_torch(Wording w) {
    return w == Wording::TorchPre21 || w == Wording::TorchCached || w == Wording::Torch21 ||
           w == Wording::TorchBare || w == Wording::TorchMps || w == Wording::TorchAllowed ||
           w == Wording::TorchMemorySummary;
}

bool is_ggml(Wording w) {
    switch (w) {
        case Wording::GgmlDeviceMallocFailed:
        case Wording::GgmlBufferFailed:
        case Wording::GgmlHostBufferFailed:
        case Wording::GgmlMetalBufferFailed:
        case Wording::GgmlModelLoadFailed:
        case Wording::GgmlKvFailed:
        case Wording::GgmlComputeFailed:
        case Wording::GgmlCudaPool:
        case Wording::GgmlCudaVmmReserve:
        case Wording::MetalOutOfMemory:
        case Wording::MetalStatus5:
            return true;
        default:
            return false;
    }
}

void judge(Finding& f, const Evidence& e) {
    f.contradictions.clear();
    derive_numbers(f, e);
    f.oom_class = classify(f, e);
    f.cause = describe_cause(f, e);
    f.fixes = advise(f, e);
}

void derive_numbers(Finding& f, const Evidence& e) {
    const Numbers& n = e.numbers;
    f.requested_bytes = n.requested;
    f.total_bytes = n.total;
    if (!e.host_memory && !f.total_bytes) {
        f.total_bytes = e.context.device_total_bytes;
        if (!f.total_bytes && e.options && e.options->device_memory_bytes)
            f.total_bytes = e.options->device_memory_bytes;
    }
    f.free_bytes = n.free;
    f.reserved_unallocated_bytes = n.unallocated;
    if (n.this_process)
        f.this_process_bytes = n.this_process;
    else if (n.largest_other_process && n.reserved && *n.largest_other_process >= *n.reserved)
        f.this_process_bytes = n.largest_other_process;
    else if (!n.reserved && n.largest_other_process && n.n_listed_processes > 1)
        f.this_process_bytes = n.largest_other_process;  // the failing one is the largest, likely
    else
        f.this_process_bytes = n.reserved;

    // Numbers that cannot all be true: say so, and reason from what holds.
    if (e.wording == Wording::TorchPre21 && n.reserved && n.allocated &&
        *n.reserved < *n.allocated) {
        // PyTorch reserves every byte it allocates: reserved >= allocated, always.
        f.contradictions.push_back(fmt::format(
            "{} reserved in total is less than the {} already allocated, which PyTorch never "
            "prints (it reserves every byte it allocates); reasoning from the allocated bytes: "
            "this process holds at least {}, and what PyTorch keeps cached is unknown.",
            b(n.reserved), b(n.allocated), b(n.allocated)));
        f.this_process_bytes = n.allocated;
    }
    if (f.total_bytes && n.allocated && *n.allocated > *f.total_bytes)
        f.contradictions.push_back(fmt::format(
            "PyTorch has {} allocated on a {} device: the driver lends it host memory (Windows' "
            "shared GPU memory, or unified memory), so the device's own numbers do not bound "
            "this process.",
            b(n.allocated), b(f.total_bytes)));
    if (e.wording == Wording::GgmlMetalBufferFailed && f.requested_bytes && f.total_bytes &&
        *f.requested_bytes < *f.total_bytes)
        f.contradictions.push_back(fmt::format(
            "{} could not be allocated although the recommended working set is {}: one Metal "
            "buffer cannot be longer than the device's maxBufferLength (often about half the "
            "RAM), whatever the working set; split the buffer (fewer layers on the GPU, or a "
            "newer llama.cpp that splits the weights).",
            b(f.requested_bytes), b(f.total_bytes)));
    if (f.requested_bytes && f.free_bytes && *f.free_bytes >= GiB &&
        *f.free_bytes / 100 >= *f.requested_bytes)
        f.contradictions.push_back(fmt::format(
            "the device reports {} free, more than 100 times the {} asked for: a shortage does "
            "not explain that; the driver's memory in pieces, a driver or allocator fault, or a "
            "limit other than memory (the number of allocations or mappings) does.",
            b(f.free_bytes), b(f.requested_bytes)));
    // Intel's GPUs (Level Zero) refuse one allocation over 4 GiB unless the
    // runtime's relaxed allocation limits are on, however much is free.
    if (f.requested_bytes && *f.requested_bytes >= 4 * GiB &&
        f.message.find("XPU out of memory") != std::string::npos &&
        (!f.total_bytes || *f.requested_bytes < *f.total_bytes))
        f.contradictions.push_back(fmt::format(
            "one {} allocation on an Intel GPU: Level Zero limits a single allocation to 4 GiB "
            "unless its relaxed allocation limits are enabled, whatever is free; split the "
            "tensor (smaller batch or tiles) or enable the relaxed limits.",
            b(f.requested_bytes)));
    if (f.total_bytes && f.free_bytes && *f.free_bytes > *f.total_bytes)
        f.contradictions.push_back(
            fmt::format("{} free is more than the device's {}: the two numbers come from different "
                        "devices or accountings (an integrated GPU with unified memory counts "
                        "system RAM as free).",
                        b(f.free_bytes), b(f.total_bytes)));

    if (e.wording == Wording::TorchMps) {
        // MPS's "other allocations" are this process's too, and its free is
        // derived from the same numbers: nothing is known about others.
    } else if (e.wording == Wording::VllmFreeMemoryStartup) {
        // At start-up the engine holds nothing yet: the rest is someone else's.
        if (f.total_bytes && f.free_bytes)
            f.other_processes_bytes = sat_sub(*f.total_bytes, *f.free_bytes);
    } else if (f.total_bytes && f.free_bytes && f.this_process_bytes) {
        f.other_processes_bytes =
            sat_sub(sat_sub(*f.total_bytes, *f.free_bytes), *f.this_process_bytes);
    }

    f.max_model_len_tokens = n.max_model_len;
    f.kv_cache_tokens = n.kv_tokens;
    f.estimated_max_len_tokens = n.estimated_max_len;
    f.prefill_tokens = n.prefill_tokens;
    f.total_tokens = n.total_tokens;
    f.n_sequences = n.n_sequences;

    // With the model's KV bytes per token, token counts become bytes.
    const auto* m = e.options && e.options->model ? &*e.options->model : nullptr;
    if (m && m->kv_bytes_per_token && e.wording == Wording::VllmMaxSeqLen && n.max_model_len &&
        n.kv_tokens) {
        f.requested_bytes = *n.max_model_len * m->kv_bytes_per_token;
        f.free_bytes = *n.kv_tokens * m->kv_bytes_per_token;
    }

    if (e.wording == Wording::VllmProfileNoKv && n.kv_left) f.deficit_bytes = -*n.kv_left;
    if (f.requested_bytes && f.free_bytes) {
        const auto usable = static_cast<int64_t>(*f.free_bytes) +
                            static_cast<int64_t>(f.reserved_unallocated_bytes.value_or(0));
        f.deficit_bytes = static_cast<int64_t>(*f.requested_bytes) - usable;
    }
}

OomClass classify(const Finding& f, const Evidence& e) {
    const Numbers& n = e.numbers;
    switch (e.wording) {
        case Wording::NotOom:
        case Wording::TfBfcNotFailure:
            return OomClass::NotOom;
        case Wording::Unknown:
            return OomClass::Unrecognised;
        case Wording::VllmMaxSeqLen:
        case Wording::VllmServeOneRequest:
        case Wording::TgiTotalTokens:
            return OomClass::KvCacheTooLarge;
        case Wording::TgiPrefill:
            return OomClass::ActivationsOrBatch;
        case Wording::VllmSamplerWarmup:
            return OomClass::UtilizationSetting;
        case Wording::BnbDispatchedToCpu:
            return OomClass::WeightsTooLarge;
        case Wording::GgmlCudaPool:
            return OomClass::ActivationsOrBatch;
        case Wording::GgmlCudaVmmReserve:
            return OomClass::Fragmentation;
        case Wording::KvCacheNoRoom:
            return OomClass::KvCacheTooLarge;
        case Wording::TorchMemorySummary: {
            // After an OOM the allocator has released every cached segment it
            // could; what stays reserved beyond the live tensors is in pieces.
            const uint64_t cached =
                std::max(n.unallocated.value_or(0), n.inactive_split.value_or(0));
            return n.reserved && cached >= std::max<uint64_t>(GiB, *n.reserved / 4)
                       ? OomClass::Fragmentation
                       : OomClass::ActivationsOrBatch;
        }
        case Wording::VllmFreeMemoryStartup: {
            const bool crowded =
                f.other_processes_bytes && f.total_bytes &&
                *f.other_processes_bytes >= std::max<uint64_t>(2 * GiB, *f.total_bytes / 4);
            return crowded ? OomClass::OtherProcess : OomClass::UtilizationSetting;
        }
        case Wording::VllmNoCacheBlocks:
        case Wording::SglangNotEnoughMemory:
        case Wording::VllmProfileNoKv:
            return weights_exceed_budget(f, e) ? OomClass::WeightsTooLarge
                                               : OomClass::UtilizationSetting;
        default:
            break;
    }
    // llama.cpp keeps the KV cache of layers on the CPU in host buffers: a
    // host buffer failing while it is allocated is the KV cache first.
    if (e.host_memory && e.phase == Phase::KvCache && is_ggml(e.wording))
        return OomClass::KvCacheTooLarge;
    if (e.host_memory) return OomClass::CpuRam;

    if (is_torch(e.wording)) {
        // set_per_process_memory_fraction caps PyTorch below the device.
        if (n.allowed && f.total_bytes && e.wording != Wording::TorchMps &&
            static_cast<double>(*n.allowed) < 0.95 * static_cast<double>(*f.total_bytes) &&
            f.requested_bytes && f.this_process_bytes.value_or(0) + *f.requested_bytes > *n.allowed)
            return OomClass::UtilizationSetting;
        if (f.requested_bytes && f.total_bytes && *f.requested_bytes > *f.total_bytes)
            return e.phase == Phase::Weights ? OomClass::WeightsTooLarge
                                             : OomClass::ActivationsOrBatch;
        if (f.requested_bytes && !f.total_bytes && *f.requested_bytes >= kLargestCommonGpu &&
            e.phase != Phase::Weights)
            return OomClass::ActivationsOrBatch;
        const bool async_pool = e.wording == Wording::TorchAllowed;
        if (others_dominate(f, n.this_process.has_value() && !async_pool, async_pool))
            return OomClass::OtherProcess;
        // vLLM sizes its KV cache itself from --gpu-memory-utilization: a
        // tensor it cannot allocate while doing so is a budget set too high.
        if (e.phase == Phase::KvCache && e.context.engine == Framework::Vllm)
            return OomClass::UtilizationSetting;
        if (fragmented(f)) return OomClass::Fragmentation;
        // memory_summary counts the pieces: free blocks inside segments that
        // also hold live tensors, together at least the request.
        if (n.inactive_split && f.requested_bytes && *n.inactive_split >= *f.requested_bytes)
            return OomClass::Fragmentation;
    }
    if (const OomClass c = by_phase(e.phase); c != OomClass::Unrecognised) return c;

    const auto* m = e.options && e.options->model ? &*e.options->model : nullptr;
    if (m && f.total_bytes &&
        static_cast<double>(m->weight_bytes) >= 0.9 * static_cast<double>(*f.total_bytes))
        return OomClass::WeightsTooLarge;
    if (is_ggml(e.wording) && e.context.kv_bytes && e.context.weights_bytes)
        return *e.context.kv_bytes >= *e.context.weights_bytes ? OomClass::KvCacheTooLarge
                                                               : OomClass::WeightsTooLarge;
    // One llama.cpp buffer of most of the device, nothing said about what
    // for: the weights, which it allocates first and in one piece per device.
    if ((e.wording == Wording::GgmlDeviceMallocFailed || e.wording == Wording::GgmlBufferFailed) &&
        f.requested_bytes && f.total_bytes && *f.requested_bytes >= *f.total_bytes / 2)
        return OomClass::WeightsTooLarge;
    // The process holds the device and one more tensor did not fit.
    if (is_torch(e.wording) && f.requested_bytes && (f.this_process_bytes || n.allocated))
        return OomClass::ActivationsOrBatch;
    return OomClass::Unrecognised;
}

namespace {

// " while loading the weights" and the like, or "".
std::string where_words(Phase phase) {
    const auto words = phase_words(phase);
    return words.empty() ? std::string() : fmt::format(" {}", words);
}

// The cause in one or two sentences, one function per class.
std::string cause_not_oom(const Finding&, const Evidence& e) {
    if (e.wording == Wording::TfBfcNotFailure)
        return "Not a failure: TensorFlow's allocator could not get one buffer at the size "
               "it wanted, retried with less and went on (\"the caller indicates that this "
               "is not a failure\"). At most it costs speed; if the program stopped, the "
               "error that stopped it is elsewhere in the log.";
    return "Not an out-of-memory error: this is a fault in a GPU kernel or driver, and "
           "memory settings will not fix it.";
}

std::string cause_unrecognised(const Finding& f, const Evidence& e) {
    const std::string where = where_words(f.phase);
    if (e.wording == Wording::Unknown)
        return "An out-of-memory error in a wording doctor does not know; its cause "
               "cannot be read from it.";
    return fmt::format(
        "Out of memory{}{}, but the message does not say how much was needed or what "
        "held the memory.",
        f.requested_bytes ? fmt::format(" allocating {}", b(f.requested_bytes)) : std::string(),
        where);
}

std::string cause_cpu_ram(const Finding& f, const Evidence& e) {
    const std::string where = where_words(f.phase);
    if (e.wording == Wording::OllamaSystemMemory)
        return fmt::format("Host RAM: the model needs {} but only {} is available.",
                           b(f.requested_bytes), b(f.free_bytes));
    if (e.wording == Wording::LinuxOomKiller || e.wording == Wording::CgroupOomKiller)
        return fmt::format(
            "Host RAM: the kernel killed the process{} when it held {}.",
            e.wording == Wording::CgroupOomKiller ? " at its container's memory limit" : "",
            b(f.this_process_bytes));
    if (e.wording == Wording::OomKilled)
        return "Host RAM: the container was killed at its memory limit (OOMKilled).";
    if (e.wording == Wording::ShellKilled)
        return fmt::format(
            "The process was killed (SIGKILL, exit code 137){}: on Linux most often the "
            "kernel's OOM killer, when host RAM or the container's memory limit ran out "
            "(dmesg names the process; docker inspect says OOMKilled).",
            where);
    if (e.wording == Wording::HostMmapFailed)
        return fmt::format(
            "Host memory: mapping {} of a file{} into the process failed (ENOMEM). The "
            "kernel refused the address space: a virtual-memory or container limit, "
            "overcommit, or the mappings a process may hold; the GPU is not involved.",
            b(f.requested_bytes),
            f.phase == Phase::Weights ? " (the checkpoint being loaded)" : "");
    return fmt::format(
        "Host RAM ran out{}{}.",
        f.requested_bytes ? fmt::format(" allocating {}", b(f.requested_bytes)) : std::string(),
        where);
}

std::string cause_weights_too_large(const Finding& f, const Evidence& e) {
    const std::string where = where_words(f.phase);
    if (e.wording == Wording::BnbDispatchedToCpu)
        return "The quantized model does not fit in GPU memory: accelerate placed some "
               "layers on the CPU or disk, which bitsandbytes refuses.";
    if (e.wording == Wording::VllmNoCacheBlocks || e.wording == Wording::SglangNotEnoughMemory ||
        e.wording == Wording::VllmProfileNoKv)
        return fmt::format(
            "The weights ({}) take more than the engine's share of the {} GPU, so "
            "nothing is left for the KV cache.",
            b(e.context.weights_bytes), b(f.total_bytes));
    return fmt::format("The model's weights do not fit: {} could not be allocated{}.",
                       b(f.requested_bytes), where.empty() ? "" : where);
}

std::string cause_kv_cache_too_large(const Finding& f, const Evidence& e) {
    const Numbers& n = e.numbers;
    if (e.wording == Wording::VllmMaxSeqLen)
        return fmt::format(
            "The KV cache left after the weights holds {} tokens, fewer than one "
            "request of the max model length ({} tokens).",
            format_count(n.kv_tokens.value_or(0)), format_count(n.max_model_len.value_or(0)));
    if (e.wording == Wording::VllmServeOneRequest)
        return fmt::format(
            "One request of {} tokens needs {} of KV cache; only {} is available{}.",
            format_count(n.max_model_len.value_or(0)), b(f.requested_bytes), b(f.free_bytes),
            n.estimated_max_len
                ? fmt::format(" (enough for {} tokens)", format_count(*n.estimated_max_len))
                : "");
    if (e.wording == Wording::TgiTotalTokens)
        return fmt::format(
            "The KV cache cannot hold {} tokens in flight (--max-batch-total-tokens).",
            format_count(n.total_tokens.value_or(0)));
    if (e.host_memory)
        return fmt::format(
            "The KV cache does not fit in host RAM{}: the layers kept on the CPU hold "
            "their KV cache there.",
            f.requested_bytes ? fmt::format(" ({} was asked for)", b(f.requested_bytes))
                              : std::string());
    return fmt::format("The KV cache does not fit{}.",
                       f.requested_bytes ? fmt::format(": {} was asked for", b(f.requested_bytes))
                                         : std::string());
}

std::string cause_activations_or_batch(const Finding& f, const Evidence& e) {
    const Numbers& n = e.numbers;
    const std::string where = where_words(f.phase);
    if (e.wording == Wording::MetalStatus5 && f.this_process_bytes && f.total_bytes)
        return fmt::format(
            "Metal ran out of memory running a command buffer: the buffers allocated "
            "({}) exceed the GPU's recommended working set ({}), and the last, the "
            "compute scratch, crossed it.",
            b(f.this_process_bytes), b(f.total_bytes));
    if (e.wording == Wording::TgiPrefill)
        return fmt::format(
            "Warm-up could not run a prefill batch of {} tokens after the weights and "
            "KV cache took their share.",
            format_count(n.prefill_tokens.value_or(0)));
    if (f.requested_bytes && f.total_bytes && *f.requested_bytes > *f.total_bytes)
        return fmt::format(
            "One {} tensor is larger than the whole {} GPU: the batch, sequence or "
            "image size makes a single buffer too big.",
            b(f.requested_bytes), b(f.total_bytes));
    if (f.requested_bytes && !f.total_bytes && *f.requested_bytes >= kLargestCommonGpu)
        return fmt::format(
            "One {} tensor: larger than all but the largest GPUs. The batch, sequence or "
            "image size makes a single buffer too big (an input not resized, or a shape "
            "bug).",
            b(f.requested_bytes));
    if (e.wording == Wording::TorchMemorySummary)
        return fmt::format(
            "PyTorch ran out of memory ({} reserved, {} allocated by its tensors when the "
            "summary was printed): live tensors fill what it reserved.",
            b(n.reserved), b(n.allocated));
    if (e.wording == Wording::GgmlCudaPool)
        return "llama.cpp's CUDA memory pool could not grow for the scratch of a step "
               "(a long prompt's batch): the weights and the KV cache left too little "
               "room for its compute buffers.";
    if (f.phase == Phase::Compute && is_ggml(e.wording))
        return fmt::format(
            "The compute buffers ({}) did not fit next to the weights and the KV cache.",
            b(f.requested_bytes));
    return fmt::format("A {} working buffer{} did not fit{}.", b(f.requested_bytes), where,
                       f.this_process_bytes && f.total_bytes
                           ? fmt::format(": this process already holds {} of {}",
                                         b(f.this_process_bytes), b(f.total_bytes))
                           : "");
}

std::string cause_fragmentation(const Finding& f, const Evidence& e) {
    const Numbers& n = e.numbers;
    if (e.wording == Wording::TorchMemorySummary)
        return fmt::format(
            "Fragmentation: after the out-of-memory error PyTorch still reserves {} but "
            "its tensors hold only {}: the rest is cached in pieces of segments it could "
            "neither release nor reuse for the request.",
            b(n.reserved), b(n.allocated));
    if (e.wording == Wording::GgmlCudaVmmReserve)
        return "Not a shortage of VRAM: llama.cpp's CUDA memory pool reserves one large "
               "virtual address range up front (cuMemAddressReserve) and the driver "
               "refused the reservation (on Windows, WDDM limits it).";
    if (f.free_bytes && f.requested_bytes && *f.free_bytes >= *f.requested_bytes &&
        f.reserved_unallocated_bytes.value_or(0) < *f.requested_bytes)
        return fmt::format(
            "Fragmentation: the device reported {} free, more than the {} asked for, "
            "yet no block that size could be had.",
            b(f.free_bytes), b(f.requested_bytes));
    return fmt::format(
        "Fragmentation: {} could not be allocated although {} was free and {} sat "
        "reserved but unallocated in PyTorch's cache.",
        b(f.requested_bytes), b(f.free_bytes), b(f.reserved_unallocated_bytes.value_or(0)));
}

std::string cause_other_process(const Finding& f, const Evidence& e) {
    if (e.wording == Wording::VllmFreeMemoryStartup)
        return fmt::format(
            "Other processes hold {} of the {} GPU; vLLM wants {} but only {} is free.",
            b(f.other_processes_bytes), b(f.total_bytes), b(f.requested_bytes), b(f.free_bytes));
    if (e.wording == Wording::TorchAllowed)
        return fmt::format(
            "{} of the {} GPU is neither free nor held by this process's tensors ({}): "
            "other processes, or freed memory the cudaMallocAsync pool keeps; {} more "
            "was needed and only {} was free.",
            b(f.other_processes_bytes), b(f.total_bytes), b(f.this_process_bytes),
            b(f.requested_bytes), b(f.free_bytes));
    return fmt::format(
        "Other processes hold {} of the {} GPU; this process needed {} more and only {} "
        "was free.",
        b(f.other_processes_bytes), b(f.total_bytes), b(f.requested_bytes), b(f.free_bytes));
}

std::string cause_utilization_setting(const Finding& f, const Evidence& e) {
    const Numbers& n = e.numbers;
    if (f.phase == Phase::SamplerWarmup)
        return fmt::format(
            "Warming up the sampler for {} sequences ran out of memory: the KV cache, "
            "sized "
            "from --gpu-memory-utilization, left too little for it.",
            n.n_sequences ? format_count(*n.n_sequences) : "max_num_seqs");
    if (f.phase == Phase::CudaGraph)
        return "Capturing CUDA graphs ran out of memory: the graphs need memory the KV "
               "cache and weights already took.";
    if (e.wording == Wording::VllmFreeMemoryStartup)
        return fmt::format("--gpu-memory-utilization asks for {} but {} is free.",
                           b(f.requested_bytes), b(f.free_bytes));
    if (e.wording == Wording::VllmNoCacheBlocks)
        return "After the weights and the profiled activations, the "
               "--gpu-memory-utilization share leaves no memory for the KV cache.";
    if (e.wording == Wording::VllmProfileNoKv)
        return fmt::format(
            "vLLM's budget, {} x gpu_memory_utilization {:.2f} = {}, is spent before the "
            "KV cache: weights {}, non-torch memory {}, the profiled activation peak {}; "
            "{} is left for the KV cache.",
            b(f.total_bytes), e.context.utilization.value_or(0.9),
            f.total_bytes ? b(static_cast<uint64_t>(static_cast<double>(*f.total_bytes) *
                                                    e.context.utilization.value_or(0.9)))
                          : std::string("?"),
            b(e.context.weights_bytes), b(n.non_torch), b(n.activation_peak),
            n.kv_left && *n.kv_left < 0 ? fmt::format("-{}", b(static_cast<uint64_t>(-*n.kv_left)))
                                        : std::string("nothing"));
    if (e.wording == Wording::SglangNotEnoughMemory)
        return "After the weights, --mem-fraction-static leaves no memory for the KV "
               "cache pool.";
    return fmt::format(
        "PyTorch is capped at {} of the {} GPU (set_per_process_memory_fraction) and "
        "needed {} more.",
        b(n.allowed), b(f.total_bytes), b(f.requested_bytes));
}

}  // namespace

std::string describe_cause(const Finding& f, const Evidence& e) {
    switch (f.oom_class) {
        case OomClass::NotOom:
            return cause_not_oom(f, e);
        case OomClass::Unrecognised:
            return cause_unrecognised(f, e);
        case OomClass::CpuRam:
            return cause_cpu_ram(f, e);
        case OomClass::WeightsTooLarge:
            return cause_weights_too_large(f, e);
        case OomClass::KvCacheTooLarge:
            return cause_kv_cache_too_large(f, e);
        case OomClass::ActivationsOrBatch:
            return cause_activations_or_batch(f, e);
        case OomClass::Fragmentation:
            return cause_fragmentation(f, e);
        case OomClass::OtherProcess:
            return cause_other_process(f, e);
        case OomClass::UtilizationSetting:
            return cause_utilization_setting(f, e);
    }
    return "";
}

}  // namespace headroom::doctor
