// Every Vulkan shader against the scalar reference on random inputs: odd
// sizes and tails, several sequences with ragged lengths and block tables,
// sliding windows, every weight and KV type. Where the shader computes what
// the reference computes, operation for operation (dequantized weights,
// embeddings, KV stores, copies, adds), the results must be equal bit for
// bit; where the order of a sum or a transcendental function differs, each
// test states its bound and where it comes from (u = 2^-24, the unit
// roundoff of f32). Reported skipped where this machine has no Vulkan device.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>

#include "core/error.h"
#include "core/units.h"
#include "engine/batch.h"
#include "engine/runner.h"
#include "format/gguf-reader.h"
#include "format/gguf-writer.h"
#include "kernels/cpu/cpu-backend.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/ref/quant.h"
#include "kernels/vulkan/vulkan-backend.h"
#include "memory/kv-cache.h"
#include "memory/terms.h"
#include "tools/synth.h"

namespace headroom::kernels {
namespace {

constexpr double kU = 1.0 / (1 << 24);  // f32 unit roundoff

// One backend for the whole binary (shaders compile once).
struct Gpu {
    Ledger host;
    std::unique_ptr<VulkanBackend> be;
    std::string why;  // no device
    DevPtr step_view;
    Gpu() {
        if (vk::list_devices(&why).empty()) return;
        VulkanOptions o;
        o.progress = false;
        o.device_memory_bytes = 1ull << 30;
        o.mem_fraction = 1.0;
        be = std::make_unique<VulkanBackend>(host, o);
        step_view = be->allocate_step_view(1 << 20);
        set_workspace();
    }
    // The tests' workspace (again after a test's Runner set its own).
    void set_workspace() {
        Workspace ws;
        ws.step_view = step_view;
        ws.step_view_bytes = 1 << 20;
        ws.logits_host_bytes = 1 << 16;
        be->set_workspace(ws);
    }
};

Gpu& gpu() {
    static Gpu g;
    return g;
}

#define HR_REQUIRE_VULKAN()                                                    \
    do {                                                                       \
        if (!gpu().be) GTEST_SKIP() << "no Vulkan device here: " << gpu().why; \
    } while (0)

// A device buffer holding v (freed with the test).
struct Buf {
    DevPtr p;
    size_t n;
    explicit Buf(const std::vector<float>& v) : n(v.size()) {
        p = gpu().be->allocate(Term::Activations, n * 4, "test buffer");
        gpu().be->upload(p, v.data(), n * 4);
    }
    explicit Buf(size_t n_floats) : n(n_floats) {
        p = gpu().be->allocate(Term::Activations, n * 4, "test buffer");
    }
    ~Buf() { gpu().be->release(p); }
    std::vector<float> get() const {
        std::vector<float> v(n);
        gpu().be->download(v.data(), p, n * 4);
        return v;
    }
};

// Runs `ops` as one step of the backend over `view`.
template <class Fn>
void step(const StepView& view, Fn&& ops) {
    gpu().be->begin_step(view);
    ops(*gpu().be);
    gpu().be->end_step({}, 0);
}

// A view holding only token ids (or row indices) and positions.
struct Ids {
    std::vector<uint32_t> words;
    StepView view;
    Ids(const std::vector<uint32_t>& ids, const std::vector<uint32_t>& positions = {}) {
        words = ids;
        words.insert(words.end(), positions.begin(), positions.end());
        view.n_tokens = static_cast<uint32_t>(ids.size());
        view.n_logit_rows = static_cast<uint32_t>(ids.size());
        view.at.tokens = 0;
        view.at.logit_rows = 0;
        view.at.positions = static_cast<uint32_t>(ids.size());
        view.words = words.data();
        view.n_words = static_cast<uint32_t>(words.size());
    }
};

std::vector<float> random_vec(size_t n, uint32_t seed, float sd = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng);
    return v;
}

bool same_bits(float a, float b) {
    return std::memcmp(&a, &b, 4) == 0;
}

// A weight matrix of `type` from random rows through the reference
// quantizer, uploaded; `f32` holds its rows dequantized by the reference.
struct Mat {
    std::vector<uint8_t> bytes;
    std::vector<float> f32;
    Weight w;
    Mat(TensorType type, int64_t n_rows, int64_t n_cols, uint32_t seed) {
        const uint64_t rb = row_bytes(type, static_cast<uint64_t>(n_cols));
        bytes.resize(rb * n_rows);
        f32.resize(static_cast<size_t>(n_rows * n_cols));
        const auto v = random_vec(static_cast<size_t>(n_rows * n_cols), seed, 0.05f);
        for (int64_t r = 0; r < n_rows; ++r) {
            ref::quantize_row(type, v.data() + r * n_cols, bytes.data() + r * rb, n_cols);
            ref::dequantize_row(type, bytes.data() + r * rb, f32.data() + r * n_cols, n_cols);
        }
        VulkanBackend& be = *gpu().be;
        be.begin_weights({}, false);
        w = be.upload_matrix({bytes.data(), type, n_rows, n_cols, rb}, WeightUse::MatmulAndRows);
        be.end_weights();
    }
};

Weight upload_vector(const std::vector<float>& v) {
    VulkanBackend& be = *gpu().be;
    be.begin_weights({}, false);
    const Weight w = be.upload_vector(v.data(), static_cast<int64_t>(v.size()), v.size() * 4);
    be.end_weights();
    return w;
}

// ---- matmul and the embedding ---------------------------------------------------

class VulkanMatmul : public ::testing::TestWithParam<TensorType> {};

// y (n_tokens, m's rows) = x @ m^T, one matmul step on the GPU.
std::vector<float> gpu_matmul(const Mat& m, const std::vector<float>& x, int64_t n_tokens) {
    Buf xb(x), yb(static_cast<size_t>(n_tokens * m.w.n_rows));
    const Weight* ws[] = {&m.w};
    const DevPtr ys[] = {yb.p};
    step({}, [&](Backend& be) { be.matmul(ws, xb.p, n_tokens, ys); });
    return yb.get();
}

// The shader's weights are the reference's bit for bit; its sum of K
// products (16 fma chains over contiguous slices of the row, then their 16
// partial sums added in turn) differs from the exact sum by at most
// (K + 16) u Σ|w x| (each of at most K + 16 roundings is within u of a
// partial sum bounded by Σ|w x|), so against the exact (double) dot product
// of the same weights: |y - ref| <= (K + 16) u Σ|w x|. Widths of fewer and
// of more chunks of 32 than slices; 1 token (matrix × vector), 3 (a few
// tokens a workgroup) and 70 (tiles of 64 tokens and a tail).
TEST_P(VulkanMatmul, MatchesTheExactDotOfTheReferenceWeightsWithinTheRoundingBound) {
    HR_REQUIRE_VULKAN();
    const TensorType type = GetParam();
    const bool kquant = traits(type).block_size == 256;
    const bool flt = type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16;
    const int64_t n_rows = 37;
    for (const int64_t n_cols : {flt ? 100 : kquant ? 256 : 96, kquant ? 768 : 672}) {
        const Mat m(type, n_rows, n_cols, 11);
        for (const int64_t n_tokens : {1, 3, 70}) {
            SCOPED_TRACE(testing::Message() << n_cols << " columns, " << n_tokens << " tokens");
            const auto x = random_vec(static_cast<size_t>(n_tokens * n_cols), 5);
            const auto y = gpu_matmul(m, x, n_tokens);
            for (int64_t t = 0; t < n_tokens; ++t)
                for (int64_t r = 0; r < n_rows; ++r) {
                    double exact = 0, mag = 0;
                    for (int64_t k = 0; k < n_cols; ++k) {
                        const double p = double(m.f32[r * n_cols + k]) * x[t * n_cols + k];
                        exact += p;
                        mag += std::fabs(p);
                    }
                    ASSERT_NEAR(y[t * n_rows + r], exact, (n_cols + 16) * kU * mag + 1e-30)
                        << "token " << t << " row " << r;
                }
        }
    }
}

TEST_P(VulkanMatmul, ABatchGivesEachTokenWhatItGetsAlone) {
    HR_REQUIRE_VULKAN();
    const TensorType type = GetParam();
    const int64_t n_rows = 53, n_cols = traits(type).block_size == 256 ? 768 : 672;
    const Mat m(type, n_rows, n_cols, 3);
    // Each kernel: a few tokens (workgroups of 4 and a tail), and tiles of 64
    // tokens and a tail, against matrix × vector.
    for (const int64_t n_tokens : {7, 70}) {
        SCOPED_TRACE(testing::Message() << n_tokens << " tokens");
        const auto x = random_vec(static_cast<size_t>(n_tokens * n_cols), 8);
        const auto all = gpu_matmul(m, x, n_tokens);
        for (int64_t t = 0; t < n_tokens; ++t) {
            const auto one = gpu_matmul(
                m, std::vector<float>(x.begin() + t * n_cols, x.begin() + (t + 1) * n_cols), 1);
            for (int64_t r = 0; r < n_rows; ++r)
                ASSERT_TRUE(same_bits(one[r], all[t * n_rows + r]))
                    << "token " << t << " row " << r;
        }
    }
}

// get_rows dequantizes as the reference does and multiplies once: equal bits.
TEST_P(VulkanMatmul, GetRowsIsTheReferenceRowTimesTheScale) {
    HR_REQUIRE_VULKAN();
    const TensorType type = GetParam();
    const int64_t n_rows = 20, n_cols = traits(type).block_size == 256 ? 256 : 96;
    const Mat m(type, n_rows, n_cols, 4);
    const std::vector<uint32_t> ids = {3, 0, 19, 3, 7};
    const Ids view(ids);
    for (const float scale : {1.0f, 25.3f}) {
        Buf out(ids.size() * n_cols);
        step(view.view, [&](Backend& be) { be.get_rows(m.w, view.view, scale, out.p); });
        const auto got = out.get();
        for (size_t t = 0; t < ids.size(); ++t)
            for (int64_t c = 0; c < n_cols; ++c) {
                float want = m.f32[ids[t] * n_cols + c];
                if (scale != 1.0f) want *= scale;
                ASSERT_TRUE(same_bits(got[t * n_cols + c], want)) << "row " << t << " col " << c;
            }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, VulkanMatmul,
                         ::testing::Values(TensorType::F32, TensorType::F16, TensorType::BF16,
                                           TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                           TensorType::Q5_0, TensorType::Q5_1, TensorType::Q4_K,
                                           TensorType::Q5_K, TensorType::Q6_K),
                         [](const auto& info) { return std::string(name(info.param)); });

// ---- elementwise ------------------------------------------------------------------

// RMSNorm: the sum of squares in f32 (128 chains of n / 128, a 7-level tree:
// relative error <= (n / 128 + 7) u against the reference's double sum), a
// square root and a division within 2 and 2.5 ulp (Vulkan's limits), and two
// products rounded as the reference rounds them: within (n / 256 + 16) u
// relative of the reference.
TEST(VulkanOps, RmsNormMatchesTheReference) {
    HR_REQUIRE_VULKAN();
    for (const int64_t n : {64, 576, 1000}) {
        const int64_t n_rows = 7;
        const auto x = random_vec(static_cast<size_t>(n_rows * n), 1);
        const auto w = random_vec(static_cast<size_t>(n), 2);
        const Weight wv = upload_vector(w);
        for (const float offset : {0.0f, 1.0f}) {
            Buf xb(x), out(x.size());
            step({}, [&](Backend& be) { be.rmsnorm(xb.p, wv, offset, 1e-6f, n_rows, n, out.p); });
            const auto got = out.get();
            std::vector<float> want(x.size());
            rmsnorm(x.data(), w.data(), offset, 1e-6f, n_rows, n, want.data());
            for (size_t i = 0; i < x.size(); ++i)
                ASSERT_NEAR(got[i], want[i], (n / 256.0 + 16) * kU * std::fabs(want[i]) + 1e-30)
                    << "n " << n << " element " << i;
        }
    }
}

// add and add_bias are one rounded add, as on the CPU: equal bits. SiLU and
// GELU take e^x (within 3 + 2|x| ulp in Vulkan) and a division (2.5 ulp):
// within (8 + 2|2g|) u of |g × up| (GELU: of 0.5 |g| (1 + |tanh|) |up|).
TEST(VulkanOps, ElementwiseOpsMatchTheReference) {
    HR_REQUIRE_VULKAN();
    const size_t n = 70001;  // past one workgroup row, with a tail
    const auto g = random_vec(n, 3, 3.0f), up = random_vec(n, 4);
    {
        Buf xb(g), yb(up);
        step({}, [&](Backend& be) { be.add(xb.p, yb.p, static_cast<int64_t>(n)); });
        const auto got = xb.get();
        for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(got[i], g[i] + up[i])) << i;
    }
    {
        const int64_t cols = 97, rows = static_cast<int64_t>(n) / cols;
        const std::vector<float> bias(up.begin(), up.begin() + cols);
        const Weight b = upload_vector(bias);
        Buf xb(g);
        step({}, [&](Backend& be) { be.add_bias(xb.p, b, rows); });
        const auto got = xb.get();
        for (int64_t i = 0; i < rows * cols; ++i)
            ASSERT_TRUE(same_bits(got[i], g[i] + bias[i % cols])) << i;
    }
    for (const bool gelu : {false, true}) {
        SCOPED_TRACE(gelu ? "gelu" : "silu");
        Buf gb(g), ub(up);
        step({}, [&](Backend& be) {
            gelu ? be.gelu_mul(gb.p, ub.p, static_cast<int64_t>(n))
                 : be.silu_mul(gb.p, ub.p, static_cast<int64_t>(n));
        });
        const auto got = gb.get();
        std::vector<float> want = g;
        gelu ? kernels::gelu_mul(want.data(), up.data(), static_cast<int64_t>(n))
             : kernels::silu_mul(want.data(), up.data(), static_cast<int64_t>(n));
        for (size_t i = 0; i < n; ++i) {
            const double mag = std::fabs(double(g[i]) * up[i]);
            ASSERT_NEAR(got[i], want[i], (8 + 4 * std::fabs(g[i])) * kU * mag + 1e-30) << i;
        }
    }
}

// RoPE: the angle is pos × freq formed exactly (fma) from a table the host
// computed in double, reduced by a three-float pi/2, and sin and cos come
// from polynomials within 2 ulp: each of c and s is within 4u of the
// reference's correctly rounded values, so each rotated element is within
// 8u (|x0| + |x1|) of the reference's.
TEST(VulkanOps, RopeMatchesTheReferenceAtLongPositions) {
    HR_REQUIRE_VULKAN();
    const uint32_t n_head = 3, head_dim = 64;
    const std::vector<uint32_t> positions = {0, 1, 17, 511, 4096, 8191, 32768, 131071};
    const auto freq = random_vec(16, 9);
    std::vector<float> factors(16);
    for (size_t i = 0; i < 16; ++i) factors[i] = 1.0f + std::fabs(freq[i]);
    const Weight fw = upload_vector(factors);
    for (const RopeMode mode : {RopeMode::Normal, RopeMode::NeoX})
        for (const uint32_t n_rot : {64u, 32u})
            for (const bool with_factors : {false, true}) {
                if (with_factors && n_rot != 32) continue;  // factors are n_rot / 2 long
                SCOPED_TRACE(testing::Message()
                             << (mode == RopeMode::NeoX ? "neox" : "normal") << " n_rot " << n_rot
                             << " factors " << with_factors);
                RopeArgs args{n_head, head_dim, n_rot, 500000.0f, 0.25f, nullptr, mode};
                const auto x = random_vec(positions.size() * n_head * head_dim, 10);
                const Ids view(positions, positions);
                Buf xb(x);
                step(view.view, [&](Backend& be) {
                    be.rope(xb.p, view.view, args, with_factors ? fw : Weight{});
                });
                const auto got = xb.get();
                std::vector<float> want = x;
                RopeArgs ref_args = args;
                ref_args.freq_factors = with_factors ? factors.data() : nullptr;
                kernels::rope(want.data(), static_cast<int64_t>(positions.size()), positions.data(),
                              ref_args);
                for (size_t t = 0; t < positions.size(); ++t)
                    for (uint32_t h = 0; h < n_head; ++h)
                        for (uint32_t i = 0; i < head_dim; ++i) {
                            const size_t at = (t * n_head + h) * head_dim;
                            const uint32_t half = n_rot / 2;
                            const uint32_t pair =
                                i < n_rot
                                    ? (mode == RopeMode::NeoX ? (i < half ? i + half : i - half)
                                                              : i ^ 1u)
                                    : i;
                            const double mag = std::fabs(x[at + i]) + std::fabs(x[at + pair]);
                            ASSERT_NEAR(got[at + i], want[at + i], 8 * kU * mag + 1e-30)
                                << "position " << positions[t] << " head " << h << " dim " << i;
                        }
            }
}

// Ops the backend runs in one dispatch where they follow each other in a
// step give the bits each gives alone: matrices of one type reading the same
// input (q, k, v), rope of q then k, and a residual add then the next norm.
// The counts are the step's dispatches: 1 where they fuse; 2 for matrices
// of two types.
TEST(VulkanOps, FusedDispatchesGiveTheBitsOfEachOpAlone) {
    HR_REQUIRE_VULKAN();
    const int64_t n_cols = 256, T = 3;
    const auto x = random_vec(static_cast<size_t>(T * n_cols), 31);
    auto same = [](const std::vector<float>& a, const std::vector<float>& b, const char* what) {
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i)
            ASSERT_TRUE(same_bits(a[i], b[i])) << what << " element " << i;
    };
    for (const TensorType v_type : {TensorType::Q4_0, TensorType::Q6_K}) {
        const Mat q(TensorType::Q4_0, 64, n_cols, 32), k(TensorType::Q4_0, 32, n_cols, 33),
            v(v_type, 48, n_cols, 34);
        Buf xb(x), qb(T * 64), kb(T * 32), vb(T * 48);
        const Weight* ws[] = {&q.w, &k.w, &v.w};
        const DevPtr ys[] = {qb.p, kb.p, vb.p};
        step({}, [&](Backend& be) { be.matmul(ws, xb.p, T, ys); });
        EXPECT_EQ(gpu().be->last_step().n_dispatches, v_type == TensorType::Q4_0 ? 1u : 2u);
        const std::vector<float> together[] = {qb.get(), kb.get(), vb.get()};
        for (size_t i = 0; i < 3; ++i) {
            Buf alone(together[i].size());
            const Weight* w1[] = {ws[i]};
            const DevPtr y1[] = {alone.p};
            step({}, [&](Backend& be) { be.matmul(w1, xb.p, T, y1); });
            same(together[i], alone.get(), "matmul");
        }
    }
    {
        const std::vector<uint32_t> positions = {5, 700, 4099};
        const Ids view(positions, positions);
        RopeArgs rq{4, 64, 64, 10000.0f, 1.0f, nullptr, RopeMode::NeoX};
        RopeArgs rk = rq;
        rk.n_head = 2;
        const auto qv = random_vec(T * 4 * 64, 35), kv = random_vec(T * 2 * 64, 36);
        Buf q2(qv), k2(kv), q1(qv), k1(kv);
        step(view.view, [&](Backend& be) {
            be.rope(q2.p, view.view, rq, {});
            be.rope(k2.p, view.view, rk, {});
        });
        EXPECT_EQ(gpu().be->last_step().n_dispatches, 1u);
        step(view.view, [&](Backend& be) { be.rope(q1.p, view.view, rq, {}); });
        step(view.view, [&](Backend& be) { be.rope(k1.p, view.view, rk, {}); });
        same(q2.get(), q1.get(), "rope q");
        same(k2.get(), k1.get(), "rope k");
    }
    {
        const auto yv = random_vec(static_cast<size_t>(T * n_cols), 37);
        const Weight w = upload_vector(random_vec(n_cols, 38));
        Buf x2(x), y2(yv), x1(x), y1(yv), out2(T * n_cols), out1(T * n_cols);
        step({}, [&](Backend& be) {
            be.add(x2.p, y2.p, T * n_cols);
            // out over the residual, as a layer does
            be.rmsnorm(x2.p, w, 0.0f, 1e-6f, T, n_cols, y2.p);
        });
        EXPECT_EQ(gpu().be->last_step().n_dispatches, 1u);
        step({}, [&](Backend& be) { be.add(x1.p, y1.p, T * n_cols); });
        step({}, [&](Backend& be) { be.rmsnorm(x1.p, w, 0.0f, 1e-6f, T, n_cols, y1.p); });
        same(x2.get(), x1.get(), "x after the add");
        same(y2.get(), y1.get(), "the norm of x");
    }
}

TEST(VulkanOps, GatherRowsAndCopyBlockAreExact) {
    HR_REQUIRE_VULKAN();
    const int64_t n_cols = 577;
    const auto x = random_vec(9 * n_cols, 12);
    const std::vector<uint32_t> rows = {8, 0, 4};
    const Ids view(rows);
    Buf xb(x), out(rows.size() * n_cols);
    step(view.view, [&](Backend& be) { be.gather_rows(xb.p, n_cols, view.view, out.p); });
    const auto got = out.get();
    for (size_t r = 0; r < rows.size(); ++r)
        for (int64_t c = 0; c < n_cols; ++c)
            ASSERT_TRUE(same_bits(got[r * n_cols + c], x[rows[r] * n_cols + c]));
    Buf dst(std::vector<float>(x.size(), 0.0f));
    gpu().be->copy_block(dst.p + 4 * 100, xb.p + 4 * 200, 4 * 1000);
    const auto copied = dst.get();
    for (size_t i = 0; i < 1000; ++i) ASSERT_TRUE(same_bits(copied[100 + i], x[200 + i]));
    EXPECT_EQ(copied[99], 0.0f);
    EXPECT_EQ(copied[1100], 0.0f);
}

// ---- KV cache and attention -------------------------------------------------------

struct Shape {
    uint32_t n_head, n_head_kv, head_dim, block_size, window;
};

ModelDesc model_of(const Shape& s) {
    ModelDesc m;
    m.hp.arch = "llama";
    m.hp.n_vocab = 100;
    m.hp.n_ctx_train = 1024;
    m.hp.n_embd = s.n_head * s.head_dim;
    m.hp.n_layer = 2;
    m.hp.n_ff = 64;
    m.hp.n_head = s.n_head;
    m.hp.n_head_kv = s.n_head_kv;
    m.hp.head_dim_k = m.hp.head_dim_v = s.head_dim;
    m.hp.layer_is_swa = {s.window != 0, false};
    m.hp.sliding_window = s.window;
    return m;
}

// Sequences of `lens` tokens whose last `n_new` are this step's, in a cache on
// the GPU and one on the CPU with the same plan (so the same block ids); K and
// V of every position written by the GPU's store_kv, one step per sequence
// chunk, then the whole step's queries.
struct KvFixture {
    Ledger cpu_ledger;
    CpuBackend cpu{cpu_ledger, 1};
    MemoryPlan plan;
    std::unique_ptr<KvCache> gpu_cache, cpu_cache;
    std::vector<SeqKv> seqs, cpu_seqs;
    Batch batch;
    std::vector<uint32_t> words = std::vector<uint32_t>(1 << 16);
    StepView view;

    // `max_allocation`: the GPU's regions in pieces of at most that many
    // bytes (0: the device's limit, one piece).
    KvFixture(const Shape& s, KvDtype dtype, const std::vector<uint32_t>& lens,
              const std::vector<uint32_t>& n_new, uint64_t max_allocation = 0) {
        const ModelDesc m = model_of(s);
        EngineConfig c;
        c.max_model_len = 512;
        c.max_num_seqs = static_cast<uint32_t>(lens.size());
        c.block_size = s.block_size;
        c.max_num_batched_tokens = 512;
        c.kv_dtype = dtype;
        c.swa_full = true;
        BudgetSpec b;
        b.kv_cache_bytes = 8ull << 20;
        plan = plan_memory(m, c, b);
        {
            const uint64_t device_limit = gpu().be->max_allocation_bytes();
            if (max_allocation) gpu().be->limit_allocations(max_allocation);
            gpu_cache = std::make_unique<KvCache>(plan, m.hp, false, *gpu().be);
            gpu().be->limit_allocations(device_limit);
        }
        cpu_cache = std::make_unique<KvCache>(plan, m.hp, false, cpu);
        seqs.resize(lens.size());
        cpu_seqs.resize(lens.size());
        for (size_t i = 0; i < lens.size(); ++i) {
            EXPECT_TRUE(gpu_cache->grow(seqs[i], lens[i]));
            EXPECT_TRUE(cpu_cache->grow(cpu_seqs[i], lens[i]));
            EXPECT_EQ(seqs[i].tables, cpu_seqs[i].tables);
        }
        for (size_t i = 0; i < lens.size(); ++i) {
            const uint32_t si = batch.add_seq(&seqs[i]);
            for (uint32_t p = lens[i] - n_new[i]; p < lens[i]; ++p)
                batch.add_token(0, p, si, false);
        }
        view = make_step_view(batch, *gpu_cache, words);
    }

    // Every position of every sequence, as one batch: its view.
    StepView all_positions(Batch& all, std::vector<uint32_t>& w) const {
        for (size_t i = 0; i < seqs.size(); ++i) {
            const uint32_t si = all.add_seq(&seqs[i]);
            for (uint32_t p = 0; p < seqs[i].n_tokens; ++p) all.add_token(0, p, si, false);
        }
        return make_step_view(all, *gpu_cache, w);
    }

    // The GPU's KV regions, piece by piece, copied into the CPU cache's
    // (one piece each).
    void copy_to_cpu() {
        const KvLayout& l = gpu_cache->layout();
        for (uint32_t g = 0; g < plan.kv_groups.size(); ++g) {
            uint8_t* to = cpu.host(cpu_cache->layout().group_pieces[g][0]);
            const uint64_t n_blocks = plan.kv_groups[g].n_blocks;
            const uint64_t per_piece = l.group_piece_blocks[g];
            for (uint64_t i = 0; i < l.group_pieces[g].size(); ++i) {
                const uint64_t first = i * per_piece;
                const uint64_t n = std::min(per_piece, n_blocks - first);
                gpu().be->download(to + first * l.group_block_bytes[g], l.group_pieces[g][i],
                                   n * l.group_block_bytes[g]);
            }
        }
    }
};

// (KV dtype, shape, the region in pieces of at most 256 KiB or in one)
class VulkanKv : public ::testing::TestWithParam<std::tuple<KvDtype, int, bool>> {};

const Shape kShapes[] = {
    {8, 2, 64, 16, 0},   // GQA 4:1
    {4, 4, 32, 4, 0},    // MHA, small blocks: tiles of 64 keys cross blocks
    {6, 1, 64, 32, 37},  // MQA, a sliding window shorter than the context
    {4, 1, 256, 8, 29},  // heads as wide as Gemma 3's, a window
    {2, 2, 96, 16, 0},   // a head width that is not a power of two
};

// store_kv writes what the CPU's store_row writes: f32, f16 and bf16 round
// as core/half.h does, Q8_0 as quant_q8_0 (its division corrected to the
// correctly rounded quotient): equal bytes. Then attention over those keys
// against the reference: scores are dot products in another order (within
// head_dim u Σ|q k|), the softmax takes e^x per tile of 64 keys instead of
// per key (Vulkan's exp: within 3 + 2|x| ulp, |x| <= 30 here), and the
// output is a weighted mean of v: within (4 head_dim + 2 n_keys + 64) u
// max|v| of the reference.
TEST_P(VulkanKv, StoreKvWritesTheReferenceBytesAndAttentionMatchesTheReference) {
    HR_REQUIRE_VULKAN();
    const auto [dtype, shape_index, split] = GetParam();
    const Shape& s = kShapes[shape_index];
    // A prefill chunk continuing a prefix, a decode step deep in its context,
    // a prefill from position 0.
    KvFixture f(s, dtype, {70, 131, 19}, {23, 1, 19}, split ? 256 * KiB : 0);
    if (split) {
        const KvLayout& gl = f.gpu_cache->layout();
        for (size_t g = 0; g < gl.group_pieces.size(); ++g) {
            ASSERT_GT(gl.group_pieces[g].size(), 4u) << "group " << g << " is not split";
            ASSERT_LE(gl.group_piece_blocks[g] * gl.group_block_bytes[g], 256 * KiB);
        }
    }
    Batch all;
    std::vector<uint32_t> all_words(1 << 16);
    const StepView all_view = f.all_positions(all, all_words);
    const uint32_t T = all_view.n_tokens;
    const auto k = random_vec(T * s.n_head_kv * s.head_dim, 21);
    const auto v = random_vec(T * s.n_head_kv * s.head_dim, 22);
    Buf kb(k), vb(v);
    for (uint32_t layer = 0; layer < 2; ++layer)
        step(all_view,
             [&](Backend& be) { be.store_kv(f.gpu_cache->layout(), layer, all_view, kb.p, vb.p); });
    f.copy_to_cpu();
    // The CPU's store_row of each row the step wrote, against the GPU's
    // bytes there (only those: device memory is not cleared, so the other
    // slots hold whatever was there before).
    const KvLayout& l = f.cpu_cache->layout();
    std::vector<uint8_t> want(std::max(l.k_row_bytes, l.v_row_bytes));
    for (uint32_t layer = 0; layer < 2; ++layer)
        for (uint32_t t = 0; t < T; ++t) {
            const int32_t slot = all_view.slot(l.group_of_layer[layer], t);
            const int32_t block = slot / static_cast<int32_t>(s.block_size);
            const uint32_t r = static_cast<uint32_t>(slot) % s.block_size;
            const uint8_t* got = f.cpu.host(l.base_of_layer(layer));
            for (uint32_t h = 0; h < s.n_head_kv; ++h) {
                store_row(k.data() + (t * s.n_head_kv + h) * s.head_dim, s.head_dim, dtype,
                          want.data());
                ASSERT_EQ(std::memcmp(got + l.k_offset(layer, block, h) + r * l.k_row_bytes,
                                      want.data(), l.k_row_bytes),
                          0)
                    << "store_kv's K bytes differ from store_row's: layer " << layer << " token "
                    << t << " head " << h;
                store_row(v.data() + (t * s.n_head_kv + h) * s.head_dim, s.head_dim, dtype,
                          want.data());
                ASSERT_EQ(std::memcmp(got + l.v_offset(layer, block, h) + r * l.v_row_bytes,
                                      want.data(), l.v_row_bytes),
                          0)
                    << "store_kv's V bytes differ from store_row's: layer " << layer << " token "
                    << t << " head " << h;
            }
        }

    const uint32_t n_q = f.view.n_tokens;
    const auto q = random_vec(n_q * s.n_head * s.head_dim, 23, 2.0f);
    for (uint32_t layer = 0; layer < 2; ++layer) {
        SCOPED_TRACE(testing::Message() << "layer " << layer);
        const uint32_t window = layer == 0 ? s.window : 0;
        Buf qb(q), out(n_q * s.n_head * s.head_dim);
        AttentionOp op;
        op.q = qb.p;
        op.out = out.p;
        op.layer = layer;
        op.n_head = s.n_head;
        op.n_head_kv = s.n_head_kv;
        op.head_dim_k = op.head_dim_v = s.head_dim;
        op.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
        op.window = window;
        step(f.view, [&](Backend& be) { be.attention(f.gpu_cache->layout(), f.view, op); });
        const auto got = out.get();
        std::vector<float> ref(got.size());
        AttentionArgs a;
        static_cast<AttentionShape&>(a) = op;
        a.q = q.data();
        a.out = ref.data();
        a.n_tokens = n_q;
        a.positions = f.view.positions();
        a.seq_of_token = f.view.seq_of_token();
        a.step = &f.view;
        a.kv = &f.cpu_cache->layout();
        a.kv_base = f.cpu.host(l.base_of_layer(layer));
        Context ctx;
        ctx.pool = &f.cpu.pool();
        std::vector<uint8_t> scratch(thread_scratch_bytes(256, 256, 8, 32));
        ctx.scratch = scratch.data();
        ctx.scratch_per_thread_bytes = scratch.size();
        ref_ops().attention(a, ctx);
        float vmax = 0;
        for (float x : v) vmax = std::max(vmax, std::fabs(x));
        // A query's result depends on its position and the cache alone: the
        // decode token (23) and a prefill token (30) each alone in a step
        // give the bits they got in the whole step.
        for (const uint32_t t : {23u, 30u}) {
            Batch one;
            std::vector<uint32_t> one_words(1 << 12);
            const uint32_t seq = t == 23 ? 1 : 2;
            one.add_token(0, f.view.positions()[t], one.add_seq(&f.seqs[seq]), false);
            const StepView one_view = make_step_view(one, *f.gpu_cache, one_words);
            const size_t row = size_t{s.n_head} * s.head_dim;
            Buf q1(std::vector<float>(q.begin() + t * row, q.begin() + (t + 1) * row)), out1(row);
            AttentionOp op1 = op;
            op1.q = q1.p;
            op1.out = out1.p;
            step(one_view,
                 [&](Backend& be) { be.attention(f.gpu_cache->layout(), one_view, op1); });
            const auto alone = out1.get();
            for (size_t i = 0; i < row; ++i)
                ASSERT_TRUE(same_bits(alone[i], got[t * row + i]))
                    << "token " << t << " alone differs at element " << i;
        }
        for (uint32_t t = 0; t < n_q; ++t) {
            const uint32_t pos = f.view.positions()[t];
            const uint32_t n_keys = pos + 1 - first_visible(pos, window);
            const double tol = (4.0 * s.head_dim + 2.0 * n_keys + 64) * kU * vmax;
            for (uint32_t i = 0; i < s.n_head * s.head_dim; ++i)
                ASSERT_NEAR(got[t * s.n_head * s.head_dim + i], ref[t * s.n_head * s.head_dim + i],
                            tol)
                    << "token " << t << " (position " << pos << ") element " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Kv, VulkanKv,
                         ::testing::Combine(::testing::Values(KvDtype::F16, KvDtype::Q8_0,
                                                              KvDtype::BF16, KvDtype::F32),
                                            ::testing::Range(0, 5), ::testing::Bool()),
                         [](const auto& info) {
                             return std::string(name(std::get<0>(info.param))) + "_shape" +
                                    std::to_string(std::get<1>(info.param)) +
                                    (std::get<2>(info.param) ? "_split" : "");
                         });

// ---- whole models ---------------------------------------------------------------

// Every architecture's forward pass on Vulkan against the CPU's f32 path
// (the same f32 arithmetic but for the order of sums and the exponentials)
// on random-weight models: llama, qwen2 (biases), qwen3 (q/k norms), gemma3
// (scaled embeddings, four norms a layer, GELU, sliding windows), with f32
// KV. A prefill of two sequences, then decode steps of both; every logit
// within 1e-4 of the CPU's times the largest, and the same top-1. (The
// per-op bounds above compound through the layers; these models differ by
// about 1e-6 of the largest logit.)
class VulkanModel : public ::testing::TestWithParam<const char*> {};

TEST_P(VulkanModel, LogitsMatchTheCpuF32Path) {
    HR_REQUIRE_VULKAN();
    SynthOptions so;
    so.type = TensorType::Q4_K;
    so.progress = false;
    const auto bytes = make_synth_model(find_synth_shape(GetParam()), so).to_bytes();
    const auto file = gguf::GgufFile::parse(bytes, "synth.gguf");
    Ledger cpu_ledger;
    CpuBackend cpu(cpu_ledger, 1);
    const auto cpu_model = Model::load(file, cpu);
    const auto gpu_model = Model::load(file, *gpu().be);
    const ModelDesc desc = describe_gguf(file);
    EXPECT_EQ(desc.vector_copy_bytes, cpu_model->converted_bytes());
    const uint32_t n_vocab = cpu_model->hparams().n_vocab;

    auto run = [&](Backend& be, const Model& model) {
        RunnerOptions ro;
        ro.config.max_model_len = 128;
        ro.config.max_num_seqs = 2;
        ro.config.max_num_batched_tokens = 64;
        ro.config.n_threads = 1;
        ro.budget.kv_cache_bytes = 1 << 20;
        ro.config.kv_dtype = KvDtype::F32;  // f16 would round slightly different keys apart
        ro.act_precision = ActPrecision::F32;
        if (!be.is_host()) {
            ro.budget.device_bytes = gpu().be->device_bytes();
            ro.budget.device_context_bytes = be.device_context_bytes();
        }
        Runner runner(model, desc, ro, be);
        std::vector<std::vector<float>> out;
        SeqKv seqs[2];
        std::vector<int32_t> next = {5, 9};
        uint32_t pos[2] = {0, 0};
        for (int step = 0; step < 6; ++step) {
            Batch batch;
            for (int i = 0; i < 2; ++i) {
                const uint32_t n = step == 0 ? 17u + 11u * i : 1u;  // prefill, then decode
                EXPECT_TRUE(runner.cache().grow(seqs[i], n));
                const uint32_t si = batch.add_seq(&seqs[i]);
                for (uint32_t t = 0; t < n; ++t, ++pos[i])
                    batch.add_token(
                        step == 0 ? static_cast<int32_t>((t * 31 + i) % 500 + 3) : next[i], pos[i],
                        si, t + 1 == n);
            }
            const float* logits = runner.forward(batch);
            out.emplace_back(logits, logits + 2 * n_vocab);
            for (int i = 0; i < 2; ++i)
                next[i] = static_cast<int32_t>(
                    std::max_element(logits + i * n_vocab, logits + (i + 1) * n_vocab) -
                    (logits + i * n_vocab));
        }
        for (auto& s : seqs) runner.cache().free(s);
        return out;
    };
    struct Restore {  // the tests' workspace once the Runner is gone, however the test ends
        ~Restore() { gpu().set_workspace(); }
    } restore;
    const auto want = run(cpu, *cpu_model);
    const auto got = run(*gpu().be, *gpu_model);
    double worst = 0;
    for (size_t step = 0; step < want.size(); ++step) {
        float scale = 0;
        for (float v : want[step]) scale = std::max(scale, std::fabs(v));
        for (size_t i = 0; i < want[step].size(); ++i) {
            worst = std::max(worst, std::fabs(double(got[step][i]) - want[step][i]) / scale);
            ASSERT_NEAR(got[step][i], want[step][i], 1e-4 * scale)
                << "step " << step << " logit " << i;
        }
        for (int s = 0; s < 2; ++s) {
            const auto top = [&](const std::vector<float>& v) {
                return std::max_element(v.begin() + s * n_vocab, v.begin() + (s + 1) * n_vocab) -
                       v.begin();
            };
            EXPECT_EQ(top(got[step]), top(want[step])) << "step " << step << " sequence " << s;
        }
    }
    std::printf("%s: largest logit difference %.2e of the largest logit\n", GetParam(), worst);
}

INSTANTIATE_TEST_SUITE_P(Shapes, VulkanModel,
                         ::testing::Values("tiny", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3"),
                         [](const auto& info) {
                             std::string n = info.param;
                             for (auto& c : n)
                                 if (c == '-') c = '_';
                             return n;
                         });

// ---- devices, allocations, pipelines ---------------------------------------------

vk::DeviceInfo device_of(uint32_t index, const char* type, bool usable = true) {
    vk::DeviceInfo d;
    d.index = index;
    d.name = fmt::format("device {}", index);
    d.type = type;
    if (!usable) d.missing = "shaderInt64";
    return d;
}

// --device vulkan: a discrete GPU before an integrated one before a virtual
// one, in the loader's order within a type, never a device that lacks a
// feature, and a CPU-type device (lavapipe) only where nothing else can run,
// with a note saying so.
TEST(VulkanDevices, VulkanMeansTheFirstUsableGpuByTypeAndACpuOnlyWithANote) {
    std::string note;
    const std::vector<vk::DeviceInfo> mixed = {
        device_of(0, "CPU"), device_of(1, "integrated GPU"), device_of(2, "discrete GPU", false),
        device_of(3, "discrete GPU"), device_of(4, "discrete GPU")};
    EXPECT_EQ(vk::best_device(mixed, &note), 3u);
    EXPECT_EQ(note, "");
    EXPECT_EQ(vk::best_device({device_of(0, "CPU"), device_of(1, "virtual GPU")}, &note), 1u);
    EXPECT_EQ(vk::best_device({device_of(0, "CPU"), device_of(1, "integrated GPU"),
                               device_of(2, "virtual GPU")},
                              &note),
              1u);
    EXPECT_EQ(vk::best_device({device_of(0, "CPU", false), device_of(1, "CPU")}, &note), 1u);
    EXPECT_NE(note.find("no Vulkan GPU here"), std::string::npos) << note;
    EXPECT_NE(note.find("vulkan:1"), std::string::npos) << note;
    EXPECT_EQ(vk::best_device({device_of(0, "discrete GPU", false)}, &note), std::nullopt);
    EXPECT_EQ(vk::best_device({}, &note), std::nullopt);
}

// One allocation's limit: maxMemoryAllocationSize, or maxBufferSize where
// lower, lowered by the option or by HEADROOM_VULKAN_MAX_ALLOCATION.
TEST(VulkanDevices, TheAllocationLimitIsTheLowestOfTheDriversAndTheOptions) {
    ::unsetenv("HEADROOM_VULKAN_MAX_ALLOCATION");
    vk::DeviceInfo d = device_of(0, "discrete GPU");
    d.max_allocation_bytes = 4ull << 30;
    EXPECT_EQ(vk::allocation_limit(d), 4ull << 30);  // no maxBufferSize reported
    d.max_buffer_bytes = 1ull << 40;
    EXPECT_EQ(vk::allocation_limit(d), 4ull << 30);
    d.max_buffer_bytes = 3ull << 30;
    EXPECT_EQ(vk::allocation_limit(d), 3ull << 30);
    EXPECT_EQ(vk::allocation_limit(d, 64 * MiB), 64 * MiB);
    ::setenv("HEADROOM_VULKAN_MAX_ALLOCATION", "96MiB", 1);
    EXPECT_EQ(vk::allocation_limit(d), 96 * MiB);
    EXPECT_EQ(vk::allocation_limit(d, 64 * MiB), 64 * MiB);  // the option first
    ::setenv("HEADROOM_VULKAN_MAX_ALLOCATION", "8GiB", 1);
    EXPECT_EQ(vk::allocation_limit(d), 3ull << 30);  // never above the driver's
    ::setenv("HEADROOM_VULKAN_MAX_ALLOCATION", "4096", 1);
    EXPECT_THROW(vk::allocation_limit(d), Error);
    ::setenv("HEADROOM_VULKAN_MAX_ALLOCATION", "lots", 1);
    EXPECT_THROW(vk::allocation_limit(d), Error);
    ::unsetenv("HEADROOM_VULKAN_MAX_ALLOCATION");
}

// A region in pieces of whole units (kernels::SplitBuffer), each piece the
// longest run of units from its start within the limit. Units ending at 0
// (empty), 100, 100 (empty), 300 and 500 bytes: under 512 bytes, one piece
// [0, 500); under 256, [0, 100) (300 > 256), [100, 300) (500 - 100 > 256)
// and [300, 500). Units ending at 100, 200, 200 under 100: 2 pieces. 10
// units of 100 bytes under 256: 5 pieces of 2 units. A
// unit larger than the limit is refused, naming the region, and nothing of
// the region is kept.
TEST(VulkanAllocations, ARegionIsCutBetweenUnitsAndAUnitPastTheLimitIsRefused) {
    HR_REQUIRE_VULKAN();
    VulkanBackend& be = *gpu().be;
    struct Restore {
        VulkanBackend& be;
        uint64_t limit;
        ~Restore() { be.limit_allocations(limit); }
    } restore{be, be.max_allocation_bytes()};
    const std::vector<uint64_t> ends = {0, 100, 100, 300, 500};
    const AllocationCount before = be.allocations();
    be.limit_allocations(512);
    {
        SplitBuffer b(be, Term::Activations, ends, "test arena");
        ASSERT_EQ(b.pieces().size(), 1u);
        EXPECT_EQ(b.size_bytes(), 500u);
        EXPECT_EQ(b.at(300), b.pieces()[0] + 300);
        EXPECT_EQ(be.allocations().count, before.count + 1);
    }
    be.limit_allocations(256);
    {
        SplitBuffer b(be, Term::Activations, ends, "test arena");
        const std::vector<DevPtr> p = b.pieces();
        ASSERT_EQ(p.size(), 3u);
        EXPECT_EQ(b.at(0), p[0]);
        EXPECT_EQ(b.at(50), p[0] + 50);
        EXPECT_EQ(b.at(100), p[1]);
        EXPECT_EQ(b.at(299), p[1] + 199);
        EXPECT_EQ(b.at(300), p[2]);
        EXPECT_GE(be.allocations().largest_bytes, 200u);
        EXPECT_EQ(be.allocations().count, before.count + 3);
    }
    {
        // Empty units after the last piece take no piece of their own.
        const std::vector<uint64_t> trailing = {100, 200, 200};
        be.limit_allocations(100);
        SplitBuffer b(be, Term::Activations, trailing, "test arena");
        EXPECT_EQ(b.pieces().size(), 2u);
        be.limit_allocations(256);
    }
    {
        SplitBuffer b(be, Term::KvCache, 10, 100, "test pool");
        EXPECT_EQ(b.units_per_piece(), 2u);
        ASSERT_EQ(b.pieces().size(), 5u);
        EXPECT_EQ(b.at(900), b.pieces()[4] + 100);
    }
    const std::vector<uint64_t> too_wide = {100, 1000};
    try {
        SplitBuffer b(be, Term::Activations, too_wide, "test arena");
        ADD_FAILURE() << "a 900-byte unit under a 256-byte limit was allocated";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("test arena"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("900 B"), std::string::npos) << e.what();
    }
    EXPECT_EQ(be.allocations().count, before.count);
}

// Pipelines are built before the first step (Workspace::kv_dtype and the
// weight types the model uploaded), through a cache written to
// $XDG_CACHE_HOME/headroom when the backend closes.
TEST(VulkanPipelines, AreBuiltBeforeTheFirstStepAndKeptOnDisk) {
    HR_REQUIRE_VULKAN();
    char dir_template[] = "/tmp/headroom-cache-XXXXXX";
    ASSERT_NE(::mkdtemp(dir_template), nullptr);
    const std::string dir = dir_template;
    const char* old = std::getenv("XDG_CACHE_HOME");
    const std::string saved = old ? old : "";
    ::setenv("XDG_CACHE_HOME", dir.c_str(), 1);
    SynthOptions so;
    so.type = TensorType::Q4_K;
    so.progress = false;
    const auto bytes = make_synth_model(find_synth_shape("tiny"), so).to_bytes();
    const auto file = gguf::GgufFile::parse(bytes, "synth.gguf");
    std::string path;
    {
        Ledger host;
        VulkanOptions o;
        o.progress = false;
        o.device_memory_bytes = 256ull << 20;
        VulkanBackend be(host, o);
        path = be.pipeline_cache_path();
        EXPECT_EQ(path.rfind(dir + "/headroom/vulkan-", 0), 0u) << path;
        const auto model = Model::load(file, be);
        RunnerOptions ro;
        ro.config.max_model_len = 64;
        ro.config.max_num_seqs = 1;
        ro.config.max_num_batched_tokens = 16;
        ro.config.kv_dtype = KvDtype::BF16;
        ro.budget.device_bytes = be.device_bytes();
        ro.budget.device_context_bytes = be.device_context_bytes();
        Runner runner(*model, describe_gguf(file), ro, be);
        SeqKv seq;
        ASSERT_TRUE(runner.cache().grow(seq, 3));
        Batch batch;
        const uint32_t si = batch.add_seq(&seq);
        for (uint32_t t = 0; t < 3; ++t)
            batch.add_token(static_cast<int32_t>(t + 5), t, si, t == 2);
        runner.forward(batch);
        EXPECT_EQ(be.pipelines_built_in_steps(), 0u);
        runner.cache().free(seq);
    }
    std::error_code ec;
    EXPECT_GT(std::filesystem::file_size(path, ec), 0u) << path << ": " << ec.message();
    std::filesystem::remove_all(dir, ec);
    if (old)
        ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
    else
        ::unsetenv("XDG_CACHE_HOME");
}
}  // namespace
}  // namespace headroom::kernels
