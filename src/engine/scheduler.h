// The scheduler decides; it runs nothing. Each step it picks which
// sequences run and how many of their tokens, under three limits:
// max_num_batched_tokens per step, max_num_seqs running, and the KV pool.
// It works on groups (engine/sequence.h): every member of a group is
// running or none is.
//
//   1. Running groups first, oldest first: each member gets its next chunk
//      (one token when decoding, up to the token budget when prefilling).
//      When a group needs KV blocks and not enough are free, the newest
//      running group is preempted: its blocks are freed (cached ones stay
//      findable), it goes back to the front of the queue and is recomputed
//      later (a group: its common prefix once, then each member's tail).
//      If it is the only one, it preempts itself.
//   2. If nothing was preempted, waiting groups are admitted in arrival
//      order while seats, token budget and blocks last; an admitted group's
//      leader first attaches its prompt's cached prefix. The head of the
//      queue is never skipped (no starvation of long prompts).
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
    std::vector<SeqGroup*> preempted;
    uint32_t n_tokens = 0;
    bool empty() const { return seqs.empty(); }
};

class Scheduler {
  public:
    Scheduler(KvCache& cache, const SchedulerConfig& config);

    const SchedulerConfig& config() const { return config_; }
    // "" if a request of n_prompt tokens can ever run, else why not, with the numbers.
    std::string check_admissible(uint32_t n_prompt) const;
    // The same for a request of n_candidates samples or beams of up to
    // n_total tokens each: seats, and the blocks of the whole group.
    std::string check_admissible(uint32_t n_prompt, uint32_t n_total, uint32_t n_candidates) const;

    // Queues a group (state Waiting, no KV). Its members are seqs; n_seats at
    // least seqs.size().
    void add(SeqGroup* group);
    // Decides the next step and grows the KV of every scheduled sequence for
    // its tokens. The result is valid until the next call.
    const SchedulerOutput& schedule();
    // Removes a running or waiting group and frees every member's blocks.
    void remove(SeqGroup* group);

    // Between steps, for the engine: a new member of a running group that
    // shares every block of `parent` (child has no KV yet; its tokens are
    // the caller's), or one member leaving (its own blocks freed).
    void fork(Sequence* parent, Sequence* child);
    void remove_member(Sequence* seq);

    // Running sequences (members of running groups) and waiting groups.
    size_t n_running() const;
    size_t n_waiting() const { return waiting_.size(); }
    uint64_t n_preemptions() const { return n_preemptions_; }
    const std::vector<SeqGroup*>& running() const { return running_; }
    const std::deque<SeqGroup*>& waiting() const { return waiting_; }

  private:
    void preempt(SeqGroup* group);
    // Chunks for every member of `group` within `budget`, into chunk_ (one
    // entry per member, 0 for a member that runs nothing); forks members
    // whose shared prefix the leader has computed. Returns the tokens.
    uint32_t plan_chunks(SeqGroup* group, uint32_t budget);
    // True if the pools hold the blocks chunk_ needs (after sliding windows).
    bool chunks_fit(SeqGroup* group);
    // Grows every member by its chunk and appends to out_.
    void commit_chunks(SeqGroup* group);
    uint32_t seats_taken() const;

    KvCache& cache_;
    SchedulerConfig config_;
    // Oldest first; capacity reserved (so are next_running_ and out_), so a
    // step without arrivals allocates nothing.
    std::vector<SeqGroup*> running_;
    std::deque<SeqGroup*> waiting_;  // front runs next
    SchedulerOutput out_;
    std::vector<SeqGroup*> next_running_;
    std::vector<uint32_t> chunk_;  // per member of the group being scheduled
    uint64_t n_preemptions_ = 0;
};

}  // namespace headroom
