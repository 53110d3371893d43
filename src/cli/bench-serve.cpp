// headroom bench serve: an in-process load generator. Keeps --concurrency
// requests in flight against the engine (running on its own thread, as under
// `serve`) until --requests have finished, and reports throughput, latency
// percentiles, preemptions, prefix-cache hits and peak memory by term.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "cli/engine-flags.h"
#include "cli/load-model.h"
#include "core/error.h"
#include "core/units.h"
#include "engine/engine.h"
#include "memory/report.h"

namespace headroom::cli {

namespace {

using Clock = std::chrono::steady_clock;

// "128" or "64-256" (uniform).
struct Dist {
    uint32_t lo = 0, hi = 0;
    uint32_t draw(std::mt19937_64& rng) const {
        return lo == hi ? lo : lo + static_cast<uint32_t>(rng() % (hi - lo + 1));
    }
};

Dist parse_dist(const std::string& s, const char* flag) {
    Dist d;
    try {
        const auto dash = s.find('-');
        size_t used = 0;
        if (dash == std::string::npos) {
            d.lo = d.hi = static_cast<uint32_t>(std::stoul(s, &used));
            if (used != s.size()) throw std::invalid_argument(s);
        } else {
            d.lo = static_cast<uint32_t>(std::stoul(s.substr(0, dash)));
            d.hi = static_cast<uint32_t>(std::stoul(s.substr(dash + 1)));
        }
    } catch (const std::exception&) {
        fail("{} '{}': expected N or LO-HI (uniform)", flag, s);
    }
    if (d.lo == 0 || d.hi < d.lo) fail("{} '{}': expected 1 <= LO <= HI", flag, s);
    return d;
}

double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto i = static_cast<size_t>(pos);
    const double frac = pos - static_cast<double>(i);
    return i + 1 < v.size() ? v[i] * (1 - frac) + v[i + 1] * frac : v[i];
}

struct Outcome {
    bool ok = false;
    uint32_t n_prompt = 0;
    uint32_t n_output = 0;
    double ttft_s = 0;
    std::vector<double> itl_s;
    double e2e_s = 0;
};

}  // namespace

void add_bench_serve_subcommand(CLI::App& bench) {
    struct Opts {
        EngineFlags engine;
        uint32_t n_requests = 64;
        uint32_t concurrency = 8;
        std::string prompt_len = "128";
        std::string gen_len = "64";
        double shared_prefix = 0.0;
        uint64_t seed = 1;
        bool json = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = bench.add_subcommand("serve",
                                     "Load-test the engine in process: --concurrency requests in "
                                     "flight until --requests finish");
    add_engine_flags(cmd, o->engine, 16);
    cmd->add_option("--requests", o->n_requests, "Requests to complete")->capture_default_str();
    cmd->add_option("--concurrency", o->concurrency, "Requests kept in flight")
        ->capture_default_str();
    cmd->add_option("--prompt-len", o->prompt_len, "Prompt tokens: N or LO-HI (uniform)")
        ->capture_default_str();
    cmd->add_option("--gen-len", o->gen_len, "Generated tokens: N or LO-HI (uniform)")
        ->capture_default_str();
    cmd->add_option("--shared-prefix", o->shared_prefix,
                    "Fraction of every prompt that is the same prefix (0..1)")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--seed", o->seed, "Seed for lengths and prompt tokens")->capture_default_str();
    cmd->add_flag("--json", o->json, "Print JSON");
    cmd->callback([o] {
        const Dist prompt_dist = parse_dist(o->prompt_len, "--prompt-len");
        const Dist gen_dist = parse_dist(o->gen_len, "--gen-len");
        if (o->concurrency == 0 || o->n_requests == 0)
            fail("--requests and --concurrency must be at least 1");
        RunnerOptions ro = runner_options(o->engine, std::max<uint32_t>(16, o->concurrency));
        BackendOptions bo = backend_options(o->engine, ro);
        bo.progress = !o->json;
        LoadedModel lm = open_model(o->engine.model, bo);
        load_weights(lm, ro, bo);
        Runner runner(*lm.model, lm.desc, ro, *lm.backend, lm.cpu.get());
        make_resident(lm, !o->json);
        EngineMetrics metrics;
        Engine engine(runner, *lm.tokenizer, metrics);

        // Prompt tokens: ordinary vocabulary entries only (no control tokens).
        std::vector<int32_t> pool;
        for (int32_t t = 0; t < lm.tokenizer->n_vocab(); ++t)
            if (lm.tokenizer->token_attr(t) == TokenAttr::Normal) pool.push_back(t);
        if (pool.empty())
            fail("the model's vocabulary has no ordinary tokens to build prompts from");
        std::mt19937_64 rng(o->seed);
        std::vector<int32_t> prefix(prompt_dist.hi);
        for (auto& t : prefix) t = pool[rng() % pool.size()];
        std::vector<GenerateRequest> requests(o->n_requests);
        for (auto& r : requests) {
            const uint32_t n = prompt_dist.draw(rng);
            const auto n_shared = static_cast<uint32_t>(std::lround(o->shared_prefix * n));
            r.prompt.assign(prefix.begin(), prefix.begin() + n_shared);
            while (r.prompt.size() < n) r.prompt.push_back(pool[rng() % pool.size()]);
            r.params.temperature = 0;
            r.params.ignore_eos = true;
            r.params.max_tokens = gen_dist.draw(rng);
        }

        engine.start();
        std::vector<Outcome> outcomes(requests.size());
        std::atomic<size_t> next{0};
        std::atomic<uint32_t> n_failed{0};
        std::vector<std::string> errors;
        std::mutex errors_mu;
        const auto t0 = Clock::now();
        auto client = [&] {
            for (size_t i; (i = next.fetch_add(1)) < requests.size();) {
                Outcome& out = outcomes[i];
                std::string error;
                const auto start = Clock::now();
                auto h = engine.submit(requests[i], &error);
                if (!h) {
                    n_failed.fetch_add(1);
                    std::lock_guard lk(errors_mu);
                    if (errors.size() < 3) errors.push_back(error);
                    continue;
                }
                auto last = start;
                TokenEvent ev;
                FinishReason reason = FinishReason::None;
                while (reason == FinishReason::None) {
                    if (!h->next(ev, std::chrono::milliseconds(1000))) continue;
                    if (ev.token >= 0) {
                        const auto now = Clock::now();
                        if (out.n_output == 0)
                            out.ttft_s = std::chrono::duration<double>(now - start).count();
                        else
                            out.itl_s.push_back(std::chrono::duration<double>(now - last).count());
                        last = now;
                        ++out.n_output;
                    }
                    reason = ev.finish;
                }
                out.e2e_s = std::chrono::duration<double>(Clock::now() - start).count();
                out.n_prompt = h->n_prompt_tokens();
                out.ok = reason == FinishReason::Length || reason == FinishReason::Stop;
                if (!out.ok) n_failed.fetch_add(1);
            }
        };
        std::vector<std::thread> clients;
        for (uint32_t c = 0; c < std::min<uint32_t>(o->concurrency, o->n_requests); ++c)
            clients.emplace_back(client);
        for (auto& c : clients) c.join();
        const double duration_s = std::chrono::duration<double>(Clock::now() - t0).count();
        engine.shutdown(std::chrono::milliseconds(1000));

        uint64_t n_out = 0, n_in = 0, n_completed = 0;
        std::vector<double> ttft, itl, e2e;
        for (const auto& oc : outcomes) {
            if (!oc.ok) continue;
            ++n_completed;
            n_out += oc.n_output;
            n_in += oc.n_prompt;
            ttft.push_back(oc.ttft_s);
            e2e.push_back(oc.e2e_s);
            itl.insert(itl.end(), oc.itl_s.begin(), oc.itl_s.end());
        }
        const auto snap = sum_ledgers(lm.backend->snapshots());
        const double hit_rate = metrics.prefix_query_tokens
                                    ? static_cast<double>(metrics.prefix_hit_tokens) /
                                          static_cast<double>(metrics.prefix_query_tokens)
                                    : 0.0;
        nlohmann::json peak = nlohmann::json::object();
        for (Term t : kTerms) peak[std::string(name(t))] = snap[t].peak_bytes;
        auto pct = [](const std::vector<double>& v) {
            return nlohmann::json{{"p50", percentile(v, 0.5)},
                                  {"p90", percentile(v, 0.9)},
                                  {"p99", percentile(v, 0.99)}};
        };
        const nlohmann::json j = {{"model", lm.desc.source},
                                  {"requests", o->n_requests},
                                  {"concurrency", o->concurrency},
                                  {"completed", n_completed},
                                  {"failed", n_failed.load()},
                                  {"duration_s", duration_s},
                                  {"preemptions", metrics.n_preemptions.load()},
                                  {"prompt_tokens", n_in},
                                  {"computed_prompt_tokens", metrics.computed_prompt_tokens.load()},
                                  {"output_tokens", n_out},
                                  {"output_tokens_per_s", n_out / duration_s},
                                  {"total_tokens_per_s", (n_in + n_out) / duration_s},
                                  {"ttft_s", pct(ttft)},
                                  {"itl_s", pct(itl)},
                                  {"e2e_s", pct(e2e)},
                                  {"prefix_cache_hit_rate", hit_rate},
                                  {"peak_bytes", peak},
                                  {"budget_bytes", runner.plan().budget_bytes},
                                  {"kv_blocks_total", runner.cache().n_blocks_total()},
                                  {"max_num_seqs", runner.plan().config.max_num_seqs},
                                  {"kv_dtype", std::string(name(runner.plan().config.kv_dtype))}};
        if (o->json) {
            fmt::print("{}\n", j.dump(2));
            return;
        }
        fmt::print("requests {} (concurrency {}): {} completed, {} failed in {:.2f}s\n",
                   o->n_requests, o->concurrency, n_completed, n_failed.load(), duration_s);
        for (const auto& e : errors) fmt::print("  refused: {}\n", e);
        fmt::print(
            "throughput: {:.1f} output tokens/s, {:.1f} total tokens/s ({} prompt, {} computed, {} "
            "output)\n",
            n_out / duration_s, (n_in + n_out) / duration_s, n_in,
            metrics.computed_prompt_tokens.load(), n_out);
        fmt::print(
            "latency (p50 / p90 / p99): TTFT {:.3f} / {:.3f} / {:.3f} s, ITL {:.1f} / {:.1f} / "
            "{:.1f} ms\n",
            percentile(ttft, 0.5), percentile(ttft, 0.9), percentile(ttft, 0.99),
            1e3 * percentile(itl, 0.5), 1e3 * percentile(itl, 0.9), 1e3 * percentile(itl, 0.99));
        fmt::print("preemptions {}, prefix cache hit rate {:.1f}%\n", metrics.n_preemptions.load(),
                   100 * hit_rate);
        fmt::print("peak memory:");
        for (Term t : kTerms) fmt::print(" {} {}", name(t), format_bytes(snap[t].peak_bytes));
        fmt::print(" (budget {})\n", format_bytes(runner.plan().budget_bytes));
    });
}

}  // namespace headroom::cli
