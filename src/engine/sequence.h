// A sequence as the scheduler sees it: its tokens (prompt, then output), how
// far its KV is computed (kv.n_tokens), and where it is in the queues.
// Sampling state, the output channel and timing live with the engine's
// request, not here, so the scheduler can be tested without a model.
//
// Sequences run in groups: the samples (n, best_of) or beams of one request
// are one group, a plain request is a group of one. Members share their
// common blocks (KvCache::fork) and the scheduler admits, preempts and
// resumes a group as a whole, so memory pressure never leaves half of one
// running.
#pragma once

#include <cstdint>
#include <vector>

#include "memory/kv-cache.h"

namespace headroom {

enum class SeqState { Waiting, Running, Finished };

struct SeqGroup;

struct Sequence {
    uint64_t id = 0;
    uint32_t index = 0;           // the member's slot in its request (the choice it may become)
    std::vector<int32_t> tokens;  // prompt then output; capacity reserved for max_total
    uint32_t n_prompt = 0;
    uint32_t max_total = 0;  // finish ("length") when tokens.size() reaches it
    SeqKv kv;                // kv.n_tokens: tokens whose K/V are computed
    SeqState state = SeqState::Waiting;
    SeqGroup* group = nullptr;
    uint32_t n_preemptions = 0;
    uint32_t n_cached_prompt = 0;  // prompt tokens found in the prefix cache at first admission
    bool admitted_once = false;

    uint32_t n_computed() const { return kv.n_tokens; }
    uint32_t n_uncomputed() const { return static_cast<uint32_t>(tokens.size()) - kv.n_tokens; }
    uint32_t n_output() const { return static_cast<uint32_t>(tokens.size()) - n_prompt; }
};

struct SeqGroup {
    uint64_t id = 0;
    // Live members, seqs[0] the leader. A request starts with its leader
    // alone; the engine forks the others from it once the prompt is computed.
    std::vector<Sequence*> seqs;
    // Seats the group takes among max_num_seqs: the members it will have at
    // most (its samples or beams), so it never waits for seats once admitted.
    uint32_t n_seats = 1;
    // After a preemption of several members: the leader alone computes
    // tokens [0, n_shared) (the members' common prefix), then the others
    // fork from it and compute only their own tails.
    uint32_t n_shared = 0;
    SeqState state = SeqState::Waiting;
};

}  // namespace headroom
