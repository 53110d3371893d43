// headroom run: generate text on the CPU. stdout carries only the generated
// text; progress, timings and the memory summary go to stderr.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine-flags.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/units.h"
#include "engine/engine.h"
#include "memory/report.h"
#include "tokenizer/chat-template.h"

namespace headroom::cli {

namespace {

// Prompts this long show a progress line while they are computed.
constexpr size_t kPromptProgressTokens = 2048;

std::atomic<bool> g_interrupted{false};

void on_sigint(int) {
    g_interrupted.store(true);
}

struct RunOptions {
    EngineFlags engine;
    std::string prompt;
    std::string prompt_file;
    bool chat = false;
    std::string system;
    int32_t n_predict = -1;
    float temperature = 0.8f;
    int32_t top_k = 40;
    float top_p = 0.95f;
    float min_p = 0.05f;
    float repeat_penalty = 1.0f;
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    int64_t seed = -1;
    std::vector<std::string> stop;
    bool ignore_eos = false;
    uint32_t n_choices = 1;
    uint32_t best_of = 0;
    uint32_t beam_width = 0;
    float length_penalty = 1.0f;
    bool memory_report = false;
    std::string memory_report_json;
    bool quiet = false;
};

struct GenerationStats {
    uint32_t n_prompt = 0;
    uint32_t n_cached = 0;
    uint32_t n_output = 0;
    double prompt_s = 0;
    double gen_s = 0;
    FinishReason finish = FinishReason::None;
    uint32_t n_kv_blocks_peak = 0;
    uint32_t n_kv_shared_peak = 0;
};

SamplingParams sampling_from(const RunOptions& o, uint32_t max_tokens) {
    SamplingParams p;
    p.temperature = o.temperature;
    p.top_k = o.top_k;
    p.top_p = o.top_p;
    p.min_p = o.min_p;
    p.repetition_penalty = o.repeat_penalty;
    p.presence_penalty = o.presence_penalty;
    p.frequency_penalty = o.frequency_penalty;
    if (o.seed >= 0) p.seed = static_cast<uint64_t>(o.seed);
    p.stop = o.stop;
    p.ignore_eos = o.ignore_eos;
    p.max_tokens = max_tokens;
    return p;
}

// Runs one request to completion on this thread, printing text as it comes
// (one choice), or each choice under a header once all are done (several).
// Returns the text of choice 0.
std::string generate(Engine& engine, const RunOptions& o, std::vector<int32_t> prompt,
                     const SamplingParams& params, GenerationStats& stats) {
    using Clock = std::chrono::steady_clock;
    std::string error;
    GenerateRequest req;
    req.prompt = std::move(prompt);
    req.params = params;
    req.choices.n = o.n_choices;
    req.choices.best_of = o.best_of;
    req.choices.beam_search = o.beam_width > 0;
    req.choices.beam_width = o.beam_width;
    req.choices.length_penalty = o.length_penalty;
    const bool several = o.n_choices > 1;
    const auto start = Clock::now();
    // A long prompt takes seconds before the first token: show how far it is.
    const bool long_prompt = !o.quiet && req.prompt.size() >= kPromptProgressTokens;
    Progress progress("prompt", req.prompt.size(), long_prompt);
    auto r = engine.submit(std::move(req), &error);
    if (!r) fail("{}", error);
    std::vector<std::string> texts(r->n_choices());
    std::vector<FinishReason> finish(r->n_choices(), FinishReason::None);
    uint32_t n_open = r->n_choices();
    Clock::time_point first_token{};
    bool got_first = false;
    bool cancelled = false;
    auto write = [](const std::string& t) {
        // A full disk stops the run at once, with the reason.
        if (std::fwrite(t.data(), 1, t.size(), stdout) != t.size() || std::fflush(stdout) != 0)
            fail("writing to stdout: {}", std::strerror(errno));
    };
    while (n_open > 0) {
        if (g_interrupted.load() && !cancelled) {
            engine.cancel(r->id());
            cancelled = true;
        }
        engine.step();
        if (long_prompt && !got_first)
            progress.update(r->n_prompt_done(), fmt::format("{} of {} tokens", r->n_prompt_done(),
                                                            r->n_prompt_tokens()));
        TokenEvent ev;
        while (r->next(ev, std::chrono::milliseconds(0))) {
            if ((ev.token >= 0 || !ev.text.empty()) && !got_first) {
                first_token = Clock::now();
                got_first = true;
                if (long_prompt) progress.finish(fmt::format("{} tokens", r->n_prompt_tokens()));
            }
            if (ev.index >= texts.size()) continue;
            if (!ev.text.empty()) {
                if (!several) write(ev.text);
                texts[ev.index] += ev.text;
            }
            if (ev.finish != FinishReason::None && finish[ev.index] == FinishReason::None) {
                finish[ev.index] = ev.finish;
                --n_open;
            }
        }
    }
    if (several)
        for (size_t i = 0; i < texts.size(); ++i)
            write(fmt::format("{}--- choice {} of {} ({}) ---\n{}\n", i ? "\n" : "", i + 1,
                              texts.size(), name(finish[i]), texts[i]));
    const auto end = Clock::now();
    stats.finish = finish[0];
    stats.n_prompt = r->n_prompt_tokens();
    stats.n_cached = r->n_cached_tokens();
    stats.n_output = r->n_output_tokens();
    stats.n_kv_blocks_peak = r->n_kv_blocks_peak();
    stats.n_kv_shared_peak = r->n_kv_blocks_shared_peak();
    stats.prompt_s = got_first ? std::chrono::duration<double>(first_token - start).count() : 0;
    stats.gen_s = got_first ? std::chrono::duration<double>(end - first_token).count() : 0;
    return texts[0];
}

void print_stats(const GenerationStats& s) {
    const uint32_t computed = s.n_prompt - s.n_cached;
    fmt::print(stderr,
               "\nprompt: {} tokens{} in {:.2f}s ({:.1f} tokens/s) | generation: {} tokens in "
               "{:.2f}s ({:.1f} tokens/s){}\n",
               s.n_prompt, s.n_cached ? fmt::format(" ({} cached)", s.n_cached) : "", s.prompt_s,
               s.prompt_s > 0 ? computed / s.prompt_s : 0.0, s.n_output, s.gen_s,
               s.gen_s > 0 && s.n_output > 1 ? (s.n_output - 1) / s.gen_s : 0.0,
               s.finish == FinishReason::Length  ? " [length limit]"
               : s.finish == FinishReason::Abort ? " [interrupted]"
                                                 : "");
}

// `headroom run` once its flags are read: one prompt, or a chat on stdin.
void run_prompt(RunOptions& o) {
    ProcessMemory process;
    process.rss_start_bytes = current_rss_bytes();
    if (o.prompt.empty() && o.prompt_file.empty() && !o.chat)
        fail("run: give a prompt with -p TEXT or -f FILE, or use --chat");
    if (!o.prompt_file.empty()) {
        std::ifstream in(o.prompt_file, std::ios::binary);
        if (!in) fail("-f {}: cannot read", o.prompt_file);
        std::stringstream ss;
        ss << in.rdbuf();
        o.prompt = ss.str();
    }
    // Every sample or beam of the request runs as a sequence of its own.
    const uint32_t width = std::max({o.n_choices, o.best_of, o.beam_width});
    InstanceOptions io = instance_options(o.engine, width);
    io.progress = !o.quiet;
    Instance inst(o.engine.model);
    inst.load(io);
    Runner& runner = inst.runner();
    Engine& engine = inst.engine();
    EngineMetrics& metrics = inst.metrics();
    const uint32_t max_len = runner.plan().config.max_model_len;
    std::signal(SIGINT, on_sigint);

    auto max_tokens_for = [&](size_t n_prompt) -> uint32_t {
        const uint32_t room = n_prompt < max_len ? max_len - static_cast<uint32_t>(n_prompt) : 0;
        return o.n_predict < 0 ? room
                               : std::min<uint32_t>(room, static_cast<uint32_t>(o.n_predict));
    };
    if (!o.chat) {
        auto tokens = inst.tokenizer().encode(o.prompt, true, true);
        GenerationStats stats;
        generate(engine, o, tokens,
                 sampling_from(o, std::max<uint32_t>(1, max_tokens_for(tokens.size()))), stats);
        if (!o.quiet) print_stats(stats);
        if (o.memory_report) {
            const uint64_t bb = runner.cache().pool(0).block_bytes();
            fmt::print(stderr,
                       "request KV at its peak: {} blocks ({}); {} more table entries shared "
                       "those blocks instead of copying them ({} saved)\n",
                       stats.n_kv_blocks_peak, format_bytes(stats.n_kv_blocks_peak * bb),
                       stats.n_kv_shared_peak, format_bytes(stats.n_kv_shared_peak * bb));
        }
    } else {
        const ChatTemplate tmpl = ChatTemplate::from_gguf(inst.file());
        if (!o.quiet)
            fmt::print(stderr, "chat ({} template); empty line or Ctrl-D to quit\n", tmpl.source());
        std::vector<ChatMessage> messages;
        if (!o.system.empty()) messages.push_back({"system", o.system});
        std::string line;
        while (true) {
            fmt::print(stderr, "> ");
            std::fflush(stderr);
            if (!std::getline(std::cin, line) || line.empty()) break;
            messages.push_back({"user", line});
            const std::string text = tmpl.apply(messages, true);
            // The template writes BOS itself where the model wants it.
            auto tokens = inst.tokenizer().encode(text, false, true);
            if (tokens.size() + 1 >= max_len) {
                fmt::print(stderr,
                           "the conversation has {} tokens, max_model_len is {}: start over\n",
                           tokens.size(), max_len);
                messages.clear();
                continue;
            }
            GenerationStats stats;
            g_interrupted.store(false);
            const std::string reply =
                generate(engine, o, tokens, sampling_from(o, max_tokens_for(tokens.size())), stats);
            fmt::print("\n");
            std::fflush(stdout);
            if (!o.quiet) print_stats(stats);
            messages.push_back({"assistant", reply});
        }
    }
    process.rss_bytes = current_rss_bytes();
    const std::vector<LedgerSnapshot> snap = inst.backend().snapshots();
    if (!o.quiet)
        fmt::print(stderr, "{}\n",
                   memory_summary_line(runner.plan(), snap, runner.cache(), process));
    const BackendTraffic traffic{inst.backend().name(), inst.backend().last_step(),
                                 inst.backend().totals(), metrics.n_steps.load()};
    if (o.memory_report)
        fmt::print(stderr, "{}{}",
                   memory_report_table(runner.plan(), snap, runner.cache(), process),
                   traffic_line(traffic));
    if (!o.memory_report_json.empty()) {
        std::ofstream out(o.memory_report_json);
        if (!out) fail("--memory-report-json {}: cannot write", o.memory_report_json);
        nlohmann::json report = memory_report_json(runner.plan(), snap, runner.cache(), process);
        report["backend"] = traffic_json(traffic);
        add_allocations(report, inst.backend());
        report["kv_sharing"] = {{"blocks_shared", metrics.kv_blocks_shared.load()},
                                {"bytes_saved", metrics.kv_shared_bytes.load()},
                                {"bytes_saved_peak", metrics.kv_shared_bytes_peak.load()}};
        out << report.dump(2) << "\n";
    }
}

}  // namespace

void add_run_command(CLI::App& app) {
    auto o = std::make_shared<RunOptions>();
    auto* cmd = app.add_subcommand(
        "run", "Generate text with a model on the CPU (stdout: only the generated text)");
    add_engine_flags(cmd, o->engine, 1);
    auto* p =
        cmd->add_option("-p,--prompt", o->prompt,
                        "Prompt, fed as raw text (BOS as the model's metadata says, special tokens "
                        "like <|im_start|> recognised, no chat template)");
    auto* f = cmd->add_option("-f,--file", o->prompt_file, "Read the raw prompt from a file")
                  ->excludes(p);
    cmd->add_flag("--chat", o->chat, "Interactive chat on stdin with the model's chat template")
        ->excludes(p)
        ->excludes(f);
    cmd->add_option("--system", o->system, "System message for --chat");
    cmd->add_option("-n,--n-predict", o->n_predict,
                    "Tokens to generate (-1: until the model stops or the context is full)")
        ->capture_default_str();
    cmd->add_option("--temp,--temperature", o->temperature, "Temperature (0: greedy)")
        ->capture_default_str();
    cmd->add_option("--top-k", o->top_k, "Top-k (0: off)")->capture_default_str();
    cmd->add_option("--top-p", o->top_p, "Top-p (1: off)")->capture_default_str();
    cmd->add_option("--min-p", o->min_p, "Min-p (0: off)")->capture_default_str();
    cmd->add_option("--repeat-penalty", o->repeat_penalty, "Repetition penalty (1: off)")
        ->capture_default_str();
    cmd->add_option("--presence-penalty", o->presence_penalty, "Presence penalty")
        ->capture_default_str();
    cmd->add_option("--frequency-penalty", o->frequency_penalty, "Frequency penalty")
        ->capture_default_str();
    cmd->add_option("-s,--seed", o->seed, "Random seed (-1: random)")->capture_default_str();
    cmd->add_option("--stop", o->stop, "Stop string (repeatable); not included in the output");
    cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-generation tokens");
    cmd->add_option("--n,--samples", o->n_choices,
                    "Answers to the prompt (each sample i uses seed + i); the prompt is computed "
                    "once and its KV blocks shared")
        ->check(CLI::Range(1u, 128u))
        ->capture_default_str();
    cmd->add_option("--best-of", o->best_of,
                    "Draw this many samples and print the --n of highest cumulative logprob")
        ->check(CLI::Range(1u, 128u));
    cmd->add_option("--beam-width", o->beam_width,
                    "Beam search with this many beams (deterministic; prints the --n best)")
        ->check(CLI::Range(1u, 128u));
    cmd->add_option("--length-penalty", o->length_penalty,
                    "Beam score: cumulative logprob / length^penalty")
        ->capture_default_str();
    cmd->add_flag("--memory-report", o->memory_report,
                  "Print the memory report (predicted vs ledger vs RSS) to stderr");
    cmd->add_option("--memory-report-json", o->memory_report_json,
                    "Write the memory report as JSON to this file");
    cmd->add_flag("-q,--quiet", o->quiet, "No loading progress or timings on stderr");
    cmd->callback([o] { run_prompt(*o); });
}

}  // namespace headroom::cli
