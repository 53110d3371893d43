// llama.cpp (ggml) reports one failed allocation in a chain of lines, each
// naming a different layer of the stack, e.g.
//
//   ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4507.00 MiB on device 0:
//     cudaMalloc failed: out of memory                               (the device)
//   ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 4725934080
//                                                  (the buffer; its owner names the phase)
//   llama_new_context_with_model: failed to allocate compute buffers  (the phase)
//
// The buffer's owner says what did not fit: alloc_tensor_range and "error
// loading model" are the weights, llama_kv_cache the KV cache, gallocr and
// "compute (pp) buffers" the compute graph's scratch. Ollama runs the same
// code, so its logs carry the same lines. Metal reports out-of-memory when a
// command buffer runs, not when buffers are allocated.
//
// The CUDA (and HIP) backend's own check reports a failed call in three lines
// after "CUDA error: out of memory":
//
//   current device: 0, in function ggml_cuda_pool_malloc_vmm at ggml-cuda.cu:7184
//   cuMemSetAccess(pool_addr + pool_size, reserve_size, &access, 1)
//   GGML_ASSERT: ggml-cuda.cu:229: !"CUDA error"
//
// In the pool (ggml_cuda_pool_malloc*, "alloc") the scratch of a step grew
// past what the weights and the KV cache left; cuMemAddressReserve is the
// pool reserving its virtual range, which the driver can refuse with VRAM free.
#include "doctor/observation.h"

namespace headroom::doctor {

namespace {

void mark(Observation& out, Wording w, Observation::Kind kind = Observation::Kind::Oom) {
    out.kind = kind;
    out.wording = w;
    out.framework = Framework::LlamaCpp;
}

// The allocating function names the phase.
Phase phase_of_owner(const Line& l) {
    if (l.has("alloc_tensor_range") || l.has("load_tensors") || l.has("llama_model_load"))
        return Phase::Weights;
    if (l.has("llama_kv_cache") || l.has("kv cache")) return Phase::KvCache;
    if (l.has("gallocr") || l.has("compute")) return Phase::Compute;
    return Phase::Unknown;
}

// ggml_metal_add_buffer's buffer names: 'data' (weights), 'kv', 'alloc' and
// 'scr0'/'scr1' (compute scratch).
Phase phase_of_metal_buffer(const Line& l) {
    const size_t q = l.find("'");
    if (q == Line::npos) return Phase::Unknown;
    const std::string_view name = l.lower.substr(q + 1, 5);
    if (name.starts_with("data")) return Phase::Weights;
    if (name.starts_with("kv")) return Phase::KvCache;
    if (name.starts_with("alloc") || name.starts_with("scr")) return Phase::Compute;
    return Phase::Unknown;
}

bool is_host_buffer(std::string_view name) {
    return name.substr(0, 3) == "cpu" || name == "cuda_host" || name.ends_with("_host");
}

}  // namespace

bool parse_ggml(const Line& l, Observation& out) {
    auto& n = out.numbers;
    // Older ggml: "CUDA error 2 at ggml-cuda.cu:6016: out of memory" (error 2
    // is cudaErrorMemoryAllocation), from the pool of a step's scratch.
    if ((l.has("cuda error 2 at") || l.has("hip error 2 at")) && l.has("ggml") &&
        l.has("out of memory")) {
        mark(out, Wording::GgmlCudaPool);
        return true;
    }
    // "WARNING: failed to allocate 16000.00 MiB of pinned memory": llama.cpp
    // falls back to pageable host memory and goes on.
    if (l.has("of pinned memory") && l.has("failed to allocate") && l.has("warning")) {
        mark(out, Wording::None, Observation::Kind::Continuation);
        return true;
    }
    if (l.has("malloc failed: out of memory")) {
        mark(out, Wording::GgmlDeviceMallocFailed);
        n.requested = bytes_after(l, "allocating");
        return true;
    }
    // "failed to allocate CUDA0 buffer of size 151851674624"
    if (const size_t at = l.find("failed to allocate "); at != Line::npos) {
        const size_t name = at + 19;
        const size_t of = l.find(" buffer of size", name);
        const auto size = of != Line::npos ? integer_after(l, "buffer of size", of) : std::nullopt;
        if (size && of - name <= 24) {
            mark(out, Wording::GgmlBufferFailed);
            n.requested = size;
            out.host_memory = is_host_buffer(l.lower.substr(name, of - name));
            out.phase = phase_of_owner(l);
            return true;
        }
        if (const auto host = integer_after(l, "failed to allocate buffer of size")) {
            mark(out, Wording::GgmlHostBufferFailed);
            n.requested = host;
            out.host_memory = l.has("cpu_buffer") || l.has("cpu buffer");
            out.phase = phase_of_owner(l);
            return true;
        }
        if (l.has("metal") && l.has("failed to allocate buffer, size")) {
            mark(out, Wording::GgmlMetalBufferFailed);
            n.requested = bytes_after(l, "size =");
            return true;
        }
        // Older Metal: "ggml_metal_add_buffer: error: failed to allocate 'data    ' buffer, size =
        // X"
        if (l.has("ggml_metal_add_buffer") && l.has("buffer, size")) {
            mark(out, Wording::GgmlMetalBufferFailed);
            n.requested = bytes_after(l, "size =");
            out.phase = phase_of_metal_buffer(l);
            return true;
        }
        if (l.has("failed to allocate buffer for kv cache")) {
            mark(out, Wording::GgmlKvFailed);
            out.phase = Phase::KvCache;
            return true;
        }
        if (l.has("failed to allocate compute")) {  // "compute buffers", "compute pp buffers"
            mark(out, Wording::GgmlComputeFailed);
            out.phase = Phase::Compute;
            return true;
        }
    }
    if (l.has("error loading model: unable to allocate")) {
        mark(out, Wording::GgmlModelLoadFailed);
        out.phase = Phase::Weights;
        out.host_memory = l.has("allocate cpu buffer");
        return true;
    }
    if (l.has("llama_kv_cache_init() failed")) {
        mark(out, Wording::GgmlKvFailed);
        out.phase = Phase::KvCache;
        return true;
    }
    if (l.has("kiogpucommandbuffercallbackerroroutofmemory") ||
        (l.has("insufficient memory") && l.has("metal"))) {
        mark(out, Wording::MetalOutOfMemory);
        return true;
    }
    if (l.has("command buffer") && l.has("failed with status 5")) {
        mark(out, Wording::MetalStatus5, Observation::Kind::Continuation);
        return true;
    }
    if (l.has("cumemaddressreserve(") || l.has("hipmemaddressreserve(")) {
        mark(out, Wording::GgmlCudaVmmReserve, Observation::Kind::Continuation);
        return true;
    }
    if ((l.has("current device:") && l.has("in function")) || l.has("cumemcreate(") ||
        l.has("cumemsetaccess(") || l.has("cumemmap(") || l.has("hipmemcreate(") ||
        l.has("ggml_cuda_device_malloc(")) {
        mark(out, Wording::GgmlCudaPool, Observation::Kind::Continuation);
        if (l.has("pool") || l.has("in function alloc") || l.has("ggml_cuda_device_malloc("))
            out.phase = Phase::Compute;
        return true;
    }
    // Lines that follow a failed allocation and add only its consequence.
    if ((l.has("compute buffer allocation failed") ||
         l.has("failed to create context with model") || l.has("failed to load model") ||
         l.has("exiting due to model loading error")) &&
        !l.has("unable to mmap")) {
        mark(out, Wording::None, Observation::Kind::Continuation);
        out.phase = phase_of_owner(l);
        if (l.has("compute buffer")) out.phase = Phase::Compute;
        return true;
    }
    return false;
}

bool read_ggml_context(const Line& l, LogContext& ctx) {
    // "load_tensors:        CUDA0 model buffer size = 48928.09 MiB" (device
    // buffers only: CPU-mapped weights do not take GPU memory).
    if ((l.has("load_tensors:") || l.has("llm_load_tensors:")) && l.has("buffer size")) {
        if (l.has("cpu") || l.has("_host")) return false;
        if (auto b = bytes_after(l, "buffer size =")) {
            ctx.weights_bytes = ctx.weights_bytes.value_or(0) + *b;
            return true;
        }
        return false;
    }
    if (l.has("loading model tensors") || l.has("ggml ctx size")) {
        ctx.weights_bytes.reset();
        ctx.hint = Phase::Weights;
        ctx.hint_line = l.number;
        return true;
    }
    if (l.has("kv self size")) {
        ctx.kv_bytes = bytes_after(l, "kv self size");
        return true;
    }
    if (l.has("llama_kv_cache") && l.has(": size =")) {
        ctx.kv_bytes = bytes_after(l, ": size =");
        return true;
    }
    if (const size_t at = l.find("n_ctx"); at != Line::npos) {
        const size_t after = at + 5;
        if (after < l.lower.size() && (l.lower[after] == ' ' || l.lower[after] == '=')) {
            if (auto v = integer_at(l.lower, after)) {
                ctx.n_ctx = v;
                return true;
            }
        }
    }
    if (l.has("recommendedmaxworkingsetsize")) {
        ctx.device_total_bytes = bytes_after(l, "recommendedmaxworkingsetsize");
        return true;
    }
    // Metal after each buffer: "allocated buffer, size = 400.00 MiB, ( 5655.70 / 5461.34)",
    // both in the size's unit. The pair is the running total against the
    // recommended max working set.
    if ((l.has("metal") || l.has("ggml_metal_add_buffer")) && l.has("allocated") &&
        l.has("size =")) {
        const size_t size_at = l.find("size =");
        const auto size = quantity_at(l.lower, size_at + 6);
        const size_t open = l.lower.find('(', size_at);
        const size_t slash = open == std::string_view::npos ? open : l.lower.find('/', open);
        if (size && slash != std::string_view::npos) {
            // The unit of the size, applied to both numbers of the pair.
            size_t u = size->end;
            while (u > size->begin && l.lower[u - 1] >= 'a' && l.lower[u - 1] <= 'z') --u;
            const std::string unit(l.lower.substr(u, size->end - u));
            auto number = [&](size_t from, size_t to) {
                std::string t(l.lower.substr(from, to - from));
                while (!t.empty() && (t.front() == ' ' || t.front() == '(')) t.erase(0, 1);
                while (!t.empty() && (t.back() == ' ' || t.back() == ')')) t.pop_back();
                const std::string text = t + " " + unit;
                const auto q = quantity_at(text, 0);
                return q && q->end == text.size() ? std::optional<uint64_t>(q->bytes)
                                                  : std::nullopt;
            };
            const size_t close = l.lower.find(')', slash);
            const auto used = number(open + 1, slash);
            const auto max =
                close == std::string_view::npos ? std::nullopt : number(slash + 1, close);
            if (used && max) {
                ctx.metal_used = used;
                ctx.device_total_bytes = max;
                if (const Phase p = phase_of_metal_buffer(l); p != Phase::Unknown) {
                    ctx.hint = p;
                    ctx.hint_line = l.number;
                }
                return true;
            }
        }
    }
    // The buffer just allocated, named by the line after it (newer logs).
    if (l.has("metal kv buffer size") || l.has("metal compute buffer size")) {
        ctx.hint = l.has("kv buffer") ? Phase::KvCache : Phase::Compute;
        ctx.hint_line = l.number;
        if (l.has("kv buffer")) ctx.kv_bytes = bytes_after(l, "buffer size =");
        return true;
    }
    if (l.has("pipeline parallelism enabled")) {
        ctx.n_pipeline_copies = integer_after(l, "n_copies").value_or(0);
        return true;
    }
    if (l.has("llama_new_context_with_model:") || l.has("llama_context:")) {
        ctx.hint = Phase::Unknown;
        ctx.hint_line = l.number;
        return true;
    }
    return false;
}

}  // namespace headroom::doctor
