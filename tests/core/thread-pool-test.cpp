#include "core/thread-pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <random>
#include <thread>
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

// Pauses around the workers' spin time (about a millisecond) make them go to
// sleep as jobs are posted: every share still runs once, with what its job
// posted, and every call returns.
TEST(ThreadPool, JobsPostedAsWorkersFallAsleepRunEveryShareOnce) {
    for (int n_threads : {2, 3}) {
        ThreadPool pool(n_threads);
        std::mt19937 rng(7);
        std::uniform_int_distribution<int> pause_us(0, 1400);
        for (int round = 0; round < 300; ++round) {
            std::vector<int> hits(static_cast<size_t>(n_threads), 0);
            int* at = hits.data();
            const int add = round + 1;
            pool.run([at, add](int i) { at[i] += add; });
            for (int h : hits) ASSERT_EQ(h, add) << "round " << round;
            if (round % 3 != 0)
                std::this_thread::sleep_for(std::chrono::microseconds(pause_us(rng)));
        }
    }
}

// A job that is a named function object (an lvalue) runs as a temporary does.
TEST(ThreadPool, RunsANamedFunctionObject) {
    ThreadPool pool(2);
    std::atomic<int> sum{0};
    auto job = [&](int i) { sum.fetch_add(i + 1); };
    pool.run(job);
    EXPECT_EQ(sum.load(), 3);
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
