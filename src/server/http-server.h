// The HTTP front end of `headroom serve`: an OpenAI-compatible API over
// cpp-httplib.
//
// Threads. httplib serves each connection on a pool thread, which reads the
// request, runs the handler and writes the response. A generation handler
// never touches engine state: it submits the request to the engine's queue
// and then, inside httplib's chunked content provider, reads tokens from the
// request's own channel (Request::next) and writes them out, as SSE when
// streaming or as one JSON body at the end. Metrics and /v1/memory read
// atomics (EngineMetrics, the ledger), never the scheduler or the KV pool.
//
// Life cycle. The listener starts before the model loads, so /health can
// answer 503 {"status":"loading"} (and every other route 503) until
// set_ready(). stop_accepting() closes the listening socket but lets open
// responses finish; the engine's shutdown then finishes or aborts what is in
// flight, and join() returns once every connection has ended.
//
// Limits. Bodies over max_body_bytes get 413 before they are read; a request
// that would make waiting + running exceed max_queued gets 503 with
// Retry-After; the pool has max_queued + 32 threads so that a full queue
// still leaves threads to answer /health, /metrics and the 503s. A client
// that sends a partial request and stalls holds one thread until httplib's
// read timeout (5 s) drops it. A client that disconnects while its response
// is pending is noticed within kPollInterval (the provider checks the socket
// between tokens) and its request is cancelled: its KV blocks are freed at
// the engine's next step.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/ledger.h"
#include "engine/engine.h"
#include "engine/grammar.h"
#include "server/metrics-text.h"
#include "tokenizer/chat-template.h"

namespace headroom::server {

struct ServeConfig {
    std::string host = "127.0.0.1";
    int port = 8000;                        // 0: any free port (see HttpServer::port())
    std::string api_key;                    // empty: no authentication
    uint64_t max_body_bytes = 1024 * 1024;  // larger bodies: 413
    uint32_t max_queued = 256;              // waiting + running requests; beyond: 503
    uint32_t n_http_threads = 0;            // 0: max_queued + 32
    uint32_t retry_after_s = 1;             // Retry-After of a 503 for a full queue
    bool truncate_history = false;          // drop the oldest turns of chats that do not fit
    bool log_requests = true;               // one line per response on stderr
};

// What the server needs of a loaded model whose engine runs on its own
// thread. Owned by the caller; must outlive join().
struct ServedModel {
    std::string name;  // the id in /v1/models and the "model" of requests
    Engine* engine = nullptr;
    const EngineMetrics* metrics = nullptr;
    const Tokenizer* tokenizer = nullptr;
    const ChatTemplate* chat_template = nullptr;
    // Compiles response_format schemas and tool grammars; null: refused.
    const GrammarCompiler* grammars = nullptr;
    // How /v1/embeddings pools hidden states (the GGUF's pooling_type).
    Pooling pooling = Pooling::Mean;
    std::vector<const Ledger*> ledgers;  // one per device (Backend::ledgers())
    std::string backend;                 // its name, for /v1/memory's traffic
    // memory_report_json() taken before the engine started; /v1/memory
    // returns it with the values that change refreshed from atomics.
    nlohmann::json memory_report;
    uint64_t rss_start_bytes = 0;
    uint32_t max_model_len = 0;
    int64_t created_s = 0;
    // What routers ask of a worker (server/router-api.h).
    std::string model_path;    // the file, as -m gave it
    std::string architecture;  // general.architecture
    uint32_t max_num_seqs = 0;
    uint64_t kv_capacity_tokens = 0;  // tokens the KV pool holds
};

// How often a pending response checks for a new token and for its client.
inline constexpr std::chrono::milliseconds kPollInterval{50};

class HttpServer {
  public:
    explicit HttpServer(ServeConfig config);
    ~HttpServer();  // stops accepting and joins if still running
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds host:port and starts accepting on a thread of its own. Throws
    // headroom::Error naming the address if it cannot bind.
    void start();
    int port() const;
    // From now on requests reach `model`.
    void set_ready(const ServedModel* model);
    // Draining: /health answers 503 "draining" at once, so routers stop
    // sending; the server still listens and serves what arrives meanwhile.
    // Idempotent.
    void begin_draining();
    // Generation requests holding a seat among --max-queued (parsed, queued
    // or running, or sending their last bytes).
    uint32_t n_in_flight() const;
    // Closes the listening socket (draining first); open connections finish
    // their responses. Idempotent.
    void stop_accepting();
    // Waits until the accept thread and every connection have ended.
    void join();

    const HttpCounters& counters() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace headroom::server
