// The KV cache without a model: block tables, prefix attach, sliding
// windows, fork, and a random workload of 10^5 operations that must leave
// every block back in the pool.
#include "memory/kv-cache.h"

#include <gtest/gtest.h>

#include <cstring>
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

// 2 layers, 1 KV head of 32 dims, f16: 2 × (64 + 64) = 256 bytes per token.
ModelDesc tiny_model(uint32_t sliding_window = 0) {
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
    if (sliding_window) {
        m.hp.sliding_window = sliding_window;
        m.hp.layer_is_swa[0] = true;  // layer 0 local, layer 1 global
    }
    return m;
}

MemoryPlan plan_with_blocks(const ModelDesc& m, uint64_t kv_bytes, uint32_t block_size = 4) {
    EngineConfig c;
    c.max_model_len = 64;
    c.max_num_seqs = 4;
    c.block_size = block_size;
    c.max_num_batched_tokens = 8;
    BudgetSpec b;
    b.kv_cache_bytes = kv_bytes;
    return plan_memory(m, c, b);
}

std::vector<int32_t> iota_tokens(int32_t start, size_t n) {
    std::vector<int32_t> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = start + static_cast<int32_t>(i);
    return t;
}

TEST(KvCache, PlanGivesTheHandComputedGeometry) {
    const MemoryPlan p = plan_with_blocks(tiny_model(), 16 * 1024);
    ASSERT_EQ(p.kv_groups.size(), 1u);
    EXPECT_EQ(p.kv_bytes_per_token, 256u);
    EXPECT_EQ(p.kv_groups[0].block_bytes, 1024u);
    EXPECT_EQ(p.kv_groups[0].n_blocks, 16u);
    EXPECT_EQ(p.kv_cache_bytes, 16u * 1024);
    EXPECT_EQ(p.kv_groups[0].max_blocks_per_seq, 16u);  // 64 tokens / 4
}

TEST(KvCache, GrowAllocatesBlocksAsTokensArrive) {
    const ModelDesc m = tiny_model();
    KvCache cache(plan_with_blocks(m, 16 * 1024), m.hp, true, cpu());
    SeqKv s;
    ASSERT_TRUE(cache.grow(s, 5));
    EXPECT_EQ(s.n_tokens, 5u);
    EXPECT_EQ(s.tables[0].size(), 2u);
    ASSERT_TRUE(cache.grow(s, 3));  // fills block 1 exactly
    EXPECT_EQ(s.tables[0].size(), 2u);
    ASSERT_TRUE(cache.grow(s, 1));
    EXPECT_EQ(s.tables[0].size(), 3u);
    EXPECT_EQ(cache.used_bytes(), 3u * 1024);
    SeqKv big;
    EXPECT_FALSE(cache.can_grow(big, 14 * 4));
    EXPECT_FALSE(cache.grow(big, 14 * 4));
    EXPECT_EQ(big.n_tokens, 0u) << "a failed grow changes nothing";
    EXPECT_TRUE(cache.can_grow(big, 13 * 4));
    cache.free(s);
    EXPECT_EQ(cache.used_bytes(), 0u);
}

TEST(KvCache, KAndVRowsFollowTheBlockLayout) {
    const ModelDesc m = tiny_model();
    KvCache cache(plan_with_blocks(m, 16 * 1024), m.hp, false, cpu());
    SeqKv s;
    ASSERT_TRUE(cache.grow(s, 6));
    const int32_t b1 = s.tables[0][1];
    const kernels::KvLayout& l = cache.layout();
    // Blocks of 1024 bytes: [layer][K,V][head][slot][64 bytes]. Layer 1's K
    // starts 512 bytes in, its V 256 bytes later.
    EXPECT_EQ(l.k_offset(1, b1, 0), b1 * 1024u + 512);
    EXPECT_EQ(l.v_offset(1, b1, 0), b1 * 1024u + 512 + 256);
    EXPECT_EQ(l.k_row_bytes, 64u);
    // Position 5 is slot 1 of the second block.
    EXPECT_EQ(cache.slot(s, 0, 5), b1 * 4 + 1);
}

TEST(KvCache, SecondSequenceAttachesTheCachedPrefix) {
    const ModelDesc m = tiny_model();
    KvCache cache(plan_with_blocks(m, 16 * 1024), m.hp, true, cpu());
    const auto prompt = iota_tokens(10, 13);  // 3 full blocks + 1 token
    SeqKv a;
    EXPECT_EQ(cache.attach_prefix(a, prompt), 0u);
    ASSERT_TRUE(cache.grow(a, 13));
    cache.publish_full_blocks(a, prompt);
    EXPECT_EQ(a.n_published, 3u);

    SeqKv b;
    EXPECT_EQ(cache.attach_prefix(b, prompt), 12u);
    EXPECT_EQ(b.tables[0], std::vector<int32_t>(a.tables[0].begin(), a.tables[0].begin() + 3));
    EXPECT_EQ(cache.pool(0).ref_count(a.tables[0][0]), 2);
    // A prompt of exactly 3 blocks attaches 2: its last token must be computed.
    SeqKv c;
    EXPECT_EQ(cache.attach_prefix(c, std::span(prompt).first(12)), 8u);
    // A different second block stops the match after the first.
    auto other = prompt;
    other[5] = 999;
    SeqKv d;
    EXPECT_EQ(cache.attach_prefix(d, other), 4u);

    // After a frees, its blocks stay cached: a later sequence still hits.
    const SeqKv* live[] = {&b, &c, &d};
    cache.free(a);
    EXPECT_EQ(cache.check_invariants(live), "");
    cache.free(b);
    cache.free(c);
    cache.free(d);
    SeqKv e;
    EXPECT_EQ(cache.attach_prefix(e, prompt), 12u);
    cache.free(e);
    EXPECT_EQ(cache.used_bytes(), 0u);
}

TEST(KvCache, SlidingWindowGroupHoldsOnlyTheWindow) {
    const ModelDesc m = tiny_model(/*sliding_window=*/8);
    const MemoryPlan p = plan_with_blocks(m, 64 * 1024);
    ASSERT_EQ(p.kv_groups.size(), 2u);
    EXPECT_EQ(p.kv_groups[0].kind, AttentionKind::Full);
    EXPECT_EQ(p.kv_groups[1].kind, AttentionKind::SlidingWindow);
    // (window - 1 + step) = 15 tokens → 4 blocks, plus one for alignment.
    EXPECT_EQ(p.kv_groups[1].max_blocks_per_seq, 5u);
    KvCache cache(p, m.hp, true, cpu());
    SeqKv s;
    for (int step = 0; step < 20; ++step) {
        ASSERT_TRUE(cache.grow(s, 3));
        const auto& swa = s.tables[1];
        const auto held = std::count_if(swa.begin(), swa.end(), [](int32_t b) { return b >= 0; });
        // Queries from the next position see 8 keys: at most 3 blocks of 4, plus the new ones.
        EXPECT_LE(held, 5) << "after " << s.n_tokens << " tokens";
        // Every position a query at n_tokens - 1 can see is still held.
        for (uint32_t pos = s.n_tokens >= 8 ? s.n_tokens - 8 : 0; pos < s.n_tokens; ++pos)
            EXPECT_GE(swa[pos / 4], 0) << "position " << pos;
    }
    EXPECT_EQ(s.tables[0].size(), 15u);  // 60 tokens, full group holds all
    cache.free(s);
    EXPECT_EQ(cache.used_bytes(), 0u);
}

TEST(KvCache, PrefixLongerThanTheWindowAttachesWithWindowBlocks) {
    const ModelDesc m = tiny_model(/*sliding_window=*/8);
    KvCache cache(plan_with_blocks(m, 64 * 1024), m.hp, true, cpu());
    const auto prompt = iota_tokens(1, 41);
    SeqKv a;
    cache.attach_prefix(a, prompt);
    for (int i = 0; i < 41; i += 8) {
        ASSERT_TRUE(cache.grow(a, std::min(8, 41 - i)));
        cache.publish_full_blocks(a, prompt);
    }
    SeqKv b;
    // 10 blocks are published; the local layer kept its last blocks, so the
    // full 40-token prefix attaches; b holds only the window in that group.
    EXPECT_EQ(cache.attach_prefix(b, prompt), 40u);
    EXPECT_EQ(b.tables[1][0], -1);
    EXPECT_GE(b.tables[1][9], 0);
    cache.free(a);
    cache.free(b);
    EXPECT_EQ(cache.used_bytes(), 0u);
}

TEST(KvCache, ForkSharesEveryBlockAndCopiesThePartialOneOnFirstWrite) {
    const ModelDesc m = tiny_model();
    KvCache cache(plan_with_blocks(m, 16 * 1024), m.hp, true, cpu());
    SeqKv parent;
    ASSERT_TRUE(cache.grow(parent, 6));  // blocks of 4 tokens: one full, one with 2 of 4
    uint8_t* region = cpu().host(cache.layout().group_pieces[0][0]);
    std::memset(region + parent.tables[0][1] * 1024, 0x5A, 1024);
    const uint32_t used_before = cache.pool(0).n_used();
    SeqKv child;
    cache.fork(parent, child);
    // The fork itself takes no block: both tables name the same two.
    EXPECT_EQ(cache.pool(0).n_used(), used_before);
    EXPECT_EQ(child.tables[0], parent.tables[0]);
    EXPECT_EQ(cache.pool(0).ref_count(parent.tables[0][1]), 2);
    EXPECT_EQ(cache.n_shared_refs(), 2u);
    EXPECT_TRUE(cache.shares_partial_last(child, 0));
    // The child's first write needs one block: the copy of the partial one.
    EXPECT_EQ(cache.blocks_to_grow(child, 0, 1, true), 1u);
    ASSERT_TRUE(cache.grow(child, 1));
    EXPECT_EQ(child.tables[0][0], parent.tables[0][0]);
    EXPECT_NE(child.tables[0][1], parent.tables[0][1]);
    EXPECT_EQ(region[child.tables[0][1] * 1024 + 1000], 0x5A);
    EXPECT_EQ(cache.pool(0).n_used(), used_before + 1);
    EXPECT_EQ(cache.pool(0).ref_count(parent.tables[0][1]), 1);
    // The parent is now the only holder of its partial block: no copy.
    EXPECT_FALSE(cache.shares_partial_last(parent, 0));
    const int32_t parent_last = parent.tables[0][1];
    ASSERT_TRUE(cache.grow(parent, 1));
    EXPECT_EQ(parent.tables[0][1], parent_last);
    EXPECT_EQ(cache.n_shared_refs(), 1u);  // the full first block
    const SeqKv* live[] = {&parent, &child};
    EXPECT_EQ(cache.check_invariants(live), "");
    cache.free(parent);
    cache.free(child);
    EXPECT_EQ(cache.used_bytes(), 0u);
    EXPECT_EQ(cache.n_shared_refs(), 0u);
}

TEST(KvCache, AForkAtABlockBoundaryCopiesNothing) {
    const ModelDesc m = tiny_model();
    KvCache cache(plan_with_blocks(m, 16 * 1024), m.hp, true, cpu());
    SeqKv parent, child;
    ASSERT_TRUE(cache.grow(parent, 8));
    cache.fork(parent, child);
    EXPECT_FALSE(cache.shares_partial_last(child, 0));
    EXPECT_EQ(cache.blocks_to_grow(child, 0, 1, false), 1u);
    const uint32_t used = cache.pool(0).n_used();
    ASSERT_TRUE(cache.grow(child, 1));
    ASSERT_TRUE(cache.grow(parent, 1));
    EXPECT_EQ(cache.pool(0).n_used(), used + 2);  // one new block each, nothing copied
    cache.free(parent);
    cache.free(child);
    EXPECT_EQ(cache.n_blocks_used(), 0u);
}

TEST(KvCache, RandomWorkloadReturnsEveryBlock) {
    for (uint32_t window : {0u, 8u}) {
        SCOPED_TRACE(window ? "sliding window" : "full attention");
        const ModelDesc m = tiny_model(window);
        KvCache cache(plan_with_blocks(m, 48 * 1024), m.hp, true, cpu());
        std::mt19937 rng(window + 3);
        struct Live {
            SeqKv kv;
            std::vector<int32_t> tokens;
        };
        std::vector<Live> seqs;
        // A few shared prompt stems make prefix hits likely.
        std::vector<std::vector<int32_t>> stems = {iota_tokens(1, 24), iota_tokens(100, 24)};
        uint64_t n_grows = 0, n_hits = 0;
        for (int op = 0; op < 100000; ++op) {
            const int choice = static_cast<int>(rng() % 10);
            if (choice < 2 && seqs.size() < 12) {
                Live s;
                s.tokens = stems[rng() % 2];
                s.tokens.resize(4 + rng() % 20);
                s.tokens.push_back(static_cast<int32_t>(rng() % 50));
                n_hits += cache.attach_prefix(s.kv, s.tokens) > 0;
                seqs.push_back(std::move(s));
            } else if (choice < 7 && !seqs.empty()) {
                Live& s = seqs[rng() % seqs.size()];
                const uint32_t n = 1 + rng() % 6;
                if (s.kv.n_tokens + n > 64) continue;
                while (s.tokens.size() < s.kv.n_tokens + n)
                    s.tokens.push_back(static_cast<int32_t>(rng() % 50));
                const bool can = cache.can_grow(s.kv, n);
                ASSERT_EQ(cache.grow(s.kv, n), can);
                if (can) {
                    ++n_grows;
                    cache.publish_full_blocks(s.kv, s.tokens);
                }
            } else if (choice < 9 && !seqs.empty()) {
                const size_t i = rng() % seqs.size();
                cache.free(seqs[i].kv);
                seqs[i] = std::move(seqs.back());
                seqs.pop_back();
            } else if (!seqs.empty() && seqs.size() < 12) {
                Live child;
                const Live& parent = seqs[rng() % seqs.size()];
                if (parent.kv.n_tokens == 0) continue;
                cache.fork(parent.kv, child.kv);
                child.tokens = parent.tokens;
                seqs.push_back(std::move(child));
            }
            if (op % 1009 == 0) {
                std::vector<const SeqKv*> live;
                for (const auto& s : seqs) live.push_back(&s.kv);
                ASSERT_EQ(cache.check_invariants(live), "") << "after op " << op;
            }
        }
        for (auto& s : seqs) cache.free(s.kv);
        EXPECT_EQ(cache.used_bytes(), 0u);
        EXPECT_EQ(cache.n_blocks_used(), 0u);
        EXPECT_EQ(cache.check_invariants({}), "");
        EXPECT_GT(n_grows, 1000u);
        EXPECT_GT(n_hits, 100u);
    }
}

}  // namespace
}  // namespace headroom
