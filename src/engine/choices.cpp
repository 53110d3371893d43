// Several answers for one prompt (docs/DESIGN.md, "groups and forks"): the
// engine's n and best_of samples fork from the prompt's leader, and beam
// search ranks each beam's continuations, keeps the best 2 × beam_width,
// forks and drops beams and sends the n best hypotheses at the end.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "engine/engine.h"

namespace headroom {

void Engine::fan_out(Request& r, std::span<float> logits) {
    r.forked_ = true;
    Request::Candidate& lead = r.cands_[0];
    for (size_t i = 1; i < r.cands_.size(); ++i) {
        Request::Candidate& c = r.cands_[i];
        c.seq.tokens.assign(lead.seq.tokens.begin(), lead.seq.tokens.end());
        scheduler_.fork(&lead.seq, &c.seq);
        if (lead.grammar) c.grammar = lead.grammar->fork();
        c.live = true;
    }
    row_copy_.assign(logits.begin(), logits.end());  // penalties change the row in place
    for (size_t i = 0; i < r.cands_.size(); ++i) {
        if (i > 0) std::copy(row_copy_.begin(), row_copy_.end(), logits.begin());
        sample_into(r, r.cands_[i], logits);
    }
}

void Engine::rank_continuations(Request& r, Request::Candidate& c, std::span<const float> logits) {
    // log p(t) = l_t - max - log sum_j exp(l_j - max)
    const float mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float x : logits) sum += std::exp(static_cast<double>(x - mx));
    const auto log_z = static_cast<float>(std::log(sum)) + mx;
    const size_t k = std::min<size_t>(2 * r.cands_.size(), logits.size());
    // The k largest logits, kept sorted best first (ties: the lower token id).
    auto better = [](const TokenLogprob& a, const TokenLogprob& b) {
        return a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token);
    };
    c.next.clear();
    for (size_t t = 0; t < logits.size(); ++t) {
        const TokenLogprob cand{static_cast<int32_t>(t), logits[t]};
        if (c.next.size() == k && !better(cand, c.next.back())) continue;
        if (c.next.size() == k) c.next.pop_back();
        c.next.insert(std::upper_bound(c.next.begin(), c.next.end(), cand, better), cand);
    }
    for (auto& x : c.next) x.logprob -= log_z;
    c.has_next = true;
}

void Engine::add_hypothesis(Request& r, const Request::Candidate& c, int32_t end_token, double cum,
                            FinishReason reason) {
    Request::Hypothesis h;
    h.output.assign(c.seq.tokens.begin() + c.seq.n_prompt, c.seq.tokens.end());
    h.n_tokens = static_cast<uint32_t>(h.output.size()) + (end_token >= 0 ? 1 : 0);
    h.reason = reason;
    h.score = cum / std::pow(static_cast<double>(std::max<uint32_t>(h.n_tokens, 1)),
                             static_cast<double>(r.length_penalty_));
    // Kept best first, at most beam_width of them (stable: earlier wins ties).
    auto at = std::upper_bound(
        r.hyps_.begin(), r.hyps_.end(), h.score,
        [](double score, const Request::Hypothesis& x) { return score > x.score; });
    r.hyps_.insert(at, std::move(h));
    if (r.hyps_.size() > r.cands_.size()) r.hyps_.pop_back();
}

void Engine::beam_step(Request& r) {
    const size_t width = r.cands_.size();
    for (const auto& c : r.cands_)
        if (c.live && !c.has_next) return;  // a beam still computes its tail
    struct Option {
        double score;
        uint32_t slot;
        int32_t token;
        float logprob;
    };
    std::vector<Option> options;
    for (uint32_t i = 0; i < width; ++i) {
        const auto& c = r.cands_[i];
        if (!c.live) continue;
        for (const auto& x : c.next)
            options.push_back({c.cum_logprob + x.logprob, i, x.token, x.logprob});
    }
    std::sort(options.begin(), options.end(), [](const Option& a, const Option& b) {
        if (a.score != b.score) return a.score > b.score;
        if (a.slot != b.slot) return a.slot < b.slot;
        return a.token < b.token;
    });
    const auto& stop_ids = r.params_.stop_token_ids;
    auto ends = [&](int32_t t) {
        return (!r.params_.ignore_eos && tokenizer_.is_end_of_generation(t)) ||
               std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end();
    };
    // The best `width` continuations that do not end; an ending one among
    // the best `width` is a finished hypothesis.
    std::vector<Option> chosen;
    for (size_t rank = 0; rank < options.size() && chosen.size() < width; ++rank) {
        const Option& o = options[rank];
        if (ends(o.token)) {
            if (rank < width)
                add_hypothesis(r, r.cands_[o.slot], o.token, o.score, FinishReason::Stop);
            continue;
        }
        chosen.push_back(o);
    }
    // Parents no continuation chose are dropped (their own blocks freed);
    // a parent chosen k times keeps one and forks k - 1 into free slots.
    std::vector<uint32_t> n_children(width, 0);
    for (const Option& o : chosen) ++n_children[o.slot];
    std::vector<uint32_t> free_slots;
    for (uint32_t i = 0; i < width; ++i) {
        auto& c = r.cands_[i];
        c.has_next = false;
        if (c.live && n_children[i] == 0) {
            scheduler_.remove_member(&c.seq);
            c.live = false;
        }
        if (!c.live) free_slots.push_back(i);
    }
    std::vector<uint32_t> target(chosen.size());
    std::vector<bool> parent_used(width, false);
    for (size_t j = 0; j < chosen.size(); ++j) {
        const uint32_t p = chosen[j].slot;
        if (!parent_used[p]) {
            parent_used[p] = true;
            target[j] = p;
            continue;
        }
        HR_CHECK(!free_slots.empty());
        const uint32_t f = free_slots.back();
        free_slots.pop_back();
        auto& parent = r.cands_[p];
        auto& child = r.cands_[f];
        child.seq.tokens.assign(parent.seq.tokens.begin(), parent.seq.tokens.end());
        child.cum_logprob = parent.cum_logprob;
        scheduler_.fork(&parent.seq, &child.seq);
        child.live = true;
        target[j] = f;
    }
    for (size_t j = 0; j < chosen.size(); ++j) {
        auto& c = r.cands_[target[j]];
        c.seq.tokens.push_back(chosen[j].token);
        c.cum_logprob += chosen[j].logprob;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!r.first_token_seen_) {
        metrics_.ttft_s.observe(std::chrono::duration<double>(now - r.t_arrival_).count());
        r.first_token_seen_ = true;
        r.t_first_token_ = now;
    }
    metrics_.generation_tokens.fetch_add(chosen.size(), std::memory_order_relaxed);

    // Done: the beams reached max_tokens (they are finished as they stand),
    // or beam_width hypotheses are in and (early_stopping, or) no live beam
    // can beat the worst of them at its present length.
    bool done = false;
    double best_live = -INFINITY;
    uint32_t n_out = 0;
    bool at_length = false;
    for (const auto& c : r.cands_) {
        if (!c.live) continue;
        best_live = std::max(best_live, c.cum_logprob);
        n_out = c.seq.n_output();
        at_length = at_length || c.seq.tokens.size() >= c.seq.max_total;
    }
    if (at_length || chosen.empty()) {
        for (const auto& c : r.cands_)
            if (c.live) add_hypothesis(r, c, -1, c.cum_logprob, FinishReason::Length);
        done = true;
    } else if (r.hyps_.size() >= width) {
        done = r.early_stopping_ ||
               r.hyps_.back().score >= best_live / std::pow(static_cast<double>(n_out),
                                                            static_cast<double>(r.length_penalty_));
    }
    if (done) close_beams(r);
}

void Engine::close_beams(Request& r) {
    for (uint32_t j = 0; j < r.n_choices_; ++j) {
        TokenEvent ev;
        ev.index = j;
        ev.finish = FinishReason::Abort;
        if (j < r.hyps_.size()) {
            const auto& h = r.hyps_[j];
            StreamDecoder decoder(tokenizer_, r.render_special_);
            for (int32_t t : h.output) ev.text += decoder.push(t);
            ev.text += decoder.flush();
            ev.finish = h.reason;
            r.n_output_.fetch_add(h.n_tokens, std::memory_order_relaxed);
        }
        if (j == 0) r.finish_.store(ev.finish);
        r.push(std::move(ev));
    }
    for (auto& c : r.cands_) c.live = false;
    scheduler_.remove(&r.group_);
    retire_request(r, r.finish_.load());
}

}  // namespace headroom
