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

// Prompts of ordinary vocabulary entries (no control tokens), the first
// shared_prefix of each the same; greedy, to exactly the drawn length.
std::vector<GenerateRequest> make_requests(const Tokenizer& tokenizer, uint32_t n_requests,
                                           const Dist& prompt_dist, const Dist& gen_dist,
                                           double shared_prefix, uint64_t seed) {
    std::vector<int32_t> pool;
    for (int32_t t = 0; t < tokenizer.n_vocab(); ++t)
        if (tokenizer.token_attr(t) == TokenAttr::Normal) pool.push_back(t);
    if (pool.empty()) fail("the model's vocabulary has no ordinary tokens to build prompts from");
    std::mt19937_64 rng(seed);
    std::vector<int32_t> prefix(prompt_dist.hi);
    for (auto& t : prefix) t = pool[rng() % pool.size()];
    std::vector<GenerateRequest> requests(n_requests);
    for (auto& r : requests) {
        const uint32_t n = prompt_dist.draw(rng);
        const auto n_shared = static_cast<uint32_t>(std::lround(shared_prefix * n));
        r.prompt.assign(prefix.begin(), prefix.begin() + n_shared);
        while (r.prompt.size() < n) r.prompt.push_back(pool[rng() % pool.size()]);
        r.params.temperature = 0;
        r.params.ignore_eos = true;
        r.params.max_tokens = gen_dist.draw(rng);
    }
    return requests;
}

struct LoadRun {
    std::vector<Outcome> outcomes;  // one per request
    uint32_t n_failed = 0;
    std::vector<std::string> errors;  // the first few refusals
    double duration_s = 0;
};

// One request from submission to its finish, timing each token.
Outcome run_request(Engine& engine, const GenerateRequest& request, std::string* error) {
    Outcome out;
    const auto start = Clock::now();
    auto h = engine.submit(request, error);
    if (!h) return out;
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
    return out;
}

// `concurrency` client threads, each taking the next request when its last
// one finishes, until every request has run.
LoadRun run_load(Engine& engine, const std::vector<GenerateRequest>& requests,
                 uint32_t concurrency) {
    LoadRun run;
    run.outcomes.resize(requests.size());
    std::atomic<size_t> next{0};
    std::atomic<uint32_t> n_failed{0};
    std::mutex errors_mu;
    const auto t0 = Clock::now();
    auto client = [&] {
        for (size_t i; (i = next.fetch_add(1)) < requests.size();) {
            std::string error;
            run.outcomes[i] = run_request(engine, requests[i], &error);
            if (run.outcomes[i].ok) continue;
            n_failed.fetch_add(1);
            std::lock_guard lk(errors_mu);
            if (!error.empty() && run.errors.size() < 3) run.errors.push_back(error);
        }
    };
    std::vector<std::thread> clients;
    for (uint32_t c = 0;
         c < std::min<uint32_t>(concurrency, static_cast<uint32_t>(requests.size())); ++c)
        clients.emplace_back(client);
    for (auto& c : clients) c.join();
    run.duration_s = std::chrono::duration<double>(Clock::now() - t0).count();
    run.n_failed = n_failed.load();
    return run;
}

// The completed requests' token counts and latencies.
struct Summary {
    uint64_t n_completed = 0, n_prompt = 0, n_output = 0;
    std::vector<double> ttft, itl, e2e;
};

Summary summarise(const std::vector<Outcome>& outcomes) {
    Summary s;
    for (const auto& oc : outcomes) {
        if (!oc.ok) continue;
        ++s.n_completed;
        s.n_output += oc.n_output;
        s.n_prompt += oc.n_prompt;
        s.ttft.push_back(oc.ttft_s);
        s.e2e.push_back(oc.e2e_s);
        s.itl.insert(s.itl.end(), oc.itl_s.begin(), oc.itl_s.end());
    }
    return s;
}

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
        InstanceOptions io = instance_options(o->engine, std::max<uint32_t>(16, o->concurrency));
        io.progress = !o->json;
        Instance inst(o->engine.model);
        inst.load(io);
        Runner& runner = inst.runner();
        Engine& engine = inst.engine();
        EngineMetrics& metrics = inst.metrics();
        const std::vector<GenerateRequest> requests = make_requests(
            inst.tokenizer(), o->n_requests, prompt_dist, gen_dist, o->shared_prefix, o->seed);

        engine.start();
        const LoadRun run = run_load(engine, requests, o->concurrency);
        engine.shutdown(std::chrono::milliseconds(1000));

        const Summary s = summarise(run.outcomes);
        const double duration_s = run.duration_s;
        const auto snap = sum_ledgers(inst.backend().snapshots());
        const double hit_rate = metrics.prefix_query_tokens
                                    ? static_cast<double>(metrics.prefix_hit_tokens) /
                                          static_cast<double>(metrics.prefix_query_tokens)
                                    : 0.0;
        if (o->json) {
            nlohmann::json peak = nlohmann::json::object();
            for (Term t : kTerms) peak[std::string(name(t))] = snap[t].peak_bytes;
            auto pct = [](const std::vector<double>& v) {
                return nlohmann::json{{"p50", percentile(v, 0.5)},
                                      {"p90", percentile(v, 0.9)},
                                      {"p99", percentile(v, 0.99)}};
            };
            const nlohmann::json j = {
                {"model", inst.desc().source},
                {"requests", o->n_requests},
                {"concurrency", o->concurrency},
                {"completed", s.n_completed},
                {"failed", run.n_failed},
                {"duration_s", duration_s},
                {"preemptions", metrics.n_preemptions.load()},
                {"prompt_tokens", s.n_prompt},
                {"computed_prompt_tokens", metrics.computed_prompt_tokens.load()},
                {"output_tokens", s.n_output},
                {"output_tokens_per_s", s.n_output / duration_s},
                {"total_tokens_per_s", (s.n_prompt + s.n_output) / duration_s},
                {"ttft_s", pct(s.ttft)},
                {"itl_s", pct(s.itl)},
                {"e2e_s", pct(s.e2e)},
                {"prefix_cache_hit_rate", hit_rate},
                {"peak_bytes", peak},
                {"budget_bytes", runner.plan().budget_bytes},
                {"kv_blocks_total", runner.cache().n_blocks_total()},
                {"max_num_seqs", runner.plan().config.max_num_seqs},
                {"kv_dtype", std::string(name(runner.plan().config.kv_dtype))}};
            fmt::print("{}\n", j.dump(2));
            return;
        }
        fmt::print("requests {} (concurrency {}): {} completed, {} failed in {:.2f}s\n",
                   o->n_requests, o->concurrency, s.n_completed, run.n_failed, duration_s);
        for (const auto& e : run.errors) fmt::print("  refused: {}\n", e);
        fmt::print(
            "throughput: {:.1f} output tokens/s, {:.1f} total tokens/s ({} prompt, {} computed, {} "
            "output)\n",
            s.n_output / duration_s, (s.n_prompt + s.n_output) / duration_s, s.n_prompt,
            metrics.computed_prompt_tokens.load(), s.n_output);
        fmt::print(
            "latency (p50 / p90 / p99): TTFT {:.3f} / {:.3f} / {:.3f} s, ITL {:.1f} / {:.1f} / "
            "{:.1f} ms\n",
            percentile(s.ttft, 0.5), percentile(s.ttft, 0.9), percentile(s.ttft, 0.99),
            1e3 * percentile(s.itl, 0.5), 1e3 * percentile(s.itl, 0.9),
            1e3 * percentile(s.itl, 0.99));
        fmt::print("preemptions {}, prefix cache hit rate {:.1f}%\n", metrics.n_preemptions.load(),
                   100 * hit_rate);
        fmt::print("peak memory:");
        for (Term t : kTerms) fmt::print(" {} {}", name(t), format_bytes(snap[t].peak_bytes));
        fmt::print(" (budget {})\n", format_bytes(runner.plan().budget_bytes));
    });
}

}  // namespace headroom::cli
