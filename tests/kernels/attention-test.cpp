// Flash attention of the fast tables against the reference: random K and V
// in a real KV cache (every dtype, block sizes that do and do not align with
// the kernels' key tiles, GQA, a sliding window, attention sinks),
// prefill-shaped and decode-shaped batches, contexts of several segments of
// keys; and every (token, head) bit-identical whether it runs alone (a
// decode step, split over keys where its context spans segments) or with the
// rest of the batch (one work item per KV head and window). Sinks by hand: a
// token that sees one key gets v · sigmoid(s - sink).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>

#include "engine/batch.h"
#include "kernel-test-util.h"
#include "kernels/cpu/cpu-backend.h"
#include "memory/kv-cache.h"
#include "memory/terms.h"

namespace headroom::kernels {
namespace {

using test::fast_tables;
using test::TestContext;

struct Shape {
    uint32_t n_head, n_head_kv, head_dim, block_size, window;
    bool sinks = false;
};

ModelDesc model_of(const Shape& s) {
    ModelDesc m;
    m.hp.arch = "llama";
    m.hp.n_vocab = 100;
    m.hp.n_ctx_train = 1024;
    m.hp.n_embd = s.n_head * s.head_dim;
    m.hp.n_layer = 1;
    m.hp.n_ff = 64;
    m.hp.n_head = s.n_head;
    m.hp.n_head_kv = s.n_head_kv;
    m.hp.head_dim_k = m.hp.head_dim_v = s.head_dim;
    m.hp.layer_is_swa.assign(1, s.window != 0);
    m.hp.sliding_window = s.window;
    return m;
}

// A cache holding `lens[i]` tokens of random K and V for sequence i, and the
// batch of queries: the last `n_new[i]` positions of each sequence.
struct CacheFixture {
    Ledger ledger;
    CpuBackend cpu{ledger, 1};
    MemoryPlan plan;
    std::unique_ptr<KvCache> cache;
    std::vector<SeqKv> seqs;
    Batch batch;
    std::vector<uint32_t> words = std::vector<uint32_t>(1 << 16);
    StepView step;
    std::vector<float> q;
    std::vector<float> sinks;  // (n_head)

    CacheFixture(const Shape& s, KvDtype dtype, const std::vector<uint32_t>& lens,
                 const std::vector<uint32_t>& n_new, uint32_t seed) {
        const ModelDesc m = model_of(s);
        EngineConfig c;
        c.max_model_len = 1024;
        c.max_num_seqs = static_cast<uint32_t>(lens.size());
        c.block_size = s.block_size;
        c.max_num_batched_tokens = 512;
        c.kv_dtype = dtype;
        c.swa_full = true;  // keep every block: the test grows sequences in one step
        BudgetSpec b;
        b.kv_cache_bytes = 64ull << 20;
        plan = plan_memory(m, c, b);
        cache = std::make_unique<KvCache>(plan, m.hp, false, cpu);
        const KvLayout& kv = cache->layout();
        uint8_t* base = cpu.host(kv.base_of_layer(0));
        std::mt19937 rng(seed);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> row(s.head_dim);
        seqs.resize(lens.size());
        for (size_t i = 0; i < lens.size(); ++i) {
            EXPECT_TRUE(cache->grow(seqs[i], lens[i]));
            for (uint32_t p = 0; p < lens[i]; ++p) {
                const int32_t block = seqs[i].tables[0][p / s.block_size];
                const uint32_t slot = p % s.block_size;
                for (uint32_t h = 0; h < s.n_head_kv; ++h) {
                    for (auto& v : row) v = normal(rng);
                    store_row(row.data(), s.head_dim, dtype,
                              base + kv.k_offset(0, block, h) + slot * kv.k_row_bytes);
                    for (auto& v : row) v = normal(rng);
                    store_row(row.data(), s.head_dim, dtype,
                              base + kv.v_offset(0, block, h) + slot * kv.v_row_bytes);
                }
            }
        }
        for (size_t i = 0; i < lens.size(); ++i) {
            const uint32_t si = batch.add_seq(&seqs[i]);
            for (uint32_t p = lens[i] - n_new[i]; p < lens[i]; ++p)
                batch.add_token(0, p, si, false);
        }
        step = make_step_view(batch, *cache, words);
        q.resize(batch.n_tokens() * s.n_head * s.head_dim);
        for (auto& v : q) v = normal(rng) * 2.0f;
        sinks.resize(s.n_head);
        for (auto& v : sinks) v = normal(rng) * 2.0f;
    }

    AttentionArgs args(const Shape& s, float* out) const {
        AttentionArgs a;
        a.q = q.data();
        a.out = out;
        a.n_tokens = step.n_tokens;
        a.positions = step.positions();
        a.seq_of_token = step.seq_of_token();
        a.step = &step;
        a.kv = &cache->layout();
        a.kv_base = cpu.host(cache->layout().base_of_layer(0));
        a.layer = 0;
        a.n_head = s.n_head;
        a.n_head_kv = s.n_head_kv;
        a.head_dim_k = a.head_dim_v = s.head_dim;
        a.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
        a.window = s.window;
        a.sinks = s.sinks ? sinks.data() : nullptr;
        return a;
    }
};

bool same_bits(float a, float b) {
    return std::memcmp(&a, &b, 4) == 0;
}

// Each token of the step alone, as a batch of one, gives the bits of its
// rows in `out` (the whole step's).
void expect_each_token_alone_the_same(const Ops& ops, const CacheFixture& st, const Shape& s,
                                      const Context& ctx, const std::vector<float>& out) {
    for (size_t t = 0; t < st.step.n_tokens; ++t) {
        AttentionArgs a = st.args(s, nullptr);
        std::vector<float> one(s.n_head * s.head_dim);
        a.q = st.q.data() + t * s.n_head * s.head_dim;
        a.out = one.data();
        a.n_tokens = 1;
        a.positions = st.step.positions() + t;
        a.seq_of_token = st.step.seq_of_token() + t;
        ops.attention(a, ctx);
        for (size_t i = 0; i < one.size(); ++i)
            ASSERT_TRUE(same_bits(one[i], out[t * one.size() + i]))
                << "token " << t << " element " << i;
    }
}

class Attention : public ::testing::TestWithParam<std::tuple<KvDtype, int>> {};

const Shape kShapes[] = {
    {8, 2, 64, 16, 0},         // GQA 4:1, blocks the size of a tile
    {4, 4, 32, 4, 0},          // MHA, small blocks: tiles cross blocks
    {6, 1, 64, 32, 37},        // MQA, a sliding window shorter than the context
    {4, 2, 128, 16, 0},        // wider heads
    {4, 1, 256, 8, 29},        // heads as wide as Gemma 3's: one or two tiles per softmax step
    {4, 2, 256, 8, 29},        // two query heads per KV head (row dot products), a window
    {2, 2, 96, 16, 37},        // MHA (row dot products), a window, chunks of 32 or 40 keys
    {8, 2, 64, 16, 0, true},   // sinks (gpt-oss: 64-wide heads, GQA 8:1 there)
    {4, 4, 64, 16, 29, true},  // sinks, a window, row dot products
};

TEST_P(Attention, MatchesTheReferenceAndIsBatchInvariant) {
    HR_REQUIRE_FAST_BACKEND();
    const auto [dtype, shape_index] = GetParam();
    const Shape& s = kShapes[shape_index];
    // Three sequences: a prefill chunk continuing a cached prefix (keys in
    // two segments of 256), a decode step deep in its context (three), a
    // prefill from position 0.
    const std::vector<uint32_t> lens = {290, 700, 19}, n_new = {23, 1, 19};
    const CacheFixture st(s, dtype, lens, n_new, 17);
    const size_t n_out = st.step.n_tokens * s.n_head * s.head_dim;
    TestContext tc(3, 256, 64, s.head_dim, s.n_head / s.n_head_kv);

    std::vector<float> ref(n_out);
    ref_ops().attention(st.args(s, ref.data()), tc.ctx());
    for (const Ops* ops : fast_tables()) {
        SCOPED_TRACE(ops->name);
        std::vector<float> out(n_out, -1.0f);
        ops->attention(st.args(s, out.data()), tc.ctx());
        // Same products, summed in another order, and exponentials taken per
        // chunk of keys instead of per key, with an exp within 2 ulp of expf.
        for (size_t i = 0; i < n_out; ++i)
            ASSERT_NEAR(out[i], ref[i], 2e-5 * (1 + std::fabs(ref[i]))) << "element " << i;

        ASSERT_NO_FATAL_FAILURE(expect_each_token_alone_the_same(*ops, st, s, tc.ctx(), out));
    }
}

// A decode step of four sequences (one window, fewer KV heads than twice
// the threads: split over segments of keys, several sequences per work item)
// against the reference, and bit for bit against one thread (never split)
// and against each token alone.
TEST_P(Attention, ADecodeStepIsTheSameSplitOverKeysOrNot) {
    HR_REQUIRE_FAST_BACKEND();
    const auto [dtype, shape_index] = GetParam();
    const Shape& s = kShapes[shape_index];
    const std::vector<uint32_t> lens = {290, 700, 19, 530}, n_new = {1, 1, 1, 1};
    const CacheFixture st(s, dtype, lens, n_new, 23);
    const size_t n_out = st.step.n_tokens * s.n_head * s.head_dim;
    TestContext three(3, 256, 64, s.head_dim, s.n_head / s.n_head_kv, s.n_head);
    TestContext one_thread(1, 256, 64, s.head_dim, s.n_head / s.n_head_kv, s.n_head);

    std::vector<float> ref(n_out);
    ref_ops().attention(st.args(s, ref.data()), three.ctx());
    for (const Ops* ops : fast_tables()) {
        SCOPED_TRACE(ops->name);
        std::vector<float> split(n_out, -1.0f), whole(n_out, -2.0f);
        ops->attention(st.args(s, split.data()), three.ctx());
        ops->attention(st.args(s, whole.data()), one_thread.ctx());
        for (size_t i = 0; i < n_out; ++i) {
            ASSERT_NEAR(split[i], ref[i], 2e-5 * (1 + std::fabs(ref[i]))) << "element " << i;
            ASSERT_TRUE(same_bits(split[i], whole[i])) << "element " << i;
        }
        ASSERT_NO_FATAL_FAILURE(expect_each_token_alone_the_same(*ops, st, s, three.ctx(), split));
    }
}

INSTANTIATE_TEST_SUITE_P(Kv, Attention,
                         ::testing::Combine(::testing::Values(KvDtype::F16, KvDtype::Q8_0,
                                                              KvDtype::BF16, KvDtype::F32),
                                            ::testing::Range(0, 9)),
                         [](const auto& info) {
                             return std::string(name(std::get<0>(info.param))) + "_shape" +
                                    std::to_string(std::get<1>(info.param));
                         });

// Position 0 sees only its own key: softmax over (s, sink) puts weight
// e^s / (e^s + e^sink) = sigmoid(s - sink) on v, and the rest on nothing.
TEST(AttentionSinks, TakeWeightButCarryNoValue) {
    const Shape s{4, 2, 64, 16, 0, true};
    const CacheFixture st(s, KvDtype::F32, {1}, {1}, 5);
    const KvLayout& kv = st.cache->layout();
    const uint8_t* base = st.cpu.host(kv.base_of_layer(0));
    const int32_t block = st.seqs[0].tables[0][0];
    TestContext tc(3, 256, 64, s.head_dim, s.n_head / s.n_head_kv);
    std::vector<const Ops*> all = {&ref_ops()};
    for (const Ops* ops : fast_tables()) all.push_back(ops);
    for (const Ops* ops : all) {
        SCOPED_TRACE(ops->name);
        std::vector<float> out(s.n_head * s.head_dim);
        ops->attention(st.args(s, out.data()), tc.ctx());
        for (uint32_t h = 0; h < s.n_head; ++h) {
            const uint32_t kv_h = h / (s.n_head / s.n_head_kv);
            const auto* k = reinterpret_cast<const float*>(base + kv.k_offset(0, block, kv_h));
            const auto* v = reinterpret_cast<const float*>(base + kv.v_offset(0, block, kv_h));
            double dot = 0;
            for (uint32_t i = 0; i < s.head_dim; ++i)
                dot += double{st.q[h * s.head_dim + i]} * k[i];
            const double score = dot / std::sqrt(static_cast<double>(s.head_dim));
            const double w = 1 / (1 + std::exp(-(score - st.sinks[h])));
            for (uint32_t i = 0; i < s.head_dim; ++i)
                ASSERT_NEAR(out[h * s.head_dim + i], w * v[i], 1e-5 * (1 + std::fabs(v[i])))
                    << "head " << h << " element " << i;
        }
    }
}

}  // namespace
}  // namespace headroom::kernels
