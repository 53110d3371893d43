// The engine end to end on a tiny random model built in memory: batch
// invariance (a request's greedy output alone equals its output batched with
// 31 others), an over-subscribed soak (every request completes with the
// output it has alone, preemptions happen, memory stays in the budget, every
// block comes back), cancellation, stop strings and refusals.
#include "engine/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>

#include "format/gguf-reader.h"
#include "format/gguf-writer.h"
#include "kernels/cpu/cpu-backend.h"
#include "model/synth.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

// One CPU backend (one worker) holds the tiny model's weights for every
// engine of this file; each runner takes its KV and arena from it and gives
// them back when it goes.
struct TinyModel {
    Ledger ledger;
    kernels::CpuBackend backend{ledger, 1};
    std::vector<uint8_t> bytes;
    std::unique_ptr<gguf::GgufFile> file;
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tokenizer;
    ModelDesc desc;
    TinyModel() {
        SynthOptions opt;
        opt.type = TensorType::Q8_0;
        opt.progress = false;
        bytes = make_synth_model(find_synth_shape("tiny"), opt).to_bytes();
        file = std::make_unique<gguf::GgufFile>(gguf::GgufFile::parse(bytes, "tiny.gguf"));
        model = Model::load(*file, backend);
        tokenizer = Tokenizer::from_gguf(*file);
        desc = describe_gguf(*file);
        desc.tokenizer_bytes = tokenizer->memory_bytes();
    }
};

TinyModel& tiny() {
    static TinyModel m;
    return m;
}

struct EngineSetup {
    Ledger& ledger = tiny().ledger;
    EngineMetrics metrics;
    std::unique_ptr<Runner> runner;
    std::unique_ptr<Engine> engine;
    EngineSetup(uint32_t max_num_seqs, uint32_t max_model_len, uint64_t kv_bytes,
                bool prefix = true, uint32_t batched = 64) {
        RunnerOptions o;
        o.config.max_num_seqs = max_num_seqs;
        o.config.max_model_len = max_model_len;
        o.config.max_num_batched_tokens = batched;
        o.config.block_size = 16;
        o.config.n_threads = 1;
        o.budget.kv_cache_bytes = kv_bytes;
        o.prefix_caching = prefix;
        runner = std::make_unique<Runner>(*tiny().model, tiny().desc, o, tiny().backend);
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
    EngineSetup s(80, 128, 8ull * 128 * kTinyKvPerToken, true, 96);
    ASSERT_EQ(s.runner->plan().kv_bytes_per_token, kTinyKvPerToken);
    const uint64_t reserved = s.ledger.snapshot()[Term::KvCache].reserved_bytes;
    uint64_t max_used = 0;
    const auto got = run_all(*s.engine, reqs, [&] {
        const auto snap = s.ledger.snapshot();
        max_used = std::max(max_used, snap[Term::KvCache].allocated_bytes);
        ASSERT_LE(snap[Term::KvCache].allocated_bytes, reserved);
        ASSERT_LE(snap.total_allocated_bytes(), s.runner->plan().total_bytes());
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
    soak(80, 7);
}

TEST(EngineSlow, Soak500RequestsAt10xOversubscription) {
    soak(500, 8);
}

TEST(Engine, CancelFreesBlocksWithinOneStep) {
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

TEST(Engine, StopStringEndsTheOutputWhereItStarts) {
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
