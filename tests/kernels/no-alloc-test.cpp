// Nothing is allocated per token: once requests are admitted and decoding,
// whole engine steps (scheduling, the step view, the forward pass, sampling
// with top-k / top-p, token events, detokenization, stop-string checks,
// metrics) make no heap allocation, counted by replacing operator new and
// malloc in this binary. The engine runs as in production: prefix caching
// on, block tables as admission reserves them, a reader draining events.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "core/ledger.h"
#include "engine/engine.h"
#include "format/gguf-reader.h"
#include "kernels/cpu/cpu-backend.h"
#include "tools/synth.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};

void note_allocation() {
    if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
}

}  // namespace

// The replacements below route operator new to malloc, so their operator
// delete frees with free(); GCC cannot see that through the inlined calls.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void* malloc(size_t n) {
    note_allocation();
    return __libc_malloc(n);
}
extern "C" void* calloc(size_t n, size_t size) {
    note_allocation();
    return __libc_calloc(n, size);
}
extern "C" void* realloc(void* p, size_t n) {
    note_allocation();
    return __libc_realloc(p, n);
}

void* operator new(size_t n) {
    note_allocation();
    if (void* p = __libc_malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](size_t n) {
    return operator new(n);
}
void* operator new(size_t n, std::align_val_t a) {
    note_allocation();
    void* p = nullptr;
    if (posix_memalign(&p, static_cast<size_t>(a), n ? n : 1) != 0) throw std::bad_alloc();
    return p;
}
void* operator new[](size_t n, std::align_val_t a) {
    return operator new(n, a);
}
void operator delete(void* p) noexcept {
    free(p);
}
void operator delete[](void* p) noexcept {
    free(p);
}
void operator delete(void* p, size_t) noexcept {
    free(p);
}
void operator delete[](void* p, size_t) noexcept {
    free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
    free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
    free(p);
}
void operator delete(void* p, size_t, std::align_val_t) noexcept {
    free(p);
}
void operator delete[](void* p, size_t, std::align_val_t) noexcept {
    free(p);
}

namespace headroom {
namespace {

// Drains every request's events (the HTTP threads' work, not counted).
void drain(std::vector<std::shared_ptr<Request>>& reqs) {
    TokenEvent ev;
    for (auto& r : reqs)
        while (r->next(ev, std::chrono::milliseconds(0))) {
        }
}

// A dense llama, and a mixture of experts with a shared expert (routing,
// the grouped matmuls and the gate's sigmoid in every layer).
class NoAlloc : public ::testing::TestWithParam<const char*> {};

TEST_P(NoAlloc, EngineStepsAllocateNothingOnceDecoding) {
    const std::string path = (std::filesystem::temp_directory_path() /
                              (std::string("headroom-no-alloc-") + GetParam() + ".gguf"))
                                 .string();
    SynthOptions so;
    so.type = TensorType::Q8_0;
    so.progress = false;
    write_synth_model(find_synth_shape(GetParam()), so, path);
    const auto file = gguf::GgufFile::open(path);
    Ledger ledger;
    kernels::CpuBackend cpu(ledger, 2);
    const auto model = Model::load(file, cpu);
    const auto tokenizer = Tokenizer::from_gguf(file);
    ModelDesc desc = describe_gguf(file);
    desc.tokenizer_bytes = tokenizer->memory_bytes();

    RunnerOptions ro;
    ro.config.max_model_len = 512;
    ro.config.max_num_seqs = 3;
    ro.config.max_num_batched_tokens = 64;
    ro.config.n_threads = 2;
    ro.budget.kv_cache_bytes = 4 << 20;
    Runner runner(*model, desc, ro, cpu);
    EngineMetrics metrics;
    Engine engine(runner, *tokenizer, metrics);

    // Greedy; top-k and top-p; top-p alone with penalties and a stop string
    // that never matches (the hold-back of a possible stop string runs).
    std::vector<std::shared_ptr<Request>> reqs;
    for (int i = 0; i < 3; ++i) {
        GenerateRequest g;
        for (int t = 0; t < 20 + 7 * i; ++t) g.prompt.push_back((t * 13 + i) % 200 + 3);
        g.params.max_tokens = 400;
        g.params.ignore_eos = true;
        g.params.seed = 7 + i;
        if (i == 0) g.params.temperature = 0;
        if (i == 1) {
            g.params.top_k = 40;
            g.params.top_p = 0.9f;
        }
        if (i == 2) {
            g.params.top_p = 0.8f;
            g.params.repetition_penalty = 1.1f;
            g.params.stop = {"\x01\x02 never"};
        }
        std::string error;
        reqs.push_back(engine.submit(std::move(g), &error));
        ASSERT_TRUE(reqs.back()) << error;
    }
    // Admission, prefill, and the first decode steps (buffers reach their size).
    for (int i = 0; i < 40; ++i) {
        ASSERT_TRUE(engine.step());
        drain(reqs);
    }
    ASSERT_EQ(engine.scheduler().n_running(), 3u);

    long n_allocations = 0;
    for (int i = 0; i < 64; ++i) {
        g_allocations = 0;
        g_counting = true;
        const bool ran = engine.step();
        g_counting = false;
        ASSERT_TRUE(ran);
        n_allocations += g_allocations.load();
        drain(reqs);
    }
    EXPECT_EQ(n_allocations, 0) << "allocations in 64 engine steps decoding three sequences";
    EXPECT_EQ(engine.scheduler().n_running(), 3u);
    std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Shapes, NoAlloc,
                         ::testing::Values("tiny", "tiny-qwen2moe", "tiny-gpt-oss"),
                         [](const auto& info) {
                             std::string n = info.param;
                             for (char& c : n)
                                 if (c == '-') c = '_';
                             return n;
                         });

}  // namespace
}  // namespace headroom
