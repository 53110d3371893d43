// Shared pieces of the kernel tests: the instruction set under test, a
// Context with its own pool and scratch, and random inputs.
//
// ctest runs the kernel tests once per instruction set, naming it in
// HEADROOM_TEST_ISA (avx2, avxvnni, avx512): a test for one this CPU cannot
// run is reported skipped, naming it, never passed. Run by hand without the
// variable, the binary tests every instruction set this CPU has.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/thread-pool.h"
#include "kernels/cpu/ops.h"

namespace headroom::kernels::test {

// The fast kernels under test (the reference is the oracle, not a subject):
// the one HEADROOM_TEST_ISA names, or every one this CPU has. Empty when
// the named one cannot run here.
inline std::vector<const Ops*> fast_tables() {
    const char* want = std::getenv("HEADROOM_TEST_ISA");
    std::vector<const Ops*> out;
    if (!want || std::string(want) == "avx2")
        if (const Ops* o = avx2_ops()) out.push_back(o);
    if (!want || std::string(want) == "avxvnni")
        if (const Ops* o = avxvnni_ops()) out.push_back(o);
    if (!want || std::string(want) == "avx512")
        if (const Ops* o = avx512_ops()) out.push_back(o);
    return out;
}

// Why fast_tables() is empty.
inline std::string skip_reason() {
    const char* want = std::getenv("HEADROOM_TEST_ISA");
    const std::string isa = want ? want : "avx2, avxvnni or avx512";
    if (isa == "avx2") return "this CPU has no AVX2 kernels (needs avx2, fma, f16c, bmi2)";
    if (isa == "avxvnni")
        return "this CPU has no AVX-VNNI kernels (needs avx2, fma, f16c, bmi2, avx_vnni)";
    if (isa == "avx512")
        return "this CPU has no AVX-512 kernels (needs avx512f, bw, vl, dq, vnni, bf16)";
    return "this CPU has no " + isa + " kernels";
}

}  // namespace headroom::kernels::test

// At the top of a kernel test: skips it, naming the instruction set, when
// the CPU cannot run the one under test.
#define HR_REQUIRE_FAST_BACKEND()                                     \
    do {                                                              \
        if (::headroom::kernels::test::fast_tables().empty())         \
            GTEST_SKIP() << ::headroom::kernels::test::skip_reason(); \
    } while (0)

namespace headroom::kernels::test {

// A Context whose buffers fit matmuls up to max_in wide with up to
// max_tokens tokens, and attention with heads up to max_head wide.
class TestContext {
  public:
    TestContext(int n_threads, uint64_t max_in, int64_t max_tokens, uint64_t max_head = 256,
                uint64_t group = 8, uint64_t n_head = 32)
        : pool_(n_threads) {
        const uint64_t per_thread = thread_scratch_bytes(max_in, max_head, group, n_head);
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
