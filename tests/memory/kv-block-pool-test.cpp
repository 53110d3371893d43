// The block pool without a model: allocation, refcounts, the prefix index,
// LRU eviction order, and invariants under random operations.
#include "memory/kv-block-pool.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace headroom {
namespace {

std::vector<int32_t> block_tokens(int32_t seed, uint32_t n = 4) {
    std::vector<int32_t> t(n);
    for (uint32_t i = 0; i < n; ++i) t[i] = seed * 100 + static_cast<int32_t>(i);
    return t;
}

TEST(KvBlockPool, AllocatesEveryBlockOnceThenRefuses) {
    KvBlockPool pool(8, 4, 64);
    std::vector<int32_t> got;
    for (int i = 0; i < 8; ++i) got.push_back(pool.allocate());
    EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(pool.allocate(), -1);
    EXPECT_FALSE(pool.can_allocate(1));
    EXPECT_EQ(pool.n_used(), 8u);
    pool.release(3);
    EXPECT_TRUE(pool.can_allocate(1));
    EXPECT_EQ(pool.allocate(), 3);
    EXPECT_EQ(pool.check_invariants(), "");
}

TEST(KvBlockPool, PublishedBlocksAreFoundOnlyWithTheirTokens) {
    KvBlockPool pool(4, 4, 16);
    const int32_t b = pool.allocate();
    const auto t = block_tokens(1);
    ASSERT_TRUE(pool.publish(b, 0xABCDEF, t));
    EXPECT_EQ(pool.find(0xABCDEF, t), b);
    EXPECT_EQ(pool.find(0xABCDEF, block_tokens(2)), -1) << "a hash collision must not hit";
    EXPECT_EQ(pool.find(0x123456, t), -1);
    // A second block with the same hash is not published.
    const int32_t c = pool.allocate();
    EXPECT_FALSE(pool.publish(c, 0xABCDEF, block_tokens(2)));
    EXPECT_FALSE(pool.is_published(c));
    EXPECT_EQ(pool.check_invariants(), "");
}

TEST(KvBlockPool, FreedHashedBlocksStayFindableAndComeBack) {
    KvBlockPool pool(4, 4, 16);
    const int32_t b = pool.allocate();
    pool.publish(b, 42, block_tokens(7));
    pool.release(b);
    EXPECT_EQ(pool.n_used(), 0u);
    EXPECT_EQ(pool.n_cached(), 1u);
    EXPECT_EQ(pool.n_free(), 4u);
    EXPECT_EQ(pool.find(42, block_tokens(7)), b);
    pool.retain(b);
    EXPECT_EQ(pool.ref_count(b), 1);
    EXPECT_EQ(pool.n_cached(), 0u);
    EXPECT_EQ(pool.check_invariants(), "");
}

TEST(KvBlockPool, EvictsLeastRecentlyFreedCachedBlocksAfterTheFreeStack) {
    KvBlockPool pool(4, 4, 16);
    std::vector<int32_t> seq;
    for (int i = 0; i < 3; ++i) {
        seq.push_back(pool.allocate());
        pool.publish(seq.back(), 1000 + i, block_tokens(i));
    }
    // Released tail first, as a finished sequence does: block 2, then 1, then 0.
    for (auto it = seq.rbegin(); it != seq.rend(); ++it) pool.release(*it);
    // One never-used block is still on the free stack: it goes first.
    EXPECT_EQ(pool.allocate(), 3);
    EXPECT_EQ(pool.n_evictions(), 0u);
    // Then the tail of the cached prefix, then its middle; the head survives longest.
    EXPECT_EQ(pool.allocate(), seq[2]);
    EXPECT_EQ(pool.find(1002, block_tokens(2)), -1);
    EXPECT_EQ(pool.allocate(), seq[1]);
    EXPECT_EQ(pool.find(1000, block_tokens(0)), seq[0]);
    EXPECT_EQ(pool.n_evictions(), 2u);
    EXPECT_EQ(pool.check_invariants(), "");
}

TEST(KvBlockPool, RandomOperationsKeepInvariants) {
    constexpr uint32_t kBlocks = 64;
    KvBlockPool pool(kBlocks, 4, 8);
    std::mt19937 rng(1);
    std::vector<int32_t> held;  // one entry per reference we hold
    // Few distinct hashes with colliding low bits stress the probing and the
    // backward-shift deletion.
    auto hash_of = [](int k) {
        return static_cast<uint64_t>(k) << 32 | static_cast<uint64_t>(k % 3);
    };
    for (int op = 0; op < 100000; ++op) {
        const int choice = static_cast<int>(rng() % 10);
        if (choice < 4) {
            const int32_t b = pool.allocate();
            if (b >= 0) {
                held.push_back(b);
                const int k = static_cast<int>(rng() % 200);
                if (rng() % 2) pool.publish(b, hash_of(k), block_tokens(k));
            } else {
                ASSERT_EQ(pool.n_free(), 0u);
            }
        } else if (choice < 8 && !held.empty()) {
            const size_t i = rng() % held.size();
            pool.release(held[i]);
            held[i] = held.back();
            held.pop_back();
        } else {
            const int k = static_cast<int>(rng() % 200);
            const int32_t b = pool.find(hash_of(k), block_tokens(k));
            if (b >= 0) {
                pool.retain(b);
                held.push_back(b);
            }
        }
        if (op % 997 == 0) {
            ASSERT_EQ(pool.check_invariants(), "") << "after op " << op;
        }
    }
    for (int32_t b : held) pool.release(b);
    EXPECT_EQ(pool.n_used(), 0u);
    EXPECT_EQ(pool.n_free(), kBlocks);
    EXPECT_EQ(pool.check_invariants(), "");
}

}  // namespace
}  // namespace headroom
