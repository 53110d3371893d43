#include "server/http-server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "memory/report.h"
#include "server/embeddings.h"
#include "server/generation.h"
#include "server/live-page.h"
#include "server/page-assets.h"
#include "server/router-api.h"

namespace headroom::server {

using json = nlohmann::json;

namespace {

// httplib's stop() marks the server as shutting down, which also ends every
// chunked response in the middle. To stop accepting while open responses
// run to their end, shut the listening socket down instead: accept() fails,
// httplib leaves its accept loop and joins its workers as they finish.
class Listener : public httplib::Server {
  public:
    void shutdown_listening_socket() {
        const socket_t s = svr_sock_;
        if (s != INVALID_SOCKET) ::shutdown(s, SHUT_RDWR);
    }
};

bool is_post_route(const std::string& path) {
    return path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/responses" ||
           path == "/v1/messages" || path == "/v1/embeddings" || path == "/tokenize" ||
           path == "/detokenize";
}

// The connection must not be reused once a body was left unread: its bytes
// would be taken for the next request. httplib closes the connection (and
// says so in the response) after a request that says "Connection: close";
// the request object is httplib's own mutable local, handlers see it const.
void close_after_response(const httplib::Request& req) {
    auto& headers = const_cast<httplib::Headers&>(req.headers);
    headers.erase("Connection");
    headers.emplace("Connection", "close");
}

ApiError status_error(int status, std::string message, std::string code,
                      std::string type = "invalid_request_error") {
    ApiError e;
    e.status = status;
    e.message = std::move(message);
    e.code = std::move(code);
    e.type = std::move(type);
    return e;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    for (size_t i = 0; i < a.size(); ++i)
        diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
    return diff == 0;
}

}  // namespace

struct HttpServer::Impl {
    explicit Impl(ServeConfig c) : config(std::move(c)) {}

    ServeConfig config;
    Listener http;
    std::thread thread;
    int port = 0;
    std::atomic<const ServedModel*> model{nullptr};
    std::atomic<uint32_t> n_in_flight{0};
    std::atomic<bool> draining{false};
    std::atomic<bool> listening_stopped{false};
    HttpCounters counters;
    std::unique_ptr<GenerationContext> ready_generation;  // set before `model`
    std::unique_ptr<MetricsHistory> history;              // set before `model`

    const ServedModel* ready() const { return model.load(std::memory_order_acquire); }

    void routes();
    void read_routes();        // GET: health, models, memory, the live page, metrics, routers'
    void generation_routes();  // POST: tokenize, detokenize, completions
    void error_handlers();     // errors, exceptions and the request log
    httplib::Server::HandlerResponse pre_route(const httplib::Request& req, httplib::Response& res);
    void post_generation(Api api, const httplib::Request& req, httplib::Response& res,
                         const httplib::ContentReader& reader);
    // Reads the body within --max-body; false (with `res` set) if it cannot.
    bool read_body(const httplib::Request& req, httplib::Response& res,
                   const httplib::ContentReader& reader, std::string& body);
    json memory_json(const ServedModel& m) const;
    void get_blocks(const httplib::Request& req, httplib::Response& res);
};

bool is_page_route(const std::string& path) {
    return path == "/" || path == "/page.css" || path == "/page.js";
}

httplib::Server::HandlerResponse HttpServer::Impl::pre_route(const httplib::Request& req,
                                                             httplib::Response& res) {
    using R = httplib::Server::HandlerResponse;
    // Answered here, before httplib reads any body: everything that can be
    // refused from the request line and headers alone.
    const bool is_v1 = req.path.rfind("/v1/", 0) == 0;
    const bool has_body = req.method != "GET" && req.method != "HEAD" && req.method != "OPTIONS";
    if (has_body && !is_post_route(req.path)) {
        close_after_response(req);
        set_error(res, status_error(404, fmt::format("no route {} {}", req.method, req.path),
                                    "not_found"));
        return R::Handled;
    }
    if (req.has_header("Content-Length")) {
        const std::string value = req.get_header_value("Content-Length");
        errno = 0;
        char* end = nullptr;
        const unsigned long long n = std::strtoull(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || value[0] == '-') {
            close_after_response(req);
            set_error(res, bad_request("", fmt::format("invalid Content-Length '{}'", value)));
            return R::Handled;
        }
        if (errno == ERANGE || n > config.max_body_bytes) {
            close_after_response(req);
            set_error(res, status_error(413,
                                        fmt::format("the request body ({} bytes) is over the "
                                                    "limit of {} bytes (--max-body)",
                                                    value, config.max_body_bytes),
                                        "request_too_large"));
            return R::Handled;
        }
    }
    if (is_v1 && !config.api_key.empty()) {
        // OpenAI's clients send "Authorization: Bearer KEY", Anthropic's "x-api-key: KEY".
        const std::string auth = req.get_header_value("Authorization");
        const std::string x_api_key = req.get_header_value("x-api-key");
        const std::string prefix = "Bearer ";
        const bool bearer_ok = auth.rfind(prefix, 0) == 0 &&
                               constant_time_equal(auth.substr(prefix.size()), config.api_key);
        const bool x_key_ok = !x_api_key.empty() && constant_time_equal(x_api_key, config.api_key);
        if (!bearer_ok && !x_key_ok) {
            if (has_body) close_after_response(req);
            set_error(res, status_error(401,
                                        auth.empty() && x_api_key.empty()
                                            ? "missing API key: send the header "
                                              "'Authorization: Bearer <key>'"
                                            : "invalid API key",
                                        "invalid_api_key"));
            return R::Handled;
        }
    }
    if (!ready() && req.path != "/health" && !is_page_route(req.path)) {
        if (has_body) close_after_response(req);
        res.set_header("Retry-After", "5");
        set_error(res, status_error(503, "the model is loading", "model_loading", "server_error"));
        return R::Handled;
    }
    return R::Unhandled;
}

void HttpServer::Impl::post_generation(Api api, const httplib::Request& req, httplib::Response& res,
                                       const httplib::ContentReader& reader) {
    std::string body;
    if (read_body(req, res, reader, body)) handle_generation(api, body, *ready_generation, res);
}

bool HttpServer::Impl::read_body(const httplib::Request& req, httplib::Response& res,
                                 const httplib::ContentReader& reader, std::string& body) {
    // Read the body ourselves: httplib would buffer a chunked body of any size.
    bool too_large = false;
    const bool ok = reader([&](const char* data, size_t n) {
        if (body.size() + n > config.max_body_bytes) {
            too_large = true;
            return false;
        }
        body.append(data, n);
        return true;
    });
    if (too_large) {
        close_after_response(req);
        set_error(res, status_error(413,
                                    fmt::format("the request body is over the limit of {} "
                                                "bytes (--max-body)",
                                                config.max_body_bytes),
                                    "request_too_large"));
        return false;
    }
    if (!ok) {
        close_after_response(req);
        set_error(res, bad_request("", "the request body could not be read"));
        return false;
    }
    return true;
}

json HttpServer::Impl::memory_json(const ServedModel& m) const {
    // The start-up report with everything that moves refreshed from atomics.
    json j = m.memory_report;
    std::vector<LedgerSnapshot> snaps;
    for (const Ledger* l : m.ledgers) snaps.push_back(l->snapshot());
    auto terms = [](const LedgerSnapshot& snap) {
        json t = json::object();
        for (Term term : kTerms) {
            const auto& s = snap[term];
            t[std::string(name(term))] = {{"allocated_bytes", s.allocated_bytes},
                                          {"peak_bytes", s.peak_bytes},
                                          {"reserved_bytes", s.reserved_bytes}};
        }
        return t;
    };
    j["terms"] = terms(sum_ledgers(snaps));
    for (const auto& s : snaps) j["devices"][s.device]["terms"] = terms(s);
    const EngineMetrics& em = *m.metrics;
    j["kv_blocks_used"] = em.kv_blocks_used.load();
    j["kv_sharing"] = {{"blocks_shared", em.kv_blocks_shared.load()},
                       {"bytes_saved", em.kv_shared_bytes.load()},
                       {"bytes_saved_peak", em.kv_shared_bytes_peak.load()}};
    if (j.contains("kv_groups") && j["kv_groups"].is_array()) {
        auto& groups = j["kv_groups"];
        for (size_t g = 0; g < groups.size() && g < EngineMetrics::kMaxKvGroups; ++g) {
            groups[g]["blocks_used"] = em.kv_group_blocks_used[g].load();
            groups[g]["blocks_cached"] = em.kv_group_blocks_cached[g].load();
        }
    }
    auto traffic = [](const TrafficCounters& c) {
        return kernels::StepStats{c.submits.load(),       c.waits.load(),    c.dispatches.load(),
                                  c.barriers.load(),      c.recorded.load(), c.upload_bytes.load(),
                                  c.download_bytes.load()};
    };
    j["backend"] = traffic_json(
        {m.backend, traffic(em.last_step), traffic(em.step_totals), em.n_steps.load()});
    j["prefix_cache"] = {{"query_tokens", em.prefix_query_tokens.load()},
                         {"hit_tokens", em.prefix_hit_tokens.load()}};
    const uint64_t rss = current_rss_bytes();
    j["rss_bytes"] = rss;
    j["rss_growth_bytes"] = rss > m.rss_start_bytes ? rss - m.rss_start_bytes : 0;
    return j;
}

void HttpServer::Impl::get_blocks(const httplib::Request& req, httplib::Response& res) {
    const ServedModel& m = *ready();
    uint64_t detail = 0;
    if (req.has_param("detail")) {
        const std::string v = req.get_param_value("detail");
        char* end = nullptr;
        errno = 0;
        detail = std::strtoull(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || v[0] == '-' || errno == ERANGE)
            return set_error(res, bad_request("detail", fmt::format("invalid request id '{}'", v)));
    }
    SnapshotBoard& board = m.engine->snapshots();
    using Clock = std::chrono::steady_clock;
    const auto asked = Clock::now();
    // A snapshot may show a state older than this request (a completion
    // answered since, its blocks freed), or an old one, or lack the detail
    // asked for: want() nudged the engine, which publishes within a step (at
    // once when idle); wait a little for it.
    const uint64_t changes = board.changes();
    auto usable = [&](const std::shared_ptr<const EngineSnapshot>& s) {
        return s && s->detail_id == detail && s->changes >= changes &&
               asked - s->taken <= kWantedFor;
    };
    board.want(detail);
    const auto deadline = asked + std::chrono::seconds(2);
    auto snap = board.latest();
    while (!usable(snap) && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        snap = board.latest();
    }
    if (!snap) {
        res.set_header("Retry-After", "1");
        return set_error(res, status_error(503, "the engine has not published a block map yet",
                                           "not_ready", "server_error"));
    }
    res.set_content(dump(blocks_json(*snap, *m.tokenizer, std::chrono::steady_clock::now())),
                    "application/json");
}

void HttpServer::Impl::routes() {
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        return pre_route(req, res);
    });

    read_routes();
    generation_routes();
    error_handlers();
}

void HttpServer::Impl::read_routes() {
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        const char* status = draining.load() ? "draining" : ready() ? "ok" : "loading";
        res.status = draining.load() || !ready() ? 503 : 200;
        res.set_content(dump({{"status", status}}), "application/json");
    });
    auto model_json = [](const ServedModel& m) {
        return json{{"id", m.name},
                    {"object", "model"},
                    {"created", m.created_s},
                    {"owned_by", "headroom"},
                    {"max_model_len", m.max_model_len}};
    };
    http.Get("/v1/models", [this, model_json](const httplib::Request&, httplib::Response& res) {
        json list = {{"object", "list"}, {"data", json::array({model_json(*ready())})}};
        res.set_content(dump(list), "application/json");
    });
    http.Get(R"(/v1/models/(.+))",
             [this, model_json](const httplib::Request& req, httplib::Response& res) {
                 const ServedModel& m = *ready();
                 if (req.matches[1] != m.name) {
                     ApiError e = bad_request("model", fmt::format("the model '{}' does not exist",
                                                                   req.matches[1].str()));
                     e.status = 404;
                     e.code = "model_not_found";
                     return set_error(res, e);
                 }
                 res.set_content(dump(model_json(m)), "application/json");
             });
    http.Get("/v1/memory", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(dump(memory_json(*ready())), "application/json");
    });
    // The live page: its files carry no data (the key guards /v1/ alone),
    // so it opens while the model loads and before the key is typed.
    auto page = [](const char* file, const char* type) {
        return [file, type](const httplib::Request&, httplib::Response& res) {
            const PageAsset* a = find_page_asset(file);
            if (!a) return set_error(res, status_error(404, "no such page", "not_found"));
            res.set_header("Cache-Control", "no-cache");
            res.set_content(a->bytes.data(), a->bytes.size(), type);
        };
    };
    http.Get("/", page("index.html", "text/html; charset=utf-8"));
    http.Get("/page.css", page("page.css", "text/css; charset=utf-8"));
    http.Get("/page.js", page("page.js", "text/javascript; charset=utf-8"));
    http.Get("/v1/memory/blocks",
             [this](const httplib::Request& req, httplib::Response& res) { get_blocks(req, res); });
    http.Get("/v1/memory/history", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(dump(history->to_json()), "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        const ServedModel& m = *ready();
        MetricsSnapshot snap;
        snap.engine = m.metrics;
        for (const Ledger* l : m.ledgers) snap.ledgers.push_back(l->snapshot());
        snap.rss_bytes = current_rss_bytes();
        snap.http = &counters;
        snap.model_name = m.name;
        res.set_content(prometheus_text(snap), "text/plain; version=0.0.4; charset=utf-8");
    });
    // For routers (server/router-api.h).
    auto info = [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(dump(server_info_json(*ready(), config)), "application/json");
    };
    http.Get("/server_info", info);
    http.Get("/get_server_info", info);
    auto model_info = [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(dump(model_info_json(*ready())), "application/json");
    };
    http.Get("/model_info", model_info);
    http.Get("/get_model_info", model_info);
    http.Get("/get_load", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(dump(load_json(*ready(), n_in_flight.load())), "application/json");
    });
}

void HttpServer::Impl::generation_routes() {
    http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res,
                                  const httplib::ContentReader& reader) {
        std::string body;
        if (read_body(req, res, reader, body)) handle_tokenize(body, *ready(), res);
    });
    http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res,
                                    const httplib::ContentReader& reader) {
        std::string body;
        if (read_body(req, res, reader, body)) handle_detokenize(body, *ready(), res);
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res,
                                             const httplib::ContentReader& reader) {
        post_generation(Api::ChatCompletions, req, res, reader);
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res,
                                        const httplib::ContentReader& reader) {
        post_generation(Api::Completions, req, res, reader);
    });
    http.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res,
                                      const httplib::ContentReader& reader) {
        post_generation(Api::Responses, req, res, reader);
    });
    http.Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res,
                                     const httplib::ContentReader& reader) {
        post_generation(Api::AnthropicMessages, req, res, reader);
    });
    http.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res,
                                       const httplib::ContentReader& reader) {
        std::string body;
        if (read_body(req, res, reader, body)) handle_embeddings(body, *ready_generation, res);
    });
}

void HttpServer::Impl::error_handlers() {
    // Responses httplib makes itself (404 for an unknown route, 400 for a
    // request it cannot parse, 414, 413) get OpenAI's error JSON too.
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        std::string message = fmt::format("HTTP {}", res.status);
        std::string code;
        if (res.status == 404) {
            message = fmt::format("no route {} {}", req.method, req.path);
            code = "not_found";
        } else if (res.status == 400) {
            message = "malformed HTTP request";
        } else if (res.status == 413) {
            message = "the request body is too large";
            code = "request_too_large";
        } else if (res.status == 414) {
            message = "the request URI is too long";
        }
        ApiError e = status_error(res.status, message, code);
        res.set_content(error_body(e), "application/json");
    });
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
            std::string what = "unknown error";
            try {
                std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                what = e.what();
            } catch (...) {
            }
            set_error(res, status_error(500, "internal error: " + what, "", "server_error"));
        });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
        if (res.status >= 0 &&
            static_cast<size_t>(res.status) < counters.n_responses_by_status.size())
            counters.n_responses_by_status[static_cast<size_t>(res.status)].fetch_add(
                1, std::memory_order_relaxed);
        // An open live page polls several times a second: its successful
        // reads would drown the log.
        const bool page_poll = res.status == 200 && req.method == "GET" &&
                               (is_page_route(req.path) || req.path.rfind("/v1/memory", 0) == 0);
        if (config.log_requests && !page_poll)
            fmt::print(stderr, "{} {} {} {}\n", req.remote_addr, req.method, req.path, res.status);
    });
}

HttpServer::HttpServer(ServeConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

HttpServer::~HttpServer() {
    stop_accepting();
    join();
}

void HttpServer::start() {
    Impl& s = *impl_;
    const uint32_t n_threads =
        s.config.n_http_threads ? s.config.n_http_threads : s.config.max_queued + 32;
    s.http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
    s.http.set_payload_max_length(s.config.max_body_bytes);
    // httplib's default adds SO_REUSEPORT, which lets a second server bind
    // the same port and silently take half the connections. Only reuse the
    // address (a restart need not wait out TIME_WAIT).
    s.http.set_socket_options([](socket_t sock) {
        int yes = 1;
        ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    s.routes();
    if (s.config.port == 0) {
        s.port = s.http.bind_to_any_port(s.config.host);
        if (s.port <= 0)
            fail("serve: cannot listen on {}: {}", s.config.host, std::strerror(errno));
    } else {
        if (!s.http.bind_to_port(s.config.host, s.config.port))
            fail("serve: cannot listen on {}:{}: {}", s.config.host, s.config.port,
                 errno ? std::strerror(errno) : "bind failed");
        s.port = s.config.port;
    }
    s.thread = std::thread([&s] { s.http.listen_after_bind(); });
}

int HttpServer::port() const {
    return impl_->port;
}

void HttpServer::set_ready(const ServedModel* model) {
    impl_->history = std::make_unique<MetricsHistory>(*model->metrics);
    impl_->ready_generation = std::make_unique<GenerationContext>(GenerationContext{
        *model, impl_->config, impl_->n_in_flight, impl_->counters, impl_->draining});
    impl_->model.store(model, std::memory_order_release);
}

void HttpServer::begin_draining() {
    impl_->draining.store(true);
}

uint32_t HttpServer::n_in_flight() const {
    return impl_->n_in_flight.load();
}

void HttpServer::stop_accepting() {
    impl_->draining.store(true);
    if (impl_->thread.joinable() && !impl_->listening_stopped.exchange(true))
        impl_->http.shutdown_listening_socket();
}

void HttpServer::join() {
    if (impl_->thread.joinable()) impl_->thread.join();
    // No handler reads the history now; its thread reads the model's
    // metrics, which the caller may destroy once join() returns.
    impl_->history.reset();
}

const HttpCounters& HttpServer::counters() const {
    return impl_->counters;
}

}  // namespace headroom::server
