#include "engine/snapshot.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/engine.h"

namespace headroom {

using Clock = std::chrono::steady_clock;

char code(BlockState s) {
    switch (s) {
        case BlockState::Free:
            return 'f';
        case BlockState::Cached:
            return 'c';
        case BlockState::Owned:
            return 'o';
        case BlockState::Shared:
            return 's';
    }
    return '?';
}

std::shared_ptr<const EngineSnapshot> SnapshotBoard::latest() const {
    std::lock_guard lk(mu_);
    return latest_;
}

void SnapshotBoard::want(uint64_t detail_id) {
    const auto now = Clock::now();
    const int64_t until =
        std::chrono::duration_cast<std::chrono::nanoseconds>((now + kWantedFor).time_since_epoch())
            .count();
    const bool was_wanted = wanted(now);
    wanted_until_ns_.store(until, std::memory_order_relaxed);
    const bool new_detail = detail_id_.exchange(detail_id, std::memory_order_relaxed) != detail_id;
    // An engine that idles builds nothing on its own: nudge it when the
    // reader would otherwise see nothing, or an old state, or not its detail.
    std::shared_ptr<const EngineSnapshot> last = latest();
    if (!was_wanted || new_detail || !last || last->changes < changes() ||
        now - last->taken > kWantedFor) {
        nudge_.store(true, std::memory_order_release);
        if (waker_) waker_();
    }
}

bool SnapshotBoard::wanted(Clock::time_point now) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count() <
           wanted_until_ns_.load(std::memory_order_relaxed);
}

void SnapshotBoard::publish(std::shared_ptr<const EngineSnapshot> snapshot) {
    std::lock_guard lk(mu_);
    latest_ = std::move(snapshot);
}

void Engine::maybe_snapshot(bool force) {
    const auto now = Clock::now();
    if (!snapshots_.wanted(now)) return;
    if (!force && now - snapshot_taken_ < kSnapshotInterval) return;
    snapshots_.publish(build_snapshot(now));
    snapshot_taken_ = now;
    snapshot_dirty_ = false;
}

std::shared_ptr<const EngineSnapshot> Engine::build_snapshot(Clock::time_point now) {
    auto snap = std::make_shared<EngineSnapshot>();
    snap->version = ++snapshot_version_;
    snap->changes = snapshots_.changes();
    snap->taken = now;
    const KvCache& cache = runner_.cache();
    snap->block_size = cache.block_size();
    snap->n_preemptions = scheduler_.n_preemptions();
    snap->pools.resize(cache.n_groups());
    for (size_t g = 0; g < cache.n_groups(); ++g) {
        const KvBlockPool& pool = cache.pool(g);
        const KvGroupPlan& plan = cache.group(g);
        auto& p = snap->pools[g];
        p.name = plan.kind == AttentionKind::Full ? "full attention"
                                                  : fmt::format("window {}", plan.window);
        p.block_bytes = pool.block_bytes();
        p.n_used = pool.n_used();
        p.state.resize(pool.n_blocks());
        p.owner.assign(pool.n_blocks(), 0);
        for (uint32_t b = 0; b < pool.n_blocks(); ++b) {
            const auto block = static_cast<int32_t>(b);
            const int32_t refs = pool.ref_count(block);
            p.state[b] = refs > 1                   ? BlockState::Shared
                         : refs == 1                ? BlockState::Owned
                         : pool.is_published(block) ? BlockState::Cached
                                                    : BlockState::Free;
        }
    }

    std::vector<const Request*> reqs;
    reqs.reserve(active_.size());
    for (const auto& [id, r] : active_) reqs.push_back(r.get());
    std::sort(reqs.begin(), reqs.end(),
              [](const Request* a, const Request* b) { return a->id_ < b->id_; });
    const uint64_t detail = snapshots_.detail_id();
    std::vector<int32_t> held;
    for (const Request* r : reqs) {
        EngineSnapshot::Request out;
        out.id = r->id_;
        out.running = r->group_.state == SeqState::Running;
        out.n_prompt = r->n_prompt_;
        out.n_cached = r->n_cached_.load(std::memory_order_relaxed);
        out.age_s = std::chrono::duration<double>(now - r->t_arrival_).count();
        if (r->first_token_seen_)
            out.ttft_s = std::chrono::duration<double>(r->t_first_token_ - r->t_arrival_).count();
        for (const Sequence* s : r->group_.seqs) {
            EngineSnapshot::Seq seq;
            seq.index = s->index;
            seq.n_tokens = static_cast<uint32_t>(s->tokens.size());
            seq.n_computed = s->n_computed();
            seq.tables = s->kv.tables;
            for (size_t g = 0; g < s->kv.tables.size() && g < snap->pools.size(); ++g)
                for (int32_t b : s->kv.tables[g]) {
                    if (b < 0) continue;
                    uint64_t& owner = snap->pools[g].owner[static_cast<size_t>(b)];
                    if (owner == 0) owner = r->id_;
                }
            out.n_output += s->tokens.size() > s->n_prompt
                                ? static_cast<uint32_t>(s->tokens.size()) - s->n_prompt
                                : 0;
            out.n_preemptions = std::max(out.n_preemptions, s->n_preemptions);
            out.seqs.push_back(std::move(seq));
        }
        // Blocks are distinct per pool; count each pool's separately.
        for (size_t g = 0; g < snap->pools.size(); ++g) {
            held.clear();
            for (const Sequence* s : r->group_.seqs)
                if (g < s->kv.tables.size())
                    for (int32_t b : s->kv.tables[g])
                        if (b >= 0) held.push_back(b);
            std::sort(held.begin(), held.end());
            out.n_blocks +=
                static_cast<uint32_t>(std::unique(held.begin(), held.end()) - held.begin());
        }
        if (r->first_token_seen_ && out.n_output > 0) {
            const double since = std::chrono::duration<double>(now - r->t_first_token_).count();
            if (since > 0) out.tokens_per_s = out.n_output / since;
        }
        if (r->id_ == detail && !r->group_.seqs.empty())
            snap->detail_tokens = r->group_.seqs[0]->tokens;
        snap->requests.push_back(std::move(out));
    }
    snap->detail_id = detail;
    return snap;
}

}  // namespace headroom
