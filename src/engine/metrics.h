// Engine metrics, updated where the events happen (admission, each step,
// each token, each finish) and read by /metrics and bench without touching
// engine state: every field is an atomic or a histogram of atomics.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

namespace headroom {

// Cumulative histogram with fixed bucket bounds (seconds), Prometheus style.
class Histogram {
  public:
    explicit Histogram(std::vector<double> bounds);
    void observe(double value);
    const std::vector<double>& bounds() const { return bounds_; }
    // Count of observations <= bounds()[i] (cumulative), i < bounds().size().
    uint64_t cumulative_count(size_t i) const;
    uint64_t count() const { return count_.load(std::memory_order_relaxed); }
    double sum() const;
    // Value below which `q` (0..1) of observations fall, interpolated within buckets.
    double quantile(double q) const;

  private:
    std::vector<double> bounds_;
    std::vector<std::atomic<uint64_t>> buckets_;  // non-cumulative, + one overflow bucket
    std::atomic<uint64_t> count_{0};
    std::atomic<uint64_t> sum_micro_{0};
};

enum class FinishReason { None, Stop, Length, Abort, Error };
const char* name(FinishReason r);  // "stop", "length", "abort", "error"

// A step's traffic between host and device (kernels::StepStats), readable
// from other threads.
struct TrafficCounters {
    std::atomic<uint64_t> submits{0};
    std::atomic<uint64_t> waits{0};
    std::atomic<uint64_t> dispatches{0};
    std::atomic<uint64_t> barriers{0};
    std::atomic<uint64_t> recorded{0};
    std::atomic<uint64_t> upload_bytes{0};
    std::atomic<uint64_t> download_bytes{0};
};

struct EngineMetrics {
    EngineMetrics();
    std::atomic<uint64_t> n_running{0};       // requests (a request's samples or beams: one)
    std::atomic<uint64_t> n_running_seqs{0};  // sequences (each sample or beam: one)
    std::atomic<uint64_t> n_waiting{0};
    std::atomic<uint64_t> n_preemptions{0};
    std::atomic<uint64_t> prefix_query_tokens{0};
    std::atomic<uint64_t> prefix_hit_tokens{0};
    std::atomic<uint64_t> kv_blocks_used{0};
    std::atomic<uint64_t> kv_blocks_total{0};
    // Table entries beyond a block's first holder (forks, cached prefixes):
    // blocks sharing saves now, their bytes, and the most bytes ever saved.
    std::atomic<uint64_t> kv_blocks_shared{0};
    std::atomic<uint64_t> kv_shared_bytes{0};
    std::atomic<uint64_t> kv_shared_bytes_peak{0};
    // Over finished requests: the blocks each held at its peak, and the table
    // entries beyond those (its samples or beams sharing instead of copying).
    std::atomic<uint64_t> request_kv_blocks{0};
    std::atomic<uint64_t> request_kv_blocks_shared{0};
    std::atomic<uint64_t> prompt_tokens{0};  // prompt tokens of admitted requests
    std::atomic<uint64_t> computed_prompt_tokens{
        0};  // prompt tokens actually computed (misses + recompute)
    std::atomic<uint64_t> generation_tokens{0};
    std::atomic<uint64_t> n_steps{0};
    std::atomic<uint64_t> requests_refused{0};
    // The backend's last step and all steps so far (zero on the CPU).
    TrafficCounters last_step, step_totals;
    // Per KV layer group (full attention, sliding window): blocks in use and
    // blocks free but still findable by the prefix cache, for GET /v1/memory.
    static constexpr size_t kMaxKvGroups = 4;
    std::array<std::atomic<uint64_t>, kMaxKvGroups> kv_group_blocks_used{};
    std::array<std::atomic<uint64_t>, kMaxKvGroups> kv_group_blocks_cached{};
    std::array<std::atomic<uint64_t>, 5> finished{};  // by FinishReason
    Histogram ttft_s;                                 // time to first token
    Histogram itl_s;                                  // inter-token latency
    Histogram e2e_s;                                  // request latency
    Histogram grammar_mask_s;                         // one constrained sequence's token mask
};

}  // namespace headroom
