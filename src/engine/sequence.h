// A sequence as the scheduler sees it: its tokens (prompt, then output), how
// far its KV is computed (kv.n_tokens), and where it is in the queues.
// Sampling state, the output channel and timing live with the engine's
// request, not here, so the scheduler can be tested without a model.
#pragma once

#include <cstdint>
#include <vector>

#include "memory/kv-cache.h"

namespace headroom {

enum class SeqState { Waiting, Running, Finished };

struct Sequence {
    uint64_t id = 0;
    std::vector<int32_t> tokens;  // prompt then output; capacity reserved for max_total
    uint32_t n_prompt = 0;
    uint32_t max_total = 0;  // finish ("length") when tokens.size() reaches it
    SeqKv kv;                // kv.n_tokens: tokens whose K/V are computed
    SeqState state = SeqState::Waiting;
    uint32_t n_preemptions = 0;
    uint32_t n_cached_prompt = 0;  // prompt tokens found in the prefix cache at first admission
    bool admitted_once = false;

    uint32_t n_computed() const { return kv.n_tokens; }
    uint32_t n_uncomputed() const { return static_cast<uint32_t>(tokens.size()) - kv.n_tokens; }
    uint32_t n_output() const { return static_cast<uint32_t>(tokens.size()) - n_prompt; }
};

}  // namespace headroom
