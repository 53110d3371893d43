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
}

std::string Scheduler::check_admissible(uint32_t n_prompt) const {
    if (n_prompt == 0) return "the prompt is empty: at least one token is needed";
    if (n_prompt >= config_.max_model_len)
        return fmt::format(
            "the prompt has {} tokens but max_model_len is {}: at most {} prompt tokens fit with "
            "room "
            "for one generated token (raise --max-model-len or shorten the prompt)",
            n_prompt, config_.max_model_len, config_.max_model_len - 1);
    for (size_t g = 0; g < cache_.n_groups(); ++g) {
        const uint32_t need = cache_.blocks_held_for(g, n_prompt + 1);
        if (need > cache_.pool(g).n_blocks())
            return fmt::format("the prompt needs {} KV blocks but the whole pool has {}", need,
                               cache_.pool(g).n_blocks());
    }
    return "";
}

void Scheduler::add(Sequence* seq) {
    seq->state = SeqState::Waiting;
    waiting_.push_back(seq);
}

void Scheduler::preempt(Sequence* seq) {
    cache_.free(seq->kv);
    seq->state = SeqState::Waiting;
    ++seq->n_preemptions;
    ++n_preemptions_;
    waiting_.push_front(seq);
    out_.preempted.push_back(seq);
}

const SchedulerOutput& Scheduler::schedule() {
    out_.seqs.clear();
    out_.preempted.clear();
    out_.n_tokens = 0;
    uint32_t budget = config_.max_num_batched_tokens;

    // 1. Running sequences, oldest first (running_[head]); victims come off
    // the back (running_[tail - 1]).
    next_running_.clear();
    size_t head = 0, tail = running_.size();
    while (head < tail) {
        Sequence* seq = running_[head++];
        if (budget == 0) {
            next_running_.push_back(seq);
            continue;
        }
        const uint32_t n = std::min(seq->n_uncomputed(), budget);
        if (n == 0) {
            next_running_.push_back(seq);
            continue;
        }
        bool preempted_self = false;
        while (!cache_.can_grow(seq->kv, n)) {
            if (head < tail) {
                preempt(running_[--tail]);
            } else {
                preempt(seq);
                preempted_self = true;
                break;
            }
        }
        if (preempted_self) break;
        const uint32_t first = seq->n_computed();
        HR_CHECK(cache_.grow(seq->kv, n));
        out_.seqs.push_back({seq, first, n, first + n == seq->tokens.size()});
        out_.n_tokens += n;
        budget -= n;
        next_running_.push_back(seq);
    }
    running_.swap(next_running_);

    // 2. Admit waiting sequences in order, unless this step had to preempt.
    if (out_.preempted.empty()) {
        while (!waiting_.empty() && budget > 0 && running_.size() < config_.max_num_seqs) {
            Sequence* seq = waiting_.front();
            HR_DCHECK(seq->kv.n_tokens == 0);
            const uint32_t cached = cache_.attach_prefix(seq->kv, seq->tokens);
            const uint32_t n = std::min(seq->n_uncomputed(), budget);
            if (!cache_.can_grow(seq->kv, n)) {
                cache_.free(seq->kv);  // its attached blocks stay cached
                break;
            }
            waiting_.pop_front();
            cache_.count_prefix_query(seq->tokens.size(), cached);
            if (!seq->admitted_once) {
                seq->n_cached_prompt = std::min(cached, seq->n_prompt);
                seq->admitted_once = true;
            }
            const uint32_t first = seq->n_computed();
            HR_CHECK(cache_.grow(seq->kv, n));
            seq->state = SeqState::Running;
            running_.push_back(seq);
            out_.seqs.push_back({seq, first, n, first + n == seq->tokens.size()});
            out_.n_tokens += n;
            budget -= n;
        }
    }
    return out_;
}

void Scheduler::remove(Sequence* seq) {
    auto drop = [seq](auto& q) {
        auto it = std::find(q.begin(), q.end(), seq);
        if (it == q.end()) return false;
        q.erase(it);
        return true;
    };
    if (!drop(running_)) drop(waiting_);
    cache_.free(seq->kv);
    seq->state = SeqState::Finished;
}

}  // namespace headroom
