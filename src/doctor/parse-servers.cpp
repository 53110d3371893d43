// Serving engines that check memory themselves and say so in their own words:
//
//   Ollama  model requires more system memory (X) than is available (Y)
//   TGI     Not enough memory to handle N prefill tokens. You need to decrease
//             `--max-batch-prefill-tokens`                      (warm-up, activations)
//           Not enough memory to handle T total tokens with P prefill tokens. You need
//             to decrease `--max-batch-total-tokens` or `--max-batch-prefill-tokens`
//                                                               (KV cache for T tokens)
//   SGLang  Not enough memory. Please try to increase --mem-fraction-static.
//             (after the weights, the static pool left nothing for the KV cache)
#include "doctor/observation.h"

namespace headroom::doctor {

bool parse_servers(const Line& l, Observation& out) {
    auto& n = out.numbers;
    if (l.has("model requires more system memory")) {
        out.kind = Observation::Kind::Oom;
        out.wording = Wording::OllamaSystemMemory;
        out.framework = Framework::Ollama;
        out.host_memory = true;
        n.requested = bytes_after(l, "system memory");
        n.free = bytes_after(l, "than is available");
        return true;
    }
    // TGI's launcher after a shard died at start-up: it was loading the weights.
    if (l.has("shardcannotstart") || (l.has("shard ") && l.has("failed to start"))) {
        out.kind = Observation::Kind::Continuation;
        out.framework = Framework::Tgi;
        out.phase = Phase::Weights;
        out.wraps_previous = true;
        return true;
    }
    if (l.has("not enough memory to handle")) {
        out.kind = Observation::Kind::Oom;
        out.framework = Framework::Tgi;
        if (l.has("total tokens with")) {
            out.wording = Wording::TgiTotalTokens;
            out.phase = Phase::KvCache;
            n.total_tokens = integer_after(l, "to handle");
            n.prefill_tokens = integer_after(l, "total tokens with");
        } else {
            out.wording = Wording::TgiPrefill;
            out.phase = Phase::Compute;
            n.prefill_tokens = integer_after(l, "to handle");
        }
        return true;
    }
    if (l.has("not enough memory") && l.has("mem-fraction-static")) {
        out.kind = Observation::Kind::Oom;
        out.wording = Wording::SglangNotEnoughMemory;
        out.framework = Framework::Sglang;
        out.phase = Phase::KvCache;
        return true;
    }
    return false;
}

bool read_servers_context(const Line& l, LogContext& ctx) {
    // SGLang: "Load weight end. ... avail mem=21.73 GB, mem usage=166.59 GB."
    if (l.has("load weight end") && l.has("mem usage")) {
        ctx.weights_bytes = bytes_after(l, "mem usage");
        return true;
    }
    return false;
}

}  // namespace headroom::doctor
