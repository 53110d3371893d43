#include "engine/scheduler.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"

namespace headroom {

Scheduler::Scheduler(KvCache& cache, const SchedulerConfig& config)
    : cache_(cache), config_(config) {
    out_.seqs.reserve(config.max_num_seqs);
    out_.preempted.reserve(config.max_num_seqs);
    running_.reserve(config.max_num_seqs);
    next_running_.reserve(config.max_num_seqs);
    chunk_.reserve(config.max_num_seqs);
}

std::string Scheduler::check_admissible(uint32_t n_prompt) const {
    // The prompt and one generated token: the least a request needs to move on.
    return check_admissible(n_prompt, n_prompt + 2, 1);
}

std::string Scheduler::check_admissible(uint32_t n_prompt, uint32_t n_total,
                                        uint32_t n_candidates) const {
    if (n_prompt == 0) return "the prompt is empty: at least one token is needed";
    if (n_prompt >= config_.max_model_len)
        return fmt::format(
            "the prompt has {} tokens but max_model_len is {}: at most {} prompt tokens fit with "
            "room "
            "for one generated token (raise --max-model-len or shorten the prompt)",
            n_prompt, config_.max_model_len, config_.max_model_len - 1);
    if (n_candidates > config_.max_num_seqs)
        return fmt::format(
            "the request runs {} sequences at once (its samples or beams) but --max-num-seqs is "
            "{}: lower n, best_of or beam_width, or raise --max-num-seqs",
            n_candidates, config_.max_num_seqs);
    n_total = std::min(std::max(n_total, n_prompt + 1), config_.max_model_len);
    // Each one's last token is sampled, never computed.
    const uint32_t n_kv = std::max(n_total - 1, n_prompt);
    for (size_t g = 0; g < cache_.n_groups(); ++g) {
        const uint32_t need = request_kv_blocks(cache_.group(g), cache_.block_size(), n_prompt,
                                                n_kv, n_candidates, config_.max_num_batched_tokens);
        if (need <= cache_.pool(g).n_blocks()) continue;
        if (n_candidates <= 1)
            return fmt::format("the prompt needs {} KV blocks but the whole pool has {}", need,
                               cache_.pool(g).n_blocks());
        return fmt::format(
            "{} sequences of up to {} tokens sharing a {}-token prompt need {} KV blocks of {} "
            "tokens (the prompt's once, each one's own tail) but the whole pool has {}: lower n, "
            "best_of, beam_width or max_tokens",
            n_candidates, n_total, n_prompt, need, cache_.block_size(), cache_.pool(g).n_blocks());
    }
    return "";
}

void Scheduler::add(SeqGroup* group) {
    HR_CHECK(!group->seqs.empty());
    group->n_seats = std::max<uint32_t>(group->n_seats, static_cast<uint32_t>(group->seqs.size()));
    group->state = SeqState::Waiting;
    for (Sequence* s : group->seqs) {
        s->group = group;
        s->state = SeqState::Waiting;
    }
    waiting_.push_back(group);
}

size_t Scheduler::n_running() const {
    size_t n = 0;
    for (const SeqGroup* g : running_) n += g->seqs.size();
    return n;
}

uint32_t Scheduler::seats_taken() const {
    uint32_t n = 0;
    for (const SeqGroup* g : running_) n += g->n_seats;
    return n;
}

namespace {

// Members are identical up to here; each keeps at least its last token to compute.
uint32_t common_prefix(const SeqGroup& group) {
    const auto& lead = group.seqs[0]->tokens;
    size_t n = lead.size();
    for (const Sequence* s : group.seqs) {
        n = std::min(n, s->tokens.size() - 1);
        size_t i = 0;
        while (i < n && s->tokens[i] == lead[i]) ++i;
        n = i;
    }
    return static_cast<uint32_t>(n);
}

}  // namespace

void Scheduler::preempt(SeqGroup* group) {
    if (group->seqs.size() > 1) group->n_shared = common_prefix(*group);
    for (Sequence* s : group->seqs) {
        cache_.free(s->kv);
        s->state = SeqState::Waiting;
        ++s->n_preemptions;
    }
    group->state = SeqState::Waiting;
    ++n_preemptions_;
    waiting_.push_front(group);
    out_.preempted.push_back(group);
}

uint32_t Scheduler::plan_chunks(SeqGroup* group, uint32_t budget) {
    Sequence* lead = group->seqs[0];
    // The others fork once the leader has computed what they share.
    const bool waiting_fork =
        group->seqs.size() > 1 && group->seqs[1]->kv.n_tokens == 0 && group->n_shared > 0;
    if (waiting_fork && lead->n_computed() == group->n_shared) {
        for (size_t i = 1; i < group->seqs.size(); ++i) cache_.fork(lead->kv, group->seqs[i]->kv);
    }
    const bool lead_only = waiting_fork && lead->n_computed() < group->n_shared;
    chunk_.assign(group->seqs.size(), 0);
    uint32_t total = 0;
    for (size_t i = 0; i < group->seqs.size() && budget > total; ++i) {
        const Sequence* s = group->seqs[i];
        uint32_t n = std::min(s->n_uncomputed(), budget - total);
        if (lead_only) n = i == 0 ? std::min(n, group->n_shared - s->n_computed()) : 0;
        chunk_[i] = n;
        total += n;
    }
    return total;
}

bool Scheduler::chunks_fit(SeqGroup* group) {
    for (size_t i = 0; i < group->seqs.size(); ++i)
        if (chunk_[i] > 0) cache_.slide(group->seqs[i]->kv);
    for (size_t g = 0; g < cache_.n_groups(); ++g) {
        uint32_t need = 0;
        for (size_t i = 0; i < group->seqs.size(); ++i) {
            if (chunk_[i] == 0) continue;
            const SeqKv& kv = group->seqs[i]->kv;
            // Holders of one shared partial block copy it in turn, all but
            // the last, which then holds it alone.
            bool copies = false;
            if (cache_.shares_partial_last(kv, g)) {
                const int32_t last = kv.tables[g].back();
                int32_t earlier = 0;
                for (size_t j = 0; j < i; ++j)
                    if (chunk_[j] > 0 && cache_.shares_partial_last(group->seqs[j]->kv, g) &&
                        group->seqs[j]->kv.tables[g].back() == last)
                        ++earlier;
                copies = cache_.pool(g).ref_count(last) > earlier + 1;
            }
            need += cache_.blocks_to_grow(kv, g, chunk_[i], copies);
        }
        if (need > cache_.pool(g).n_free()) return false;
    }
    return true;
}

void Scheduler::commit_chunks(SeqGroup* group) {
    for (size_t i = 0; i < group->seqs.size(); ++i) {
        if (chunk_[i] == 0) continue;
        Sequence* s = group->seqs[i];
        const uint32_t first = s->n_computed();
        const bool grown = cache_.grow(s->kv, chunk_[i]);
        HR_CHECK_MSG(grown, "chunks_fit said the pools hold the chunk");
        out_.seqs.push_back({s, first, chunk_[i], first + chunk_[i] == s->tokens.size()});
        out_.n_tokens += chunk_[i];
    }
}

const SchedulerOutput& Scheduler::schedule() {
    out_.seqs.clear();
    out_.preempted.clear();
    out_.n_tokens = 0;
    uint32_t budget = config_.max_num_batched_tokens;

    // 1. Running groups, oldest first (running_[head]); victims come off
    // the back (running_[tail - 1]).
    next_running_.clear();
    size_t head = 0, tail = running_.size();
    while (head < tail) {
        SeqGroup* group = running_[head++];
        const uint32_t n = budget > 0 ? plan_chunks(group, budget) : 0;
        if (n == 0) {
            next_running_.push_back(group);
            continue;
        }
        bool preempted_self = false;
        while (!chunks_fit(group)) {
            if (head < tail) {
                preempt(running_[--tail]);
            } else {
                preempt(group);
                preempted_self = true;
                break;
            }
        }
        if (preempted_self) break;
        commit_chunks(group);
        budget -= n;
        next_running_.push_back(group);
    }
    running_.swap(next_running_);

    // 2. Admit waiting groups in order, unless this step had to preempt.
    if (out_.preempted.empty()) {
        uint32_t seats = seats_taken();
        while (!waiting_.empty() && budget > 0 &&
               seats + waiting_.front()->n_seats <= config_.max_num_seqs) {
            SeqGroup* group = waiting_.front();
            Sequence* lead = group->seqs[0];
            HR_DCHECK(lead->kv.n_tokens == 0);
            // A group resuming after a preemption attaches at most what its members share.
            const size_t reach =
                group->seqs.size() > 1 ? size_t{group->n_shared} + 1 : lead->tokens.size();
            const uint32_t cached = cache_.attach_prefix(
                lead->kv, std::span<const int32_t>(lead->tokens.data(), reach));
            const uint32_t n = plan_chunks(group, budget);
            if (!chunks_fit(group)) {
                for (Sequence* s : group->seqs) cache_.free(s->kv);  // attached blocks stay cached
                break;
            }
            waiting_.pop_front();
            cache_.count_prefix_query(reach, cached);
            for (Sequence* s : group->seqs) {
                if (!s->admitted_once) {
                    s->n_cached_prompt = std::min(cached, s->n_prompt);
                    s->admitted_once = true;
                }
                s->state = SeqState::Running;
            }
            group->state = SeqState::Running;
            commit_chunks(group);
            running_.push_back(group);
            seats += group->n_seats;
            budget -= n;
        }
    }
    return out_;
}

void Scheduler::remove(SeqGroup* group) {
    auto drop = [group](auto& q) {
        auto it = std::find(q.begin(), q.end(), group);
        if (it == q.end()) return false;
        q.erase(it);
        return true;
    };
    if (!drop(running_)) drop(waiting_);
    for (Sequence* s : group->seqs) {
        cache_.free(s->kv);
        s->state = SeqState::Finished;
    }
    group->state = SeqState::Finished;
}

void Scheduler::fork(Sequence* parent, Sequence* child) {
    SeqGroup* group = parent->group;
    HR_CHECK(group && group->state == SeqState::Running && child->kv.n_tokens == 0);
    cache_.fork(parent->kv, child->kv);
    child->group = group;
    child->state = SeqState::Running;
    child->admitted_once = true;
    child->n_cached_prompt = parent->n_cached_prompt;
    group->seqs.push_back(child);
    group->n_seats = std::max<uint32_t>(group->n_seats, static_cast<uint32_t>(group->seqs.size()));
}

void Scheduler::remove_member(Sequence* seq) {
    SeqGroup* group = seq->group;
    HR_CHECK(group);
    cache_.free(seq->kv);
    seq->state = SeqState::Finished;
    auto& m = group->seqs;
    m.erase(std::find(m.begin(), m.end(), seq));
    if (m.empty()) remove(group);
}

}  // namespace headroom
