#include "core/thread-pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <vector>

namespace headroom {
namespace {

TEST(ThreadPool, RunsEveryThreadIndexOncePerCall) {
    ThreadPool pool(4);
    for (int round = 0; round < 1000; ++round) {
        std::vector<std::atomic<int>> hits(4);
        pool.run([&](int i) { hits[i].fetch_add(1); });
        for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
}

TEST(ThreadPool, ParallelForCoversTheRangeExactlyOnce) {
    ThreadPool pool(3);
    for (int64_t n : {0, 1, 2, 3, 7, 1000}) {
        std::vector<int> seen(static_cast<size_t>(n), 0);
        pool.parallel_for(n, [&](int64_t begin, int64_t end, int) {
            for (int64_t i = begin; i < end; ++i) ++seen[i];
        });
        EXPECT_EQ(std::accumulate(seen.begin(), seen.end(), 0), n);
        for (int s : seen) EXPECT_EQ(s, 1);
    }
}

TEST(ThreadPool, SingleThreadRunsInline) {
    ThreadPool pool(1);
    int calls = 0;
    pool.run([&](int i) { calls += 1 + i; });
    EXPECT_EQ(calls, 1);
    EXPECT_GE(physical_core_count(), 1);
}

}  // namespace
}  // namespace headroom
