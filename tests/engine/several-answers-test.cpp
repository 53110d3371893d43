// Several answers for one prompt on SmolLM2: n samples and beams share the
// prompt's KV blocks.
//  - n = 8 samples of 64 tokens after a 1000-token prompt hold the prompt's
//    full blocks once plus 8 tails, counted by hand and by the pool, at
//    least 5x less than 8 separate requests;
//  - beam search picks the same best beam as a reference beam search written
//    here over teacher-forced next-token log-probabilities (each candidate
//    prefix a fresh request of its own, in an engine without prefix caching);
//  - samples with a seed are reproducible and differ from each other;
//  - a soak of n = 1, n = 4 and 4-beam requests on a pool 5x too small ends
//    with every request complete, groups never split and every block back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/engine.h"
#include "engine/loaded-model.h"

namespace headroom {
namespace {

struct Smol {
    Smol() : lm("smollm2-135m", 2) {}
    std::unique_ptr<Runner> runner(uint32_t max_num_seqs, uint64_t kv_bytes, bool prefix = true,
                                   uint32_t max_model_len = 512) {
        RunnerOptions o;
        o.config.max_model_len = max_model_len;
        o.config.max_num_seqs = max_num_seqs;
        o.config.n_threads = 2;
        o.budget.kv_cache_bytes = kv_bytes;
        o.prefix_caching = prefix;
        return std::make_unique<Runner>(*lm.model, lm.desc, o, *lm.backend);
    }
    LoadedModel lm;
};

Smol& smol() {
    static Smol s;
    return s;
}

// SmolLM2's KV: 30 layers × 3 KV heads × 64 × 2 (K, V) × 2 bytes per token.
constexpr uint64_t kTokenBytes = 30ull * 3 * 64 * 2 * 2;

struct Output {
    std::vector<std::string> texts;
    std::vector<FinishReason> finish;
    uint32_t peak_blocks = 0;  // the pool's blocks in use, at the most
    uint32_t request_peak = 0, request_shared = 0;
};

Output run_to_end(Engine& engine, GenerateRequest g) {
    std::string error;
    auto r = engine.submit(std::move(g), &error);
    EXPECT_TRUE(r) << error;
    Output out;
    if (!r) return out;
    out.texts.resize(r->n_choices());
    out.finish.resize(r->n_choices(), FinishReason::None);
    while (!r->finished()) {
        engine.step();
        out.peak_blocks = std::max<uint32_t>(
            out.peak_blocks, static_cast<uint32_t>(engine.runner().cache().n_blocks_used()));
        TokenEvent ev;
        while (r->next(ev, std::chrono::milliseconds(0))) {
            out.texts[ev.index] += ev.text;
            if (ev.finish != FinishReason::None) out.finish[ev.index] = ev.finish;
        }
    }
    out.request_peak = r->n_kv_blocks_peak();
    out.request_shared = r->n_kv_blocks_shared_peak();
    return out;
}

std::vector<int32_t> long_prompt(const Tokenizer& tok, size_t n) {
    std::string text;
    for (int i = 0; text.size() < 8 * n; ++i)
        text += " chapter " + std::to_string(i) + " of the long report on river levels;";
    auto t = tok.encode(text, true, false);
    t.resize(n);
    return t;
}

TEST(SeveralAnswers, EightSamplesHoldThePromptOnceAndEightTails) {
    auto runner = smol().runner(8, 700 * 16 * kTokenBytes, true, 2048);
    EngineMetrics metrics;
    Engine engine(*runner, *smol().lm.tokenizer, metrics);
    GenerateRequest g;
    g.prompt = long_prompt(*smol().lm.tokenizer, 1000);
    g.params.max_tokens = 64;
    g.params.ignore_eos = true;
    g.params.seed = 11;
    g.choices.n = 8;
    const Output eight = run_to_end(engine, g);
    // By hand, blocks of 16: the prompt's 62 full blocks (992 tokens) once;
    // each sample computes K/V for 1000 + 63 positions (its 64th token is
    // never fed), 67 blocks, 5 of them its own (its copy of the prompt's
    // partial block among them).
    const uint32_t by_hand = 62 + 8 * (67 - 62);
    EXPECT_EQ(eight.peak_blocks, by_hand);
    EXPECT_EQ(eight.request_peak, by_hand);
    EXPECT_EQ(eight.request_shared, 8u * 67 - by_hand);
    // The admission check and the plan use this function.
    const KvGroupPlan& group = runner->plan().kv_groups[0];
    EXPECT_EQ(request_kv_blocks(group, 16, 1000, 1063, 8), by_hand);
    EXPECT_EQ(request_kv_blocks(group, 16, 1000, 1063, 1), 67u);

    g.choices.n = 1;
    const Output one = run_to_end(engine, g);
    EXPECT_EQ(one.request_peak, 67u);
    const double ratio = 8.0 * one.request_peak / eight.peak_blocks;
    std::printf("n=8: %u KV blocks (%.1f MiB); 8 separate requests: %u blocks (%.1f MiB): %.2fx\n",
                eight.peak_blocks, eight.peak_blocks * 16.0 * kTokenBytes / (1 << 20),
                8 * one.request_peak, 8.0 * one.request_peak * 16 * kTokenBytes / (1 << 20), ratio);
    EXPECT_GE(ratio, 5.0);
    EXPECT_EQ(engine.runner().cache().n_blocks_used(), 0u);
}

TEST(SeveralAnswers, SeededSamplesAreReproducibleAndDiffer) {
    auto runner = smol().runner(4, 4 * 256 * kTokenBytes);
    EngineMetrics metrics;
    Engine engine(*runner, *smol().lm.tokenizer, metrics);
    GenerateRequest g;
    g.prompt =
        smol().lm.tokenizer->encode("Once upon a time, there was a little robot who", true, false);
    g.params.max_tokens = 24;
    g.params.ignore_eos = true;
    g.params.seed = 42;
    g.choices.n = 4;
    const Output a = run_to_end(engine, g);
    const Output b = run_to_end(engine, g);
    EXPECT_EQ(a.texts, b.texts);
    for (size_t i = 0; i < a.texts.size(); ++i)
        for (size_t j = i + 1; j < a.texts.size(); ++j)
            EXPECT_NE(a.texts[i], a.texts[j]) << "samples " << i << " and " << j;
    // Sample i of a request is what a request of one sample with seed + i draws.
    GenerateRequest single = g;
    single.choices.n = 1;
    single.params.seed = 42 + 2;
    EXPECT_EQ(run_to_end(engine, single).texts[0], a.texts[2]);
}

// The reference: beam search as the engine documents it, each step's
// log-probabilities from a fresh request for the whole candidate prefix.
struct RefBeam {
    std::vector<int32_t> tokens;  // output
    double cum = 0;
};

std::vector<TokenLogprob> next_logprobs(Engine& engine, const std::vector<int32_t>& prompt,
                                        const std::vector<int32_t>& output, uint32_t k) {
    GenerateRequest g;
    g.prompt = prompt;
    g.prompt.insert(g.prompt.end(), output.begin(), output.end());
    g.params.temperature = 0;
    g.params.max_tokens = 1;
    g.params.n_logprobs = k;
    g.params.ignore_eos = true;
    std::string error;
    auto r = engine.submit(std::move(g), &error);
    EXPECT_TRUE(r) << error;
    std::vector<TokenLogprob> top;
    while (!r->finished()) {
        engine.step();
        TokenEvent ev;
        while (r->next(ev, std::chrono::milliseconds(0)))
            if (ev.token >= 0) top = ev.top_logprobs;
    }
    return top;
}

std::vector<int32_t> reference_beam_search(Engine& engine, const Tokenizer& tok,
                                           const std::vector<int32_t>& prompt, uint32_t width,
                                           uint32_t max_tokens) {
    std::vector<RefBeam> live = {RefBeam{}};
    struct Done {
        std::vector<int32_t> tokens;
        double score;
    };
    std::vector<Done> done;
    for (uint32_t step = 0; step < max_tokens; ++step) {
        struct Option {
            double score;
            uint32_t beam;
            int32_t token;
        };
        std::vector<Option> options;
        for (uint32_t b = 0; b < live.size(); ++b)
            for (const auto& x : next_logprobs(engine, prompt, live[b].tokens, 2 * width))
                options.push_back({live[b].cum + x.logprob, b, x.token});
        std::stable_sort(options.begin(), options.end(),
                         [](const Option& a, const Option& b) { return a.score > b.score; });
        std::vector<RefBeam> next;
        for (size_t rank = 0; rank < options.size() && next.size() < width; ++rank) {
            const Option& o = options[rank];
            if (tok.is_end_of_generation(o.token)) {
                if (rank < width)
                    done.push_back({live[o.beam].tokens,
                                    o.score / static_cast<double>(live[o.beam].tokens.size() + 1)});
                continue;
            }
            RefBeam nb = live[o.beam];
            nb.tokens.push_back(o.token);
            nb.cum = o.score;
            next.push_back(std::move(nb));
        }
        live = std::move(next);
        std::stable_sort(done.begin(), done.end(),
                         [](const Done& a, const Done& b) { return a.score > b.score; });
        if (done.size() > width) done.resize(width);
        if (done.size() >= width) {
            double best = -INFINITY;
            for (const auto& b : live) best = std::max(best, b.cum);
            if (done.back().score >= best / static_cast<double>(step + 1)) break;
        }
    }
    if (!live.empty() && live[0].tokens.size() == max_tokens)
        for (const auto& b : live)
            done.push_back({b.tokens, b.cum / static_cast<double>(b.tokens.size())});
    std::stable_sort(done.begin(), done.end(),
                     [](const Done& a, const Done& b) { return a.score > b.score; });
    return done.empty() ? std::vector<int32_t>{} : done[0].tokens;
}

TEST(SeveralAnswers, BeamSearchAgreesWithAReferenceOverTeacherForcedLogits) {
    const Tokenizer& tok = *smol().lm.tokenizer;
    auto beams_runner = smol().runner(4, 8 * 256 * kTokenBytes);
    auto ref_runner = smol().runner(1, 2 * 256 * kTokenBytes, /*prefix=*/false);
    EngineMetrics m1, m2;
    Engine beams(*beams_runner, tok, m1);
    Engine ref(*ref_runner, tok, m2);
    // The greedy tests' prompts (those that fit this context), and a chat turn.
    std::vector<std::string> prompts;
    std::ifstream golden(std::string(HEADROOM_TEST_DATA_DIR) + "/greedy/smollm2-135m.json");
    const nlohmann::json cases = nlohmann::json::parse(golden)["cases"];
    for (const auto& c : cases)
        if (c["prompt_tokens"].size() < 200) prompts.push_back(c["prompt"].get<std::string>());
    prompts.push_back("<|im_start|>user\nName a fruit.<|im_end|>\n<|im_start|>assistant\n");
    ASSERT_EQ(prompts.size(), 10u);
    constexpr uint32_t kWidth = 4, kTokens = 12;
    int agree = 0;
    for (const std::string& p : prompts) {
        const auto prompt = tok.encode(p, true, true);
        GenerateRequest g;
        g.prompt = prompt;
        g.params.max_tokens = kTokens;
        g.choices.beam_search = true;
        g.choices.beam_width = kWidth;
        const Output got = run_to_end(beams, g);
        const auto want_tokens = reference_beam_search(ref, tok, prompt, kWidth, kTokens);
        StreamDecoder d(tok);
        std::string want;
        for (int32_t t : want_tokens) want += d.push(t);
        want += d.flush();
        const bool same = got.texts.size() == 1 && got.texts[0] == want;
        agree += same;
        std::printf("%s %-52.52s | %s\n", same ? "same" : "DIFF", p.c_str(), got.texts[0].c_str());
        if (!same) std::printf("     reference: %s\n", want.c_str());
    }
    std::printf("beam search agrees with the reference on %d of 10 prompts\n", agree);
    EXPECT_GE(agree, 9);
    EXPECT_EQ(beams.runner().cache().n_blocks_used(), 0u);
}

TEST(SeveralAnswers, MixedGroupsUnderPressureAllCompleteWhole) {
    // A pool of 28 blocks (448 tokens); 24 requests asking for ~5x that.
    auto runner = smol().runner(12, 28 * 16 * kTokenBytes, true, 256);
    EngineMetrics metrics;
    Engine engine(*runner, *smol().lm.tokenizer, metrics);
    const Tokenizer& tok = *smol().lm.tokenizer;
    std::vector<std::shared_ptr<Request>> reqs;
    std::vector<GenerateRequest> asked_for;
    std::mt19937 rng(3);
    uint64_t asked = 0;
    for (int i = 0; i < 24; ++i) {
        GenerateRequest g;
        g.prompt = long_prompt(tok, 40 + rng() % 60);
        g.params.max_tokens = 20 + rng() % 30;
        g.params.ignore_eos = true;
        g.params.seed = static_cast<uint64_t>(i);
        const int kind = i % 3;
        g.choices.n = kind == 1 ? 4 : 1;
        if (kind == 2) {
            g.choices.beam_search = true;
            g.choices.beam_width = 4;
        }
        asked += (kind == 0 ? 1 : 4) * ((g.prompt.size() + g.params.max_tokens + 15) / 16);
        asked_for.push_back(g);
        std::string error;
        reqs.push_back(engine.submit(std::move(g), &error));
        ASSERT_TRUE(reqs.back()) << error;
    }
    EXPECT_GE(asked, 5u * 28);
    std::map<uint64_t, std::vector<uint32_t>> closed;  // request -> indices closed
    std::map<uint64_t, std::vector<std::string>> texts;
    for (int step = 0; step < 100000 && engine.n_active() > 0; ++step) {
        engine.step();
        for (const SeqGroup* g : engine.scheduler().running())
            for (const Sequence* s : g->seqs) ASSERT_EQ(s->state, SeqState::Running);
        for (const SeqGroup* g : engine.scheduler().waiting())
            for (const Sequence* s : g->seqs) {
                ASSERT_EQ(s->state, SeqState::Waiting);
                ASSERT_EQ(s->kv.n_tokens, 0u);
            }
        for (auto& r : reqs) {
            TokenEvent ev;
            while (r->next(ev, std::chrono::milliseconds(0))) {
                auto& t = texts[r->id()];
                if (t.size() <= ev.index) t.resize(ev.index + 1);
                t[ev.index] += ev.text;
                if (ev.finish != FinishReason::None) closed[r->id()].push_back(ev.index);
            }
        }
    }
    EXPECT_EQ(engine.n_active(), 0u);
    for (auto& r : reqs) {
        EXPECT_TRUE(r->finished());
        EXPECT_EQ(closed[r->id()].size(), r->n_choices());
        EXPECT_EQ(r->finish_reason(), FinishReason::Length);
    }
    std::printf("preemptions: %llu\n",
                static_cast<unsigned long long>(engine.scheduler().n_preemptions()));
    EXPECT_GT(engine.scheduler().n_preemptions(), 0u);
    EXPECT_EQ(engine.runner().cache().n_blocks_used(), 0u);
    EXPECT_EQ(engine.runner().cache().n_shared_refs(), 0u);
    // Preempted and recomputed, every answer is what the request gives alone.
    auto roomy = smol().runner(4, 8 * 256 * kTokenBytes, true, 256);
    EngineMetrics m2;
    Engine alone(*roomy, tok, m2);
    for (size_t i = 0; i < reqs.size(); ++i)
        EXPECT_EQ(texts[reqs[i]->id()], run_to_end(alone, asked_for[i]).texts) << "request " << i;
}

}  // namespace
}  // namespace headroom
