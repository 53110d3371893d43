// headroom bench: prompt processing and generation speed of one sequence
// through the runner, next to the machine's read bandwidth (measured here) so
// decode can be judged against the wall it runs into. Subcommands (bench
// serve) are registered under it.
//
// One repetition: a fresh sequence prefills -p random tokens (batches of up to
// --max-num-batched-tokens), then decodes -n tokens one at a time, each the
// argmax of the previous step's logits. Nothing is allocated inside the loop.
// So -p 512 -n 128 gives llama-bench's pp512 and its tg128 at depth 512
// (-d 512); -p 0 -n 128 gives llama-bench's default tg128, from an empty
// context.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>

#include "cli/commands.h"
#include "cli/engine-flags.h"
#include "core/error.h"
#include "core/region.h"
#include "core/thread-pool.h"
#include "core/units.h"
#include "kernels/cpu/cpu-backend.h"
#include "memory/kv-cache.h"

namespace headroom::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Stats {
    double mean = 0, sd = 0;
};

Stats stats(const std::vector<double>& v) {
    Stats s;
    if (v.empty()) return s;
    for (double x : v) s.mean += x;
    s.mean /= static_cast<double>(v.size());
    if (v.size() > 1) {
        for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
        s.sd = std::sqrt(s.sd / static_cast<double>(v.size() - 1));
    }
    return s;
}

// One thread's read of [p, p + n) (n a multiple of 128), a 64-byte line a
// load where the CPU has AVX-512 (target_clones picks the widest at load
// time): on an Intel Xeon virtual machine 8-byte loads read 11-12 GB/s on
// two threads, 16-byte ones 14-15 and 64-byte ones 19-20, and a decode
// step's kernels load 32 or 64 bytes at a time. ahead: also ask for the
// line that many bytes further on (prefetches past the end do not fault).
using ProbeLine = uint64_t __attribute__((vector_size(64), may_alias));
__attribute__((target_clones("avx512f", "avx2", "default"))) uint64_t read_lines(const uint8_t* p,
                                                                                 size_t n,
                                                                                 size_t ahead) {
    ProbeLine a = {}, b = {};
    for (size_t i = 0; i < n; i += 128) {
        if (ahead) {
            __builtin_prefetch(p + i + ahead, 0, 2);
            __builtin_prefetch(p + i + ahead + 64, 0, 2);
        }
        a ^= *reinterpret_cast<const ProbeLine*>(p + i);
        b ^= *reinterpret_cast<const ProbeLine*>(p + i + 64);
    }
    a ^= b;
    uint64_t sum = 0;
    for (int k = 0; k < 8; ++k) sum += a[k];
    return sum;
}

// Read bandwidth of this machine with `pool`'s threads: each streams its
// share of `buf` (16x the size of a large L3 cache). The median of `reps`
// passes after a warm-up one (a shared machine gives both slow and odd fast
// passes), for each way to read, and the fastest counts: plain loads, which
// only the hardware prefetchers fetch ahead of, and loads that also ask for
// the line 1, 2 or 4 KiB further on, or `kernel_ahead` bytes on, as the
// decode kernels do (Context::decode_prefetch_bytes): where the prefetchers
// keep too few lines in flight, only a read that asks ahead reaches the
// memory's rate (docs/cpu-kernels.md#the-read-bandwidth-probe).
double measure_read_bandwidth_gbps(ThreadPool& pool, const Region& buf, int reps,
                                   uint64_t kernel_ahead) {
    constexpr size_t kUnit = 128;  // bytes per read_lines step
    const size_t n_bytes = buf.size_bytes() / kUnit * kUnit;
    std::vector<size_t> aheads{0, 1024, 2048, 4096};
    if (std::find(aheads.begin(), aheads.end(), kernel_ahead) == aheads.end())
        aheads.push_back(kernel_ahead);
    std::atomic<uint64_t> sink{0};
    std::vector<std::vector<double>> gbps(aheads.size());  // [way]
    for (int r = 0; r <= reps; ++r) {
        for (size_t a = 0; a < aheads.size(); ++a) {
            const auto t0 = Clock::now();
            pool.parallel_for(
                static_cast<int64_t>(n_bytes / kUnit), [&](int64_t b, int64_t e, int) {
                    sink.fetch_add(read_lines(buf.data() + static_cast<size_t>(b) * kUnit,
                                              static_cast<size_t>(e - b) * kUnit, aheads[a]),
                                   std::memory_order_relaxed);
                });
            if (r > 0) gbps[a].push_back(static_cast<double>(n_bytes) / seconds_since(t0) / 1e9);
        }
    }
    if (sink.load() == 1) fmt::print(stderr, " ");  // keeps the reads
    double best = 0;
    for (auto& g : gbps) {
        std::sort(g.begin(), g.end());
        best = std::max(best, g[g.size() / 2]);
    }
    return best;
}

// Bytes of weights one decode step reads by the model's shape: every matrix
// once, one embedding row, and of each layer's experts the n_expert_used a
// token is routed to (the active parameters).
uint64_t weights_read_per_token(const Model& model) {
    const auto& w = model.weights();
    const uint64_t k = model.hparams().n_expert_used;
    auto bytes = [k](const kernels::Weight& m) {
        return m.row_bytes * static_cast<uint64_t>(m.n_rows) * (m.n_expert ? k : 1);
    };
    uint64_t n = bytes(w.output) + w.tok_embd.row_bytes;
    for (const auto& l : w.layers)
        for (const auto* m :
             {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.router, &l.gate_exps,
              &l.up_exps, &l.down_exps, &l.gate_shexp, &l.up_shexp, &l.down_shexp})
            if (*m) n += bytes(*m);
    return n;
}

int32_t argmax(const float* v, uint32_t n) {
    return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

struct Opts {
    EngineFlags engine;
    uint32_t n_prompt = 512;
    uint32_t n_gen = 128;
    int reps = 3;
    bool json = false;
    uint64_t seed = 1234;
};

// What the repetitions measured: tokens a second of each (pp, tg), the read
// bandwidth around each decode, and what a decode step reads.
struct BenchOutcome {
    std::vector<double> pp, tg, bw, frac;
    std::vector<std::array<double, 2>> bw_around;
    std::string moved;              // runs whose bandwidth moved during the decode
    double step_bytes = 0;          // weights and KV a decode step reads
    double counted_step_bytes = 0;  // weight bytes the CPU's matmuls counted in one
    std::string precision;
    std::string isa;       // the CPU's table, or the GPU backend's name
    double bandwidth = 0;  // GB/s, the mean of the probes
    int n_threads = 0;     // the CPU's; 0 on a GPU
    // Of the runs above.
    Stats pps, tgs, fracs;
    double tg_gbps = 0;  // bytes a decode step reads × steps a second
};

void print_bench_json(const Opts& o, Instance& inst, const BenchOutcome& r) {
    auto* cpu = dynamic_cast<kernels::CpuBackend*>(&inst.backend());
    const Model& model = inst.model();
    const HParams& hp = model.hparams();
    const Runner& runner = inst.runner();
    nlohmann::json j;
    j["model"] = hp.name.empty() ? o.engine.model : hp.name;
    j["threads"] = r.n_threads;
    j["isa"] = r.isa;
    j["act_precision"] = r.precision;
    if (cpu) j["decode_prefetch_bytes"] = cpu->decode_prefetch_bytes();
    j["kv_dtype"] = std::string(name(runner.plan().config.kv_dtype));
    j["pp"] = {
        {"n_tokens", o.n_prompt}, {"tokens_per_s", r.pps.mean}, {"sd", r.pps.sd}, {"runs", r.pp}};
    j["tg"] = {
        {"n_tokens", o.n_gen}, {"tokens_per_s", r.tgs.mean}, {"sd", r.tgs.sd}, {"runs", r.tg}};
    j["bytes_per_decode_step"] = r.step_bytes;
    j["weight_bytes_per_decode_step"] = weights_read_per_token(model);
    if (cpu) j["matmul_bytes_read_per_decode_step"] = r.counted_step_bytes;
    j["tg_effective_gbps"] = r.tg_gbps;
    j["bandwidth_gbps"] = r.bandwidth;
    j["bandwidth_runs"] = r.bw;
    j["bandwidth_before_after_runs"] = r.bw_around;
    j["tg_fraction_of_bandwidth"] = r.fracs.mean;
    j["tg_fraction_runs"] = r.frac;
    // The last decode step's traffic between host and device (zero on the CPU).
    const kernels::StepStats st = inst.backend().last_step();
    j["backend"] = inst.backend().name();
    j["n_cpu_layers"] = model.n_cpu_layers();
    j["decode_step"] = {{"submits", st.n_submits},
                        {"waits", st.n_waits},
                        {"dispatches", st.n_dispatches},
                        {"barriers", st.n_barriers},
                        {"recorded", st.n_recorded},
                        {"upload_bytes", st.upload_bytes},
                        {"download_bytes", st.download_bytes}};
    fmt::print("{}\n", j.dump(2));
}

void print_bench_text(const Opts& o, Instance& inst, const BenchOutcome& r) {
    auto* cpu = dynamic_cast<kernels::CpuBackend*>(&inst.backend());
    const Model& model = inst.model();
    const HParams& hp = model.hparams();
    const Runner& runner = inst.runner();
    fmt::print("model        {}\n", hp.name.empty() ? o.engine.model : hp.name);
    if (cpu)
        fmt::print("backend      {}, {} threads, activations {}, kv {}, decode prefetch {}\n",
                   r.isa, r.n_threads, r.precision, name(runner.plan().config.kv_dtype),
                   cpu->decode_prefetch_bytes() ? format_bytes(cpu->decode_prefetch_bytes())
                                                : std::string("off"));
    else if (model.n_cpu_layers() > 0)
        fmt::print(
            "backend      {} (f32 shaders), kv {}; the first {} of {} layers on the CPU ({} "
            "threads)\n",
            r.isa, name(runner.plan().config.kv_dtype), model.n_cpu_layers(), hp.n_layer,
            runner.plan().config.n_threads);
    else
        fmt::print("backend      {} (f32 shaders), kv {}\n", r.isa,
                   name(runner.plan().config.kv_dtype));
    if (o.n_gen && cpu)
        fmt::print(
            "bandwidth    {:.1f} GB/s read ({} threads, measured before and after each decode)\n",
            r.bandwidth, r.n_threads);
    fmt::print("{:<10} {:>18}\n", "test", "tokens/s");
    if (o.n_prompt)
        fmt::print("{:<10} {:>10.2f} ± {:<6.2f}\n", fmt::format("pp{}", o.n_prompt), r.pps.mean,
                   r.pps.sd);
    if (o.n_gen && cpu)
        fmt::print("{:<10} {:>10.2f} ± {:<6.2f} {:.1f} GB/s effective, {:.0f}% of read bandwidth\n",
                   fmt::format("tg{}", o.n_gen), r.tgs.mean, r.tgs.sd, r.tg_gbps,
                   100 * r.fracs.mean);
    else if (o.n_gen) {
        const kernels::StepStats st = inst.backend().last_step();
        fmt::print(
            "{:<10} {:>10.2f} ± {:<6.2f} {:.1f} GB/s of weights and KV read; a step: {} "
            "submission, {} wait, {} dispatches, {} barriers, {}, {} B up, {} B down\n",
            fmt::format("tg{}", o.n_gen), r.tgs.mean, r.tgs.sd, r.tg_gbps, st.n_submits, st.n_waits,
            st.n_dispatches, st.n_barriers, st.n_recorded ? "recorded" : "submitted again",
            st.upload_bytes, st.download_bytes);
    }
    if (o.n_gen && cpu)
        fmt::print(
            "reads        {} of weights per decode step by the model's shape{}; {} counted\n",
            format_bytes(weights_read_per_token(model)),
            hp.n_expert ? fmt::format(" ({} of {} experts)", hp.n_expert_used, hp.n_expert)
                        : std::string(),
            format_bytes(static_cast<uint64_t>(r.counted_step_bytes)));
    if (!r.moved.empty())
        fmt::print(
            "note         the read bandwidth moved during a decode ({}): such a run's fraction "
            "is against the mean of the two\n",
            r.moved);
}

// One sequence of -p + -n + 1 tokens, steps of the prompt's length (at most
// 512), one logits row, no prefix cache (every repetition computes its
// prompt), and exactly that sequence's KV rather than what --mem-fraction
// leaves.
InstanceOptions bench_options(const Opts& o) {
    InstanceOptions io = instance_options(o.engine, 1);
    io.progress = !o.json;
    io.runner.prefix_caching = false;
    io.one_sequence_pool = true;
    EngineConfig& c = io.settings.config;
    const uint32_t n_ctx = o.n_prompt + o.n_gen + 1;
    if (c.max_model_len == 0) c.max_model_len = n_ctx;
    if (c.max_model_len < n_ctx)
        fail("--max-model-len {} is less than -p + -n + 1 = {}", c.max_model_len, n_ctx);
    if (c.max_num_batched_tokens == 0)
        c.max_num_batched_tokens = std::clamp<uint32_t>(o.n_prompt, 1, 512);
    c.max_logit_rows = 1;
    return io;
}

void run_bench(const Opts& o) {
    if (o.n_prompt == 0 && o.n_gen == 0) fail("bench: -p and -n are both 0, nothing to measure");
    if (o.reps < 1) fail("bench: -r {} must be at least 1", o.reps);
    const InstanceOptions io = bench_options(o);
    Instance inst(o.engine.model);
    inst.load(io);
    const Model& model = inst.model();
    const HParams& hp = model.hparams();
    Runner& runner = inst.runner();
    // The read-bandwidth probe is the CPU's; a GPU's decode is reported in
    // bytes per second alone.
    auto* cpu = dynamic_cast<kernels::CpuBackend*>(&inst.backend());
    // The bandwidth is measured next to each decode phase: another tenant's
    // load changes it within seconds on a shared machine.
    Region probe_buf;
    if (o.n_gen && cpu) probe_buf = Region(size_t{512} << 20, "bandwidth probe");  // committed
    constexpr int kProbePasses = 5;

    std::mt19937 rng(static_cast<uint32_t>(o.seed));
    std::vector<int32_t> prompt(o.n_prompt);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % hp.n_vocab);
    const uint32_t step = runner.plan().config.max_num_batched_tokens;
    Batch batch;
    batch.reserve(step, 1, 1);

    // Weight bytes the CPU's matmuls read per decode step, as counted by the
    // backend in the last decode.
    double counted_step_bytes = 0;
    // One repetition; returns prefill seconds, decode seconds, and the read
    // bandwidth measured just before and just after the decode (0 if not
    // `probe`).
    auto once = [&](uint32_t n_prompt, uint32_t n_gen, bool probe) {
        SeqKv seq;
        int32_t next = prompt.empty() ? 1 : prompt[0];
        const auto t0 = Clock::now();
        for (uint32_t c0 = 0; c0 < n_prompt; c0 += step) {
            const uint32_t c1 = std::min(n_prompt, c0 + step);
            if (!runner.cache().grow(seq, c1 - c0)) fail("internal: KV pool too small");
            batch.clear();
            const uint32_t s = batch.add_seq(&seq);
            for (uint32_t i = c0; i < c1; ++i) batch.add_token(prompt[i], i, s, i + 1 == n_prompt);
            const float* logits = runner.forward(batch);
            if (c1 == n_prompt) next = argmax(logits, hp.n_vocab);
        }
        const double pp_s = seconds_since(t0);
        auto measure = [&] {
            return cpu && probe && n_gen
                       ? measure_read_bandwidth_gbps(cpu->pool(), probe_buf, kProbePasses,
                                                     cpu->decode_prefetch_bytes())
                       : 0.0;
        };
        const double before = measure();
        const uint64_t read0 = cpu ? cpu->matmul_bytes_read() : 0;
        const auto t1 = Clock::now();
        for (uint32_t i = 0; i < n_gen; ++i) {
            if (!runner.cache().grow(seq, 1)) fail("internal: KV pool too small");
            batch.clear();
            const uint32_t s = batch.add_seq(&seq);
            batch.add_token(next, n_prompt + i, s, true);
            next = argmax(runner.forward(batch), hp.n_vocab);
        }
        const double tg_s = seconds_since(t1);
        if (cpu && n_gen)
            counted_step_bytes =
                static_cast<double>(cpu->matmul_bytes_read() - read0) / static_cast<double>(n_gen);
        const double after = measure();
        runner.cache().free(seq);
        return std::tuple{pp_s, tg_s, before, after};
    };

    // A decode step reads the weights and the sequence's K and V so far.
    const double kv_bytes =
        static_cast<double>(runner.plan().kv_bytes_per_token) * (o.n_prompt + o.n_gen / 2.0);
    const double step_bytes = static_cast<double>(weights_read_per_token(model)) + kv_bytes;

    once(std::min<uint32_t>(o.n_prompt, 32), std::min<uint32_t>(o.n_gen, 4), false);  // warm-up
    std::vector<double> pp, tg, bw, frac;
    std::vector<std::array<double, 2>> bw_around;
    // Runs whose bandwidth moved by more than kMoved between the two probes:
    // the decode ran partly at the one, partly at the other.
    constexpr double kMoved = 1.25;
    std::string moved;
    for (int r = 0; r < o.reps; ++r) {
        const auto [pp_s, tg_s, before, after] = once(o.n_prompt, o.n_gen, true);
        if (o.n_prompt) pp.push_back(o.n_prompt / pp_s);
        if (o.n_gen) {
            const double gbps = (before + after) / 2;
            tg.push_back(o.n_gen / tg_s);
            bw.push_back(gbps);
            bw_around.push_back({before, after});
            frac.push_back(gbps > 0 ? tg.back() * step_bytes / 1e9 / gbps : 0.0);
            if (std::max(before, after) > kMoved * std::min(before, after))
                moved += fmt::format("{}run {}: {:.1f} -> {:.1f} GB/s", moved.empty() ? "" : ", ",
                                     r + 1, before, after);
        }
    }
    const Stats tgs = stats(tg);
    const BenchOutcome r{pp,
                         tg,
                         bw,
                         frac,
                         bw_around,
                         moved,
                         step_bytes,
                         counted_step_bytes,
                         std::string(kernels::name(io.runner.act_precision)),
                         cpu ? std::string(cpu->ops().name) : inst.backend().name(),
                         stats(bw).mean,
                         cpu ? cpu->pool().n_threads() : 0,
                         stats(pp),
                         tgs,
                         stats(frac),
                         tgs.mean * step_bytes / 1e9};
    if (o.json)
        print_bench_json(o, inst, r);
    else
        print_bench_text(o, inst, r);
}

}  // namespace

void add_bench_command(CLI::App& app) {
    auto o = std::make_shared<Opts>();
    auto* cmd = app.add_subcommand(
        "bench",
        "Benchmark one sequence's prompt processing (pp) and generation (tg) speed against the "
        "machine's read bandwidth; subcommands run other benchmarks");
    cmd->require_subcommand(0, 1);
    add_engine_flags(cmd, o->engine, 1);
    cmd->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens per repetition")
        ->capture_default_str();
    cmd->add_option("-n,--n-gen", o->n_gen,
                    "Generated tokens per repetition, after the prompt (-p 0: from an empty "
                    "context)")
        ->capture_default_str();
    cmd->add_option("-r,--repetitions", o->reps, "Repetitions (mean ± sd)")->capture_default_str();
    cmd->add_flag("--json", o->json, "Print JSON instead of a table");
    cmd->add_option("--seed", o->seed, "Seed of the random prompt")->capture_default_str();
    add_bench_serve_subcommand(*cmd);
    cmd->callback([o, cmd] {
        if (!cmd->get_subcommands().empty()) return;  // a subcommand ran instead
        run_bench(*o);
    });
}

}  // namespace headroom::cli
