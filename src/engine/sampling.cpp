#include "engine/sampling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace headroom {

std::string SamplingParams::validate() const {
    if (!(temperature >= 0) || temperature > 100)
        return fmt::format("temperature {} must be in [0, 100]", temperature);
    if (top_k < 0) return fmt::format("top_k {} must be >= 0 (0 turns it off)", top_k);
    if (!(top_p > 0) || top_p > 1) return fmt::format("top_p {} must be in (0, 1]", top_p);
    if (!(min_p >= 0) || min_p > 1) return fmt::format("min_p {} must be in [0, 1]", min_p);
    if (!(repetition_penalty > 0) || repetition_penalty > 100)
        return fmt::format("repetition_penalty {} must be in (0, 100]", repetition_penalty);
    if (!(presence_penalty >= -2) || presence_penalty > 2)
        return fmt::format("presence_penalty {} must be in [-2, 2]", presence_penalty);
    if (!(frequency_penalty >= -2) || frequency_penalty > 2)
        return fmt::format("frequency_penalty {} must be in [-2, 2]", frequency_penalty);
    if (n_logprobs > 20) return fmt::format("top_logprobs {} must be at most 20", n_logprobs);
    for (const auto& [token, bias] : logit_bias)
        if (!(bias >= -100) || bias > 100)
            return fmt::format("logit_bias of token {} is {}; it must be in [-100, 100]", token,
                               bias);
    return "";
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
    rng_.seed(params.seed ? *params.seed : std::random_device{}());
}

namespace {

// log(sum(exp(x))) and the max, over a row.
double log_sum_exp(std::span<const float> x, float* max_out) {
    float mx = -std::numeric_limits<float>::infinity();
    for (float v : x) mx = std::max(mx, v);
    double sum = 0;
    for (float v : x) sum += std::exp(static_cast<double>(v - mx));
    *max_out = mx;
    return std::log(sum) + mx;
}

// The k most likely tokens of the model's own distribution (raw_lse: its
// log-sum-exp), by log-probability. index: (n_vocab) scratch.
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, double raw_lse, int k,
                                       int32_t* index) {
    const auto n_vocab = static_cast<int32_t>(logits.size());
    for (int32_t i = 0; i < n_vocab; ++i) index[i] = i;
    k = std::min<int32_t>(k, n_vocab);
    std::partial_sort(index, index + k, index + n_vocab,
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    std::vector<TokenLogprob> top;
    top.reserve(static_cast<size_t>(k));
    for (int32_t i = 0; i < k; ++i)
        top.push_back({index[i], static_cast<float>(logits[index[i]] - raw_lse)});
    return top;
}

int32_t argmax(std::span<const float> logits) {
    int32_t best = 0;
    for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i)
        if (logits[i] > logits[best]) best = i;
    return best;
}

// Top-k, then top-p, over the candidates index[0, n) (all of the
// vocabulary at first), with their softmax at the temperature written to
// probs[0, n). Returns the new n.
int32_t keep_likely(std::span<const float> logits, const SamplingParams& params, int32_t* index,
                    float* probs) {
    const auto n_vocab = static_cast<int32_t>(logits.size());
    int32_t n = n_vocab;
    for (int32_t i = 0; i < n_vocab; ++i) index[i] = i;
    const auto by_logit = [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    if (params.top_k > 0 && params.top_k < n) {
        std::nth_element(index, index + params.top_k - 1, index + n, by_logit);
        n = params.top_k;
    }
    float mx = -std::numeric_limits<float>::infinity();
    for (int32_t i = 0; i < n; ++i) mx = std::max(mx, logits[index[i]]);
    // Softmax over the candidates: weight e^((l - mx) / T), normalized by their sum.
    const auto weight = [&](int32_t token) {
        return std::exp((logits[token] - mx) / params.temperature);
    };
    double sum = 0;
    for (int32_t i = 0; i < n; ++i) sum += weight(index[i]);
    if (params.top_p < 1.0f) {
        // Top-p keeps the most likely candidates whose mass reaches top_p.
        // They are few: sort a head of the candidates, four times longer each
        // time it falls short, instead of all of them.
        int32_t head = std::min<int32_t>(n, 64);
        for (;;) {
            if (head < n) std::nth_element(index, index + head - 1, index + n, by_logit);
            std::sort(index, index + head, by_logit);
            double cum = 0;
            int32_t keep = 0;
            for (int32_t i = 0; i < head && !keep; ++i) {
                cum += static_cast<float>(weight(index[i]) / sum);
                if (cum >= params.top_p) keep = i + 1;
            }
            if (keep || head == n) {
                if (keep) n = keep;
                break;
            }
            head = static_cast<int32_t>(std::min<int64_t>(n, int64_t{head} * 4));
        }
    }
    for (int32_t i = 0; i < n; ++i) probs[i] = static_cast<float>(weight(index[i]) / sum);
    return n;
}

// Min-p drops the candidates less likely than min_p times the most likely
// one, in place. Returns the new n.
int32_t keep_above_min_p(float min_p, int32_t n, int32_t* index, float* probs) {
    float p_max = 0;
    for (int32_t i = 0; i < n; ++i) p_max = std::max(p_max, probs[i]);
    const float floor = min_p * p_max;
    int32_t w = 0;
    for (int32_t i = 0; i < n; ++i) {
        if (probs[i] >= floor) {
            probs[w] = probs[i];
            index[w] = index[i];
            ++w;
        }
    }
    return w;
}

// One candidate of index[0, n), drawn with the (unnormalized) weights probs.
int32_t draw(int32_t n, const int32_t* index, const float* probs, std::mt19937_64& rng) {
    double total = 0;
    for (int32_t i = 0; i < n; ++i) total += probs[i];
    const double r = std::uniform_real_distribution<double>(0.0, total)(rng);
    double cum = 0;
    for (int32_t i = 0; i < n; ++i) {
        cum += probs[i];
        if (r < cum) return index[i];
    }
    return index[n - 1];
}

}  // namespace

void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> prompt,
                              std::span<const int32_t> output, uint32_t* mark) {
    const auto n_vocab = static_cast<int32_t>(logits.size());
    // `mark` tells the first occurrence of a token (epoch-stamped, so the
    // array needs no clearing between calls).
    if (++mark_epoch_ == 0) {
        std::fill(mark, mark + n_vocab, 0u);
        mark_epoch_ = 1;
    }
    const uint32_t seen_output = mark_epoch_;
    if (++mark_epoch_ == 0) mark_epoch_ = 1;
    const uint32_t seen_any = mark_epoch_;
    for (int32_t t : output) {
        if (t < 0 || t >= n_vocab) continue;
        logits[t] -= params_.frequency_penalty;
        if (mark[t] != seen_output) {
            logits[t] -= params_.presence_penalty;
            mark[t] = seen_output;
        }
    }
    if (params_.repetition_penalty != 1.0f) {
        auto penalize = [&](int32_t t) {
            if (t < 0 || t >= n_vocab || mark[t] == seen_any) return;
            mark[t] = seen_any;
            logits[t] = logits[t] > 0 ? logits[t] / params_.repetition_penalty
                                      : logits[t] * params_.repetition_penalty;
        };
        for (int32_t t : prompt) penalize(t);
        for (int32_t t : output) penalize(t);
    }
}

SampleResult Sampler::sample(std::span<float> logits, std::span<const int32_t> prompt,
                             std::span<const int32_t> output, uint8_t* scratch) {
    auto* probs = reinterpret_cast<float*>(scratch);                        // (n_vocab)
    auto* index = reinterpret_cast<int32_t*>(scratch + 4 * logits.size());  // (n_vocab)
    auto* mark = reinterpret_cast<uint32_t*>(scratch + 8 * logits.size());  // (n_vocab)
    auto* raw = reinterpret_cast<float*>(scratch + 12 * logits.size());     // (n_vocab)
    SampleResult result;

    // Logprobs are of the model's own distribution, before penalties.
    const bool logprobs = params_.logprobs || params_.n_logprobs;
    float raw_max = 0;
    const double raw_lse = logprobs ? log_sum_exp(logits, &raw_max) : 0.0;
    if (params_.n_logprobs)
        result.top = top_logprobs(logits, raw_lse, static_cast<int>(params_.n_logprobs), index);
    const bool penalties = params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                           params_.frequency_penalty != 0.0f;
    // Keep the raw logits when penalties will change them and logprobs are asked for.
    const bool keep_raw = penalties && logprobs;
    if (keep_raw) std::copy(logits.begin(), logits.end(), raw);
    if (penalties) apply_penalties(logits, prompt, output, mark);

    if (params_.temperature < 1e-5f) {
        result.token = argmax(logits);
    } else {
        int32_t n = keep_likely(logits, params_, index, probs);
        if (params_.min_p > 0) n = keep_above_min_p(params_.min_p, n, index, probs);
        result.token = draw(n, index, probs, rng_);
    }
    if (logprobs)
        result.logprob =
            static_cast<float>((keep_raw ? raw[result.token] : logits[result.token]) - raw_lse);
    return result;
}

}  // namespace headroom
