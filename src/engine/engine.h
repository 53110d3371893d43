// The engine: one thread owns the scheduler, the runner and every sequence.
// Other threads only submit and cancel requests through a queue and read
// each request's events from its own channel. Each step:
//   schedule -> build one ragged batch -> forward -> sample -> stream -> free
// (the four lines of nano-vllm's step, plus stop handling). run/bench call
// step() on their own thread; serve runs the same loop on a thread of its own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/runner.h"
#include "engine/sampling.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/snapshot.h"
#include "tokenizer/tokenizer.h"

namespace headroom {

class Engine {
  public:
    Engine(Runner& runner, const Tokenizer& tokenizer, EngineMetrics& metrics);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Validates and queues a request. On refusal returns null and sets
    // *error to a message naming the numbers (prompt too long, bad
    // parameter, shutting down). Thread-safe.
    std::shared_ptr<Request> submit(GenerateRequest request, std::string* error);
    // Stops a request; its blocks are freed within one step. Thread-safe.
    void cancel(uint64_t id);
    // Queues an embedding of `tokens` (computed between steps, in chunks of
    // the step's logit rows). Refuses an empty input or one longer than
    // max_model_len. Thread-safe.
    std::shared_ptr<Embedding> embed(std::vector<int32_t> tokens, Pooling pooling,
                                     std::string* error);

    // Inline mode: takes queued submissions and cancels, runs one step.
    // Returns false if there was nothing to run.
    bool step();
    // Threaded mode.
    void start();
    // Stops accepting, lets in-flight requests finish for up to `timeout`,
    // aborts the rest, joins the thread.
    void shutdown(std::chrono::milliseconds timeout);

    size_t n_active() const;
    // False once shutdown() began: submit() refuses everything.
    bool accepting() const;
    const Scheduler& scheduler() const { return scheduler_; }
    Runner& runner() { return runner_; }
    const Tokenizer& tokenizer() const { return tokenizer_; }
    EngineMetrics& metrics() { return metrics_; }
    uint32_t max_model_len() const { return scheduler_.config().max_model_len; }
    // Block map and requests for readers on other threads (engine/snapshot.h).
    SnapshotBoard& snapshots() { return snapshots_; }

  private:
    void drain_inbox();
    // Runs the queued embeddings whose KV fits now; the others wait.
    bool run_embeddings();
    // false: the pool cannot hold it now (it waits for a later step).
    bool run_embedding(Embedding& e);
    void run_step(const SchedulerOutput& out);
    // Constrained decoding: whether a sampling row of `out` has a grammar;
    // fills those rows' masks (one per sampling row, in batch order).
    bool fill_masks_wanted(const SchedulerOutput& out) const;
    void fill_masks(const SchedulerOutput& out);
    std::span<uint32_t> mask_row(size_t row);
    // Samples candidate c from its logits row and emits the token.
    void sample_into(Request& r, Request::Candidate& c, std::span<float> logits);
    // After the prompt: forks every other candidate from the leader and
    // samples each one's first token from the same logits.
    void fan_out(Request& r, std::span<float> logits);
    // Beams: the best 2 × beam_width continuations of c's logits.
    void rank_continuations(Request& r, Request::Candidate& c, std::span<const float> logits);
    // Beams: once every live beam has its continuations, picks the next
    // beams (forking, dropping), records finished ones, ends when done.
    void beam_step(Request& r);
    void add_hypothesis(Request& r, const Request::Candidate& c, int32_t end_token, double cum,
                        FinishReason reason);
    void emit_token(Request& r, Request::Candidate& c, const SampleResult& s);
    // Closes one choice (its last event); the request when no candidate is left.
    void close_choice(Request& r, Request::Candidate& c, FinishReason reason);
    // Beams: the n best hypotheses go out as the choices; the request retires.
    void close_beams(Request& r);
    // Every open choice closes with `reason` (abort, shutdown).
    void abort_request(Request& r, FinishReason reason);
    // Counts a request whose choices are all closed in the metrics and
    // forgets it (destroyed there when no reader holds it).
    void retire_request(Request& r, FinishReason reason);
    void count_sharing(Request& r);
    void update_gauges();
    void loop();
    // Publishes a snapshot if one is wanted and the last is kSnapshotInterval
    // old (or `force`); else marks the state as not yet shown.
    void maybe_snapshot(bool force);
    std::shared_ptr<const EngineSnapshot> build_snapshot(std::chrono::steady_clock::time_point now);

    Runner& runner_;
    const Tokenizer& tokenizer_;
    EngineMetrics& metrics_;
    Scheduler scheduler_;
    Batch batch_;
    std::unordered_map<uint64_t, std::shared_ptr<Request>> active_;
    std::unordered_map<const Sequence*, Request*> by_seq_;
    std::vector<std::pair<Request*, uint32_t>> finished_this_step_;  // (request, candidate)
    std::vector<Request*> beam_requests_;  // beam requests that sampled this step
    std::vector<float> row_copy_;          // one logits row, for fan_out
    std::vector<uint32_t> masks_;          // grammar masks, one row per sampling row
    std::vector<int32_t> block_scratch_;   // count_sharing

    mutable std::mutex inbox_mu_;
    std::condition_variable inbox_cv_;
    std::vector<std::shared_ptr<Request>> inbox_;
    std::vector<uint64_t> cancels_;
    std::vector<std::shared_ptr<Embedding>> embeds_;  // guarded by inbox_mu_
    std::vector<std::shared_ptr<Embedding>> embeds_waiting_;
    Batch embed_batch_;
    std::atomic<uint64_t> next_id_{1};
    std::atomic<size_t> n_active_{0};
    bool stopping_ = false;   // guarded by inbox_mu_
    bool abort_all_ = false;  // guarded by inbox_mu_
    bool accepting_ = true;   // guarded by inbox_mu_
    std::thread thread_;

    SnapshotBoard snapshots_;
    std::chrono::steady_clock::time_point snapshot_taken_{};
    uint64_t snapshot_version_ = 0;
    bool snapshot_dirty_ = false;  // the state changed since the last snapshot
};

}  // namespace headroom
