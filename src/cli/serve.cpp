// headroom serve: the OpenAI-compatible HTTP server (src/server/).
//
// Order of start-up: bind and answer /health with 503 while the model loads
// (with a progress bar on stderr), then start the engine thread and answer
// everything. SIGINT and SIGTERM are taken by one thread (sigwait) so no
// handler runs in signal context: the first one stops accepting, lets
// in-flight requests finish for up to --shutdown-timeout and aborts the
// rest; a second one aborts at once. Either way the process exits 0.
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "cli/engine-flags.h"
#include "core/error.h"
#include "core/units.h"
#include "engine/engine.h"
#include "engine/grammar.h"
#include "memory/report.h"
#include "server/http-server.h"
#include "tokenizer/chat-template.h"

namespace headroom::cli {

namespace {

struct ServeOptions {
    EngineFlags engine;
    server::ServeConfig server;
    std::string served_model_name;
    std::string max_body = "1MiB";
    std::string grammar_cache = "64MiB";
    std::string chat_template;  // a Jinja file in place of the model's template
    double shutdown_timeout_s = 30;
    double drain_grace_s = 3;
    bool quiet = false;
};

// Waits for SIGINT/SIGTERM on a thread of its own. The signals must be
// blocked in every thread, so this is built before any other thread starts.
class SignalWaiter {
  public:
    SignalWaiter() {
        sigemptyset(&set_);
        sigaddset(&set_, SIGINT);
        sigaddset(&set_, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &set_, nullptr);
        std::thread([this] { wait_loop(); }).detach();
    }
    void set_loading(bool loading) {
        std::lock_guard lk(mu_);
        loading_ = loading;
    }
    void wait(int n) {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return n_signals_ >= n; });
    }
    int first_signal() {
        std::lock_guard lk(mu_);
        return first_signal_;
    }
    // Waits up to `timeout` for at least `n` signals; true if they came.
    bool wait_for(int n, std::chrono::milliseconds timeout) {
        std::unique_lock lk(mu_);
        return cv_.wait_for(lk, timeout, [&] { return n_signals_ >= n; });
    }

  private:
    void wait_loop() {
        for (;;) {
            int sig = 0;
            if (sigwait(&set_, &sig) != 0) continue;
            std::lock_guard lk(mu_);
            if (loading_) {
                // Nothing is in flight yet: stop right here.
                fmt::print(stderr, "\nheadroom serve: {} while loading, exiting\n",
                           sig == SIGINT ? "interrupted" : "terminated");
                std::_Exit(0);
            }
            if (n_signals_++ == 0) first_signal_ = sig;
            cv_.notify_all();
        }
    }

    sigset_t set_{};
    std::mutex mu_;
    std::condition_variable cv_;
    int n_signals_ = 0;
    int first_signal_ = 0;
    bool loading_ = true;
};

bool is_loopback(const std::string& host) {
    return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::string default_model_name(const std::string& model) {
    if (model.find('/') == std::string::npos && !model.ends_with(".gguf")) return model;
    return std::filesystem::path(model).stem().string();
}

int64_t unix_time_s() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

constexpr uint32_t kMaxHttpThreads = 16384;

// The model's chat template, or the file --chat-template names (with the
// model's BOS and EOS texts).
ChatTemplate load_chat_template(const Instance& inst, const std::string& path) {
    ChatTemplate model_template = ChatTemplate::from_gguf(inst.file());
    if (path.empty()) return model_template;
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("--chat-template {}: cannot read the file", path);
    const std::string text{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
    try {
        return ChatTemplate::from_string(text, model_template.bos_token(),
                                         model_template.eos_token());
    } catch (const Error& e) {
        fail("--chat-template {}: {}", path, e.what());
    }
}

void serve(ServeOptions& o) {
    server::ServeConfig& sc = o.server;
    sc.max_body_bytes = parse_bytes_or_throw(o.max_body, "--max-body");
    if (sc.max_body_bytes == 0) fail("--max-body must be more than 0");
    // Each waiting or running request holds an HTTP thread: bound both, so a
    // typo cannot ask for a million threads (or wrap max_queued + 32).
    if (sc.max_queued == 0 || sc.max_queued > kMaxHttpThreads - 32)
        fail("--max-queued {}: expected 1 to {}", sc.max_queued, kMaxHttpThreads - 32);
    if (sc.n_http_threads > kMaxHttpThreads)
        fail("--http-threads {}: expected 1 to {} (0: --max-queued + 32)", sc.n_http_threads,
             kMaxHttpThreads);
    if (sc.port < 0 || sc.port > 65535) fail("--port {}: expected 0 to 65535", sc.port);
    if (!(o.shutdown_timeout_s >= 0)) fail("--shutdown-timeout must be at least 0");
    if (!(o.drain_grace_s >= 0)) fail("--drain-grace must be at least 0");
    if (sc.api_key.empty())
        if (const char* key = std::getenv("HEADROOM_API_KEY")) sc.api_key = key;
    sc.log_requests = !o.quiet;
    const std::string name =
        o.served_model_name.empty() ? default_model_name(o.engine.model) : o.served_model_name;

    // Never destroyed: its thread waits for signals until the process ends.
    SignalWaiter& signals = *new SignalWaiter;
    ProcessMemory process;
    process.rss_start_bytes = current_rss_bytes();
    if (!is_loopback(sc.host) && sc.api_key.empty())
        fmt::print(stderr,
                   "warning: serving on {} without --api-key: anyone who can reach this port can "
                   "use the model\n",
                   sc.host);
    server::HttpServer http(sc);
    http.start();
    fmt::print(stderr, "headroom serve: listening on http://{}:{} (loading {})\n", sc.host,
               http.port(), o.engine.model);

    InstanceOptions io = instance_options(o.engine, 32);
    io.settings.config.grammar_cache_bytes =
        parse_bytes_or_throw(o.grammar_cache, "--grammar-cache");
    io.progress = !o.quiet;
    Instance inst(o.engine.model);
    inst.load(io);
    Runner& runner = inst.runner();
    const ChatTemplate chat_template = load_chat_template(inst, o.chat_template);
    Engine& engine = inst.engine();
    EngineMetrics& metrics = inst.metrics();

    server::ServedModel served;
    served.name = name;
    served.engine = &engine;
    served.metrics = &metrics;
    served.tokenizer = &inst.tokenizer();
    served.chat_template = &chat_template;
    // llama.cpp's pooling types: 1 mean, 2 cls, 3 last; none or another: mean.
    const auto pooling = inst.file().get_uint(inst.desc().hp.arch + ".pooling_type");
    served.pooling = pooling == 2u ? Pooling::Cls : pooling == 3u ? Pooling::Last : Pooling::Mean;
    std::optional<GrammarCompiler> grammars;
    if (runner.plan().config.grammar_cache_bytes)
        served.grammars =
            &grammars.emplace(inst.tokenizer(), runner.plan().config.grammar_cache_bytes);
    served.ledgers = inst.backend().ledgers();
    served.backend = inst.backend().name();
    served.max_model_len = runner.plan().config.max_model_len;
    served.created_s = unix_time_s();
    served.rss_start_bytes = process.rss_start_bytes;
    served.model_path = o.engine.model;
    served.architecture = inst.desc().hp.arch;
    served.max_num_seqs = runner.plan().config.max_num_seqs;
    served.kv_capacity_tokens =
        uint64_t{runner.cache().pool(0).n_blocks()} * runner.cache().block_size();
    process.rss_bytes = current_rss_bytes();
    // Taken before the engine thread starts: the only time the KV pool may
    // be read from this thread.
    served.memory_report =
        memory_report_json(runner.plan(), inst.backend().snapshots(), runner.cache(), process);
    add_allocations(served.memory_report, inst.backend());
    const std::string summary =
        memory_summary_line(runner.plan(), inst.backend().snapshots(), runner.cache(), process);

    signals.set_loading(false);
    engine.start();
    http.set_ready(&served);
    const auto& c = runner.plan().config;
    fmt::print(stderr,
               "headroom serve: ready: model '{}' ({} chat template), max_model_len {}, "
               "max_num_seqs {}, {} KV blocks\n{}\n",
               name, chat_template.source(), c.max_model_len, c.max_num_seqs,
               runner.cache().n_blocks_total(), summary);

    signals.wait(1);
    const auto timeout =
        std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout_s * 1000));
    fmt::print(stderr,
               "headroom serve: draining: /health answers 503 \"draining\"; {} requests in flight "
               "get up to {:g}s to finish (signal again to abort them)\n",
               engine.n_active(), o.shutdown_timeout_s);
    // Still listening while anything is in flight, and after SIGTERM (a
    // service manager's) for --drain-grace at least: routers read "draining"
    // and stop sending, and what they sent meanwhile is served. Then the
    // socket closes.
    http.begin_draining();
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + timeout;
    const auto grace_end =
        start + std::chrono::milliseconds(static_cast<int64_t>(
                    signals.first_signal() == SIGTERM ? o.drain_grace_s * 1000 : 0));
    for (;;) {
        const auto now = std::chrono::steady_clock::now();
        const bool busy = engine.n_active() > 0 || http.n_in_flight() > 0;
        if ((!busy && now >= grace_end) || now >= deadline) break;
        if (signals.wait_for(2, std::chrono::milliseconds(50))) break;
    }
    http.stop_accepting();
    auto& n_aborts = metrics.finished[static_cast<size_t>(FinishReason::Abort)];
    const uint64_t n_aborts_before = n_aborts.load();
    engine.shutdown(std::chrono::milliseconds(0));  // aborts what is left
    const uint64_t n_aborted = n_aborts.load() - n_aborts_before;
    http.join();
    fmt::print(stderr, "headroom serve: stopped{}\n",
               n_aborted ? fmt::format(" ({} requests aborted)", n_aborted) : "");
}

}  // namespace

void add_serve_command(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
    add_engine_flags(cmd, o->engine, 32);
    cmd->add_option("--host", o->server.host, "Address to listen on (loopback by default)")
        ->capture_default_str();
    cmd->add_option("--port", o->server.port, "Port (0: any free port, printed at start-up)")
        ->capture_default_str();
    cmd->add_option("--api-key", o->server.api_key,
                    "Require 'Authorization: Bearer KEY' on /v1/* (default: $HEADROOM_API_KEY)");
    cmd->add_option("--served-model-name", o->served_model_name,
                    "Model id in /v1/models and requests (default: the -m name or file stem)");
    cmd->add_option("--chat-template", o->chat_template,
                    "A Jinja chat template file to use in place of the model's own");
    cmd->add_option("--grammar-cache", o->grammar_cache,
                    "Memory for compiled grammars (response_format schemas, tool calls), counted "
                    "in the plan's runtime term; a larger grammar is refused with 400; 0 turns "
                    "constrained decoding off")
        ->capture_default_str();
    cmd->add_option("--max-body", o->max_body, "Largest request body; larger ones get 413")
        ->capture_default_str();
    cmd->add_option("--max-queued", o->server.max_queued,
                    "Most requests waiting or running; more get 503 with Retry-After")
        ->capture_default_str();
    cmd->add_option("--http-threads", o->server.n_http_threads,
                    "HTTP worker threads (default: --max-queued + 32)");
    cmd->add_flag("--truncate-history", o->server.truncate_history,
                  "Drop the oldest non-system turns of a chat that does not fit max_model_len "
                  "instead of answering 400");
    cmd->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                    "Seconds in-flight requests get to finish after SIGINT/SIGTERM")
        ->capture_default_str();
    cmd->add_option("--drain-grace", o->drain_grace_s,
                    "After SIGTERM, seconds to keep serving while /health says draining, so "
                    "routers notice before the socket closes (set above their health-check "
                    "interval; within --shutdown-timeout)")
        ->capture_default_str();
    cmd->add_flag("-q,--quiet", o->quiet, "No loading progress and no request log on stderr");
    cmd->callback([o] { serve(*o); });
}

}  // namespace headroom::cli
