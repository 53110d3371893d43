#include "core/share-queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/thread-pool.h"

namespace headroom {
namespace {

struct Taken {
    int64_t begin, end;
};

// Every item handed out exactly once, whatever the thread count and grab.
TEST(ShareQueue, HandsOutEveryItemOnce) {
    for (int n_threads : {1, 2, 3, 8}) {
        ThreadPool pool(n_threads);
        for (int64_t n : {0, 1, 2, 5, 64, 1000, 4099}) {
            for (int64_t grab : {1, 3, 100}) {
                ShareQueue queue(n, n_threads, grab);
                std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
                pool.run([&](int t) {
                    queue.drain(t, [&](int64_t b, int64_t e) {
                        EXPECT_LT(b, e);
                        EXPECT_LE(e - b, grab);
                        for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
                    });
                });
                for (int64_t i = 0; i < n; ++i)
                    ASSERT_EQ(seen[i].load(), 1) << "n=" << n << " grab=" << grab << " item " << i;
            }
        }
    }
}

// Run alone, a thread walks its own share front to back and then steals the
// back half of what is left, each piece again front to back.
TEST(ShareQueue, OneThreadWalksSharesInOrderThenStealsBackHalves) {
    ShareQueue queue(100, 2, 10);
    std::vector<Taken> taken;
    queue.drain(0, [&](int64_t b, int64_t e) { taken.push_back({b, e}); });
    // Own share [0, 50) in grabs of 10; then share 1's [50, 100): back half
    // [75, 100), then of [50, 75) the back half [62, 75), then [56, 62) ...
    std::vector<Taken> want = {{0, 10},  {10, 20}, {20, 30},  {30, 40}, {40, 50},
                               {75, 85}, {85, 95}, {95, 100}, {62, 72}, {72, 75},
                               {56, 62}, {53, 56}, {51, 53},  {50, 51}};
    ASSERT_EQ(taken.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(taken[i].begin, want[i].begin) << i;
        EXPECT_EQ(taken[i].end, want[i].end) << i;
    }
}

// A thread that stalls gives its share to the others.
TEST(ShareQueue, StalledThreadsWorkIsStolen) {
    ThreadPool pool(2);
    ShareQueue queue(400, 2, 4);
    std::atomic<int64_t> done[2] = {0, 0};
    pool.run([&](int t) {
        queue.drain(t, [&](int64_t b, int64_t e) {
            if (t == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
            done[t].fetch_add(e - b);
        });
    });
    EXPECT_EQ(done[0].load() + done[1].load(), 400);
    // Thread 1 sleeps 20 ms per grab of 4; thread 0 finishes everything else
    // in far less time than that.
    EXPECT_GT(done[0].load(), 300);
}

// Shares given by their bounds (empty ones among them): a thread walks its
// own from the front, then steals; every item once.
TEST(ShareQueue, GivenBoundsAreEachThreadsShare) {
    const std::vector<int64_t> bounds = {0, 7, 7, 30};
    ShareQueue queue(bounds, 5);
    std::vector<Taken> taken;
    queue.drain(2, [&](int64_t b, int64_t e) { taken.push_back({b, e}); });
    // Own share [7, 30) in grabs of 5, then share 0's [0, 7): back half
    // [3, 7), then [1, 3), then [0, 1).
    const std::vector<Taken> want = {{7, 12},  {12, 17}, {17, 22}, {22, 27},
                                     {27, 30}, {3, 7},   {1, 3},   {0, 1}};
    ASSERT_EQ(taken.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(taken[i].begin, want[i].begin) << i;
        EXPECT_EQ(taken[i].end, want[i].end) << i;
    }
    ThreadPool pool(3);
    ShareQueue shared(bounds, 2);
    std::vector<std::atomic<int>> seen(30);
    pool.run([&](int t) {
        shared.drain(t, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
        });
    });
    for (int64_t i = 0; i < 30; ++i) ASSERT_EQ(seen[i].load(), 1) << i;
}

TEST(ShareQueue, MoreThreadsThanSharesStillCoverEverything) {
    const int n_threads = ShareQueue::kMaxShares + 2;
    ShareQueue queue(1000, n_threads, 1);
    std::vector<int> seen(1000, 0);
    for (int t = n_threads - 1; t >= 0; --t)
        queue.drain(t, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) ++seen[i];
        });
    for (int s : seen) ASSERT_EQ(s, 1);
}

}  // namespace
}  // namespace headroom
