// Nothing is allocated per token: after a few warm-up steps, decode steps
// through the Runner (one sequence, then three batched) make no heap
// allocation, counted by replacing operator new and malloc in this binary.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "engine/runner.h"
#include "format/gguf-reader.h"
#include "memory/ledger.h"
#include "model/synth.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};

void note_allocation() {
    if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
}

}  // namespace

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

TEST(NoAlloc, DecodeStepsAllocateNothingAfterWarmUp) {
    const std::string path =
        (std::filesystem::temp_directory_path() / "headroom-no-alloc-tiny.gguf").string();
    SynthOptions so;
    so.type = TensorType::Q8_0;
    so.progress = false;
    write_synth_model(find_synth_shape("tiny"), so, path);
    const auto file = gguf::GgufFile::open(path);
    const auto model = Model::load(file);
    const ModelDesc desc = describe_gguf(file);

    RunnerOptions ro;
    ro.config.max_model_len = 256;
    ro.config.max_num_seqs = 3;
    ro.config.max_num_batched_tokens = 64;
    ro.config.max_logit_rows = 3;
    ro.config.n_threads = 2;
    ro.budget.kv_cache_bytes = 4 << 20;
    ro.prefix_caching = false;
    Ledger ledger;
    Runner runner(*model, desc, ro, ledger);

    // Sequences with their block tables' room reserved, as the engine does at
    // admission.
    SeqKv seqs[3];
    for (auto& s : seqs) {
        s.tables.resize(runner.cache().n_groups());
        for (auto& t : s.tables) t.reserve(256 / ro.config.block_size + 1);
    }
    Batch batch;
    batch.reserve(64, 3, 3);
    const uint32_t n_vocab = model->hparams().n_vocab;
    auto step = [&](int n_seqs, uint32_t n_tokens) {
        batch.clear();
        for (int i = 0; i < n_seqs; ++i) {
            const uint32_t pos = seqs[i].n_tokens;
            ASSERT_TRUE(runner.cache().grow(seqs[i], n_tokens));
            const uint32_t s = batch.add_seq(&seqs[i]);
            for (uint32_t t = 0; t < n_tokens; ++t)
                batch.add_token(static_cast<int32_t>((pos + t) * 7 % n_vocab), pos + t, s,
                                t + 1 == n_tokens);
        }
        const float* logits = runner.forward(batch);
        ASSERT_TRUE(std::isfinite(logits[0]));
    };
    step(1, 20);  // prefill
    for (int i = 0; i < 4; ++i) step(1, 1);

    g_allocations = 0;
    g_counting = true;
    for (int i = 0; i < 32; ++i) step(1, 1);
    g_counting = false;
    EXPECT_EQ(g_allocations.load(), 0) << "allocations in 32 decode steps of one sequence";

    step(3, 1);
    for (int i = 0; i < 4; ++i) step(3, 1);
    g_allocations = 0;
    g_counting = true;
    for (int i = 0; i < 32; ++i) step(3, 1);
    g_counting = false;
    EXPECT_EQ(g_allocations.load(), 0) << "allocations in 32 decode steps of three sequences";
    std::filesystem::remove(path);
}

}  // namespace
}  // namespace headroom
