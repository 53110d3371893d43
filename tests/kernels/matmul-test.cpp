// The fast matmuls against their specs: bit for bit against
// ref::matmul_int / ref::matmul_float (the same float operations in the same
// order over exact integer sums), within a derived bound of the f32 reference
// backend, and bit for bit between a batch and its tokens run one at a time.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "kernel-test-util.h"
#include "kernels/cpu/act-format.h"
#include "kernels/cpu/ref/quant-matmul.h"
#include "kernels/cpu/ref/quant.h"

namespace headroom::kernels {
namespace {

using test::fast_tables;
using test::random_acts;
using test::TestContext;

// W (n_rows, n_cols) of `type`, from random f32 rows through the reference
// quantizer (so every block is one ggml could have written).
struct Weights {
    std::vector<uint8_t> bytes;
    Matrix m;
};

Weights random_weights(TensorType type, int64_t n_rows, int64_t n_cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    Weights w;
    const uint64_t rb = row_bytes(type, static_cast<uint64_t>(n_cols));
    w.bytes.resize(rb * static_cast<uint64_t>(n_rows));
    std::vector<float> row(static_cast<size_t>(n_cols));
    for (int64_t r = 0; r < n_rows; ++r) {
        for (auto& v : row) v = normal(rng);
        ref::quantize_row(type, row.data(), w.bytes.data() + static_cast<uint64_t>(r) * rb, n_cols);
    }
    w.m = {w.bytes.data(), type, n_rows, n_cols, rb};
    return w;
}

std::vector<float> run(const Ops& ops, const Matrix& w, const std::vector<float>& x,
                       int64_t n_tokens, Context& ctx) {
    std::vector<float> y(static_cast<size_t>(n_tokens * w.n_rows), -1.0f);
    const Acts a = ops.prepare(x.data(), n_tokens, w.n_cols, w.type, ctx);
    ops.matmul(w, a, y.data(), ctx);
    return y;
}

// w with its repacked copy for `ops` (in `store`), or w itself if ops reads
// w as stored.
Matrix repacked(const Ops& ops, const Matrix& w, std::vector<uint8_t>& store, Context& ctx) {
    const uint64_t n = ops.packed_bytes(w);
    if (n == 0) return w;
    store.assign(n + 64, 0);
    auto* dst = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(store.data()) + 63) &
                                           ~uintptr_t{63});
    ops.repack(w, dst, ctx);
    Matrix p = w;
    p.packed = dst;
    p.packed_for = &ops;
    return p;
}

bool same_bits(float a, float b) {
    return std::memcmp(&a, &b, 4) == 0;
}

class IntMatmul : public ::testing::TestWithParam<std::tuple<TensorType, ActPrecision>> {};

TEST_P(IntMatmul, MatchesTheSpecExactlyAndTheReferenceWithinTheQuantizationBound) {
    HR_REQUIRE_FAST_BACKEND();
    const auto [type, quant] = GetParam();
    const bool k = is_k_type(type);
    // Rows not a multiple of 16 (a partial row group); several packed chunks.
    const int64_t n_rows = 37, n_cols = k ? 768 : 608, n_tokens = 19;
    const Weights w = random_weights(type, n_rows, n_cols, 7);
    const auto x = random_acts(n_tokens, n_cols, 11);
    std::vector<float> spec(static_cast<size_t>(n_tokens * n_rows));
    ref::matmul_int(w.m, x.data(), n_tokens, quant, spec.data());

    TestContext tc(3, static_cast<uint64_t>(n_cols), n_tokens);
    tc.ctx().act_precision = quant;
    const auto exact = run(ref_ops(), w.m, x, n_tokens, tc.ctx());

    // |y - exact| <= sum_i |w_i| * d_i / 2 (each activation rounds by at most
    // half its block's step d), plus f32 accumulation slack.
    std::vector<float> wrow(static_cast<size_t>(n_cols));
    const int act_block = k ? 256 : 32;
    const float max_q = quant == ActPrecision::Int8 ? kInt8Max : kInt16Max;
    std::vector<double> bound(spec.size());
    for (int64_t r = 0; r < n_rows; ++r) {
        ref::dequantize_row(type, w.m.data + static_cast<uint64_t>(r) * w.m.row_bytes, wrow.data(),
                            n_cols);
        for (int64_t t = 0; t < n_tokens; ++t) {
            double b = 0, mag = 0;
            for (int64_t i = 0; i < n_cols; i += act_block) {
                float amax = 0;
                for (int j = 0; j < act_block; ++j)
                    amax = std::max(amax, std::fabs(x[t * n_cols + i + j]));
                for (int j = 0; j < act_block; ++j) {
                    b += std::fabs(wrow[i + j]) * amax / max_q / 2;
                    mag += std::fabs(wrow[i + j] * x[t * n_cols + i + j]);
                }
            }
            bound[t * n_rows + r] = b * 1.01 + mag * 1e-5;
        }
    }

    std::vector<uint8_t> store;
    for (const Ops* ops : fast_tables()) {
        // Decode over a repacked copy with and without asking ahead for the
        // weights (Context::decode_prefetch_bytes; past the copy's end too).
        for (const auto& [packed, ahead] :
             {std::pair{false, uint64_t{0}}, std::pair{true, uint64_t{0}},
              std::pair{true, uint64_t{4096}}}) {
            SCOPED_TRACE(std::string(ops->name) + (packed ? " repacked" : " as stored") +
                         (ahead ? ", asking ahead" : ""));
            const Matrix m = packed ? repacked(*ops, w.m, store, tc.ctx()) : w.m;
            tc.ctx().decode_prefetch_bytes = ahead;
            // Decode-sized calls read the weights directly (kernels for one,
            // two and more tokens), batches go through a panel.
            for (const int64_t nt : {int64_t{1}, int64_t{2}, int64_t{3}, n_tokens}) {
                const auto y = run(*ops, m, x, nt, tc.ctx());
                for (size_t i = 0; i < y.size(); ++i) {
                    ASSERT_TRUE(same_bits(y[i], spec[i]))
                        << nt << " tokens: y[" << i / n_rows << ", " << i % n_rows << "] = " << y[i]
                        << ", spec " << spec[i];
                    ASSERT_LE(std::fabs(y[i] - exact[i]), bound[i]) << "element " << i;
                }
            }
        }
    }
}

TEST_P(IntMatmul, ABatchGivesEachTokenWhatItGetsAlone) {
    HR_REQUIRE_FAST_BACKEND();
    const auto [type, quant] = GetParam();
    const int64_t n_rows = 40, n_cols = is_k_type(type) ? 512 : 256, n_tokens = 32;
    const Weights w = random_weights(type, n_rows, n_cols, 3);
    const auto x = random_acts(n_tokens, n_cols, 5);
    TestContext tc(2, static_cast<uint64_t>(n_cols), n_tokens);
    tc.ctx().act_precision = quant;
    std::vector<uint8_t> store;
    for (const Ops* ops : fast_tables()) {
        SCOPED_TRACE(ops->name);
        const Matrix m = repacked(*ops, w.m, store, tc.ctx());
        const auto batch = run(*ops, m, x, n_tokens, tc.ctx());
        for (int64_t t = 0; t < n_tokens; ++t) {
            const std::vector<float> one(x.begin() + t * n_cols, x.begin() + (t + 1) * n_cols);
            const auto alone = run(*ops, m, one, 1, tc.ctx());
            for (int64_t r = 0; r < n_rows; ++r)
                ASSERT_TRUE(same_bits(alone[r], batch[t * n_rows + r]))
                    << "token " << t << " row " << r;
        }
    }
}

// A batch whose activations outgrow one tile of tokens (wide rows: where a
// backend tiles batches, AVX2, a tile holds a dozen tokens) runs tile by
// tile; every token still gets the spec's bits, in every tile and at the
// partial last one.
TEST_P(IntMatmul, ABatchOfSeveralTokenTilesMatchesTheSpec) {
    HR_REQUIRE_FAST_BACKEND();
    const auto [type, quant] = GetParam();
    const int64_t n_rows = 20, n_cols = 8192, n_tokens = 41;
    const Weights w = random_weights(type, n_rows, n_cols, 13);
    const auto x = random_acts(n_tokens, n_cols, 17);
    std::vector<float> spec(static_cast<size_t>(n_tokens * n_rows));
    ref::matmul_int(w.m, x.data(), n_tokens, quant, spec.data());
    TestContext tc(2, static_cast<uint64_t>(n_cols), n_tokens);
    tc.ctx().act_precision = quant;
    std::vector<uint8_t> store;
    for (const Ops* ops : fast_tables()) {
        SCOPED_TRACE(ops->name);
        const Matrix m = repacked(*ops, w.m, store, tc.ctx());
        const auto y = run(*ops, m, x, n_tokens, tc.ctx());
        for (size_t i = 0; i < y.size(); ++i)
            ASSERT_TRUE(same_bits(y[i], spec[i])) << "y[" << i / n_rows << ", " << i % n_rows
                                                  << "] = " << y[i] << ", spec " << spec[i];
    }
}

INSTANTIATE_TEST_SUITE_P(
    Types, IntMatmul,
    ::testing::Combine(::testing::Values(TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                                         TensorType::Q5_1, TensorType::Q8_0, TensorType::IQ4_NL,
                                         TensorType::MXFP4, TensorType::Q4_K, TensorType::Q5_K,
                                         TensorType::Q6_K, TensorType::IQ4_XS, TensorType::Q3_K,
                                         TensorType::Q2_K),
                       ::testing::Values(ActPrecision::Int8, ActPrecision::Int16)),
    [](const auto& info) {
        return std::string(name(std::get<0>(info.param))) +
               (std::get<1>(info.param) == ActPrecision::Int8 ? "_Int8" : "_Int16");
    });

class F32ActsMatmul : public ::testing::TestWithParam<TensorType> {};

TEST_P(F32ActsMatmul, MatchesTheSpecExactlyAndTheReferenceToRounding) {
    HR_REQUIRE_FAST_BACKEND();
    const TensorType type = GetParam();
    const bool k = is_k_type(type);
    const int64_t n_rows = 21, n_cols = k ? 768 : 352, n_tokens = 11;
    const Weights w = random_weights(type, n_rows, n_cols, 31);
    const auto x = random_acts(n_tokens, n_cols, 37);
    std::vector<float> spec(static_cast<size_t>(n_tokens * n_rows));
    ref::matmul_f32_acts(w.m, x.data(), n_tokens, spec.data());
    TestContext tc(2, static_cast<uint64_t>(n_cols), n_tokens);
    tc.ctx().act_precision = ActPrecision::F32;
    const auto exact = run(ref_ops(), w.m, x, n_tokens, tc.ctx());
    std::vector<uint8_t> store;
    for (const Ops* ops : fast_tables()) {
        SCOPED_TRACE(ops->name);
        const Matrix m = repacked(*ops, w.m, store, tc.ctx());
        const auto y = run(*ops, m, x, n_tokens, tc.ctx());
        for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_TRUE(same_bits(y[i], spec[i]))
                << "element " << i << ": " << y[i] << " vs " << spec[i];
            // The reference sums the same products without fma: n roundings apart.
            ASSERT_NEAR(y[i], exact[i], 1e-5 * (1 + std::fabs(exact[i])));
        }
        for (int64_t t = 0; t < n_tokens; ++t) {
            const std::vector<float> one(x.begin() + t * n_cols, x.begin() + (t + 1) * n_cols);
            const auto alone = run(*ops, m, one, 1, tc.ctx());
            for (int64_t r = 0; r < n_rows; ++r)
                ASSERT_TRUE(same_bits(alone[r], y[t * n_rows + r]));
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, F32ActsMatmul,
                         ::testing::Values(TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                                           TensorType::Q5_1, TensorType::Q8_0, TensorType::IQ4_NL,
                                           TensorType::MXFP4, TensorType::Q4_K, TensorType::Q5_K,
                                           TensorType::Q6_K, TensorType::IQ4_XS, TensorType::Q3_K,
                                           TensorType::Q2_K),
                         [](const auto& info) { return std::string(name(info.param)); });

class FloatMatmul : public ::testing::TestWithParam<TensorType> {};

TEST_P(FloatMatmul, MatchesTheSpecExactlyAndABatchMatchesSingleTokens) {
    HR_REQUIRE_FAST_BACKEND();
    const TensorType type = GetParam();
    const int64_t n_rows = 13, n_cols = 200, n_tokens = 9;  // 200: a partial vector per row
    const Weights w = random_weights(type, n_rows, n_cols, 21);
    const auto x = random_acts(n_tokens, n_cols, 23);
    TestContext tc(2, static_cast<uint64_t>(n_cols), n_tokens);
    const auto exact = run(ref_ops(), w.m, x, n_tokens, tc.ctx());
    for (const Ops* ops : fast_tables()) {
        SCOPED_TRACE(ops->name);
        const int lanes = std::string(ops->name) == "avx512" ? 16 : 8;
        std::vector<float> spec(static_cast<size_t>(n_tokens * n_rows));
        ref::matmul_float(w.m, x.data(), n_tokens, lanes, spec.data());
        const auto y = run(*ops, w.m, x, n_tokens, tc.ctx());
        for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_TRUE(same_bits(y[i], spec[i])) << "element " << i;
            // Only the summation order differs from the reference.
            ASSERT_NEAR(y[i], exact[i], 1e-4 * (1 + std::fabs(exact[i])));
        }
        for (int64_t t = 0; t < n_tokens; ++t) {
            const std::vector<float> one(x.begin() + t * n_cols, x.begin() + (t + 1) * n_cols);
            const auto alone = run(*ops, w.m, one, 1, tc.ctx());
            for (int64_t r = 0; r < n_rows; ++r)
                ASSERT_TRUE(same_bits(alone[r], y[t * n_rows + r]));
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, FloatMatmul,
                         ::testing::Values(TensorType::F32, TensorType::F16, TensorType::BF16),
                         [](const auto& info) { return std::string(name(info.param)); });

// One call for a layer's Q, K and V (three row counts, partial row groups,
// the threads' shares crossing from one matrix into the next), as stored and
// repacked: each output is its own matrix's spec.
TEST(Matmul, SeveralMatricesInOneCallEachMatchTheirSpec) {
    HR_REQUIRE_FAST_BACKEND();
    const int64_t n_cols = 320;
    const int64_t rows[3] = {37, 8, 21};
    for (const TensorType type : {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K}) {
        const int64_t n_in = is_k_type(type) ? 512 : n_cols;
        std::vector<Weights> ws;
        for (int i = 0; i < 3; ++i) ws.push_back(random_weights(type, rows[i], n_in, 50 + i));
        for (const int64_t n_tokens : {int64_t{1}, int64_t{20}}) {
            const auto x = random_acts(n_tokens, n_in, 60);
            std::vector<float> spec[3];
            for (int i = 0; i < 3; ++i) {
                spec[i].resize(static_cast<size_t>(n_tokens * rows[i]));
                ref::matmul_int(ws[i].m, x.data(), n_tokens, ActPrecision::Int8, spec[i].data());
            }
            TestContext tc(3, static_cast<uint64_t>(n_in), n_tokens);
            std::vector<uint8_t> stores[3];
            for (const Ops* ops : fast_tables()) {
                for (const bool packed : {false, true}) {
                    SCOPED_TRACE(std::string(name(type)) + " " + ops->name +
                                 (packed ? " repacked, " : " as stored, ") +
                                 std::to_string(n_tokens) + " tokens");
                    Matrix m[3];
                    const Matrix* mp[3];
                    std::vector<float> y[3];
                    float* yp[3];
                    for (int i = 0; i < 3; ++i) {
                        m[i] = packed ? repacked(*ops, ws[i].m, stores[i], tc.ctx()) : ws[i].m;
                        mp[i] = &m[i];
                        y[i].assign(spec[i].size(), -1.0f);
                        yp[i] = y[i].data();
                    }
                    const Acts a = ops->prepare(x.data(), n_tokens, n_in, type, tc.ctx());
                    ops->matmul_n(mp, yp, 3, a, tc.ctx());
                    for (int i = 0; i < 3; ++i)
                        for (size_t e = 0; e < spec[i].size(); ++e)
                            ASSERT_TRUE(same_bits(y[i][e], spec[i][e]))
                                << "matrix " << i << " element " << e;
                }
            }
        }
    }
}

// Repacked copies cut into parts (PackedParts, as the CPU backend lays them
// out for its pool: part t of every matrix in one stream), cut evenly and
// with empty parts, for a pool with a thread per part (each thread starts on
// its own part) and for one with fewer threads: every output equals its own
// matrix's spec, bit for bit, for decode calls, a batch, and f32 activations.
TEST(Matmul, RepackedCopiesCutIntoPartsMatchTheirSpec) {
    HR_REQUIRE_FAST_BACKEND();
    const int64_t rows[3] = {37, 8, 21};
    for (const TensorType type : {TensorType::Q4_0, TensorType::Q4_K, TensorType::Q6_K}) {
        const int64_t n_in = is_k_type(type) ? 512 : 320;
        std::vector<Weights> ws;
        for (int i = 0; i < 3; ++i) ws.push_back(random_weights(type, rows[i], n_in, 70 + i));
        const int64_t max_tokens = 20;
        const auto x = random_acts(max_tokens, n_in, 80);
        for (const Ops* ops : fast_tables()) {
            const int64_t L = ops->packed_group_rows;
            for (const int n_parts : {2, 3}) {
                for (const bool even : {true, false}) {
                    // Part t of matrix i: groups [cut(i, t), cut(i, t + 1)); uneven:
                    // the first part takes every group, the others are empty.
                    auto cut = [&](int i, int t) {
                        const int64_t g = (rows[i] + L - 1) / L;
                        return even ? g * t / n_parts : (t == 0 ? 0 : g);
                    };
                    std::vector<PackedParts> parts(3);
                    std::vector<std::vector<uint8_t>> region(static_cast<size_t>(n_parts));
                    for (int t = 0; t < n_parts; ++t) {
                        uint64_t bytes = 0;
                        for (int i = 0; i < 3; ++i)
                            bytes += static_cast<uint64_t>(cut(i, t + 1) - cut(i, t)) * L *
                                     ws[i].m.row_bytes;
                        region[t].assign(bytes + 64, 0);
                    }
                    Matrix m[3];
                    const Matrix* mp[3];
                    for (int t = 0; t < n_parts; ++t) {
                        uint64_t at = 0;
                        for (int i = 0; i < 3; ++i) {
                            parts[i].data.resize(static_cast<size_t>(n_parts));
                            parts[i].data[t] = region[t].data() + at;
                            at += static_cast<uint64_t>(cut(i, t + 1) - cut(i, t)) * L *
                                  ws[i].m.row_bytes;
                        }
                    }
                    for (int i = 0; i < 3; ++i) {
                        for (int t = 0; t <= n_parts; ++t) parts[i].row0.push_back(cut(i, t) * L);
                        m[i] = ws[i].m;
                        m[i].parts = &parts[i];
                        TestContext pack(2, static_cast<uint64_t>(n_in), 1);
                        ops->repack(m[i], nullptr, pack.ctx());
                        m[i].packed = parts[i].data[0];
                        m[i].packed_for = ops;
                        mp[i] = &m[i];
                    }
                    for (const int n_threads : {n_parts, 2}) {
                        TestContext tc(n_threads, static_cast<uint64_t>(n_in), max_tokens);
                        // Each thread's stream asked for ahead, across parts.
                        tc.ctx().decode_prefetch_bytes = 4096;
                        for (const ActPrecision quant : {ActPrecision::Int8, ActPrecision::F32}) {
                            tc.ctx().act_precision = quant;
                            for (const int64_t nt :
                                 {int64_t{1}, int64_t{2}, int64_t{3}, max_tokens}) {
                                SCOPED_TRACE(std::string(name(type)) + " " + ops->name + ", " +
                                             std::to_string(n_parts) +
                                             (even ? " even" : " uneven") + " parts, " +
                                             std::to_string(n_threads) + " threads, " +
                                             std::to_string(nt) + " tokens" +
                                             (quant == ActPrecision::F32 ? ", f32 acts" : ""));
                                std::vector<float> y[3];
                                float* yp[3];
                                for (int i = 0; i < 3; ++i) {
                                    y[i].assign(static_cast<size_t>(nt * rows[i]), -1.0f);
                                    yp[i] = y[i].data();
                                }
                                const Acts a = ops->prepare(x.data(), nt, n_in, type, tc.ctx());
                                ops->matmul_n(mp, yp, 3, a, tc.ctx());
                                for (int i = 0; i < 3; ++i) {
                                    std::vector<float> spec(y[i].size());
                                    if (quant == ActPrecision::F32)
                                        ref::matmul_f32_acts(ws[i].m, x.data(), nt, spec.data());
                                    else
                                        ref::matmul_int(ws[i].m, x.data(), nt, quant, spec.data());
                                    for (size_t e = 0; e < spec.size(); ++e)
                                        ASSERT_TRUE(same_bits(y[i][e], spec[e]))
                                            << "matrix " << i << " element " << e;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

// A MoE projection: experts' gate and up over their runs of sorted rows
// (1 token: the direct path; 13 and 30: batches through a panel; an expert
// with none), in one call. Each row equals the spec of its expert's matrix
// for that row alone, bit for bit.
TEST(Matmul, ExpertGroupsEachMatchTheirSpec) {
    HR_REQUIRE_FAST_BACKEND();
    const int64_t n_tok[] = {1, 13, 0, 2, 30};
    const int n_exp = 5;
    int64_t row0[n_exp + 1] = {0};
    for (int e = 0; e < n_exp; ++e) row0[e + 1] = row0[e] + n_tok[e];
    const int64_t n_rows_x = row0[n_exp], n_out = 40;
    for (const TensorType type : {TensorType::Q4_0, TensorType::Q4_K, TensorType::MXFP4}) {
        for (const ActPrecision quant : {ActPrecision::Int8, ActPrecision::Int16}) {
            const int64_t n_in = is_k_type(type) ? 512 : 320;
            std::vector<Weights> gate, up;
            for (int e = 0; e < n_exp; ++e) {
                gate.push_back(random_weights(type, n_out, n_in, 70 + e));
                up.push_back(random_weights(type, n_out, n_in, 80 + e));
            }
            const auto x = random_acts(n_rows_x, n_in, 90);
            // The spec: each expert's rows alone, through its matrices.
            std::vector<float> spec_g(static_cast<size_t>(n_rows_x * n_out));
            std::vector<float> spec_u(spec_g.size());
            for (int e = 0; e < n_exp; ++e) {
                if (n_tok[e] == 0) continue;
                ref::matmul_int(gate[e].m, x.data() + row0[e] * n_in, n_tok[e], quant,
                                spec_g.data() + row0[e] * n_out);
                ref::matmul_int(up[e].m, x.data() + row0[e] * n_in, n_tok[e], quant,
                                spec_u.data() + row0[e] * n_out);
            }
            TestContext tc(3, static_cast<uint64_t>(n_in), n_rows_x);
            tc.ctx().act_precision = quant;
            std::vector<std::vector<uint8_t>> stores(2 * n_exp);
            for (const Ops* ops : fast_tables()) {
                for (const bool packed : {false, true}) {
                    SCOPED_TRACE(std::string(name(type)) + " " + std::string(name(quant)) + " " +
                                 ops->name + (packed ? " repacked" : " as stored"));
                    std::vector<Matrix> m(2 * n_exp);
                    std::vector<ExpertGroup> groups;
                    for (int e = 0; e < n_exp; ++e) {
                        m[2 * e] =
                            packed ? repacked(*ops, gate[e].m, stores[2 * e], tc.ctx()) : gate[e].m;
                        m[2 * e + 1] =
                            packed ? repacked(*ops, up[e].m, stores[2 * e + 1], tc.ctx()) : up[e].m;
                        if (n_tok[e] == 0) continue;
                        ExpertGroup g;
                        g.ws[0] = &m[2 * e];
                        g.ws[1] = &m[2 * e + 1];
                        g.row0 = row0[e];
                        g.n_tok = n_tok[e];
                        groups.push_back(g);
                    }
                    std::vector<float> yg(spec_g.size(), -1.0f), yu(spec_u.size(), -1.0f);
                    float* ys[2] = {yg.data(), yu.data()};
                    const Acts a = ops->prepare(x.data(), n_rows_x, n_in, type, tc.ctx());
                    ASSERT_TRUE(a.quantized);
                    ops->matmul_experts(groups.data(), static_cast<int>(groups.size()), 2, a, ys,
                                        tc.ctx());
                    for (size_t i = 0; i < spec_g.size(); ++i) {
                        ASSERT_TRUE(same_bits(yg[i], spec_g[i]))
                            << "gate row " << i / n_out << " col " << i % n_out;
                        ASSERT_TRUE(same_bits(yu[i], spec_u[i]))
                            << "up row " << i / n_out << " col " << i % n_out;
                    }
                }
            }
        }
    }
}

// Blocks of activations from 1e-12 to 1e4 in magnitude: the f16 scales
// (and Q4_1's f16 block sums) of the small ones are subnormal or zero, of the
// large ones near the f16 range's top. The fast quantizers round them as the
// spec does, bit for bit, at every magnitude.
TEST(Matmul, ActivationScalesRoundAsTheSpecAtEveryMagnitude) {
    HR_REQUIRE_FAST_BACKEND();
    const int64_t n_rows = 16, n_cols = 32 * 40, n_tokens = 2;
    std::vector<float> x = random_acts(n_tokens, n_cols, 71);
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t b = 0; b < n_cols / 32; ++b)
            for (int j = 0; j < 32; ++j)
                x[static_cast<size_t>(t * n_cols + b * 32 + j)] *=
                    std::pow(10.0f, -12.0f + 16.0f * static_cast<float>(b) / 39.0f + 0.3f * t);
    TestContext tc(2, static_cast<uint64_t>(n_cols), n_tokens);
    std::vector<uint8_t> store;
    for (const TensorType type : {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q8_0}) {
        const Weights w = random_weights(type, n_rows, n_cols, 72);
        std::vector<float> spec(static_cast<size_t>(n_tokens * n_rows));
        ref::matmul_int(w.m, x.data(), n_tokens, ActPrecision::Int8, spec.data());
        for (const Ops* ops : fast_tables()) {
            SCOPED_TRACE(std::string(name(type)) + " " + ops->name);
            const Matrix m = repacked(*ops, w.m, store, tc.ctx());
            for (const int64_t nt : {int64_t{1}, n_tokens}) {
                const auto y = run(*ops, m, x, nt, tc.ctx());
                for (size_t i = 0; i < y.size(); ++i)
                    ASSERT_TRUE(same_bits(y[i], spec[i])) << "element " << i;
            }
        }
    }
}

// Q8_0 quants at both ends of s8, -128 included (which ggml's quantizer
// never writes, but a file may hold): with Int8 activations every fast path
// multiplies them exactly.
TEST(Matmul, Q8_0WeightsAtTheEndsOfTheirRangeAreExact) {
    HR_REQUIRE_FAST_BACKEND();
    const int64_t n_rows = 24, n_cols = 256, n_tokens = 13;
    Weights w = random_weights(TensorType::Q8_0, n_rows, n_cols, 81);
    std::mt19937 rng(82);
    const int8_t ends[4] = {-128, -127, 127, 126};
    for (int64_t r = 0; r < n_rows; ++r)
        for (int64_t b = 0; b < n_cols / 32; ++b)
            for (int j = 0; j < 32; ++j)
                if (rng() % 2)
                    w.bytes[static_cast<size_t>(r * w.m.row_bytes + b * 34 + 2 + j)] =
                        static_cast<uint8_t>(ends[rng() % 4]);
    // Each block's largest activation quantizes to +-127.
    const auto x = random_acts(n_tokens, n_cols, 83);
    std::vector<float> spec(static_cast<size_t>(n_tokens * n_rows));
    ref::matmul_int(w.m, x.data(), n_tokens, ActPrecision::Int8, spec.data());
    TestContext tc(2, static_cast<uint64_t>(n_cols), n_tokens);
    std::vector<uint8_t> store;
    for (const Ops* ops : fast_tables()) {
        for (const bool packed : {false, true}) {
            SCOPED_TRACE(std::string(ops->name) + (packed ? " repacked" : " as stored"));
            const Matrix m = packed ? repacked(*ops, w.m, store, tc.ctx()) : w.m;
            for (const int64_t nt : {int64_t{1}, int64_t{4}, n_tokens}) {
                const auto y = run(*ops, m, x, nt, tc.ctx());
                for (size_t i = 0; i < y.size(); ++i)
                    ASSERT_TRUE(same_bits(y[i], spec[i])) << nt << " tokens, element " << i;
            }
        }
    }
}

// check(ops, m, spec) for each integer activation precision, fast table
// and w as stored and repacked: spec is ref::matmul_int's y for x's
// n_tokens tokens at that precision (set in tc's Context).
template <class Check>
void for_each_int_path(const Weights& w, const std::vector<float>& x, int64_t n_tokens,
                       TestContext& tc, Check&& check) {
    std::vector<uint8_t> store;
    for (const ActPrecision quant : {ActPrecision::Int8, ActPrecision::Int16}) {
        std::vector<float> spec(static_cast<size_t>(n_tokens * w.m.n_rows));
        ref::matmul_int(w.m, x.data(), n_tokens, quant, spec.data());
        tc.ctx().act_precision = quant;
        for (const Ops* ops : fast_tables()) {
            for (const bool packed : {false, true}) {
                SCOPED_TRACE(std::string(ops->name) + (packed ? " repacked" : " as stored"));
                check(*ops, packed ? repacked(*ops, w.m, store, tc.ctx()) : w.m, spec);
            }
        }
    }
}

// Q4_K at the top of its range: every level 15 and every 6-bit scale and
// min 63, activations all +-1 (each quantizes to +-127), of one sign or
// mixed. Every partial sum the kernels keep is then its largest (the high
// nibbles' taken 16 times over among them): each token alone, as a decode
// step runs it, bit for bit against the spec.
TEST(Matmul, Q4_KLevelsAndScalesAtTheirTopAreExact) {
    HR_REQUIRE_FAST_BACKEND();
    const int64_t n_rows = 37, n_cols = 512, n_tokens = 4;
    Weights w = random_weights(TensorType::Q4_K, n_rows, n_cols, 101);
    for (int64_t r = 0; r < n_rows; ++r)
        for (int64_t b = 0; b < n_cols / 256; ++b)  // past d and dmin: scales, mins, levels
            std::memset(w.bytes.data() + r * w.m.row_bytes + b * 144 + 4, 0xFF, 140);
    std::vector<float> x(static_cast<size_t>(n_tokens * n_cols));
    for (int64_t i = 0; i < n_cols; ++i) {
        x[i] = 1.0f;
        x[n_cols + i] = -1.0f;
        x[2 * n_cols + i] = i % 2 ? 1.0f : -1.0f;
        x[3 * n_cols + i] = (i / 32) % 2 ? 1.0f : -1.0f;  // a sign per sub-block
    }
    TestContext tc(2, static_cast<uint64_t>(n_cols), n_tokens);
    for_each_int_path(w, x, n_tokens, tc, [&](const Ops& ops, const Matrix& m, const auto& spec) {
        for (int64_t t = 0; t < n_tokens; ++t) {
            const std::vector<float> xt(x.begin() + t * n_cols, x.begin() + (t + 1) * n_cols);
            const auto y = run(ops, m, xt, 1, tc.ctx());
            for (int64_t i = 0; i < n_rows; ++i)
                ASSERT_TRUE(same_bits(y[i], spec[t * n_rows + i]))
                    << "token " << t << ", row " << i << ": " << y[i] << ", spec "
                    << spec[t * n_rows + i];
        }
    });
}

// MXFP4 exponents at both ends (0 and 1 give subnormal scales, 255 the
// largest, 2^127, as ggml reads it) and between, every nibble random: each
// row one exponent, both activation precisions, bit for bit.
TEST(Matmul, Mxfp4ScalesAtTheEndsOfTheirRangeAreExact) {
    HR_REQUIRE_FAST_BACKEND();
    const uint8_t exponents[] = {0, 1, 2, 3, 100, 127, 128, 200, 253, 254, 255};
    const auto n_rows = static_cast<int64_t>(std::size(exponents));
    const int64_t n_cols = 256, n_tokens = 5;
    Weights w = random_weights(TensorType::MXFP4, n_rows, n_cols, 91);
    std::mt19937 rng(92);
    for (int64_t r = 0; r < n_rows; ++r) {
        for (int64_t b = 0; b < n_cols / 32; ++b) {
            uint8_t* blk = w.bytes.data() + r * w.m.row_bytes + b * 17;
            blk[0] = exponents[r];
            for (int j = 1; j < 17; ++j) blk[j] = static_cast<uint8_t>(rng());
        }
    }
    const auto x = random_acts(n_tokens, n_cols, 93);
    TestContext tc(2, static_cast<uint64_t>(n_cols), n_tokens);
    for_each_int_path(w, x, n_tokens, tc, [&](const Ops& ops, const Matrix& m, const auto& spec) {
        for (const int64_t nt : {int64_t{1}, n_tokens}) {
            const auto y = run(ops, m, x, nt, tc.ctx());
            for (size_t i = 0; i < y.size(); ++i)
                ASSERT_TRUE(same_bits(y[i], spec[i]))
                    << nt << " tokens, exponent " << int{exponents[i % n_rows]} << ": " << y[i]
                    << ", spec " << spec[i];
        }
    });
}

// Q8_K (llama.cpp's activation type, which a file may still hold) has no
// integer kernel: the fast tables hand it to the reference.
TEST(Matmul, TypesWithoutFastKernelsFallBackToTheReference) {
    HR_REQUIRE_FAST_BACKEND();
    const int64_t n_rows = 9, n_cols = 256;
    std::vector<uint8_t> bytes(row_bytes(TensorType::Q8_K, n_cols) * n_rows);
    std::mt19937 rng(4);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng() & 0x3F);  // small scales
    const Matrix m{bytes.data(), TensorType::Q8_K, n_rows, n_cols,
                   row_bytes(TensorType::Q8_K, n_cols)};
    const auto x = random_acts(2, n_cols, 9);
    TestContext tc(2, n_cols, 2);
    const auto exact = run(ref_ops(), m, x, 2, tc.ctx());
    for (const Ops* ops : fast_tables()) {
        const auto y = run(*ops, m, x, 2, tc.ctx());
        for (size_t i = 0; i < y.size(); ++i) ASSERT_TRUE(same_bits(y[i], exact[i]));
    }
}

}  // namespace
}  // namespace headroom::kernels

namespace headroom::kernels {
namespace {

// Whether the kernel lists `flag` among the first CPU's flags in
// /proc/cpuinfo; nullopt where that cannot be read.
[[maybe_unused]] std::optional<bool> cpuinfo_has_flag(const std::string& flag) {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("flags", 0) != 0) continue;
        std::istringstream words(line.substr(line.find(':') + 1));
        for (std::string w; words >> w;)
            if (w == flag) return true;
        return false;
    }
    return std::nullopt;
}

// Whether the CPU has AVX-VNNI by another reading than dispatch.cpp's:
// GCC's CPUID check, or where the compiler has none (clang 14) the kernel's
// flags, which kernels older than 5.11 do not list.
std::optional<bool> cpu_has_avx_vnni() {
#if defined(__clang__)
    return cpuinfo_has_flag("avx_vnni");
#else
    return __builtin_cpu_supports("avxvnni") != 0;
#endif
}

// Every backend whose instructions the CPU has, and the widest of them
// unless HEADROOM_ISA names one.
TEST(Dispatch, OffersEveryBackendThisCpuRuns) {
    EXPECT_EQ(avx2_ops() != nullptr, __builtin_cpu_supports("avx2") != 0);
    if (const auto vnni = cpu_has_avx_vnni()) {
        EXPECT_EQ(avxvnni_ops() != nullptr, *vnni && avx2_ops());
    }
    EXPECT_EQ(avx512_ops() != nullptr, __builtin_cpu_supports("avx512vnni") != 0);
    const char* best = avx512_ops() ? "avx512" : avxvnni_ops() ? "avxvnni" : "avx2";
    if (avx2_ops()) {
        EXPECT_STREQ(ops().name, std::getenv("HEADROOM_ISA") ? std::getenv("HEADROOM_ISA") : best);
    }
}

// HEADROOM_DECODE_PREFETCH overrides the CPU's distance; anything but whole
// cache lines up to 64 KiB is refused with the variable named.
TEST(Dispatch, DecodePrefetchDistanceIsTheCpusOrTheOneAskedFor) {
    const char* old = std::getenv("HEADROOM_DECODE_PREFETCH");
    const bool was_set = old != nullptr;  // `old` dies with the next setenv
    const std::string saved = was_set ? old : "";
    ::unsetenv("HEADROOM_DECODE_PREFETCH");
    EXPECT_EQ(decode_prefetch_bytes(ref_ops()), 0u);  // the reference streams nothing
    // dispatch.cpp: 4 KiB ahead on AMD's AVX2, 2.5 KiB on Intel's cores, and
    // nothing on AMD's AVX-512, whose hardware prefetchers keep up.
    const bool amd = __builtin_cpu_is("amd");
    for (const Ops* o : {avx2_ops(), avxvnni_ops()}) {
        if (o) {
            EXPECT_EQ(decode_prefetch_bytes(*o), amd ? 4096u : 2560u) << o->name;
        }
    }
    if (const Ops* o = avx512_ops()) {
        EXPECT_EQ(decode_prefetch_bytes(*o), amd ? 0u : 2560u);
    }
    for (const auto& [value, bytes] :
         {std::pair{"0", 0ull}, std::pair{"1024", 1024ull}, std::pair{"65536", 65536ull}}) {
        ::setenv("HEADROOM_DECODE_PREFETCH", value, 1);
        EXPECT_EQ(decode_prefetch_bytes(ops()), bytes) << value;
    }
    for (const char* bad : {"100", "65600", "-64", "4k", " 64", "99999999999999999999999"}) {
        ::setenv("HEADROOM_DECODE_PREFETCH", bad, 1);
        try {
            decode_prefetch_bytes(ops());
            ADD_FAILURE() << bad << " was taken";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("HEADROOM_DECODE_PREFETCH=" + std::string(bad)),
                      std::string::npos)
                << e.what();
        }
    }
    if (was_set)
        ::setenv("HEADROOM_DECODE_PREFETCH", saved.c_str(), 1);
    else
        ::unsetenv("HEADROOM_DECODE_PREFETCH");
}

// Says at the end of the run which kernels it exercised.
class ExercisedBackends : public ::testing::Environment {
  public:
    void TearDown() override {
        const auto fast = test::fast_tables();
        std::string names;
        for (const Ops* o : fast) names += std::string(names.empty() ? "" : ", ") + o->name;
        if (fast.empty())
            std::printf("kernel tests: reference only; fast kernels skipped: %s\n",
                        test::skip_reason().c_str());
        else
            std::printf("kernel tests: %s against the reference\n", names.c_str());
    }
};
const auto* const kExercised = ::testing::AddGlobalTestEnvironment(new ExercisedBackends);

}  // namespace
}  // namespace headroom::kernels
