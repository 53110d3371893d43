// Turning one row of logits into the next token. Order of operations, as
// vLLM and llama.cpp apply them:
//   1. penalties: repetition (prompt and output tokens: logit / r if
//      positive, × r if negative), presence (−p once per token present in
//      the output) and frequency (−f × count in the output);
//   2. temperature 0 → greedy argmax;
//   3. logits / temperature, then top-k, softmax, top-p, min-p;
//   4. draw from what is left with the request's own generator (a fixed
//      seed gives the same tokens every time).
// Scratch comes from the activation arena: sampling allocates nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace headroom {

struct SamplingParams {
    float temperature = 1.0f;
    int32_t top_k = 0;   // 0: off
    float top_p = 1.0f;  // 1: off
    float min_p = 0.0f;  // 0: off
    float repetition_penalty = 1.0f;
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    std::optional<uint64_t> seed;
    uint32_t max_tokens = 256;
    std::vector<std::string> stop;        // stop strings (not included in the output)
    std::vector<int32_t> stop_token_ids;  // in addition to the model's end-of-generation tokens
    bool ignore_eos = false;
    uint32_t n_logprobs = 0;  // top alternatives to report per token (0: none)
    bool logprobs = false;    // report the chosen token's logprob
    // Added to the logits of these tokens before anything else (OpenAI's
    // logit_bias: -100 bans a token, 100 all but forces it).
    std::vector<std::pair<int32_t, float>> logit_bias;

    // Returns an error message for out-of-range values, or "".
    std::string validate() const;
};

// Several answers for one prompt, computed once and shared (KvCache::fork).
// Beam search: the n best of beam_width beams by cumulative logprob /
// output_length^length_penalty; deterministic; of the sampling parameters
// only max_tokens, stop_token_ids and ignore_eos apply. early_stopping ends
// it as soon as beam_width beams finished, else when no live beam can beat
// the finished ones.
struct ChoiceParams {
    uint32_t n = 1;        // choices returned
    uint32_t best_of = 0;  // samples drawn (0: n); the n of highest cumulative logprob return
    bool beam_search = false;
    uint32_t beam_width = 0;  // 0: n
    float length_penalty = 1.0f;
    bool early_stopping = false;
};

struct TokenLogprob {
    int32_t token = 0;
    float logprob = 0;
};

struct SampleResult {
    int32_t token = 0;
    float logprob = 0;              // of the chosen token under the model's distribution
    std::vector<TokenLogprob> top;  // n_logprobs best alternatives (allocated only when asked)
};

// Per-sequence sampling state: the generator.
class Sampler {
  public:
    explicit Sampler(const SamplingParams& params);

    // logits: (n_vocab), modified in place by penalties. prompt/output: the
    // sequence's tokens so far. scratch: 16 × n_vocab bytes.
    SampleResult sample(std::span<float> logits, std::span<const int32_t> prompt,
                        std::span<const int32_t> output, uint8_t* scratch);

  private:
    // Repetition, presence and frequency penalties on logits, in place.
    // mark: (n_vocab) scratch.
    void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt,
                         std::span<const int32_t> output, uint32_t* mark);

    SamplingParams params_;
    std::mt19937_64 rng_;
    uint32_t mark_epoch_ = 0;
};

}  // namespace headroom
