// vLLM's own out-of-memory messages. vLLM sizes its KV cache at start-up from
// --gpu-memory-utilization x total memory, minus weights and the profiled
// activation peak, and refuses to start when that leaves too little:
//
//   No available memory for the cache blocks. Try increasing `gpu_memory_utilization` ...
//   The model's max seq len (A) is larger than the maximum number of tokens that can
//     be stored in KV cache (B). Try increasing `gpu_memory_utilization` or decreasing
//     `max_model_len` ...
//   To serve at least one request with the models's max seq len (A), (X GiB KV cache is
//     needed, which is larger than the available KV cache memory (Y GiB). Based on the
//     available memory, the estimated maximum model length is C. ...
//   Free memory on device [cuda:N] (F/T GiB) on startup is less than desired GPU memory
//     utilization (U, R GiB). ...
//   CUDA out of memory occurred when warming up sampler with N dummy requests. ...
//   the current vLLM instance can use total_gpu_memory (T) x gpu_memory_utilization
//     (U) = B; model weights take W; non_torch_memory takes N; PyTorch activation
//     peak memory takes A; the rest of the memory reserved for KV Cache is K.
//     (K = B - W - N - A; with K <= 0 vLLM fails next: the budget is spent.)
//
// Out-of-memory errors during profiling or CUDA graph capture are PyTorch's
// messages; the traceback frames and "Capturing cudagraphs" lines around them
// give the phase (read_python_context, read_vllm_context).
#include "doctor/observation.h"

namespace headroom::doctor {

namespace {

void mark(Observation& out, Wording w) {
    out.kind = Observation::Kind::Oom;
    out.wording = w;
    out.framework = Framework::Vllm;
}

// "(19.77/22.05 GiB)": the free amount borrows the total's unit.
void read_free_over_total(const Line& l, size_t from, Numbers& n) {
    const size_t open = l.lower.find('(', from);
    if (open == std::string_view::npos) return;
    const size_t slash = l.lower.find('/', open);
    if (slash == std::string_view::npos) return;
    const auto total = quantity_at(l.lower, slash + 1);
    if (!total) return;
    // Unit text of the total, e.g. "gib".
    size_t unit_begin = total->end;
    while (unit_begin > 0 && l.lower[unit_begin - 1] >= 'a' && l.lower[unit_begin - 1] <= 'z')
        --unit_begin;
    const std::string free_text = std::string(l.lower.substr(open + 1, slash - open - 1)) + " " +
                                  std::string(l.lower.substr(unit_begin, total->end - unit_begin));
    if (const auto free = quantity_at(free_text, 0); free && free->end == free_text.size())
        n.free = free->bytes;
    n.total = total->bytes;
}

}  // namespace

bool parse_vllm(const Line& l, Observation& out) {
    auto& n = out.numbers;
    if (l.has("no available memory for the cache blocks")) {
        mark(out, Wording::VllmNoCacheBlocks);
        return true;
    }
    if (l.has("larger than the maximum number of tokens that can be stored in kv cache")) {
        mark(out, Wording::VllmMaxSeqLen);
        out.phase = Phase::KvCache;
        n.max_model_len = integer_after(l, "max seq len");
        n.kv_tokens = integer_after(l, "stored in kv cache");
        return true;
    }
    if (l.has("to serve at least one request with the model") && l.has("kv cache is needed")) {
        mark(out, Wording::VllmServeOneRequest);
        out.phase = Phase::KvCache;
        n.max_model_len = integer_after(l, "max seq len");
        n.requested = bytes_before(l, "kv cache is needed");
        n.free = bytes_after(l, "available kv cache memory");
        n.estimated_max_len = integer_after(l, "estimated maximum model length is");
        return true;
    }
    if (l.has("free memory on device") && l.has("less than desired gpu memory utilization")) {
        mark(out, Wording::VllmFreeMemoryStartup);
        read_free_over_total(l, l.find("free memory on device"), n);
        const size_t u = l.find("desired gpu memory utilization");
        if (u != Line::npos) {
            const size_t open = l.lower.find('(', u);
            if (open != std::string_view::npos) {
                n.utilization = fraction_at(l.lower, open + 1);
                const size_t comma = l.lower.find(',', open);
                if (comma != std::string_view::npos) {
                    if (const auto q = quantity_at(l.lower, comma + 1)) n.requested = q->bytes;
                }
            }
        }
        return true;
    }
    if (const size_t at = l.find("reserved for kv cache is"); at != Line::npos) {
        size_t p = at + std::string_view("reserved for kv cache is").size();
        while (p < l.lower.size() && l.lower[p] == ' ') ++p;
        const bool negative = p < l.lower.size() && l.lower[p] == '-';
        const auto k = quantity_at(l.lower, negative ? p + 1 : p);
        // A positive rest is a healthy start-up (its numbers are context).
        if (!k || (!negative && k->bytes > 0)) return false;
        mark(out, Wording::VllmProfileNoKv);
        out.phase = Phase::Profiling;
        const auto w = bytes_after(l, "model weights take");
        n.non_torch = bytes_after(l, "non_torch_memory takes");
        n.activation_peak = bytes_after(l, "activation peak memory takes");
        if (w) n.requested = *w + n.non_torch.value_or(0) + n.activation_peak.value_or(0);
        n.kv_left = negative ? -static_cast<int64_t>(k->bytes) : 0;
        return true;
    }
    if (l.has("out of memory occurred when warming up sampler")) {
        mark(out, Wording::VllmSamplerWarmup);
        out.phase = Phase::SamplerWarmup;
        out.wraps_previous = true;
        n.n_sequences = integer_after(l, "warming up sampler with");
        return true;
    }
    return false;
}

bool read_vllm_context(const Line& l, LogContext& ctx) {
    bool took = false;
    if (auto w = bytes_after(l, "loading model weights took")) {
        ctx.weights_bytes = w;
        took = true;
    } else if (auto m = bytes_after(l, "model loading took")) {
        ctx.weights_bytes = m;
        took = true;
    } else if (auto t = bytes_after(l, "model weights take")) {
        ctx.weights_bytes = t;
        took = true;
    }
    if (auto total = bytes_after(l, "total_gpu_memory")) {
        ctx.device_total_bytes = total;
        took = true;
    }
    for (auto key : {"gpu_memory_utilization", "gpu-memory-utilization"}) {
        const size_t at = l.find(key);
        if (at == Line::npos) continue;
        if (auto u = fraction_at(l.lower, at + std::string_view(key).size())) {
            ctx.utilization = u;
            took = true;
            break;
        }
    }
    if (l.has("capturing cudagraphs") || l.has("capturing cuda graph") ||
        l.has("capturing the model for cuda graphs")) {
        ctx.hint = Phase::CudaGraph;
        ctx.hint_line = l.number;
        took = true;
    } else if (l.has("graph capturing finished")) {
        ctx.hint = Phase::Unknown;
        ctx.hint_line = l.number;
        took = true;
    }
    return took;
}

}  // namespace headroom::doctor
