// The fast tables' elementwise ops against the scalar reference, on sizes
// that leave partial vectors and are large enough to run on the pool.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernel-test-util.h"

namespace headroom::kernels {
namespace {

using test::fast_tables;
using test::random_acts;
using test::TestContext;

TEST(Elementwise, RmsNormMatchesTheReference) {
    HR_REQUIRE_FAST_BACKEND();
    TestContext tc(3, 64, 1);
    for (const int64_t n : {int64_t{7}, int64_t{64}, int64_t{1000}}) {
        const int64_t n_tokens = 70;  // 70 x 1000 elements: parallel
        const auto x = random_acts(n_tokens, n, 1);
        std::vector<float> w(static_cast<size_t>(n));
        std::mt19937 rng(2);
        for (auto& v : w) v = std::uniform_real_distribution<float>(-2, 2)(rng);
        std::vector<float> ref(x.size());
        rmsnorm(x.data(), w.data(), 1.0f, 1e-6f, n_tokens, n, ref.data());
        for (const Ops* ops : fast_tables()) {
            SCOPED_TRACE(ops->name);
            std::vector<float> out = x;  // in place, as the forward pass calls it
            ops->rmsnorm(out.data(), w.data(), 1.0f, 1e-6f, n_tokens, n, out.data(), tc.ctx());
            // The sum of squares is accumulated in f32 lanes instead of f64:
            // relative error ~ n * 2^-24 in the scale.
            for (size_t i = 0; i < out.size(); ++i)
                ASSERT_NEAR(out[i], ref[i], 1e-5 * (1 + std::fabs(ref[i])))
                    << "n " << n << " element " << i;
        }
    }
}

TEST(Elementwise, GatedActivationsMatchTheReference) {
    HR_REQUIRE_FAST_BACKEND();
    TestContext tc(2, 64, 1);
    const int64_t n = 100003;  // parallel, with a tail
    const auto g = random_acts(1, n, 3), u = random_acts(1, n, 4);
    std::vector<float> silu_ref = g, gelu_ref = g;
    silu_mul(silu_ref.data(), u.data(), n);
    gelu_mul(gelu_ref.data(), u.data(), n);
    for (const Ops* ops : fast_tables()) {
        SCOPED_TRACE(ops->name);
        std::vector<float> s = g, ge = g;
        ops->silu_mul(s.data(), u.data(), n, tc.ctx());
        ops->gelu_mul(ge.data(), u.data(), n, tc.ctx());
        // exp within 2 ulp of expf, then a divide: a few ulp of the result;
        // tanh as 1 - 2 / (e^2u + 1) loses relative precision near 0, where
        // gelu's 1 + tanh masks it: 1e-6 of |g * u| absolute.
        for (int64_t i = 0; i < n; ++i) {
            ASSERT_NEAR(s[i], silu_ref[i], 2e-6 * (1 + std::fabs(silu_ref[i]))) << i;
            ASSERT_NEAR(ge[i], gelu_ref[i], 2e-6 * (1 + std::fabs(g[i] * u[i]))) << i;
        }
    }
}

TEST(Elementwise, AddAndRopeAreExact) {
    HR_REQUIRE_FAST_BACKEND();
    TestContext tc(2, 64, 1);
    const auto x = random_acts(1, 70001, 5), y = random_acts(1, 70001, 6);
    std::vector<float> ref = x;
    add(ref.data(), y.data(), 70001);
    const int64_t n_tokens = 37;
    const uint32_t n_head = 6, head_dim = 64;
    const auto q = random_acts(n_tokens, n_head * head_dim, 7);
    std::vector<uint32_t> pos(n_tokens);
    for (int64_t t = 0; t < n_tokens; ++t) pos[t] = static_cast<uint32_t>(t * 97 % 5000);
    std::vector<float> factors(head_dim / 2);
    for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.25f * static_cast<float>(i);
    // Rotated dims: whole vectors of pairs, a partial one (36: 18 pairs, a
    // tail after whole vectors of 8 and 16 lanes), all of the head; with and
    // without frequency factors (the angles kept between calls or not).
    for (const uint32_t n_rot : {32u, 36u, 64u}) {
        for (const float* f :
             {static_cast<const float*>(factors.data()), static_cast<const float*>(nullptr)}) {
            for (const RopeMode mode : {RopeMode::Normal, RopeMode::NeoX}) {
                RopeArgs a{n_head, head_dim, n_rot, 10000.0f, 0.5f, f, mode};
                std::vector<float> rref = q;
                rope(rref.data(), n_tokens, pos.data(), a);
                for (const Ops* ops : fast_tables()) {
                    SCOPED_TRACE(std::string(ops->name) + " n_rot " + std::to_string(n_rot) +
                                 (f ? " factors" : "") +
                                 (mode == RopeMode::NeoX ? " neox" : " normal"));
                    std::vector<float> r = q;
                    ops->rope(r.data(), n_tokens, pos.data(), a, tc.ctx());
                    for (size_t i = 0; i < r.size(); ++i) ASSERT_EQ(r[i], rref[i]) << i;
                }
            }
        }
    }
    for (const Ops* ops : fast_tables()) {
        std::vector<float> s = x;
        ops->add(s.data(), y.data(), 70001, tc.ctx());
        for (size_t i = 0; i < s.size(); ++i) ASSERT_EQ(s[i], ref[i]);
    }
}

// A decode step's calls: one token at a time, the arguments changing between
// calls as a model's layers change them (another base, position scaling,
// frequency factors, fewer rotated dims, YaRN) and the position moving on. Each
// call rotates exactly as the reference does, whatever the one before it.
TEST(Elementwise, RopeOfOneTokenFollowsEveryChangeOfArguments) {
    HR_REQUIRE_FAST_BACKEND();
    TestContext tc(2, 64, 1);
    const uint32_t n_head = 4, head_dim = 64;
    std::vector<float> factors(32);
    for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.5f * static_cast<float>(i);
    const RopeArgs plain{n_head, head_dim, 64, 10000.0f, 1.0f, nullptr, RopeMode::Normal};
    std::vector<std::pair<uint32_t, RopeArgs>> calls;
    auto with = [&](uint32_t pos, auto change) {
        RopeArgs a = plain;
        change(a);
        calls.emplace_back(pos, a);
    };
    const auto same = [](RopeArgs&) {};
    with(7, same);
    with(7, same);
    with(7, [](RopeArgs& a) { a.base = 1e6f; });
    with(7, [&](RopeArgs& a) { a.freq_factors = factors.data(); });
    with(7, same);
    with(7, [](RopeArgs& a) { a.position_scale = 0.25f; });
    with(7, [](RopeArgs& a) { a.n_rot = 32; });
    with(7, [](RopeArgs& a) { a.mode = RopeMode::NeoX; });
    with(8, same);
    with(3000, [&](RopeArgs& a) { a.freq_factors = factors.data(); });
    with(3000, [&](RopeArgs& a) { a.freq_factors = factors.data(); });
    with(3000, same);
    with(3000, [](RopeArgs& a) { a.yarn_factor = 32, a.yarn_orig_ctx = 4096; });
    with(3000, [](RopeArgs& a) { a.yarn_factor = 32, a.yarn_orig_ctx = 4096; });
    with(3000,
         [](RopeArgs& a) { a.yarn_factor = 32, a.yarn_orig_ctx = 4096, a.yarn_truncate = false; });
    with(3000, [](RopeArgs& a) { a.yarn_factor = 32, a.yarn_orig_ctx = 1024; });
    with(3000,
         [](RopeArgs& a) { a.yarn_factor = 32, a.yarn_orig_ctx = 1024, a.yarn_beta_fast = 16; });
    with(3000, [](RopeArgs& a) { a.yarn_factor = 8, a.yarn_orig_ctx = 1024; });
    with(3000, same);
    const auto q = random_acts(1, n_head * head_dim, 8);
    for (const Ops* ops : fast_tables()) {
        for (size_t c = 0; c < calls.size(); ++c) {
            SCOPED_TRACE(std::string(ops->name) + " call " + std::to_string(c));
            const auto& [pos, a] = calls[c];
            std::vector<float> want = q, got = q;
            rope(want.data(), 1, &pos, a);
            ops->rope(got.data(), 1, &pos, a, tc.ctx());
            for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << i;
        }
    }
}

// gpt-oss's YaRN (64 rotated dims, base 150000, factor 32 over 4096
// positions): the ramp runs from pair 8.0928 to pair 17.3980 (8 to 18
// rounded out), so at position 1000 pair 4 keeps its angle 1000 ·
// 150000^(-8/64), pair 20 is divided by 32, and pair 12 blends them; cos and
// sin are scaled by 1 + 0.1 ln 32. Angles worked out in Python (double).
TEST(Elementwise, YarnAnglesByHand) {
    RopeArgs a{1, 64, 64, 150000.0f, 1.0f, nullptr, RopeMode::NeoX};
    a.yarn_factor = 32;
    a.yarn_orig_ctx = 4096;
    for (const bool truncate : {false, true}) {
        a.yarn_truncate = truncate;
        EXPECT_NEAR(rope_theta(1000, 4, a), 225.41800020287084, 1e-9);
        EXPECT_NEAR(rope_theta(1000, 12, a), truncate ? 7.015713910504387 : 6.79495948973222, 1e-9);
        EXPECT_NEAR(rope_theta(1000, 20, a), 0.01818833668168956, 1e-12);
        // A unit vector at dim 12 turns to (cos, sin) × 1.3465736 in dims (12, 44).
        std::vector<float> x(64, 0.0f);
        x[12] = 1.0f;
        const uint32_t pos = 1000;
        rope(x.data(), 1, &pos, a);
        const double theta = truncate ? 7.015713910504387 : 6.79495948973222;
        EXPECT_NEAR(x[12], std::cos(theta) * 1.3465735902799727, 1e-6);
        EXPECT_NEAR(x[44], std::sin(theta) * 1.3465735902799727, 1e-6);
    }
}

// Heads wider than any known model's (a file may say anything): rotated as
// the reference does, never past the end of a buffer.
TEST(Elementwise, RopeOfVeryWideHeadsMatchesTheReference) {
    HR_REQUIRE_FAST_BACKEND();
    TestContext tc(2, 64, 1);
    for (const uint32_t head_dim : {1024u, 1040u, 4096u}) {
        const std::vector<uint32_t> pos = {3, 9000};
        const auto q = random_acts(2, 2 * head_dim, 4);
        const RopeArgs a{2, head_dim, head_dim, 10000.0f, 1.0f, nullptr, RopeMode::NeoX};
        std::vector<float> want = q;
        rope(want.data(), 2, pos.data(), a);
        for (const Ops* ops : fast_tables()) {
            SCOPED_TRACE(std::string(ops->name) + ", head_dim " + std::to_string(head_dim));
            std::vector<float> got = q;
            ops->rope(got.data(), 2, pos.data(), a, tc.ctx());
            for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << i;
        }
    }
}

// K and V rows into the cache: the bytes the reference writes, for every
// cache type, on rows that hold what rounds to half subnormals, to infinity,
// exact ties, zeros of both signs, infinities and a NaN.
TEST(Elementwise, StoreRowWritesTheReferenceBytes) {
    HR_REQUIRE_FAST_BACKEND();
    for (const int64_t n : {int64_t{64}, int64_t{128}, int64_t{40}}) {
        std::vector<float> x = random_acts(1, n, 21);
        const float special[] = {0.0f,
                                 -0.0f,
                                 6e-8f,
                                 -3e-6f,
                                 1e-5f,
                                 65504.0f,
                                 65520.0f,
                                 -70000.0f,
                                 1.0f + 1.0f / 2048,
                                 1e30f,
                                 INFINITY,
                                 -INFINITY,
                                 NAN,
                                 2.9802322e-8f,
                                 5.9604645e-8f,
                                 1.0f + 3.0f / 2048};
        for (size_t i = 0; i < std::size(special); ++i) x[(i * 5) % n] = special[i];
        for (int64_t i = 16; i < n; i += 7) x[i] *= 1e-4f;
        for (const KvDtype dtype : {KvDtype::F16, KvDtype::BF16, KvDtype::F32, KvDtype::Q8_0}) {
            if (dtype == KvDtype::Q8_0 && n % 32 != 0) continue;
            const size_t bytes = row_bytes(tensor_type(dtype), static_cast<uint64_t>(n));
            std::vector<uint8_t> want(bytes, 0xEE);
            store_row(x.data(), n, dtype, want.data());
            for (const Ops* ops : fast_tables()) {
                SCOPED_TRACE(std::string(ops->name) + ", " + std::to_string(n) + " elements, " +
                             std::string(name(tensor_type(dtype))));
                std::vector<uint8_t> got(bytes, 0x11);
                ops->store_row(x.data(), n, dtype, got.data());
                ASSERT_EQ(got, want);
            }
        }
    }
}

}  // namespace
}  // namespace headroom::kernels
