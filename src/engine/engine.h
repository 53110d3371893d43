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
#include "engine/runner.h"
#include "engine/sampling.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/snapshot.h"
#include "tokenizer/tokenizer.h"

namespace headroom {

struct GenerateRequest {
    std::vector<int32_t> prompt;
    SamplingParams params;
    bool render_special = false;  // control tokens in the output render their text
    ChoiceParams choices;         // n, best_of or beam search
};

// One streamed step of a request's output: of choice `index`. Each choice
// ends with one event whose finish is set.
struct TokenEvent {
    uint32_t index = 0;  // the choice (0..n-1)
    std::string text;    // output text made final by this event
    int32_t token = -1;  // the token this event carries; -1 for a closing event without one
    float logprob = 0;
    std::vector<TokenLogprob> top_logprobs;
    FinishReason finish = FinishReason::None;  // set on the last event
};

// A submitted request: the engine thread fills it, any one reader drains it.
class Request {
  public:
    uint64_t id() const { return id_; }
    // Waits up to `timeout` for the next event; false on timeout or when
    // every event has been taken after the request finished.
    bool next(TokenEvent& event, std::chrono::milliseconds timeout);
    bool finished() const;
    uint32_t n_prompt_tokens() const { return n_prompt_; }
    uint32_t n_choices() const { return n_choices_; }
    // Prompt tokens computed or found in the prefix cache so far (progress
    // of a long prompt; readable while the request runs).
    uint32_t n_prompt_done() const { return n_prompt_done_.load(std::memory_order_relaxed); }
    // Read after the request finished:
    uint32_t n_cached_tokens() const { return n_cached_.load(); }
    // Output tokens of the returned choices, summed.
    uint32_t n_output_tokens() const { return n_output_.load(); }
    FinishReason finish_reason() const { return finish_.load(); }  // of choice 0
    // KV blocks of this request at its peak: blocks it held, and the table
    // entries beyond those (what its members shared instead of copying).
    uint32_t n_kv_blocks_peak() const { return n_blocks_peak_.load(); }
    uint32_t n_kv_blocks_shared_peak() const { return n_shared_peak_.load(); }

  private:
    friend class Engine;
    void push(TokenEvent event);

    // One sample or beam (engine-thread state).
    struct Candidate {
        Sequence seq;
        std::unique_ptr<Sampler> sampler;  // samples only
        std::unique_ptr<StreamDecoder> decoder;
        std::string text;      // output text not yet sent (held back: it may start a stop string)
        size_t n_emitted = 0;  // bytes of text already sent (0 but at the end)
        double cum_logprob = 0;
        FinishReason finish = FinishReason::None;
        bool live = false;               // a member of the group now
        std::vector<TokenEvent> held;    // best_of > n: events kept until the best are known
        std::vector<TokenLogprob> next;  // beams: the best continuations of the last logits
        bool has_next = false;
    };
    // A finished beam.
    struct Hypothesis {
        std::vector<int32_t> output;  // without the token that ended it
        double score = 0;
        uint32_t n_tokens = 0;  // generated, the ending token included
        FinishReason reason = FinishReason::None;
    };

    uint64_t id_ = 0;
    uint32_t n_prompt_ = 0;
    uint32_t n_choices_ = 1;
    uint32_t n_closed_ = 0;  // choices whose last event was pushed (under mu_)
    std::atomic<uint32_t> n_cached_{0};
    std::atomic<uint32_t> n_prompt_done_{0};
    std::atomic<uint32_t> n_output_{0};
    std::atomic<FinishReason> finish_{FinishReason::None};
    std::atomic<uint32_t> n_blocks_peak_{0};
    std::atomic<uint32_t> n_shared_peak_{0};
    mutable std::mutex mu_;
    std::condition_variable cv_;
    // Events not yet taken are events_[head_, size): a vector whose
    // capacity stays, so a reader that keeps up costs no allocation.
    std::vector<TokenEvent> events_;
    size_t head_ = 0;
    bool done_ = false;  // every choice's closing event was pushed

    // Engine-thread state.
    SeqGroup group_;
    std::vector<Candidate> cands_;  // fixed size: best_of, n or beam_width
    SamplingParams params_;
    bool render_special_ = false;
    bool hold_ = false;  // best_of > n: choices are chosen at the end
    bool beam_ = false;
    bool forked_ = false;   // the candidates were forked from the leader
    bool in_step_ = false;  // listed in the engine's beam requests of this step
    float length_penalty_ = 1.0f;
    bool early_stopping_ = false;
    std::vector<Hypothesis> hyps_;
    size_t max_stop_bytes_ = 0;
    std::chrono::steady_clock::time_point t_arrival_, t_last_token_, t_first_token_;
    bool first_token_seen_ = false;
};

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
    void run_step(const SchedulerOutput& out);
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
    void finish_candidate(Request& r, Request::Candidate& c, FinishReason reason);
    void finish_beams(Request& r);
    // Every open choice closes with `reason` (abort).
    void finish(Request& r, FinishReason reason);
    void complete(Request& r, FinishReason reason);
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
    std::vector<int32_t> block_scratch_;   // count_sharing

    mutable std::mutex inbox_mu_;
    std::condition_variable inbox_cv_;
    std::vector<std::shared_ptr<Request>> inbox_;
    std::vector<uint64_t> cancels_;
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
