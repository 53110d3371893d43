// The scheduler without a model: a fake engine appends a token to every
// sequence that samples. Checks the limits every step, preemption under
// pressure, prefix reuse, and that every block comes back.
#include "engine/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "kernels/cpu/cpu-backend.h"

namespace headroom {
namespace {

// The host backend the caches take their region from.
kernels::CpuBackend& cpu() {
    static Ledger ledger;
    static kernels::CpuBackend backend(ledger, 1);
    return backend;
}

using ::testing::HasSubstr;

ModelDesc tiny_model() {
    ModelDesc m;
    m.hp.arch = "llama";
    m.hp.n_vocab = 100;
    m.hp.n_ctx_train = 256;
    m.hp.n_embd = 64;
    m.hp.n_layer = 2;
    m.hp.n_ff = 128;
    m.hp.n_head = 2;
    m.hp.n_head_kv = 1;
    m.hp.head_dim_k = m.hp.head_dim_v = 32;
    m.hp.layer_is_swa.assign(2, false);
    return m;
}

// A pool of `n_blocks` blocks of 4 tokens (1 KiB each), max_model_len 64.
struct Fixture {
    explicit Fixture(uint32_t n_blocks, uint32_t max_num_seqs = 8, uint32_t budget = 16) {
        EngineConfig c;
        c.max_model_len = 64;
        c.max_num_seqs = max_num_seqs;
        c.block_size = 4;
        c.max_num_batched_tokens = budget;
        BudgetSpec b;
        b.kv_cache_bytes = uint64_t{n_blocks} * 1024;
        const ModelDesc m = tiny_model();
        plan = plan_memory(m, c, b);
        cache = std::make_unique<KvCache>(plan, m.hp, true, cpu());
        scheduler = std::make_unique<Scheduler>(*cache, SchedulerConfig{max_num_seqs, budget, 64});
    }
    Sequence* add(std::vector<int32_t> prompt, uint32_t max_new) {
        auto s = std::make_unique<Sequence>();
        s->id = seqs.size();
        s->n_prompt = static_cast<uint32_t>(prompt.size());
        s->tokens = std::move(prompt);
        s->max_total = s->n_prompt + max_new;
        scheduler->add(s.get());
        seqs.push_back(std::move(s));
        return seqs.back().get();
    }
    // One step of a fake engine: the "model" emits token (id * 7 + length) % 50.
    // Returns the sequences that finished.
    std::vector<Sequence*> step() {
        const SchedulerOutput& out = scheduler->schedule();
        std::vector<Sequence*> done;
        EXPECT_LE(out.n_tokens, scheduler->config().max_num_batched_tokens);
        EXPECT_LE(scheduler->n_running(), scheduler->config().max_num_seqs);
        for (const auto& s : out.seqs) {
            EXPECT_EQ(s.seq->n_computed(), s.first + s.n_tokens);
            if (!s.sample) continue;
            Sequence* q = s.seq;
            q->tokens.push_back(static_cast<int32_t>((q->id * 7 + q->tokens.size()) % 50));
            if (q->tokens.size() >= q->max_total) done.push_back(q);
        }
        for (const auto& s : out.seqs) cache->publish_full_blocks(s.seq->kv, s.seq->tokens);
        for (Sequence* q : done) scheduler->remove(q);
        return done;
    }
    MemoryPlan plan;
    std::unique_ptr<KvCache> cache;
    std::unique_ptr<Scheduler> scheduler;
    std::vector<std::unique_ptr<Sequence>> seqs;
};

std::vector<int32_t> prompt_of(int n, int start = 0) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(start + i);
    return p;
}

TEST(Scheduler, ChunksALongPromptUnderTheTokenBudget) {
    Fixture f(64, 4, 16);
    Sequence* s = f.add(prompt_of(40), 4);
    std::vector<uint32_t> chunks;
    for (int i = 0; i < 10 && s->state != SeqState::Finished; ++i) {
        const auto& out = f.scheduler->schedule();
        ASSERT_EQ(out.seqs.size(), 1u);
        chunks.push_back(out.seqs[0].n_tokens);
        if (out.seqs[0].sample) s->tokens.push_back(1);
        if (s->tokens.size() >= s->max_total) f.scheduler->remove(s);
    }
    EXPECT_EQ(chunks, (std::vector<uint32_t>{16, 16, 8, 1, 1, 1}));
}

TEST(Scheduler, DecodesGoFirstThenPrefillFillsTheBudget) {
    Fixture f(64, 4, 16);
    Sequence* a = f.add(prompt_of(8), 10);
    f.step();  // a: 8-token prefill
    Sequence* b = f.add(prompt_of(30, 100), 10);
    const auto& out = f.scheduler->schedule();
    ASSERT_EQ(out.seqs.size(), 2u);
    EXPECT_EQ(out.seqs[0].seq, a);
    EXPECT_EQ(out.seqs[0].n_tokens, 1u);
    EXPECT_EQ(out.seqs[1].seq, b);
    EXPECT_EQ(out.seqs[1].n_tokens, 15u);
    EXPECT_FALSE(out.seqs[1].sample);
}

TEST(Scheduler, RespectsMaxNumSeqs) {
    Fixture f(64, 2, 64);
    for (int i = 0; i < 5; ++i) f.add(prompt_of(3, 10 * i), 5);
    f.scheduler->schedule();
    EXPECT_EQ(f.scheduler->n_running(), 2u);
    EXPECT_EQ(f.scheduler->n_waiting(), 3u);
}

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOut) {
    // 8 blocks = 32 tokens. Two sequences of 12-token prompts growing to 24 each cannot both fit.
    Fixture f(8, 4, 32);
    Sequence* old_seq = f.add(prompt_of(12), 12);
    Sequence* new_seq = f.add(prompt_of(12, 50), 12);
    std::vector<Sequence*> finished;
    for (int i = 0; i < 100 && finished.size() < 2; ++i)
        for (Sequence* d : f.step()) finished.push_back(d);
    ASSERT_EQ(finished.size(), 2u);
    EXPECT_EQ(finished[0], old_seq) << "the oldest keeps running";
    EXPECT_GT(new_seq->n_preemptions, 0u);
    EXPECT_EQ(old_seq->n_preemptions, 0u);
    EXPECT_EQ(f.cache->n_blocks_used(), 0u);
}

TEST(Scheduler, RefusesWhatCanNeverFit) {
    Fixture f(64);
    EXPECT_THAT(f.scheduler->check_admissible(64),
                HasSubstr("the prompt has 64 tokens but max_model_len is 64"));
    EXPECT_THAT(f.scheduler->check_admissible(0), HasSubstr("empty"));
    EXPECT_EQ(f.scheduler->check_admissible(63), "");
}

TEST(Scheduler, ReusesACachedPrefix) {
    Fixture f(64, 4, 64);
    f.add(prompt_of(20), 2);
    while (f.step().empty()) {
    }
    Sequence* second = f.add(prompt_of(21), 2);
    const auto& out = f.scheduler->schedule();
    ASSERT_EQ(out.seqs.size(), 1u);
    EXPECT_EQ(out.seqs[0].first, 20u) << "5 cached blocks of 4 tokens";
    EXPECT_EQ(out.seqs[0].n_tokens, 1u);
    EXPECT_EQ(second->n_cached_prompt, 20u);
    EXPECT_EQ(f.cache->prefix_stats().hit_tokens, 20u);
}

TEST(Scheduler, OversubscribedRandomWorkloadCompletesEverything) {
    // A pool for ~2.5 full sequences, 40 requests in flight at once.
    Fixture f(40, 16, 24);
    std::mt19937 rng(11);
    for (int i = 0; i < 40; ++i) {
        const int n = 4 + static_cast<int>(rng() % 30);
        f.add(prompt_of(n, static_cast<int>(rng() % 3) * 100), 4 + rng() % 25);
    }
    size_t n_finished = 0;
    for (int step = 0; step < 5000 && n_finished < 40; ++step) {
        n_finished += f.step().size();
        std::vector<const SeqKv*> live;
        for (Sequence* s : f.scheduler->running()) live.push_back(&s->kv);
        ASSERT_EQ(f.cache->check_invariants(live), "") << "step " << step;
        for (Sequence* s : f.scheduler->waiting()) ASSERT_EQ(s->kv.n_tokens, 0u);
    }
    EXPECT_EQ(n_finished, 40u);
    EXPECT_GT(f.scheduler->n_preemptions(), 0u);
    for (const auto& s : f.seqs) {
        ASSERT_EQ(s->tokens.size(), s->max_total);
        // Output tokens depend only on (id, position): preemption and
        // recompute must not change them.
        for (uint32_t i = s->n_prompt; i < s->max_total; ++i)
            ASSERT_EQ(s->tokens[i], static_cast<int32_t>((s->id * 7 + i) % 50));
    }
    EXPECT_EQ(f.cache->n_blocks_used(), 0u);
}

}  // namespace
}  // namespace headroom
