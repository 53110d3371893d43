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
        auto g = std::make_unique<SeqGroup>();
        g->seqs.push_back(s.get());
        scheduler->add(g.get());
        groups.push_back(std::move(g));
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
        for (Sequence* q : done) scheduler->remove(q->group);
        return done;
    }
    MemoryPlan plan;
    std::unique_ptr<KvCache> cache;
    std::unique_ptr<Scheduler> scheduler;
    std::vector<std::unique_ptr<Sequence>> seqs;
    std::vector<std::unique_ptr<SeqGroup>> groups;
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
        if (s->tokens.size() >= s->max_total) f.scheduler->remove(s->group);
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
        for (SeqGroup* g : f.scheduler->running())
            for (Sequence* s : g->seqs) live.push_back(&s->kv);
        ASSERT_EQ(f.cache->check_invariants(live), "") << "step " << step;
        for (SeqGroup* g : f.scheduler->waiting()) ASSERT_EQ(g->seqs[0]->kv.n_tokens, 0u);
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

// Groups as the engine makes them: a request of n samples forks n - 1
// members from its leader once the prompt is computed; a beam-like request
// also drops members and forks new ones from the survivors every step. The
// "model" emits f(id, slot, position), so recomputation after a preemption
// cannot change what a member holds.
struct GroupRequest {
    SeqGroup group;
    std::vector<std::unique_ptr<Sequence>> members;  // slots; live ones are in group.seqs
    uint32_t width = 1;
    bool beams = false;
    bool forked = false;
    bool done = false;
};

int32_t fake_token(const Sequence& s) {
    return static_cast<int32_t>((s.id * 13 + s.index * 5 + s.tokens.size()) % 50);
}

TEST(Scheduler, GroupsRunWholeUnderPressureAndGiveEveryBlockBack) {
    // 48 blocks of 4 tokens; 30 requests of 1, 4 samples or 3 "beams": about
    // 5x more KV than the pool holds is asked for at once.
    Fixture f(48, 12, 24);
    std::mt19937 rng(5);
    std::vector<std::unique_ptr<GroupRequest>> reqs;
    uint64_t asked_blocks = 0;
    for (int i = 0; i < 30; ++i) {
        auto r = std::make_unique<GroupRequest>();
        const int kind = i % 3;
        r->width = kind == 0 ? 1 : kind == 1 ? 4 : 3;
        r->beams = kind == 2;
        const uint32_t n_prompt = 6 + rng() % 18;
        const uint32_t max_new = 4 + rng() % 14;
        for (uint32_t k = 0; k < r->width; ++k) {
            auto s = std::make_unique<Sequence>();
            s->id = static_cast<uint64_t>(i);
            s->index = k;
            s->n_prompt = n_prompt;
            s->max_total = n_prompt + max_new;
            s->tokens.reserve(s->max_total);
            r->members.push_back(std::move(s));
        }
        r->members[0]->tokens = prompt_of(static_cast<int>(n_prompt), (i % 2) * 100);
        r->group.seqs.push_back(r->members[0].get());
        r->group.n_seats = r->width;
        asked_blocks += r->width * ((n_prompt + max_new + 3) / 4);
        EXPECT_EQ(f.scheduler->check_admissible(n_prompt, n_prompt + max_new, r->width), "");
        f.scheduler->add(&r->group);
        reqs.push_back(std::move(r));
    }
    EXPECT_GT(asked_blocks, 5u * 48);
    size_t n_done = 0;
    for (int step = 0; step < 20000 && n_done < reqs.size(); ++step) {
        const SchedulerOutput& out = f.scheduler->schedule();
        EXPECT_LE(f.scheduler->n_running(), 12u);
        std::vector<GroupRequest*> sampled;
        for (const auto& s : out.seqs) {
            f.cache->publish_full_blocks(s.seq->kv, s.seq->tokens);
            if (!s.sample) continue;
            for (auto& r : reqs)
                if (&r->group == s.seq->group &&
                    std::find(sampled.begin(), sampled.end(), r.get()) == sampled.end())
                    sampled.push_back(r.get());
        }
        for (GroupRequest* r : sampled) {
            SeqGroup& g = r->group;
            // Every live member must have computed all its tokens to move on together.
            bool all_ready = true;
            for (Sequence* m : g.seqs) all_ready = all_ready && m->n_uncomputed() == 0;
            if (!all_ready) continue;
            if (!r->forked && r->width > 1) {
                r->forked = true;
                for (uint32_t k = 1; k < r->width; ++k) {
                    Sequence* c = r->members[k].get();
                    c->tokens = g.seqs[0]->tokens;
                    f.scheduler->fork(g.seqs[0], c);
                }
            } else if (r->beams && g.seqs.size() > 1 && rng() % 2) {
                // Drop the last member; fork a new one from the first.
                Sequence* gone = g.seqs.back();
                f.scheduler->remove_member(gone);
                gone->tokens = g.seqs[0]->tokens;
                f.scheduler->fork(g.seqs[0], gone);
            }
            for (Sequence* m : g.seqs) m->tokens.push_back(fake_token(*m));
            if (g.seqs[0]->tokens.size() >= g.seqs[0]->max_total) {
                f.scheduler->remove(&g);
                r->done = true;
                ++n_done;
            }
        }
        // Never half a group: every member in its group's state, KV or none alike.
        std::vector<const SeqKv*> live;
        for (SeqGroup* g : f.scheduler->running()) {
            ASSERT_EQ(g->state, SeqState::Running);
            for (Sequence* m : g->seqs) {
                ASSERT_EQ(m->state, SeqState::Running);
                live.push_back(&m->kv);
            }
        }
        for (SeqGroup* g : f.scheduler->waiting())
            for (Sequence* m : g->seqs) {
                ASSERT_EQ(m->state, SeqState::Waiting);
                ASSERT_EQ(m->kv.n_tokens, 0u);
            }
        ASSERT_EQ(f.cache->check_invariants(live), "") << "step " << step;
    }
    EXPECT_EQ(n_done, reqs.size());
    EXPECT_GT(f.scheduler->n_preemptions(), 0u);
    EXPECT_EQ(f.cache->n_blocks_used(), 0u);
    EXPECT_EQ(f.cache->n_shared_refs(), 0u);
    for (const auto& r : reqs)
        if (!r->beams)
            for (const auto& m : r->members)
                for (uint32_t i = m->n_prompt + 1; i < m->tokens.size(); ++i) {
                    Sequence probe = Sequence{};
                    probe.id = m->id;
                    probe.index = m->index;
                    probe.tokens.resize(i);
                    ASSERT_EQ(m->tokens[i], fake_token(probe));
                }
}

TEST(Scheduler, AGroupCountsItsPromptOnceAndEachTail) {
    Fixture f(64, 8, 64);
    // Blocks of 4: a 10-token prompt has 2 full blocks; each of 3 sequences
    // of 18 tokens holds 5 blocks, 3 of them its own.
    EXPECT_EQ(request_kv_blocks(f.cache->group(0), 4, 10, 18, 3), 2u + 3u * 3u);
    EXPECT_EQ(request_kv_blocks(f.cache->group(0), 4, 10, 18, 1), 5u);
    EXPECT_THAT(f.scheduler->check_admissible(10, 64, 9), HasSubstr("--max-num-seqs is 8"));
    // 8 × 16 blocks of 64 tokens, sharing 2: more than the 64 the pool has.
    EXPECT_THAT(f.scheduler->check_admissible(10, 64, 8),
                HasSubstr("need 114 KV blocks of 4 tokens"));
    EXPECT_EQ(f.scheduler->check_admissible(10, 64, 4), "");
    // A sequence of n tokens computes K/V for n - 1 (its last is sampled,
    // never fed): 3 candidates of 33 tokens after a 16-token prompt hold
    // 4 + 3 × (8 − 4) = 16 blocks, the whole pool of Fixture(16); of 37
    // tokens, 4 + 3 × 5 = 19.
    Fixture small(16, 8, 64);
    EXPECT_EQ(small.scheduler->check_admissible(16, 33, 3), "");
    EXPECT_THAT(small.scheduler->check_admissible(16, 37, 3), HasSubstr("need 19 KV blocks"));
}

}  // namespace
}  // namespace headroom
