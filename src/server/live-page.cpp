#include "server/live-page.h"

#include <string>

namespace headroom::server {

using json = nlohmann::json;

json blocks_json(const EngineSnapshot& snap, const Tokenizer& tokenizer,
                 std::chrono::steady_clock::time_point now) {
    json pools = json::array();
    uint64_t n_used = 0;
    for (const auto& p : snap.pools) {
        std::string state(p.state.size(), 'f');
        uint32_t counts[4] = {0, 0, 0, 0};
        for (size_t b = 0; b < p.state.size(); ++b) {
            state[b] = code(p.state[b]);
            ++counts[static_cast<size_t>(p.state[b])];
        }
        n_used += p.n_used;
        pools.push_back({{"name", p.name},
                         {"n_blocks", p.state.size()},
                         {"block_bytes", p.block_bytes},
                         {"blocks_used", p.n_used},
                         {"counts",
                          {{"free", counts[0]},
                           {"cached", counts[1]},
                           {"owned", counts[2]},
                           {"shared", counts[3]}}},
                         {"state", std::move(state)},
                         {"owner", p.owner}});
    }
    json requests = json::array();
    for (const auto& r : snap.requests) {
        json seqs = json::array();
        for (const auto& s : r.seqs)
            seqs.push_back({{"index", s.index},
                            {"tokens", s.n_tokens},
                            {"computed", s.n_computed},
                            {"block_tables", s.tables}});
        requests.push_back({{"id", r.id},
                            {"state", r.running ? "running" : "waiting"},
                            {"prompt_tokens", r.n_prompt},
                            {"output_tokens", r.n_output},
                            {"cached_tokens", r.n_cached},
                            {"blocks", r.n_blocks},
                            {"preemptions", r.n_preemptions},
                            {"age_s", r.age_s},
                            {"ttft_s", r.ttft_s < 0 ? json(nullptr) : json(r.ttft_s)},
                            {"tokens_per_s", r.tokens_per_s},
                            {"sequences", std::move(seqs)}});
    }
    json detail = nullptr;
    if (snap.detail_id != 0) {
        detail = {{"id", snap.detail_id}, {"found", !snap.detail_tokens.empty()}};
        if (!snap.detail_tokens.empty()) {
            detail["tokens"] = snap.detail_tokens;
            // Every token alone, as the grid's tooltip shows it.
            json pieces = json::array();
            for (int32_t t : snap.detail_tokens)
                pieces.push_back(tokenizer.decode(std::span<const int32_t>(&t, 1), true));
            detail["pieces"] = std::move(pieces);
        }
    }
    const double age_ms = std::chrono::duration<double, std::milli>(now - snap.taken).count();
    return {{"version", snap.version},         {"age_ms", age_ms},
            {"block_size", snap.block_size},   {"preemptions", snap.n_preemptions},
            {"blocks_used", n_used},           {"pools", std::move(pools)},
            {"requests", std::move(requests)}, {"detail", std::move(detail)}};
}

MetricsHistory::MetricsHistory(const EngineMetrics& metrics)
    : metrics_(metrics), start_(std::chrono::steady_clock::now()) {
    take();
    thread_ = std::thread([this] {
        std::unique_lock lk(mu_);
        for (int64_t k = 1;; ++k) {
            if (cv_.wait_until(lk, start_ + std::chrono::seconds(k), [this] { return stop_; }))
                return;
            lk.unlock();
            take();
            lk.lock();
        }
    });
}

MetricsHistory::~MetricsHistory() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void MetricsHistory::take() {
    constexpr auto r = std::memory_order_relaxed;
    Sample s;
    s.t_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    s.generation_tokens = metrics_.generation_tokens.load(r);
    s.computed_prompt_tokens = metrics_.computed_prompt_tokens.load(r);
    s.prefix_query_tokens = metrics_.prefix_query_tokens.load(r);
    s.prefix_hit_tokens = metrics_.prefix_hit_tokens.load(r);
    s.kv_blocks_used = metrics_.kv_blocks_used.load(r);
    s.kv_blocks_total = metrics_.kv_blocks_total.load(r);
    s.n_running = metrics_.n_running.load(r);
    s.n_waiting = metrics_.n_waiting.load(r);
    s.n_preemptions = metrics_.n_preemptions.load(r);
    std::lock_guard lk(mu_);
    samples_.push_back(s);
    if (samples_.size() > kSamples) samples_.pop_front();
}

json MetricsHistory::to_json() const {
    nlohmann::json samples = nlohmann::json::array();
    std::lock_guard lk(mu_);
    for (const Sample& s : samples_)
        samples.push_back({{"t_s", s.t_s},
                           {"generation_tokens", s.generation_tokens},
                           {"computed_prompt_tokens", s.computed_prompt_tokens},
                           {"prefix_query_tokens", s.prefix_query_tokens},
                           {"prefix_hit_tokens", s.prefix_hit_tokens},
                           {"kv_blocks_used", s.kv_blocks_used},
                           {"kv_blocks_total", s.kv_blocks_total},
                           {"running", s.n_running},
                           {"waiting", s.n_waiting},
                           {"preemptions", s.n_preemptions}});
    return {{"interval_s", 1}, {"samples", std::move(samples)}};
}

}  // namespace headroom::server
