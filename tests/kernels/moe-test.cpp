// The routing ops of a mixture-of-experts layer (kernels/moe.h) against
// values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/moe.h"

namespace headroom::kernels {
namespace {

// A route buffer for n_tokens tokens, k of n_expert experts each.
struct Route {
    std::vector<uint8_t> bytes;
    RouteArgs args;
    Route(int64_t n_tokens, uint32_t k, uint32_t n_expert)
        : bytes(route_layout(n_tokens, k, n_expert).bytes) {
        args = {bytes.data(), n_tokens, n_expert, k};
    }
};

// Token 0: logits (0, ln 3, ln 2, 0) give p = (1, 3, 2, 1) / 7: experts 1
// then 2, weights 3/7 and 2/7, or 3/5 and 2/5 renormalized. Token 1:
// logits (ln 4, 0, 0, ln 2) give p = (4, 1, 1, 2) / 8: experts 0 then 3.
TEST(Moe, SoftmaxRoutingPicksTheLargestAndWeighsThemByHand) {
    const float l3 = std::log(3.0f), l2 = std::log(2.0f), l4 = std::log(4.0f);
    const std::vector<float> logits = {0, l3, l2, 0, l4, 0, 0, l2};
    for (const bool norm : {false, true}) {
        Route r(2, 2, 4);
        route_experts(logits.data(), r.args, ExpertGating::Softmax, norm);
        const int32_t* ex = r.args.expert();
        const float* w = r.args.weight();
        EXPECT_EQ(ex[0], 1);
        EXPECT_EQ(ex[1], 2);
        EXPECT_EQ(ex[2], 0);
        EXPECT_EQ(ex[3], 3);
        EXPECT_NEAR(w[0], norm ? 3.0 / 5 : 3.0 / 7, 1e-6);
        EXPECT_NEAR(w[1], norm ? 2.0 / 5 : 2.0 / 7, 1e-6);
        EXPECT_NEAR(w[2], norm ? 4.0 / 6 : 4.0 / 8, 1e-6);
        EXPECT_NEAR(w[3], norm ? 2.0 / 6 : 2.0 / 8, 1e-6);
        // Sorted rows: expert 0 (token 1), 1 (token 0), 2 (token 0), 3 (token 1).
        const int32_t* start = r.args.start();
        const std::vector<int32_t> want_start = {0, 1, 2, 3, 4};
        EXPECT_EQ(std::vector<int32_t>(start, start + 5), want_start);
        const int32_t* token = r.args.token();
        EXPECT_EQ(std::vector<int32_t>(token, token + 4), (std::vector<int32_t>{1, 0, 0, 1}));
        const int32_t* row = r.args.row();
        EXPECT_EQ(std::vector<int32_t>(row, row + 4), (std::vector<int32_t>{1, 2, 0, 3}));
    }
}

// gpt-oss: the k largest logits (3 and 1 of (1, 3, -2)), weights softmax
// over them: e^3 / (e^3 + e^1) and e^1 / (e^3 + e^1).
TEST(Moe, SoftmaxOfTopKWeighsOnlyTheChosen) {
    const std::vector<float> logits = {1, 3, -2};
    Route r(1, 2, 3);
    route_experts(logits.data(), r.args, ExpertGating::SoftmaxOfTopK, false);
    EXPECT_EQ(r.args.expert()[0], 1);
    EXPECT_EQ(r.args.expert()[1], 0);
    const double e3 = std::exp(3.0), e1 = std::exp(1.0);
    EXPECT_NEAR(r.args.weight()[0], e3 / (e3 + e1), 1e-6);
    EXPECT_NEAR(r.args.weight()[1], e1 / (e3 + e1), 1e-6);
}

// Equal logits go to the lower expert; a NaN logit never wins; every row
// still lands on a valid expert.
TEST(Moe, TiesGoToTheLowerExpertAndNaNNeverWins) {
    const float nan = std::nanf("");
    const std::vector<float> logits = {2, 5, 5, 5, nan, 1, 0, 7};
    Route r(2, 2, 4);
    route_experts(logits.data(), r.args, ExpertGating::SoftmaxOfTopK, false);
    EXPECT_EQ(r.args.expert()[0], 1);
    EXPECT_EQ(r.args.expert()[1], 2);
    EXPECT_EQ(r.args.expert()[2], 3);
    EXPECT_EQ(r.args.expert()[3], 1);
    EXPECT_EQ(r.args.start()[4], 4);
}

// Three tokens of two columns, each to 2 of 3 experts: gather copies each
// token's row to its sorted rows; combine sums the rows back by weight.
TEST(Moe, GatherAndCombineFollowTheSortedOrder) {
    Route r(3, 2, 3);
    // Token 0: experts 2, 0; token 1: 0, 1; token 2: 1, 2 (weights as given).
    const std::vector<float> logits = {5, 0, 9, 9, 5, 0, 0, 9, 5};
    route_experts(logits.data(), r.args, ExpertGating::SoftmaxOfTopK, false);
    ASSERT_EQ(std::vector<int32_t>(r.args.expert(), r.args.expert() + 6),
              (std::vector<int32_t>{2, 0, 0, 1, 1, 2}));
    // Sorted: expert 0 has tokens 0, 1; expert 1 tokens 1, 2; expert 2 tokens 0, 2.
    const std::vector<float> x = {1, 2, 3, 4, 5, 6};
    std::vector<float> xs(12, -1);
    gather_routed(x.data(), 2, r.args, xs.data());
    EXPECT_EQ(xs, (std::vector<float>{1, 2, 3, 4, 3, 4, 5, 6, 1, 2, 5, 6}));
    // Experts' outputs: row i holds (10 i, 10 i + 1).
    std::vector<float> ys(12);
    for (int i = 0; i < 6; ++i) ys[2 * i] = 10.0f * i, ys[2 * i + 1] = 10.0f * i + 1;
    const float* w = r.args.weight();  // (a, 1 - a) for every token: the same gaps
    std::vector<float> out(6, -1);
    combine_routed(ys.data(), 2, r.args, out.data());
    // Token 0: w0 · row 4 (expert 2) + w1 · row 0 (expert 0).
    EXPECT_NEAR(out[0], w[0] * 40 + w[1] * 0, 1e-5);
    EXPECT_NEAR(out[1], w[0] * 41 + w[1] * 1, 1e-5);
    // Token 1: w0 · row 1 (expert 0) + w1 · row 2 (expert 1).
    EXPECT_NEAR(out[2], w[2] * 10 + w[3] * 20, 1e-5);
    // Token 2: w0 · row 3 (expert 1) + w1 · row 5 (expert 2).
    EXPECT_NEAR(out[5], w[4] * 31 + w[5] * 51, 1e-5);
    EXPECT_NEAR(w[0], 1 / (1 + std::exp(-4.0)), 1e-6);
}

// Token 0 to experts 1 and 2, token 1 to experts 0 and 1: sorted rows are
// (expert 0: token 1), (expert 1: tokens 0, 1), (expert 2: token 0), and
// each gets its own expert's bias.
TEST(Moe, ExpertBiasesFollowEachRowsExpert) {
    Route r(2, 2, 3);
    const std::vector<float> logits = {0, 2, 1, 2, 1, 0};
    route_experts(logits.data(), r.args, ExpertGating::Softmax, true);
    std::vector<float> y(4 * 2, 0.0f);                         // (T×k, n_cols = 2)
    const std::vector<float> bias = {1, 2, 10, 20, 100, 200};  // (3 experts, 2)
    add_expert_bias(y.data(), bias.data(), 2, r.args);
    EXPECT_EQ(y, (std::vector<float>{1, 2, 10, 20, 10, 20, 100, 200}));
}

// g = min(gate, 7), u = clamp(up, -7, 7), out = g sigmoid(1.702 g) (u + 1):
// gate 0 gives 0; gate 9 is clamped to 7 (sigmoid(11.914) = 0.99999330);
// up -9 is clamped to -7, so (u + 1) = -6; gate -1 gives -sigmoid(-1.702)
// = -0.154204 times (0.5 + 1).
TEST(Moe, ClampedSwigluByHand) {
    std::vector<float> gate = {0.0f, 9.0f, 7.0f, -1.0f, 9.0f};
    const std::vector<float> up = {3.0f, 0.0f, -9.0f, 0.5f, 9.0f};
    swiglu_oai(gate.data(), up.data(), 5, kSwigluOaiAlpha, kSwigluOaiLimit);
    EXPECT_EQ(gate[0], 0.0f);
    EXPECT_NEAR(gate[1], 7 * 0.99999330, 1e-5);
    EXPECT_NEAR(gate[2], 7 * 0.99999330 * -6, 1e-4);
    EXPECT_NEAR(gate[3], -0.154204 * 1.5, 1e-5);
    EXPECT_NEAR(gate[4], 7 * 0.99999330 * 8, 1e-4);
}

}  // namespace
}  // namespace headroom::kernels
