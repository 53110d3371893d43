// Tensor types against the gguf package's reference (golden vectors from
// scripts/make-golden-quant.py) and against hand-computed blocks, plus
// quantize -> dequantize error bounds for every type headroom can write.
#include "kernels/cpu/ref/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/half.h"
#include "test-util.h"

namespace headroom::ref {
namespace {

std::vector<float> dequantize(TensorType type, const std::vector<uint8_t>& blocks) {
    const auto& t = traits(type);
    const int64_t n = static_cast<int64_t>(blocks.size() / t.block_bytes * t.block_size);
    std::vector<float> out(static_cast<size_t>(n));
    dequantize_row(type, blocks.data(), out.data(), n);
    return out;
}

class GoldenDequant : public ::testing::TestWithParam<TensorType> {};

TEST_P(GoldenDequant, MatchesTheGgufPackage) {
    const TensorType type = GetParam();
    const std::string base = test::data_path("quant/" + std::string(name(type)));
    const auto blocks = test::read_bytes(base + ".blocks");
    const auto expected = test::read_array<float>(base + ".dequant.f32");
    ASSERT_FALSE(blocks.empty()) << "missing golden file " << base << ".blocks";
    const auto got = dequantize(type, blocks);
    ASSERT_EQ(got.size(), expected.size());
    // The integer-scaled types are exact in the reference; the K types
    // multiply two f16-derived floats in a different order (d*sc*q vs
    // (d*sc)*q), so allow 1e-6 relative.
    const bool exact = type == TensorType::F16 || type == TensorType::BF16 ||
                       type == TensorType::Q8_0 || type == TensorType::Q4_0 ||
                       type == TensorType::Q5_0 || type == TensorType::IQ4_NL ||
                       type == TensorType::MXFP4;
    for (size_t i = 0; i < got.size(); ++i) {
        if (exact) {
            ASSERT_EQ(got[i], expected[i]) << "element " << i;
        } else {
            ASSERT_NEAR(got[i], expected[i], 1e-6 * std::fabs(expected[i]) + 1e-12)
                << "element " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, GoldenDequant,
                         ::testing::Values(TensorType::F16, TensorType::BF16, TensorType::Q4_0,
                                           TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                           TensorType::Q8_0, TensorType::Q2_K, TensorType::Q3_K,
                                           TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K,
                                           TensorType::IQ4_NL, TensorType::IQ4_XS,
                                           TensorType::MXFP4),
                         [](const auto& info) { return std::string(name(info.param)); });

class GoldenQuant : public ::testing::TestWithParam<TensorType> {};

TEST_P(GoldenQuant, IsBitExactWithTheGgufPackage) {
    const TensorType type = GetParam();
    const std::string base = test::data_path("quant/" + std::string(name(type)));
    const auto input = test::read_array<float>(base + ".input.f32");
    const auto expected = test::read_bytes(base + ".quant");
    ASSERT_FALSE(input.empty());
    std::vector<uint8_t> got(expected.size());
    quantize_row(type, input.data(), got.data(), static_cast<int64_t>(input.size()));
    size_t n_diff = 0;
    for (size_t i = 0; i < got.size(); ++i) n_diff += got[i] != expected[i];
    EXPECT_EQ(n_diff, 0u) << "bytes differing from gguf's quantization";
}

INSTANTIATE_TEST_SUITE_P(Types, GoldenQuant,
                         ::testing::Values(TensorType::F16, TensorType::BF16, TensorType::Q4_0,
                                           TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                           TensorType::Q8_0, TensorType::MXFP4),
                         [](const auto& info) { return std::string(name(info.param)); });

TEST(Dequant, Q8KByHand) {
    // Q8_K is not in the gguf package: x = d * q, with d an f32.
    std::vector<uint8_t> block(292, 0);
    const float d = 0.25f;
    std::memcpy(block.data(), &d, 4);
    block[4] = 8;                         // q[0] = 8   -> 2.0
    block[5] = static_cast<uint8_t>(-4);  // q[1] = -4  -> -1.0
    block[259] = 127;                     // q[255]     -> 31.75
    const auto y = dequantize(TensorType::Q8_K, block);
    EXPECT_EQ(y[0], 2.0f);
    EXPECT_EQ(y[1], -1.0f);
    EXPECT_EQ(y[2], 0.0f);
    EXPECT_EQ(y[255], 31.75f);
}

TEST(Dequant, Q4_0ByHand) {
    // d = 0.5 (f16 0x3800); byte j holds element j (low) and j + 16 (high).
    std::vector<uint8_t> block(18, 0);
    block[0] = 0x00;
    block[1] = 0x38;
    block[2] = 0xF0;  // x[0] = 0.5 * (0 - 8) = -4, x[16] = 0.5 * (15 - 8) = 3.5
    const auto y = dequantize(TensorType::Q4_0, block);
    EXPECT_EQ(y[0], -4.0f);
    EXPECT_EQ(y[16], 3.5f);
    EXPECT_EQ(y[1], -4.0f);
}

TEST(Half, ConversionsRoundToNearestEven) {
    EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
    EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
    EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // halfway to the next step: rounds to inf
    EXPECT_EQ(f32_to_f16(5.960464477539063e-08f), 0x0001);  // smallest subnormal
    EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3C00);      // tie, to even
    EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3C02);      // tie, to even (up)
    EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
    EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
    EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
    for (uint32_t h = 0; h < 0x7C00; ++h)  // every finite positive half survives a round trip
        ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h);
}

// Relative RMS error of quantize -> dequantize on Gaussian data, per type.
struct Bound {
    TensorType type;
    double max_rel_rmse;  // from the format's bits per weight: ~2^-(bits-1) / sqrt(3) scaled
};

class RoundTrip : public ::testing::TestWithParam<Bound> {};

TEST_P(RoundTrip, ErrorIsWithinTheFormatsBound) {
    const auto [type, bound] = GetParam();
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const int64_t n = 256 * 64;
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = dist(rng);
    std::vector<uint8_t> q(row_bytes(type, static_cast<uint64_t>(n)));
    quantize_row(type, x.data(), q.data(), n);
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row(type, q.data(), y.data(), n);
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; ++i) {
        err += (x[i] - y[i]) * (x[i] - y[i]);
        ref += x[i] * x[i];
    }
    const double rel = std::sqrt(err / ref);
    EXPECT_LT(rel, bound) << name(type) << " relative RMSE " << rel;
    EXPECT_GT(rel, bound / 20) << name(type) << " suspiciously exact: " << rel;
}

INSTANTIATE_TEST_SUITE_P(
    Types, RoundTrip,
    ::testing::Values(Bound{TensorType::F16, 6e-4}, Bound{TensorType::BF16, 4e-3},
                      Bound{TensorType::Q8_0, 8e-3}, Bound{TensorType::Q8_K, 8e-3},
                      Bound{TensorType::Q6_K, 3.5e-2}, Bound{TensorType::Q5_0, 5e-2},
                      Bound{TensorType::Q5_1, 5e-2}, Bound{TensorType::Q5_K, 5e-2},
                      Bound{TensorType::Q4_0, 1.1e-1}, Bound{TensorType::Q4_1, 1.1e-1},
                      Bound{TensorType::Q4_K, 1.0e-1}, Bound{TensorType::IQ4_NL, 9e-2},
                      Bound{TensorType::IQ4_XS, 9e-2}, Bound{TensorType::MXFP4, 1.3e-1},
                      Bound{TensorType::Q3_K, 1.75e-1}, Bound{TensorType::Q2_K, 3.2e-1}),
    [](const auto& info) { return std::string(name(info.param.type)); });

}  // namespace
}  // namespace headroom::ref
