// Shared pieces of the kernel tests: the backends this CPU runs, a Context
// with its own pool and scratch, and random inputs.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/thread-pool.h"
#include "kernels/kernels.h"

namespace headroom::kernels::test {

// The fast backends this CPU supports (the reference is the oracle, not a subject).
inline std::vector<const Ops*> fast_backends() {
    std::vector<const Ops*> out;
    if (const Ops* o = avx2_ops()) out.push_back(o);
    if (const Ops* o = avx512_ops()) out.push_back(o);
    return out;
}

// A Context whose buffers fit matmuls up to max_in wide with up to
// max_tokens tokens, and attention with heads up to max_head wide.
class TestContext {
  public:
    TestContext(int n_threads, uint64_t max_in, int64_t max_tokens, uint64_t max_head = 256,
                uint64_t group = 8)
        : pool_(n_threads) {
        const uint64_t per_thread = thread_scratch_bytes(max_in, max_head, group);
        scratch_.resize(per_thread * static_cast<uint64_t>(n_threads) + 64);
        acts_.resize(acts_row_bytes(max_in) * static_cast<uint64_t>(max_tokens) + 64);
        ctx_.pool = &pool_;
        ctx_.scratch = align(scratch_.data());
        ctx_.scratch_per_thread_bytes = per_thread;
        ctx_.acts_q = align(acts_.data());
        ctx_.acts_q_bytes = acts_row_bytes(max_in) * static_cast<uint64_t>(max_tokens);
    }
    Context& ctx() { return ctx_; }

  private:
    static uint8_t* align(uint8_t* p) {
        return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63});
    }
    ThreadPool pool_;
    std::vector<uint8_t> scratch_, acts_;
    Context ctx_;
};

// Activations like a transformer's: mostly N(0, 1), with a few large
// outliers per row (which set the scale of their quantization blocks).
inline std::vector<float> random_acts(int64_t n_tokens, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int64_t> pick(0, n - 1);
    std::vector<float> x(static_cast<size_t>(n_tokens * n));
    for (auto& v : x) v = normal(rng);
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int i = 0; i < 3; ++i) x[static_cast<size_t>(t * n + pick(rng))] *= 20.0f;
    return x;
}

}  // namespace headroom::kernels::test
