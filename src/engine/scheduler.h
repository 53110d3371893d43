// The scheduler decides; it runs nothing. Each step it picks which
// sequences run and how many of their tokens, under three limits:
// max_num_batched_tokens per step, max_num_seqs running, and the KV pool.
//
//   1. Running sequences first, oldest first: each gets its next chunk
//      (one token when decoding, up to the token budget when prefilling).
//      When one needs a KV block and none is free, the newest running
//      sequence is preempted: its blocks are freed (cached ones stay
//      findable), it goes back to the front of the queue and is recomputed
//      later. If it is the only one, it preempts itself.
//   2. If nothing was preempted, waiting sequences are admitted in arrival
//      order while seats, token budget and blocks last; an admitted sequence
//      first attaches its prompt's cached prefix. The head of the queue is
//      never skipped (no starvation of long prompts).
// "KV full" is an outcome here, never an error.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "engine/sequence.h"
#include "memory/kv-cache.h"

namespace headroom {

struct SchedulerConfig {
    uint32_t max_num_seqs = 1;
    uint32_t max_num_batched_tokens = 512;
    uint32_t max_model_len = 2048;
};

struct ScheduledSeq {
    Sequence* seq = nullptr;
    uint32_t first = 0;     // first token index computed this step
    uint32_t n_tokens = 0;  // tokens [first, first + n_tokens)
    bool sample = false;    // the chunk reaches the end: sample the next token
};

struct SchedulerOutput {
    std::vector<ScheduledSeq> seqs;
    std::vector<Sequence*> preempted;
    uint32_t n_tokens = 0;
    bool empty() const { return seqs.empty(); }
};

class Scheduler {
  public:
    Scheduler(KvCache& cache, const SchedulerConfig& config);

    const SchedulerConfig& config() const { return config_; }
    // "" if a request of n_prompt tokens can ever run, else why not, with the numbers.
    std::string check_admissible(uint32_t n_prompt) const;

    // Queues a sequence (state Waiting, no KV).
    void add(Sequence* seq);
    // Decides the next step and grows the KV of every scheduled sequence for
    // its tokens. The result is valid until the next call.
    const SchedulerOutput& schedule();
    // Removes a running or waiting sequence and frees its blocks.
    void remove(Sequence* seq);

    size_t n_running() const { return running_.size(); }
    size_t n_waiting() const { return waiting_.size(); }
    uint64_t n_preemptions() const { return n_preemptions_; }
    const std::vector<Sequence*>& running() const { return running_; }
    const std::deque<Sequence*>& waiting() const { return waiting_; }

  private:
    void preempt(Sequence* seq);

    KvCache& cache_;
    SchedulerConfig config_;
    // Oldest first; at most max_num_seqs, capacity reserved (so are
    // next_running_ and out_), so a step without arrivals allocates nothing.
    std::vector<Sequence*> running_;
    std::deque<Sequence*> waiting_;  // front runs next
    SchedulerOutput out_;
    std::vector<Sequence*> next_running_;
    uint64_t n_preemptions_ = 0;
};

}  // namespace headroom
