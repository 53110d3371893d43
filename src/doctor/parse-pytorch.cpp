// PyTorch's allocator messages, every wording since 1.0:
//
//   pre-2.1  CUDA out of memory. Tried to allocate X (GPU 0; T total capacity;
//            A already allocated; F free; [L allowed;] R reserved in total by PyTorch)
//   oldest   ... A already allocated; F free; C cached)    C = reserved - allocated
//   2.1+     ... Tried to allocate X. GPU 0 has a total capac(i)ty of T of which F
//            is free. [Process P has M memory in use.] [Including non-PyTorch
//            memory, this process has M memory in use.] [L allowed;] Of the
//            allocated memory A is allocated by PyTorch, [with Q allocated in
//            private pools (e.g., CUDA Graphs),] and U is reserved by PyTorch
//            but unallocated.
//   MPS      MPS backend out of memory (MPS allocated: A, other allocations: O,
//            max allowed: M). Tried to allocate X on private pool.
//   CPU      DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes.
//   async    Allocation on device 0 would exceed allowed memory. (out of memory)
//            Currently allocated : A  Requested : X  Device limit : T
//            Free (according to CUDA): F  PyTorch limit (set by user-supplied
//            memory fraction) : L          (one field a line, or all on one;
//            L is 2^34 GiB when no fraction is set)
//
// The "CUDA" prefix reads "HIP" on ROCm and is missing in some newer builds;
// the anchors below do not depend on it. Wrapped messages are joined by the
// scanner and read again here.
#include <algorithm>

#include "doctor/observation.h"

namespace headroom::doctor {

namespace {

// "Process 1246069 has 577.00 MiB memory in use." entries (2.1+ lists every
// process on the device; in a container the entry can be this process).
void read_process_list(const Line& line, Numbers& out) {
    uint64_t sum = 0, largest = 0, count = 0;
    bool any = false;
    for (size_t at = line.find("process "); at != Line::npos; at = line.find("process ", at + 8)) {
        size_t end = 0;
        if (!integer_at(line.lower, at + 8, &end)) continue;
        if (line.lower.substr(end, 5) != " has ") continue;
        const auto q = quantity_at(line.lower, end + 5);
        if (!q) continue;
        sum += q->bytes;
        largest = std::max(largest, q->bytes);
        ++count;
        any = true;
    }
    if (any) {
        out.sum_listed_processes = sum;
        out.largest_other_process = largest;
        out.n_listed_processes = count;
    }
}

bool is_torch_primary(const Line& l) {
    if (l.has("out of memory. tried to allocate")) return true;
    if (l.has("would exceed allowed memory")) return true;
    if (l.has("tried to allocate") && (l.has("total capacity") || l.has("total capacty")))
        return true;
    for (auto anchor : {"cuda out of memory", "hip out of memory", "xpu out of memory"}) {
        const size_t at = l.find(anchor);
        // "If you encounter CUDA out of memory, try ..." is advice, not an error.
        if (at != Line::npos && !is_conditional(l, at)) return true;
    }
    return l.has("outofmemoryerror");
}

}  // namespace

Wording parse_pytorch_message(const Line& l, Numbers& n) {
    if (l.has("would exceed allowed memory")) {
        n.requested = bytes_after(l, "requested");
        n.allocated = bytes_after(l, "currently allocated");
        n.this_process = n.allocated;  // live tensors; the async pool's cache is not counted
        n.total = bytes_after(l, "device limit");
        n.free = bytes_after(l, "free (according to cuda)");
        n.allowed = bytes_after(l, "memory fraction)");
        // Without a fraction the limit prints as 2^34 GiB: no limit.
        if (n.allowed && n.total && *n.allowed > 1024 * *n.total) n.allowed.reset();
        return Wording::TorchAllowed;
    }
    n.requested = bytes_after(l, "tried to allocate");
    read_process_list(l, n);
    n.allowed = bytes_before(l, "allowed;");
    if (l.has("total capacity of") || l.has("total capacty of")) {
        n.total = bytes_after(l, "total capacity of");
        if (!n.total) n.total = bytes_after(l, "total capacty of");
        n.free = bytes_after(l, "of which");
        n.this_process = bytes_after(l, "this process has");
        n.allocated = bytes_after(l, "of the allocated memory");
        n.unallocated = bytes_before(l, "is reserved by pytorch but unallocated");
        if (n.allocated && n.unallocated) n.reserved = *n.allocated + *n.unallocated;
        return Wording::Torch21;
    }
    if (l.has("total capacity")) {
        n.total = bytes_before(l, "total capacity");
        n.free = bytes_before(l, " free;");
        if (!n.free) n.free = bytes_before(l, " free)");
        n.allocated = bytes_before(l, "already allocated");
        n.reserved = bytes_before(l, "reserved in total by pytorch");
        if (n.reserved) {
            if (n.allocated && *n.reserved >= *n.allocated)
                n.unallocated = *n.reserved - *n.allocated;
            return Wording::TorchPre21;
        }
        // The oldest form reports the cache (reserved but unallocated) itself.
        n.unallocated = bytes_before(l, "cached");
        if (n.unallocated && n.allocated) n.reserved = *n.allocated + *n.unallocated;
        return Wording::TorchCached;
    }
    return Wording::TorchBare;
}

bool is_allowed_memory_field(const Line& l) {
    static constexpr std::string_view kFields[] = {
        "currently allocated",      "requested",     "device limit",
        "free (according to cuda)", "pytorch limit", "memory fraction)"};
    for (auto f : kFields)
        if (l.has(f)) return true;
    // The limit's value wrapped onto a line of its own: ": 17179869184.00 GiB".
    std::string_view t = l.lower;
    while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
    return t.starts_with(":") && quantity_at(t, 1).has_value();
}

bool is_pytorch_continuation(const Line& l) {
    static constexpr std::string_view kFragments[] = {
        "total capacity", "total capacty",     "of which",       "is free",
        "memory in use",  "allocated memory",  "by pytorch",     "unallocated",
        "allowed;",       "tried to allocate", "max_split_size", "alloc_conf",
        "fragmentation",  "memory management", "private pools",  "already allocated",
    };
    for (auto f : kFragments)
        if (l.has(f)) return true;
    return false;
}

bool parse_pytorch(const Line& l, Observation& out) {
    if (l.has("mps backend out of memory")) {
        out.kind = Observation::Kind::Oom;
        out.wording = Wording::TorchMps;
        out.framework = Framework::PyTorch;
        auto& n = out.numbers;
        n.requested = bytes_after(l, "tried to allocate");
        const auto mps = bytes_after(l, "mps allocated");
        const auto other = bytes_after(l, "other allocations");
        n.allowed = bytes_after(l, "max allowed");
        n.total = n.allowed;
        if (mps) n.this_process = *mps + other.value_or(0);
        if (n.total && n.this_process)
            n.free = *n.total > *n.this_process ? *n.total - *n.this_process : 0;
        return true;
    }
    if (l.has("defaultcpuallocator") &&
        (l.has("can't allocate memory") || l.has("not enough memory"))) {
        out.kind = Observation::Kind::Oom;
        out.wording = Wording::TorchCpu;
        out.framework = Framework::PyTorch;
        out.host_memory = true;
        out.numbers.requested = bytes_after(l, "you tried to allocate", 0, true);
        return true;
    }
    // TensorFlow's stream executor growing its pool ("I ... cuda_driver.cc]
    // failed to allocate 2.12G (2282521344 bytes) from device:
    // CUDA_ERROR_OUT_OF_MEMORY"): the allocator asks for less next.
    if (l.has("cuda_driver") && l.has("failed to allocate") && l.has("cuda_error_out_of_memory")) {
        out.kind = Observation::Kind::NotOom;
        out.wording = Wording::TfBfcNotFailure;
        out.framework = Framework::Unknown;
        return true;
    }
    if (l.has("cuda error: out of memory") || l.has("hip error: out of memory") ||
        l.has("cuda_error_out_of_memory")) {
        out.kind = Observation::Kind::Oom;
        out.wording = Wording::CudaErrorOom;
        out.framework = Framework::PyTorch;
        return true;
    }
    if (is_torch_primary(l)) {
        out.kind = Observation::Kind::Oom;
        out.framework = Framework::PyTorch;
        out.wording = parse_pytorch_message(l, out.numbers);
        // TGI re-raises what its warm-up (a largest prefill batch) hit.
        if (l.has("unable to warmup model")) out.phase = Phase::Profiling;
        return true;
    }
    return false;
}

// Words anywhere in a line (a traceback's code context, a Jupyter frame, a
// progress bar) that say what the program was doing. A loading bar counts
// only while it runs: at 100% the weights are in and what fails next is not them.
bool read_phase_words(const Line& l, LogContext& ctx) {
    struct Phrase {
        std::string_view words;
        Phase phase;
    };
    static constexpr Phrase kPhrases[] = {
        {"_initialize_affine_weight", Phase::Weights}, {"columnparallellinear", Phase::Weights},
        {"rowparallellinear", Phase::Weights},         {"load_single_module", Phase::Weights},
        {"create_weights(", Phase::Weights},           {"_allocate_kv_cache", Phase::KvCache},
        {"initialize_kv_cache", Phase::KvCache},       {"init_kv_cache", Phase::KvCache},
    };
    for (const auto& p : kPhrases) {
        if (l.has(p.words)) {
            ctx.hint = p.phase;
            ctx.hint_line = l.number;
            return true;
        }
    }
    for (auto bar : {"loading safetensors checkpoint shards", "loading safetensors weights",
                     "loading weights concurrently", "loading checkpoint shards"}) {
        if (l.has(bar) && !l.has("100%")) {
            ctx.hint = Phase::Weights;
            ctx.hint_line = l.number;
            return true;
        }
    }
    return false;
}

// Traceback frames say what the program was doing:
//   File ".../modeling_utils.py", line 886, in _load_state_dict_into_meta_model
bool read_python_context(const Line& l, LogContext& ctx) {
    if (read_phase_words(l, ctx)) return true;
    const size_t file = l.find("file \"");
    if (file == Line::npos) return false;
    const size_t in = l.lower.rfind(", in ");
    if (in == std::string_view::npos || in < file) return false;
    std::string_view fn = l.lower.substr(in + 5);
    while (!fn.empty() && (fn.back() == ' ' || fn.back() == '\t')) fn.remove_suffix(1);
    struct Hint {
        std::string_view function;
        Phase phase;
    };
    static constexpr Hint kHints[] = {
        {"_load_state_dict_into_meta_model", Phase::Weights},
        {"set_module_tensor_to_device", Phase::Weights},
        {"_load_pretrained_model", Phase::Weights},
        {"load_state_dict", Phase::Weights},
        {"load_checkpoint_and_dispatch", Phase::Weights},
        {"load_weights", Phase::Weights},
        {"load_model", Phase::Weights},
        {"capture_model", Phase::CudaGraph},
        {"capture_end", Phase::CudaGraph},
        {"capture_begin", Phase::CudaGraph},
        {"_capture_cudagraphs", Phase::CudaGraph},
        {"_dummy_sampler_run", Phase::SamplerWarmup},
        {"profile_run", Phase::Profiling},
        {"determine_num_available_blocks", Phase::Profiling},
        {"determine_available_memory", Phase::Profiling},
    };
    for (const auto& h : kHints) {
        if (fn == h.function) {
            ctx.hint = h.phase;
            ctx.hint_line = l.number;
            return true;
        }
    }
    // transformers' KV cache grows by concatenation in cache_utils.py.
    if (l.has("cache_utils.py")) {
        ctx.hint = Phase::KvCache;
        ctx.hint_line = l.number;
        return true;
    }
    return false;
}

}  // namespace headroom::doctor
