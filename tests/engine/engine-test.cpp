// The engine end to end on a tiny random model built in memory: batch
// invariance (a request's greedy output alone equals its output batched with
// 31 others), an over-subscribed soak (every request completes with the
// output it has alone, preemptions happen, memory stays in the budget, every
// block comes back), cancellation, stop strings and refusals.
//
// ctest runs it once per backend, naming it in HEADROOM_TEST_BACKEND (cpu,
// vulkan, vulkan-split: the first of the model's two layers on the CPU, the
// other on the GPU): the Vulkan runs are reported skipped where this machine
// has no Vulkan device. On Vulkan the soak's pool is what a device budget
// (--device-memory) of a few sequences leaves, and a decode step is checked
// to be one submission and one wait.
#include "engine/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <thread>

#include "format/gguf-reader.h"
#include "format/gguf-writer.h"
#include "kernels/cpu/cpu-backend.h"
#include "memory/report.h"
#include "tools/synth.h"
#if HEADROOM_VULKAN
#include "kernels/vulkan/vk-context.h"
#include "kernels/vulkan/vulkan-backend.h"
#endif

namespace headroom {
namespace {

using ::testing::HasSubstr;

std::string_view backend_under_test() {
    const char* b = std::getenv("HEADROOM_TEST_BACKEND");
    return b ? b : "cpu";
}
bool on_vulkan() {
    return backend_under_test().starts_with("vulkan");
}
// Layers on the CPU of the split run.
uint32_t n_cpu_layers() {
    return backend_under_test() == "vulkan-split" ? 1 : 0;
}

// The backend under test, or null (with *why) when it cannot run here. A
// Vulkan backend's budget is `device_memory` (--device-memory).
std::unique_ptr<kernels::Backend> make_backend(Ledger& host, uint64_t device_memory,
                                               std::string* why) {
    if (!on_vulkan()) return std::make_unique<kernels::CpuBackend>(host, 1);
#if HEADROOM_VULKAN
    if (kernels::vk::list_devices(why).empty()) return nullptr;
    kernels::VulkanOptions o;
    o.device_memory_bytes = device_memory;
    o.mem_fraction = 1.0;
    o.progress = false;
    return std::make_unique<kernels::VulkanBackend>(host, o);
#else
    (void)device_memory;
    *why = "built without the Vulkan backend";
    return nullptr;
#endif
}

uint64_t device_bytes_of(const kernels::Backend& b) {
#if HEADROOM_VULKAN
    if (const auto* v = dynamic_cast<const kernels::VulkanBackend*>(&b)) return v->device_bytes();
#endif
    (void)b;
    return 0;
}

// One backend (the CPU's with one worker, or a Vulkan device) holds the tiny
// model's weights for every engine that uses it; each runner takes its KV
// and arena from it and gives them back when it goes.
struct TinyModel {
    Ledger ledger;
    std::string why;
    std::unique_ptr<kernels::Backend> backend;
    std::unique_ptr<kernels::Backend> cpu;  // the split's CPU part
    std::vector<uint8_t> bytes;
    std::unique_ptr<gguf::GgufFile> file;
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tokenizer;
    ModelDesc desc;
    explicit TinyModel(uint64_t device_memory = 256ull << 20) {
        backend = make_backend(ledger, device_memory, &why);
        if (!backend) return;
        SynthOptions opt;
        opt.type = TensorType::Q8_0;
        opt.progress = false;
        bytes = make_synth_model(find_synth_shape("tiny"), opt).to_bytes();
        file = std::make_unique<gguf::GgufFile>(gguf::GgufFile::parse(bytes, "tiny.gguf"));
        if (n_cpu_layers() > 0) cpu = std::make_unique<kernels::CpuBackend>(ledger, 1);
        model = Model::load(*file, *backend, cpu.get(), n_cpu_layers());
        tokenizer = Tokenizer::from_gguf(*file);
        desc = describe_gguf(*file);
        desc.tokenizer_bytes = tokenizer->memory_bytes();
    }
};

TinyModel& tiny() {
    static TinyModel m;
    return m;
}

#define HR_REQUIRE_BACKEND()                                                          \
    do {                                                                              \
        if (!tiny().backend) GTEST_SKIP() << "no Vulkan device here: " << tiny().why; \
    } while (0)

struct EngineSetup {
    TinyModel& m;
    EngineMetrics metrics;
    std::unique_ptr<Runner> runner;
    std::unique_ptr<Engine> engine;
    // kv_bytes 0: the pool is what the backend's budget leaves (a GPU's).
    EngineSetup(uint32_t max_num_seqs, uint32_t max_model_len, uint64_t kv_bytes,
                bool prefix = true, uint32_t batched = 64, TinyModel& model = tiny())
        : m(model) {
        RunnerOptions o;
        o.config.max_num_seqs = max_num_seqs;
        o.config.max_model_len = max_model_len;
        o.config.max_num_batched_tokens = batched;
        o.config.block_size = 16;
        o.config.n_threads = 1;
        o.budget.kv_cache_bytes = kv_bytes;
        o.prefix_caching = prefix;
        if (!m.backend->is_host()) {
            o.budget.device_bytes = device_bytes_of(*m.backend);
            o.budget.mem_fraction = 1.0;
            o.budget.device_context_bytes = m.backend->device_context_bytes();
        }
        runner = std::make_unique<Runner>(*m.model, m.desc, o, *m.backend, m.cpu.get());
        engine = std::make_unique<Engine>(*runner, *tiny().tokenizer, metrics);
    }
};

// KV bytes per token of the tiny model: 2 layers × 2 KV heads × (16 + 16) × 2 B.
constexpr uint64_t kTinyKvPerToken = 256;

// Runs requests until all are finished; returns each one's output tokens.
std::vector<std::vector<int32_t>> run_all(Engine& engine, const std::vector<GenerateRequest>& reqs,
                                          const std::function<void()>& after_step = {}) {
    std::vector<std::shared_ptr<Request>> handles;
    for (const auto& r : reqs) {
        std::string error;
        handles.push_back(engine.submit(r, &error));
        EXPECT_TRUE(handles.back()) << error;
    }
    std::vector<std::vector<int32_t>> out(reqs.size());
    std::vector<bool> done(reqs.size(), false);
    size_t n_done = 0;
    for (int guard = 0; n_done < reqs.size() && guard < 200000; ++guard) {
        engine.step();
        if (after_step) after_step();
        for (size_t i = 0; i < handles.size(); ++i) {
            TokenEvent ev;
            while (!done[i] && handles[i]->next(ev, std::chrono::milliseconds(0))) {
                if (ev.token >= 0) out[i].push_back(ev.token);
                if (ev.finish != FinishReason::None) {
                    done[i] = true;
                    ++n_done;
                }
            }
        }
    }
    EXPECT_EQ(n_done, reqs.size());
    return out;
}

std::vector<GenerateRequest> random_requests(int n, uint32_t seed, uint32_t max_prompt,
                                             uint32_t max_new) {
    std::mt19937 rng(seed);
    std::vector<GenerateRequest> reqs;
    for (int i = 0; i < n; ++i) {
        GenerateRequest r;
        const uint32_t len = 1 + rng() % max_prompt;
        // A shared stem on a third of the requests exercises prefix caching.
        for (uint32_t j = 0; j < len; ++j)
            r.prompt.push_back(
                static_cast<int32_t>(i % 3 == 0 && j < 20 ? 300 + j : 3 + rng() % 500));
        r.params.temperature = 0;
        r.params.max_tokens = 1 + rng() % max_new;
        r.params.ignore_eos = true;
        reqs.push_back(std::move(r));
    }
    return reqs;
}

std::vector<std::vector<int32_t>> alone(const std::vector<GenerateRequest>& reqs) {
    std::vector<std::vector<int32_t>> out;
    EngineSetup s(1, 256, 256 * kTinyKvPerToken * 4, /*prefix=*/false);
    for (const auto& r : reqs) out.push_back(run_all(*s.engine, {r})[0]);
    return out;
}

TEST(Engine, GreedyOutputIsTheSameAloneOrBatchedWith31Others) {
    HR_REQUIRE_BACKEND();
    const auto reqs = random_requests(32, 1, 60, 24);
    const auto expected = alone(reqs);
    EngineSetup s(32, 256, 32ull * 256 * kTinyKvPerToken * 4);
    const auto got = run_all(*s.engine, reqs);
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "request " << i;
    EXPECT_GT(s.metrics.n_steps.load(), 0u);
}

void soak(int n_requests, uint32_t seed) {
    // A pool for 8 full-length sequences of 128 tokens, 80 seats: 10× over-subscribed.
    const auto reqs = random_requests(n_requests, seed, 100, 28);
    const auto expected = alone(reqs);
    // On a GPU the pool is what a device budget for 8 such sequences leaves:
    // the model on a backend whose --device-memory is the plan's device
    // terms with that pool.
    std::unique_ptr<TinyModel> small;
    uint64_t kv_bytes = 8ull * 128 * kTinyKvPerToken;
    // A split's device pool holds the GPU layer's half of each token; the
    // host's pool as many blocks for the CPU's.
    const uint32_t n_halves = n_cpu_layers() > 0 ? 2 : 1;
    if (on_vulkan()) {
        kv_bytes /= n_halves;
        EngineConfig c;
        c.n_cpu_layers = n_cpu_layers();
        c.n_threads = 1;
        c.max_num_seqs = 80;
        c.max_model_len = 128;
        c.max_num_batched_tokens = 96;
        c.block_size = 16;
        c.device = "gpu0";
        BudgetSpec b;
        b.kv_cache_bytes = kv_bytes;
        b.device_context_bytes = kernels::kVulkanContextBytes;
        small = std::make_unique<TinyModel>(plan_memory(tiny().desc, c, b).budgeted_bytes() + 100);
        kv_bytes = 0;
    }
    EngineSetup s(80, 128, kv_bytes, true, 96, small ? *small : tiny());
    ASSERT_EQ(s.runner->plan().kv_bytes_per_token, kTinyKvPerToken);
    if (small) {
        ASSERT_EQ(s.runner->cache().n_blocks_total(), n_halves * 8u * 128 / 16);
        ASSERT_EQ(s.runner->plan().max_num_seqs_at_max_model_len, 8u);
    }
    Ledger& device = s.runner->ledger();
    const uint64_t reserved = device.snapshot()[Term::KvCache].reserved_bytes;
    uint64_t max_used = 0;
    const auto got = run_all(*s.engine, reqs, [&] {
        const auto snaps = s.m.backend->snapshots();
        const LedgerSnapshot kv = device.snapshot();
        max_used = std::max(max_used, kv[Term::KvCache].allocated_bytes);
        ASSERT_LE(kv[Term::KvCache].allocated_bytes, reserved);
        ASSERT_LE(sum_ledgers(snaps).total_allocated_bytes(), s.runner->plan().total_bytes());
    });
    for (size_t i = 0; i < reqs.size(); ++i) ASSERT_EQ(got[i], expected[i]) << "request " << i;
    EXPECT_GT(s.metrics.n_preemptions.load(), 0u);
    EXPECT_GT(max_used, reserved / 2);
    EXPECT_EQ(s.runner->cache().n_blocks_used(), 0u);
    EXPECT_EQ(s.engine->n_active(), 0u);
    EXPECT_EQ(s.metrics.finished[static_cast<size_t>(FinishReason::Length)].load(),
              static_cast<uint64_t>(n_requests));
    EXPECT_GT(s.metrics.prefix_hit_tokens.load(), 0u);
    std::printf(
        "soak: %d requests, 80 seats, pool of %llu blocks: %llu preemptions, peak KV %llu of %llu "
        "bytes, "
        "%llu of %llu prompt tokens from the prefix cache\n",
        n_requests, static_cast<unsigned long long>(s.runner->cache().n_blocks_total()),
        static_cast<unsigned long long>(s.metrics.n_preemptions.load()),
        static_cast<unsigned long long>(max_used), static_cast<unsigned long long>(reserved),
        static_cast<unsigned long long>(s.metrics.prefix_hit_tokens.load()),
        static_cast<unsigned long long>(s.metrics.prefix_query_tokens.load()));
}

TEST(Engine, OversubscribedSoakCompletesEveryRequestWithItsAloneOutput) {
    HR_REQUIRE_BACKEND();
    soak(80, 7);
}

TEST(EngineSlow, Soak500RequestsAt10xOversubscription) {
    HR_REQUIRE_BACKEND();
    soak(500, 8);
}

// A GPU's decode step: one submission, one wait; up only the step view (the
// token ids, positions, slots and block tables) and on a split the hidden
// state from the CPU's layers, down only the rows sampled.
TEST(Engine, ADecodeStepIsOneSubmissionAndOneWait) {
    HR_REQUIRE_BACKEND();
    if (tiny().backend->is_host()) GTEST_SKIP() << "the CPU backend submits nothing";
    EngineSetup s(3, 256, 3ull * 256 * kTinyKvPerToken);
    std::vector<std::shared_ptr<Request>> reqs;
    for (const auto& r : random_requests(3, 4, 30, 1)) {
        GenerateRequest g = r;
        g.params.max_tokens = 50;
        std::string error;
        reqs.push_back(s.engine->submit(g, &error));
    }
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(s.engine->step());  // prefills, then decoding
    ASSERT_TRUE(s.engine->step());
    const kernels::StepStats st = tiny().backend->last_step();
    const kernels::StepView& view = s.runner->last_step();
    ASSERT_EQ(view.n_tokens, 3u);  // three sequences, one token each
    EXPECT_EQ(st.n_submits, 1u);
    EXPECT_EQ(st.n_waits, 1u);
    const uint64_t hidden = n_cpu_layers() > 0 ? 3ull * tiny().model->hparams().n_embd * 4 : 0;
    EXPECT_EQ(st.upload_bytes, uint64_t{view.n_words} * 4 + hidden);
    EXPECT_EQ(st.download_bytes, 3ull * tiny().model->hparams().n_vocab * 4);
    std::printf(
        "decode step of 3 sequences: %llu submission, %llu wait, %llu dispatches, %llu "
        "bytes up, %llu bytes down\n",
        static_cast<unsigned long long>(st.n_submits), static_cast<unsigned long long>(st.n_waits),
        static_cast<unsigned long long>(st.n_dispatches),
        static_cast<unsigned long long>(st.upload_bytes),
        static_cast<unsigned long long>(st.download_bytes));
}

TEST(Engine, CancelFreesBlocksWithinOneStep) {
    HR_REQUIRE_BACKEND();
    EngineSetup s(4, 256, 4ull * 256 * kTinyKvPerToken);
    GenerateRequest r = random_requests(1, 3, 40, 1)[0];
    r.params.max_tokens = 200;
    std::string error;
    auto h = s.engine->submit(r, &error);
    for (int i = 0; i < 5; ++i) s.engine->step();
    EXPECT_GT(s.runner->cache().n_blocks_used(), 0u);
    s.engine->cancel(h->id());
    s.engine->step();
    EXPECT_EQ(s.runner->cache().n_blocks_used(), 0u);
    TokenEvent ev;
    FinishReason last = FinishReason::None;
    while (h->next(ev, std::chrono::milliseconds(0))) last = ev.finish;
    EXPECT_EQ(last, FinishReason::Abort);
}

TEST(Engine, SnapshotShowsEveryBlockWithItsOwnerOnlyWhileWanted) {
    HR_REQUIRE_BACKEND();
    EngineSetup s(4, 256, 64ull * 16 * kTinyKvPerToken);  // 64 blocks
    auto reqs = random_requests(2, 11, 40, 1);
    for (auto& r : reqs) r.params.max_tokens = 60;
    std::string error;
    auto a = s.engine->submit(reqs[0], &error);
    auto b = s.engine->submit(reqs[1], &error);
    ASSERT_TRUE(a && b) << error;
    for (int i = 0; i < 4; ++i) s.engine->step();
    // Nobody asked: nothing was built.
    EXPECT_EQ(s.engine->snapshots().latest(), nullptr);

    s.engine->snapshots().want(a->id());
    s.engine->step();  // the first snapshot is built at once
    auto snap = s.engine->snapshots().latest();
    ASSERT_NE(snap, nullptr);
    // One pool per KV layer group (the split run's host layers have their own).
    const KvCache& cache = s.runner->cache();
    ASSERT_EQ(snap->pools.size(), cache.n_groups());
    for (size_t g = 0; g < cache.n_groups(); ++g) {
        const KvBlockPool& pool = cache.pool(g);
        const auto& p = snap->pools[g];
        ASSERT_EQ(p.state.size(), pool.n_blocks());
        uint32_t held = 0;
        for (uint32_t i = 0; i < pool.n_blocks(); ++i) {
            const int32_t refs = pool.ref_count(static_cast<int32_t>(i));
            held += p.state[i] == BlockState::Owned || p.state[i] == BlockState::Shared;
            EXPECT_EQ(p.state[i] == BlockState::Shared, refs > 1) << "block " << i;
            EXPECT_EQ(p.owner[i] != 0, refs > 0) << "block " << i;
        }
        EXPECT_EQ(held, pool.n_used());
        EXPECT_EQ(p.n_used, pool.n_used());
    }
    ASSERT_EQ(snap->requests.size(), 2u);
    EXPECT_EQ(snap->requests[0].id, a->id());  // oldest first
    for (const auto& r : snap->requests) {
        ASSERT_EQ(r.seqs.size(), 1u);
        const auto& seq = r.seqs[0];
        // In every (full-attention) pool a sequence holds ceil(computed /
        // block_size) blocks, each owned by it or (the oldest holder) by the
        // request before it.
        uint32_t n_blocks = 0;
        for (size_t g = 0; g < snap->pools.size(); ++g) {
            const auto& p = snap->pools[g];
            EXPECT_EQ(seq.tables[g].size(), (seq.n_computed + 15) / 16) << "request " << r.id;
            n_blocks += static_cast<uint32_t>(seq.tables[g].size());
            for (int32_t blk : seq.tables[g]) {
                const uint64_t owner = p.owner[static_cast<size_t>(blk)];
                EXPECT_TRUE(owner == r.id ||
                            (owner == a->id() && p.state[blk] == BlockState::Shared));
            }
        }
        EXPECT_EQ(r.n_blocks, n_blocks);
        EXPECT_TRUE(r.running);
    }
    // The request asked about comes with its tokens: its prompt, then what it generated.
    EXPECT_EQ(snap->detail_id, a->id());
    ASSERT_EQ(snap->detail_tokens.size(), snap->requests[0].seqs[0].n_tokens);
    EXPECT_TRUE(
        std::equal(reqs[0].prompt.begin(), reqs[0].prompt.end(), snap->detail_tokens.begin()));

    // Within kSnapshotInterval of the last one, steps build nothing new...
    const uint64_t version = snap->version;
    EXPECT_EQ(snap->changes, s.engine->snapshots().changes());
    s.engine->snapshots().take_nudge();  // the first want()'s (a server's loop takes it)
    s.engine->step();
    EXPECT_EQ(s.engine->snapshots().latest()->version, version);
    // ...but the snapshot now shows an older state than the engine's, so a
    // reader asking again nudges the engine for a new one even though the
    // last is fresh and has its detail.
    EXPECT_LT(s.engine->snapshots().latest()->changes, s.engine->snapshots().changes());
    s.engine->snapshots().want(a->id());
    EXPECT_TRUE(s.engine->snapshots().take_nudge());

    // Once both finish, the last state shows no holder: freed blocks are free or cached.
    TokenEvent ev;
    for (int guard = 0; guard < 10000 && (!a->finished() || !b->finished()); ++guard) {
        s.engine->step();
        while (a->next(ev, std::chrono::milliseconds(0)) ||
               b->next(ev, std::chrono::milliseconds(0))) {
        }
    }
    ASSERT_TRUE(a->finished() && b->finished());
    std::this_thread::sleep_for(kSnapshotInterval + std::chrono::milliseconds(10));
    s.engine->snapshots().want(0);
    s.engine->step();
    snap = s.engine->snapshots().latest();
    EXPECT_GT(snap->version, version);
    EXPECT_TRUE(snap->requests.empty());
    uint32_t cached = 0, pool_cached = 0;
    for (size_t g = 0; g < cache.n_groups(); ++g) {
        for (const BlockState st : snap->pools[g].state) {
            EXPECT_TRUE(st == BlockState::Free || st == BlockState::Cached);
            cached += st == BlockState::Cached;
        }
        pool_cached += cache.pool(g).n_cached();
    }
    EXPECT_EQ(cached, pool_cached);
    EXPECT_GT(cached, 0u);
}

TEST(Engine, StopStringEndsTheOutputWhereItStarts) {
    HR_REQUIRE_BACKEND();
    GenerateRequest r = random_requests(1, 5, 30, 1)[0];
    r.params.max_tokens = 40;
    EngineSetup s(1, 256, 256 * kTinyKvPerToken);
    // The full text alone, then the same request with a stop string taken from its middle.
    std::string error;
    auto h = s.engine->submit(r, &error);
    std::string full;
    TokenEvent ev;
    while (!h->finished()) {
        s.engine->step();
        while (h->next(ev, std::chrono::milliseconds(0))) full += ev.text;
    }
    ASSERT_GT(full.size(), 12u);
    const std::string stop = full.substr(full.size() / 2, 3);
    r.params.stop = {stop};
    h = s.engine->submit(r, &error);
    std::string cut;
    FinishReason reason = FinishReason::None;
    while (!h->finished()) {
        s.engine->step();
        while (h->next(ev, std::chrono::milliseconds(0))) {
            cut += ev.text;
            if (ev.finish != FinishReason::None) reason = ev.finish;
        }
    }
    EXPECT_EQ(cut, full.substr(0, full.find(stop)));
    EXPECT_EQ(reason, FinishReason::Stop);
}

TEST(Engine, RefusesWhatCannotFitWithTheNumbers) {
    HR_REQUIRE_BACKEND();
    EngineSetup s(1, 64, 64 * kTinyKvPerToken);
    GenerateRequest r;
    r.prompt.assign(64, 5);
    std::string error;
    EXPECT_EQ(s.engine->submit(r, &error), nullptr);
    EXPECT_THAT(error, HasSubstr("the prompt has 64 tokens but max_model_len is 64"));
    r.prompt.assign(10, 5);
    r.params.top_p = 2;
    EXPECT_EQ(s.engine->submit(r, &error), nullptr);
    EXPECT_THAT(error, HasSubstr("top_p"));
    r.params = SamplingParams{};
    r.prompt = {9999};
    EXPECT_EQ(s.engine->submit(r, &error), nullptr);
    EXPECT_THAT(error, HasSubstr("outside the vocabulary"));
    EXPECT_EQ(s.metrics.requests_refused.load(), 3u);
}

TEST(Engine, ThreadedModeServesConcurrentSubmitters) {
    HR_REQUIRE_BACKEND();
    EngineSetup s(8, 256, 8ull * 256 * kTinyKvPerToken);
    s.engine->start();
    const auto reqs = random_requests(16, 9, 30, 8);
    std::vector<std::thread> clients;
    std::vector<std::vector<int32_t>> outputs(reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
        clients.emplace_back([&, i] {
            std::string error;
            auto h = s.engine->submit(reqs[i], &error);
            TokenEvent ev;
            while (!h->finished())
                if (h->next(ev, std::chrono::milliseconds(100)) && ev.token >= 0)
                    outputs[i].push_back(ev.token);
        });
    }
    for (auto& c : clients) c.join();
    s.engine->shutdown(std::chrono::milliseconds(1000));
    const auto expected = alone(reqs);
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(outputs[i], expected[i]);
}

}  // namespace
}  // namespace headroom
