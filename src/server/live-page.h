// What the live page of `serve` reads besides /v1/memory (README, "The live
// page"): the block map and the requests (GET /v1/memory/blocks, from the
// engine's published snapshot, engine/snapshot.h) and the last minutes of a
// few counters (GET /v1/memory/history, sampled once a second by a thread of
// the server's own from EngineMetrics' atomics). Neither touches engine state.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/metrics.h"
#include "engine/snapshot.h"
#include "tokenizer/tokenizer.h"

namespace headroom::server {

// The block map of `snap` as JSON: per pool a string of one letter per block
// ('f' free, 'c' cached, 'o' owned, 's' shared) and the owning request of
// each; the requests with their block tables; and, for the request asked
// about, its tokens and their text.
nlohmann::json blocks_json(const EngineSnapshot& snap, const Tokenizer& tokenizer,
                           std::chrono::steady_clock::time_point now);

// A ring of once-a-second samples of the engine's counters.
class MetricsHistory {
  public:
    static constexpr size_t kSamples = 300;  // five minutes
    explicit MetricsHistory(const EngineMetrics& metrics);
    ~MetricsHistory();  // stops the thread
    MetricsHistory(const MetricsHistory&) = delete;
    MetricsHistory& operator=(const MetricsHistory&) = delete;

    // {"interval_s": 1, "samples": [{"t_s", counters...}, ...]}, oldest first.
    nlohmann::json to_json() const;

  private:
    struct Sample {
        double t_s = 0;  // since the server became ready
        uint64_t generation_tokens = 0, computed_prompt_tokens = 0;
        uint64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
        uint64_t kv_blocks_used = 0, kv_blocks_total = 0;
        uint64_t n_running = 0, n_waiting = 0, n_preemptions = 0;
    };
    void take();

    const EngineMetrics& metrics_;
    const std::chrono::steady_clock::time_point start_;
    mutable std::mutex mu_;  // guards samples_ and stop_
    std::condition_variable cv_;
    std::deque<Sample> samples_;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace headroom::server
