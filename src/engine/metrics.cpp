#include "engine/metrics.h"

#include <algorithm>

namespace headroom {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(bounds_.size() + 1) {}

void Histogram::observe(double value) {
    const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
    buckets_[static_cast<size_t>(it - bounds_.begin())].fetch_add(1, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
    sum_micro_.fetch_add(static_cast<uint64_t>(std::max(0.0, value) * 1e6),
                         std::memory_order_relaxed);
}

uint64_t Histogram::cumulative_count(size_t i) const {
    uint64_t n = 0;
    for (size_t b = 0; b <= i && b < buckets_.size(); ++b)
        n += buckets_[b].load(std::memory_order_relaxed);
    return n;
}

double Histogram::sum() const {
    return static_cast<double>(sum_micro_.load(std::memory_order_relaxed)) / 1e6;
}

double Histogram::quantile(double q) const {
    const uint64_t total = count();
    if (total == 0) return 0;
    const double target = q * static_cast<double>(total);
    uint64_t cum = 0;
    for (size_t b = 0; b < buckets_.size(); ++b) {
        const uint64_t n = buckets_[b].load(std::memory_order_relaxed);
        if (n > 0 && static_cast<double>(cum + n) >= target) {
            const double lo = b == 0 ? 0.0 : bounds_[b - 1];
            const double hi = b < bounds_.size() ? bounds_[b] : bounds_.back() * 2;
            return lo + (hi - lo) * (target - static_cast<double>(cum)) / static_cast<double>(n);
        }
        cum += n;
    }
    return bounds_.back();
}

const char* name(FinishReason r) {
    switch (r) {
        case FinishReason::None:
            return "none";
        case FinishReason::Stop:
            return "stop";
        case FinishReason::Length:
            return "length";
        case FinishReason::Abort:
            return "abort";
        case FinishReason::Error:
            return "error";
    }
    return "?";
}

namespace {
std::vector<double> latency_buckets() {
    return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,   0.3,   0.4,  0.5,
            0.75,  1.0,    2.5,   5.0,  7.5,   10.0, 20.0,  40.0, 80.0, 160.0, 320.0, 640.0};
}
// A token mask takes microseconds to milliseconds.
std::vector<double> mask_buckets() {
    return {5e-6, 1e-5,   2e-5, 3e-5, 5e-5, 7.5e-5, 1e-4, 1.5e-4, 2e-4, 3e-4,
            5e-4, 7.5e-4, 1e-3, 2e-3, 5e-3, 1e-2,   2e-2, 5e-2,   0.1};
}
}  // namespace

EngineMetrics::EngineMetrics()
    : ttft_s(latency_buckets()),
      itl_s(latency_buckets()),
      e2e_s(latency_buckets()),
      grammar_mask_s(mask_buckets()) {}

}  // namespace headroom
