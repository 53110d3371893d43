// A request as the engine holds it, and the channel its events go through:
// the engine thread pushes each choice's events, any one reader (an HTTP
// thread, run's loop) takes them with next(). Everything else in Request is
// engine-thread state, read and written only by the engine (a friend).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/grammar.h"
#include "engine/metrics.h"
#include "engine/sampling.h"
#include "engine/sequence.h"
#include "tokenizer/tokenizer.h"

namespace headroom {

struct GenerateRequest {
    std::vector<int32_t> prompt;
    SamplingParams params;
    bool render_special = false;  // control tokens in the output render their text
    ChoiceParams choices;         // n, best_of or beam search
    // The output must follow this grammar (response_format, tools); null: free.
    std::shared_ptr<const CompiledGrammar> grammar;
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

// How an embedding pools a sequence's final hidden states.
enum class Pooling { Mean, Cls, Last };

// One embedding asked of the engine: the engine thread computes it between
// steps (the input's KV blocks are taken and given back at once), any one
// reader waits for it.
class Embedding {
  public:
    // Waits up to `timeout`; true once done (then vector() or error() holds it).
    bool wait(std::chrono::milliseconds timeout);
    const std::vector<float>& vector() const { return vector_; }  // (n_embd), not normalized
    const std::string& error() const { return error_; }

  private:
    friend class Engine;
    void finish(std::vector<float> v, std::string error);
    std::vector<int32_t> tokens_;
    Pooling pooling_ = Pooling::Mean;
    std::vector<float> vector_;
    std::string error_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
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
        std::unique_ptr<GrammarState> grammar;  // constrained output only
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
    std::chrono::steady_clock::time_point t_arrival_, t_last_token_, t_first_token_;
    bool first_token_seen_ = false;
};

}  // namespace headroom
