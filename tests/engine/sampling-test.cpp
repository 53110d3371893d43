// Sampling against hand-computed distributions.
#include "engine/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace headroom {
namespace {

struct Row {
    std::vector<float> logits;
    std::vector<uint8_t> scratch;
    explicit Row(std::vector<float> l) : logits(std::move(l)), scratch(16 * logits.size()) {}
};

SampleResult sample_once(Sampler& s, std::vector<float> logits, std::vector<int32_t> prompt = {},
                         std::vector<int32_t> output = {}) {
    Row r(std::move(logits));
    return s.sample(r.logits, prompt, output, r.scratch.data());
}

std::map<int32_t, double> frequencies(SamplingParams p, const std::vector<float>& logits, int n) {
    p.seed = 1234;
    Sampler s(p);
    std::map<int32_t, double> f;
    for (int i = 0; i < n; ++i) f[sample_once(s, logits).token] += 1.0 / n;
    return f;
}

TEST(Sampling, GreedyTakesTheArgmax) {
    SamplingParams p;
    p.temperature = 0;
    Sampler s(p);
    EXPECT_EQ(sample_once(s, {0.1f, 2.0f, -1.0f, 1.9f}).token, 1);
}

TEST(Sampling, TemperatureOneFollowsTheSoftmax) {
    // logits ln(1), ln(2), ln(3), ln(4): probabilities 0.1, 0.2, 0.3, 0.4.
    const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
    const auto f = frequencies(SamplingParams{}, logits, 20000);
    EXPECT_NEAR(f.at(0), 0.1, 0.01);
    EXPECT_NEAR(f.at(1), 0.2, 0.012);
    EXPECT_NEAR(f.at(2), 0.3, 0.013);
    EXPECT_NEAR(f.at(3), 0.4, 0.014);
}

TEST(Sampling, TemperatureSharpens) {
    // T = 0.5 squares the probabilities: 1, 4, 9, 16 over 30.
    SamplingParams p;
    p.temperature = 0.5f;
    const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
    const auto f = frequencies(p, logits, 20000);
    EXPECT_NEAR(f.at(3), 16.0 / 30, 0.015);
    EXPECT_NEAR(f.at(0), 1.0 / 30, 0.006);
}

TEST(Sampling, TopKTopPAndMinPCutTheTail) {
    const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
    SamplingParams k;
    k.top_k = 2;  // tokens 3 and 2, renormalized: 4/7 and 3/7
    auto f = frequencies(k, logits, 20000);
    EXPECT_EQ(f.count(0) + f.count(1), 0u);
    EXPECT_NEAR(f.at(3), 4.0 / 7, 0.015);
    SamplingParams p;
    p.top_p = 0.65f;  // 0.4 + 0.3 = 0.7 >= 0.65: tokens 3 and 2
    f = frequencies(p, logits, 5000);
    EXPECT_EQ(f.count(0) + f.count(1), 0u);
    SamplingParams m;
    m.min_p = 0.6f;  // keep p >= 0.6 * 0.4 = 0.24: tokens 2 and 3
    f = frequencies(m, logits, 5000);
    EXPECT_EQ(f.count(0) + f.count(1), 0u);
    EXPECT_EQ(f.size(), 2u);
}

TEST(Sampling, TopPKeepsAsManyCandidatesAsItsMassNeeds) {
    // 4096 tokens: token i has weight 2 for i < 1000, else 1. Total mass
    // 2000 + 3096 = 5096; top_p 0.6 (3057.6) keeps the 1000 heavy tokens
    // (2000) and the first 1058 light ones by index (the tie order), 2058
    // tokens: far more than one sorted head of candidates.
    std::vector<float> logits(4096, 0.0f);
    for (int i = 0; i < 1000; ++i) logits[i] = std::log(2.0f);
    SamplingParams p;
    p.top_p = 0.6f;
    const auto f = frequencies(p, logits, 20000);
    int32_t hi = 0;
    double heavy = 0;
    for (const auto& [token, freq] : f) {
        hi = std::max(hi, token);
        if (token < 1000) heavy += freq;
    }
    EXPECT_LT(hi, 2058);
    EXPECT_GT(hi, 2000);                       // the tail of the kept set is drawn too
    EXPECT_NEAR(heavy, 2000.0 / 3058, 0.015);  // kept mass 2000 + 1058
}

TEST(Sampling, SameSeedSameTokens) {
    SamplingParams p;
    p.seed = 99;
    Sampler a(p), b(p);
    const std::vector<float> logits(50, 0.0f);
    for (int i = 0; i < 100; ++i)
        ASSERT_EQ(sample_once(a, logits).token, sample_once(b, logits).token);
}

TEST(Sampling, PenaltiesFollowTheirDefinitions) {
    SamplingParams p;
    p.temperature = 0;
    p.repetition_penalty = 2.0f;
    Sampler s(p);
    Row r({4.0f, -2.0f, 3.0f, 1.0f});
    // Token 0 (positive) is divided, token 1 (negative) multiplied; each once
    // however often it occurs.
    const std::vector<int32_t> prompt = {0, 1, 1};
    s.sample(r.logits, prompt, {}, r.scratch.data());
    EXPECT_FLOAT_EQ(r.logits[0], 2.0f);
    EXPECT_FLOAT_EQ(r.logits[1], -4.0f);
    EXPECT_FLOAT_EQ(r.logits[2], 3.0f);

    SamplingParams q;
    q.temperature = 0;
    q.presence_penalty = 0.5f;
    q.frequency_penalty = 0.25f;
    Sampler t(q);
    Row r2({1.0f, 1.0f, 1.0f});
    const std::vector<int32_t> output = {2, 2, 2, 0};
    EXPECT_EQ(t.sample(r2.logits, {}, output, r2.scratch.data()).token, 1);
    EXPECT_FLOAT_EQ(r2.logits[2], 1.0f - 0.5f - 3 * 0.25f);
    EXPECT_FLOAT_EQ(r2.logits[0], 1.0f - 0.5f - 0.25f);
}

TEST(Sampling, LogprobsAreOfTheRawDistribution) {
    SamplingParams p;
    p.temperature = 0;
    p.logprobs = true;
    p.n_logprobs = 2;
    p.repetition_penalty = 3.0f;  // must not change the reported logprobs
    Sampler s(p);
    const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
    const auto r = sample_once(s, logits, {3});
    // Token 3's logit becomes ln(4)/3 ≈ 0.46 < ln(3): greedy picks token 2.
    EXPECT_EQ(r.token, 2);
    EXPECT_NEAR(r.logprob, std::log(0.3), 1e-5);
    ASSERT_EQ(r.top.size(), 2u);
    EXPECT_EQ(r.top[0].token, 3);
    EXPECT_NEAR(r.top[0].logprob, std::log(0.4), 1e-5);
    EXPECT_EQ(r.top[1].token, 2);
}

TEST(Sampling, ValidateNamesTheBadField) {
    SamplingParams p;
    p.top_p = 0;
    EXPECT_NE(p.validate().find("top_p"), std::string::npos);
    p = SamplingParams{};
    p.temperature = -1;
    EXPECT_NE(p.validate().find("temperature"), std::string::npos);
    EXPECT_EQ(SamplingParams{}.validate(), "");
}

}  // namespace
}  // namespace headroom
