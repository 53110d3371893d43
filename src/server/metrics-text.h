// GET /metrics: the Prometheus text exposition format (version 0.0.4).
//
// Everything is read from atomics (EngineMetrics, the ledger's snapshot,
// the HTTP counters below), never from engine state, so a scrape costs the
// engine nothing and cannot race it. Names follow Prometheus conventions:
// a `headroom_` prefix, base units (seconds, bytes), `_total` on counters.
// Token counters (prefix cache, prompt, generation) count tokens; request
// outcomes are labelled by finish reason, HTTP responses by status code.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ledger.h"
#include "engine/metrics.h"

namespace headroom::server {

// Counted by the HTTP front end where the events happen.
struct HttpCounters {
    std::array<std::atomic<uint64_t>, 600> n_responses_by_status{};
    // Clients that went away before their response ended; each one's request was cancelled.
    std::atomic<uint64_t> n_disconnects{0};
};

struct MetricsSnapshot {
    const EngineMetrics* engine = nullptr;
    std::vector<LedgerSnapshot> ledgers;  // one per device
    uint64_t rss_bytes = 0;
    const HttpCounters* http = nullptr;
    std::string model_name;  // the model_name label of vLLM's series
};

std::string prometheus_text(const MetricsSnapshot& snapshot);

}  // namespace headroom::server
