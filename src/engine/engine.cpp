#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <future>

#include "core/check.h"
#include "engine/stop-strings.h"

namespace headroom {

using Clock = std::chrono::steady_clock;

// ---- Engine ------------------------------------------------------------------

Engine::Engine(Runner& runner, const Tokenizer& tokenizer, EngineMetrics& metrics)
    : runner_(runner),
      tokenizer_(tokenizer),
      metrics_(metrics),
      scheduler_(runner.cache(), SchedulerConfig{runner.plan().config.max_num_seqs,
                                                 runner.plan().config.max_num_batched_tokens,
                                                 runner.plan().config.max_model_len}) {
    const auto& c = runner.plan().config;
    batch_.reserve(c.max_num_batched_tokens, c.max_num_seqs, c.max_logit_rows);
    finished_this_step_.reserve(c.max_num_seqs);
    beam_requests_.reserve(c.max_num_seqs);
    row_copy_.reserve(runner.model().hparams().n_vocab);
    const uint32_t embed_chunk = std::min(c.max_num_batched_tokens, c.max_logit_rows);
    embed_batch_.reserve(embed_chunk, 1, embed_chunk);
    // Grammar masks, one per sequence that samples in a step (the plan's
    // runtime term counts them with the grammar cache).
    if (c.grammar_cache_bytes) masks_.resize(c.max_num_seqs * mask_words(tokenizer.n_vocab()));
    snapshots_.set_waker([this] {
        // Under the inbox lock, so the loop cannot miss it between its check and its wait.
        std::lock_guard lk(inbox_mu_);
        inbox_cv_.notify_one();
    });
    block_scratch_.reserve(size_t{c.max_num_seqs} * (c.max_model_len / c.block_size + 2));
    metrics_.kv_blocks_total = runner.cache().n_blocks_total();
}

Engine::~Engine() {
    if (thread_.joinable()) shutdown(std::chrono::milliseconds(0));
}

std::shared_ptr<Request> Engine::submit(GenerateRequest request, std::string* error) {
    auto refuse = [&](std::string why) -> std::shared_ptr<Request> {
        metrics_.requests_refused.fetch_add(1, std::memory_order_relaxed);
        *error = std::move(why);
        return nullptr;
    };
    const SamplingParams& p = request.params;
    if (!request.choices.beam_search)
        if (auto why = p.validate(); !why.empty()) return refuse(why);
    if (p.max_tokens == 0) return refuse("max_tokens must be at least 1");
    if (request.choices.n == 0) return refuse("n must be at least 1");
    uint32_t n_candidates = request.choices.n;
    if (request.choices.beam_search) {
        const uint32_t width =
            request.choices.beam_width ? request.choices.beam_width : request.choices.n;
        if (width < request.choices.n)
            return refuse(
                fmt::format("beam_width ({}) must be at least n ({})", width, request.choices.n));
        if (!p.stop.empty()) return refuse("stop strings are not supported with beam search");
        if (request.grammar)
            return refuse(
                "beam search does not follow a grammar (response_format, structured outputs, "
                "tools); use n or best_of");
        if (p.logprobs || p.n_logprobs) return refuse("logprobs are not returned with beam search");
        if (!(request.choices.length_penalty >= -10.0f && request.choices.length_penalty <= 10.0f))
            return refuse("length_penalty must be between -10 and 10");
        n_candidates = width;
    } else if (request.choices.best_of) {
        if (request.choices.best_of < request.choices.n)
            return refuse(fmt::format("best_of ({}) must be at least n ({})",
                                      request.choices.best_of, request.choices.n));
        n_candidates = request.choices.best_of;
    }
    const auto n_prompt = static_cast<uint32_t>(request.prompt.size());
    const auto max_total = static_cast<uint32_t>(
        std::min<uint64_t>(uint64_t{n_prompt} + p.max_tokens, max_model_len()));
    if (auto why = n_candidates > 1 ? scheduler_.check_admissible(n_prompt, max_total, n_candidates)
                                    : scheduler_.check_admissible(n_prompt);
        !why.empty())
        return refuse(why);
    for (int32_t t : request.prompt)
        if (t < 0 || t >= tokenizer_.n_vocab())
            return refuse(fmt::format("token id {} is outside the vocabulary (0..{})", t,
                                      tokenizer_.n_vocab() - 1));
    for (const auto& [t, bias] : p.logit_bias)
        if (t < 0 || t >= tokenizer_.n_vocab())
            return refuse(fmt::format("logit_bias: token id {} is outside the vocabulary (0..{})",
                                      t, tokenizer_.n_vocab() - 1));

    auto r = std::make_shared<Request>();
    r->id_ = next_id_.fetch_add(1);
    r->n_prompt_ = n_prompt;
    r->n_choices_ = request.choices.n;
    r->params_ = std::move(request.params);
    r->render_special_ = request.render_special;
    r->beam_ = request.choices.beam_search;
    r->hold_ = !r->beam_ && n_candidates > request.choices.n;
    r->length_penalty_ = request.choices.length_penalty;
    r->early_stopping_ = request.choices.early_stopping;
    r->cands_.resize(n_candidates);
    for (uint32_t i = 0; i < n_candidates; ++i) {
        Request::Candidate& c = r->cands_[i];
        Sequence& seq = c.seq;
        seq.id = r->id_;
        seq.index = i;
        seq.n_prompt = n_prompt;
        seq.max_total = max_total;
        seq.tokens.reserve(max_total);
        if (!r->beam_) {
            SamplingParams sp = r->params_;
            if (sp.seed) sp.seed = *sp.seed + i;  // sample i: seed + i
            c.sampler = std::make_unique<Sampler>(sp);
            c.decoder = std::make_unique<StreamDecoder>(tokenizer_, request.render_special);
            c.text.reserve(64);
            // The leader walks the grammar from its start; the others fork its state.
            if (request.grammar && i == 0)
                c.grammar = std::make_unique<GrammarState>(request.grammar);
        } else {
            c.next.reserve(2 * n_candidates);
        }
    }
    r->cands_[0].seq.tokens = std::move(request.prompt);
    r->cands_[0].seq.tokens.reserve(max_total);
    r->cands_[0].live = true;
    r->group_.id = r->id_;
    r->group_.seqs.reserve(n_candidates);
    r->group_.seqs.push_back(&r->cands_[0].seq);
    r->group_.n_seats = n_candidates;
    if (r->beam_) r->hyps_.reserve(n_candidates + 1);
    r->t_arrival_ = Clock::now();
    r->events_.reserve(16);
    {
        std::lock_guard lk(inbox_mu_);
        if (!accepting_) return refuse("the server is shutting down");
        inbox_.push_back(r);
        n_active_.fetch_add(1);
    }
    inbox_cv_.notify_one();
    return r;
}

std::shared_ptr<Embedding> Engine::embed(std::vector<int32_t> tokens, Pooling pooling,
                                         std::string* error) {
    if (tokens.empty()) {
        *error = "the input is empty";
        return nullptr;
    }
    if (tokens.size() > max_model_len()) {
        *error = fmt::format("the input is {} tokens, more than max_model_len ({})", tokens.size(),
                             max_model_len());
        return nullptr;
    }
    for (int32_t t : tokens)
        if (t < 0 || t >= tokenizer_.n_vocab()) {
            *error = fmt::format("token id {} is outside the vocabulary (0..{})", t,
                                 tokenizer_.n_vocab() - 1);
            return nullptr;
        }
    auto e = std::make_shared<Embedding>();
    e->tokens_ = std::move(tokens);
    e->pooling_ = pooling;
    {
        std::lock_guard lk(inbox_mu_);
        if (!accepting_) {
            *error = "the server is shutting down";
            return nullptr;
        }
        embeds_.push_back(e);
    }
    inbox_cv_.notify_one();
    return e;
}

bool Engine::run_embeddings() {
    {
        std::lock_guard lk(inbox_mu_);
        for (auto& e : embeds_) embeds_waiting_.push_back(std::move(e));
        embeds_.clear();
    }
    if (embeds_waiting_.empty()) return false;
    size_t kept = 0;
    for (auto& e : embeds_waiting_)
        if (!run_embedding(*e)) embeds_waiting_[kept++] = std::move(e);
    embeds_waiting_.resize(kept);
    return true;
}

bool Engine::run_embedding(Embedding& e) {
    const auto& c = runner_.plan().config;
    const uint32_t chunk = std::min(c.max_num_batched_tokens, c.max_logit_rows);
    const uint32_t n_embd = runner_.model().hparams().n_embd;
    const auto n = static_cast<uint32_t>(e.tokens_.size());
    std::vector<double> sum(n_embd, 0.0);
    std::vector<float> out(n_embd, 0.0f);
    SeqKv seq;
    // The whole input's blocks must be free before any pass runs.
    if (!runner_.cache().can_grow(seq, n)) {
        if (n_active_.load() > 0) return false;  // blocks come back as requests finish
        e.finish({},
                 fmt::format("the input needs the KV of {} tokens; the pool holds {} blocks "
                             "of {}",
                             n, runner_.cache().n_blocks_total(), runner_.cache().block_size()));
        return true;
    }
    for (uint32_t c0 = 0; c0 < n; c0 += chunk) {
        const uint32_t c1 = std::min(n, c0 + chunk);
        HR_CHECK(runner_.cache().grow(seq, c1 - c0));
        embed_batch_.clear();
        const uint32_t s = embed_batch_.add_seq(&seq);
        for (uint32_t i = c0; i < c1; ++i) embed_batch_.add_token(e.tokens_[i], i, s, true);
        const float* h = runner_.forward(embed_batch_, true);
        for (uint32_t i = c0; i < c1; ++i) {
            const float* row = h + size_t{i - c0} * n_embd;
            if (e.pooling_ == Pooling::Mean)
                for (uint32_t d = 0; d < n_embd; ++d) sum[d] += row[d];
            else if ((e.pooling_ == Pooling::Cls && i == 0) ||
                     (e.pooling_ == Pooling::Last && i + 1 == n))
                std::copy(row, row + n_embd, out.begin());
        }
    }
    runner_.cache().free(seq);
    runner_.count_kv();
    if (e.pooling_ == Pooling::Mean)
        for (uint32_t d = 0; d < n_embd; ++d) out[d] = static_cast<float>(sum[d] / n);
    e.finish(std::move(out), "");
    return true;
}

void Engine::cancel(uint64_t id) {
    {
        std::lock_guard lk(inbox_mu_);
        cancels_.push_back(id);
    }
    inbox_cv_.notify_one();
}

size_t Engine::n_active() const {
    return n_active_.load();
}

bool Engine::accepting() const {
    std::lock_guard lk(inbox_mu_);
    return accepting_;
}

void Engine::drain_inbox() {
    std::vector<std::shared_ptr<Request>> incoming;
    std::vector<uint64_t> cancels;
    bool abort_all = false;
    {
        std::lock_guard lk(inbox_mu_);
        incoming.swap(inbox_);
        cancels.swap(cancels_);
        abort_all = abort_all_;
    }
    for (auto& r : incoming) {
        scheduler_.add(&r->group_);
        for (const auto& c : r->cands_) by_seq_[&c.seq] = r.get();
        metrics_.prompt_tokens.fetch_add(r->n_prompt_, std::memory_order_relaxed);
        active_.emplace(r->id_, std::move(r));
    }
    if (abort_all)
        for (const auto& [id, r] : active_) cancels.push_back(id);
    for (uint64_t id : cancels) {
        auto it = active_.find(id);
        if (it != active_.end()) abort_request(*it->second, FinishReason::Abort);
    }
    if (!incoming.empty() || !cancels.empty()) update_gauges();
}

namespace {

void store_traffic(const kernels::StepStats& s, TrafficCounters& c) {
    constexpr auto r = std::memory_order_relaxed;
    c.submits.store(s.n_submits, r);
    c.waits.store(s.n_waits, r);
    c.dispatches.store(s.n_dispatches, r);
    c.barriers.store(s.n_barriers, r);
    c.recorded.store(s.n_recorded, r);
    c.upload_bytes.store(s.upload_bytes, r);
    c.download_bytes.store(s.download_bytes, r);
}

}  // namespace

bool Engine::step() {
    drain_inbox();
    const bool embedded = run_embeddings();
    const uint64_t preempted_before = scheduler_.n_preemptions();
    const SchedulerOutput& out = scheduler_.schedule();
    metrics_.n_preemptions.fetch_add(scheduler_.n_preemptions() - preempted_before,
                                     std::memory_order_relaxed);
    snapshot_dirty_ = true;
    if (out.empty()) {
        snapshots_.changed();
        update_gauges();
        maybe_snapshot(false);
        return embedded;
    }
    run_step(out);
    metrics_.n_steps.fetch_add(1, std::memory_order_relaxed);
    const kernels::Backend& be = runner_.backend();
    store_traffic(be.last_step(), metrics_.last_step);
    store_traffic(be.totals(), metrics_.step_totals);
    snapshots_.changed();
    update_gauges();
    maybe_snapshot(false);
    return true;
}

void Engine::run_step(const SchedulerOutput& out) {
    batch_.clear();
    uint64_t n_prompt_computed = 0;
    for (const ScheduledSeq& s : out.seqs) {
        const uint32_t idx = batch_.add_seq(&s.seq->kv);
        const uint32_t last = s.first + s.n_tokens - 1;
        for (uint32_t i = s.first; i <= last; ++i) {
            batch_.add_token(s.seq->tokens[i], i, idx, s.sample && i == last);
            n_prompt_computed += i < s.seq->n_prompt;
        }
        if (s.seq->index != 0) continue;
        Request& r = *by_seq_.at(s.seq);
        r.n_cached_.store(s.seq->n_cached_prompt, std::memory_order_relaxed);
        r.n_prompt_done_.store(std::min(last + 1, s.seq->n_prompt), std::memory_order_relaxed);
    }
    metrics_.computed_prompt_tokens.fetch_add(n_prompt_computed, std::memory_order_relaxed);

    for (const ScheduledSeq& s : out.seqs)
        if (s.seq->group && s.seq->group->seqs[0] == s.seq) count_sharing(*by_seq_.at(s.seq));
    // A constrained sequence's mask depends only on the tokens it accepted:
    // it is filled on another thread while the forward pass runs.
    std::future<void> masking;
    if (fill_masks_wanted(out))
        masking = std::async(std::launch::async, [this, &out] { fill_masks(out); });
    float* logits = runner_.forward(batch_);
    if (masking.valid()) masking.get();
    // Publish filled blocks first, so forks and finished prompts find them cached.
    for (const ScheduledSeq& s : out.seqs)
        runner_.cache().publish_full_blocks(s.seq->kv, s.seq->tokens);
    const int32_t n_vocab = static_cast<int32_t>(runner_.model().hparams().n_vocab);
    finished_this_step_.clear();
    beam_requests_.clear();
    size_t row = 0;
    for (const ScheduledSeq& s : out.seqs) {
        if (!s.sample) continue;
        Request& r = *by_seq_.at(s.seq);
        Request::Candidate& c = r.cands_[s.seq->index];
        const std::span<float> l(logits + row * static_cast<size_t>(n_vocab),
                                 static_cast<size_t>(n_vocab));
        if (c.grammar) apply_mask(l, mask_row(row));
        ++row;
        if (r.beam_) {
            rank_continuations(r, c, l);
            if (!r.in_step_) {
                r.in_step_ = true;
                beam_requests_.push_back(&r);
            }
        } else if (!r.forked_ && r.cands_.size() > 1) {
            fan_out(r, l);
        } else {
            sample_into(r, c, l);
        }
    }
    for (Request* r : beam_requests_) {
        r->in_step_ = false;
        beam_step(*r);
    }
    for (auto [r, i] : finished_this_step_) close_choice(*r, r->cands_[i], r->cands_[i].finish);
}

bool Engine::fill_masks_wanted(const SchedulerOutput& out) const {
    for (const ScheduledSeq& s : out.seqs)
        if (s.sample && by_seq_.at(s.seq)->cands_[s.seq->index].grammar) return true;
    return false;
}

std::span<uint32_t> Engine::mask_row(size_t row) {
    const size_t words = mask_words(tokenizer_.n_vocab());
    return {masks_.data() + row * words, words};
}

void Engine::fill_masks(const SchedulerOutput& out) {
    const size_t words = mask_words(tokenizer_.n_vocab());
    size_t n_rows = 0;
    for (const ScheduledSeq& s : out.seqs) n_rows += s.sample;
    if (masks_.size() < n_rows * words) masks_.resize(n_rows * words);
    size_t row = 0;
    for (const ScheduledSeq& s : out.seqs) {
        if (!s.sample) continue;
        Request::Candidate& c = by_seq_.at(s.seq)->cands_[s.seq->index];
        if (c.grammar) {
            const auto t0 = Clock::now();
            c.grammar->fill_mask(mask_row(row));
            metrics_.grammar_mask_s.observe(
                std::chrono::duration<double>(Clock::now() - t0).count());
        }
        ++row;
    }
}

void Engine::sample_into(Request& r, Request::Candidate& c, std::span<float> logits) {
    Sequence& seq = c.seq;
    for (const auto& [token, bias] : r.params_.logit_bias)
        if (token >= 0 && static_cast<size_t>(token) < logits.size()) logits[token] += bias;
    const std::span<const int32_t> prompt(seq.tokens.data(), seq.n_prompt);
    const std::span<const int32_t> output(seq.tokens.data() + seq.n_prompt, seq.n_output());
    const SampleResult res = c.sampler->sample(
        logits, prompt, output, reinterpret_cast<uint8_t*>(runner_.sampler_scratch()));
    seq.tokens.push_back(res.token);
    c.cum_logprob += res.logprob;
    if (c.grammar) c.grammar->accept(res.token);
    emit_token(r, c, res);
}

void Engine::emit_token(Request& r, Request::Candidate& c, const SampleResult& s) {
    const auto now = Clock::now();
    if (!r.first_token_seen_) {
        metrics_.ttft_s.observe(std::chrono::duration<double>(now - r.t_arrival_).count());
        r.first_token_seen_ = true;
        r.t_first_token_ = now;
    } else if (c.seq.index == 0) {
        metrics_.itl_s.observe(std::chrono::duration<double>(now - r.t_last_token_).count());
    }
    if (c.seq.index == 0) r.t_last_token_ = now;
    if (!r.hold_) r.n_output_.fetch_add(1, std::memory_order_relaxed);
    metrics_.generation_tokens.fetch_add(1, std::memory_order_relaxed);

    TokenEvent ev;
    ev.index = c.seq.index;
    ev.token = s.token;
    ev.logprob = s.logprob;
    ev.top_logprobs = s.top;
    FinishReason reason = FinishReason::None;
    const auto& stop_ids = r.params_.stop_token_ids;
    if ((!r.params_.ignore_eos && tokenizer_.is_end_of_generation(s.token)) ||
        std::find(stop_ids.begin(), stop_ids.end(), s.token) != stop_ids.end()) {
        reason = FinishReason::Stop;
    } else {
        c.text += c.decoder->push(s.token);
        const std::string_view pending = std::string_view(c.text).substr(c.n_emitted);
        const StopScan scan = scan_stop_strings(pending, r.params_.stop);
        ev.text = std::string(pending.substr(0, scan.send));
        if (scan.stopped) {
            reason = FinishReason::Stop;
            c.text.resize(c.n_emitted + scan.send);
            c.n_emitted = c.text.size();
            c.decoder.reset();  // nothing after the stop string is sent
        } else {
            // Only the held tail is kept: a stop string starts after what was sent.
            c.text.erase(0, c.n_emitted + scan.send);
            c.n_emitted = 0;
        }
    }
    // A grammar that reached its end allows nothing more (its stop token was
    // sampled, or it ended with ignore_eos set).
    if (reason == FinishReason::None && c.grammar && c.grammar->terminated())
        reason = FinishReason::Stop;
    if (reason == FinishReason::None && c.seq.tokens.size() >= c.seq.max_total)
        reason = FinishReason::Length;
    if (r.hold_)
        c.held.push_back(std::move(ev));
    else
        r.push(std::move(ev));
    if (reason != FinishReason::None) {
        c.finish = reason;
        finished_this_step_.emplace_back(&r, c.seq.index);
    }
}

void Engine::close_choice(Request& r, Request::Candidate& c, FinishReason reason) {
    TokenEvent closing;
    closing.index = c.seq.index;
    closing.finish = reason;
    if (c.decoder) c.text += c.decoder->flush();
    if (reason != FinishReason::Abort)
        closing.text = c.text.substr(std::min(c.n_emitted, c.text.size()));
    c.n_emitted = c.text.size();
    c.finish = reason;
    if (c.seq.index == 0 && !r.hold_) r.finish_.store(reason);
    const bool last =
        std::count_if(r.cands_.begin(), r.cands_.end(), [](const auto& x) { return x.live; }) == 1;
    if (c.live) {
        c.live = false;
        if (last)
            scheduler_.remove(&r.group_);
        else
            scheduler_.remove_member(&c.seq);
    }
    if (r.hold_) {
        c.held.push_back(std::move(closing));
    } else {
        r.push(std::move(closing));
    }
    if (!last) return;
    if (r.hold_) {
        // best_of: the n candidates of highest cumulative logprob, in that order.
        std::vector<uint32_t> order(r.cands_.size());
        for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
            return r.cands_[a].cum_logprob > r.cands_[b].cum_logprob;
        });
        for (uint32_t j = 0; j < r.n_choices_; ++j) {
            auto& best = r.cands_[order[j]];
            if (j == 0) r.finish_.store(best.finish);
            r.n_output_.fetch_add(best.seq.n_output(), std::memory_order_relaxed);
            for (auto& ev : best.held) {
                ev.index = j;
                r.push(std::move(ev));
            }
        }
    }
    retire_request(r, r.finish_.load());
}

void Engine::abort_request(Request& r, FinishReason reason) {
    // Abort: every choice not yet closed closes now, without more text.
    if (r.hold_ || r.beam_) {
        for (uint32_t j = 0; j < r.n_choices_; ++j) {
            TokenEvent closing;
            closing.index = j;
            closing.finish = reason;
            r.push(std::move(closing));
        }
    } else {
        for (auto& c : r.cands_) {
            const bool open = c.finish == FinishReason::None && (c.live || !r.forked_);
            if (!open || c.seq.index >= r.n_choices_) continue;
            TokenEvent closing;
            closing.index = c.seq.index;
            closing.finish = reason;
            if (c.decoder && reason != FinishReason::Abort) {
                c.text += c.decoder->flush();
                closing.text = c.text.substr(std::min(c.n_emitted, c.text.size()));
            }
            c.finish = reason;
            r.push(std::move(closing));
        }
    }
    for (auto& c : r.cands_) c.live = false;
    // Choice 0 keeps the reason it finished with, if it had.
    if (r.hold_ || r.beam_ || r.cands_[0].finish == FinishReason::Abort ||
        r.finish_.load() == FinishReason::None)
        r.finish_.store(reason);
    if (r.group_.state != SeqState::Finished) scheduler_.remove(&r.group_);
    retire_request(r, reason);
}

void Engine::retire_request(Request& r, FinishReason reason) {
    metrics_.finished[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
    metrics_.request_kv_blocks.fetch_add(r.n_blocks_peak_.load(), std::memory_order_relaxed);
    metrics_.request_kv_blocks_shared.fetch_add(r.n_shared_peak_.load(), std::memory_order_relaxed);
    metrics_.e2e_s.observe(std::chrono::duration<double>(Clock::now() - r.t_arrival_).count());
    for (const auto& c : r.cands_) by_seq_.erase(&c.seq);
    const uint64_t id = r.id_;
    active_.erase(id);  // may destroy r if no reader holds it
    n_active_.fetch_sub(1);
}

void Engine::count_sharing(Request& r) {
    constexpr auto rel = std::memory_order_relaxed;
    const KvCache& cache = runner_.cache();
    uint32_t distinct = 0, entries = 0;
    if (r.group_.seqs.size() == 1) {
        // One sequence holds each of its blocks once.
        for (const auto& t : r.group_.seqs[0]->kv.tables)
            for (int32_t b : t) distinct += b >= 0;
        if (distinct > r.n_blocks_peak_.load(rel)) r.n_blocks_peak_.store(distinct, rel);
        return;
    }
    for (size_t g = 0; g < cache.n_groups(); ++g) {
        block_scratch_.clear();
        for (const Sequence* s : r.group_.seqs)
            if (s->kv.tables.size() > g)
                for (int32_t b : s->kv.tables[g])
                    if (b >= 0) block_scratch_.push_back(b);
        entries += static_cast<uint32_t>(block_scratch_.size());
        std::sort(block_scratch_.begin(), block_scratch_.end());
        distinct += static_cast<uint32_t>(
            std::unique(block_scratch_.begin(), block_scratch_.end()) - block_scratch_.begin());
    }
    if (distinct > r.n_blocks_peak_.load(rel)) r.n_blocks_peak_.store(distinct, rel);
    if (entries - distinct > r.n_shared_peak_.load(rel))
        r.n_shared_peak_.store(entries - distinct, rel);
}

void Engine::update_gauges() {
    metrics_.n_running.store(scheduler_.running().size(), std::memory_order_relaxed);
    metrics_.n_running_seqs.store(scheduler_.n_running(), std::memory_order_relaxed);
    metrics_.n_waiting.store(scheduler_.n_waiting(), std::memory_order_relaxed);
    metrics_.kv_blocks_used.store(runner_.cache().n_blocks_used(), std::memory_order_relaxed);
    const uint64_t shared_bytes = runner_.cache().shared_bytes();
    metrics_.kv_blocks_shared.store(runner_.cache().n_shared_refs(), std::memory_order_relaxed);
    metrics_.kv_shared_bytes.store(shared_bytes, std::memory_order_relaxed);
    if (shared_bytes > metrics_.kv_shared_bytes_peak.load(std::memory_order_relaxed))
        metrics_.kv_shared_bytes_peak.store(shared_bytes, std::memory_order_relaxed);
    const KvCache& cache = runner_.cache();
    for (size_t g = 0; g < std::min(cache.n_groups(), EngineMetrics::kMaxKvGroups); ++g) {
        metrics_.kv_group_blocks_used[g].store(cache.pool(g).n_used(), std::memory_order_relaxed);
        metrics_.kv_group_blocks_cached[g].store(cache.pool(g).n_cached(),
                                                 std::memory_order_relaxed);
    }
    const auto& ps = runner_.cache().prefix_stats();
    metrics_.prefix_query_tokens.store(ps.query_tokens, std::memory_order_relaxed);
    metrics_.prefix_hit_tokens.store(ps.hit_tokens, std::memory_order_relaxed);
    runner_.count_kv();
}

void Engine::loop() {
    for (;;) {
        bool work = false;
        {
            std::unique_lock lk(inbox_mu_);
            auto has_work = [&] {
                return stopping_ || abort_all_ || !inbox_.empty() || !cancels_.empty() ||
                       !embeds_.empty() || !embeds_waiting_.empty() || n_active_.load() > 0;
            };
            if (!has_work() && snapshot_dirty_) {
                // Going idle: show the state the last step left.
                lk.unlock();
                maybe_snapshot(true);
                lk.lock();
                if (snapshot_dirty_) snapshot_dirty_ = false;  // nobody was reading
            }
            inbox_cv_.wait(lk, [&] { return has_work() || snapshots_.nudged(); });
            if (stopping_ && inbox_.empty() && n_active_.load() == 0) break;
            work = has_work();
        }
        if (snapshots_.take_nudge()) maybe_snapshot(true);
        if (work) step();
    }
    // Embeddings still waiting for blocks when the engine stops.
    std::lock_guard lk(inbox_mu_);
    for (auto* list : {&embeds_, &embeds_waiting_}) {
        for (auto& e : *list) e->finish({}, "the server is shutting down");
        list->clear();
    }
}

void Engine::start() {
    HR_CHECK(!thread_.joinable());
    thread_ = std::thread([this] { loop(); });
}

void Engine::shutdown(std::chrono::milliseconds timeout) {
    {
        std::lock_guard lk(inbox_mu_);
        accepting_ = false;
    }
    const auto deadline = Clock::now() + timeout;
    while (thread_.joinable() && n_active_.load() > 0 && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    {
        // What is still running is aborted by the loop before it exits.
        std::lock_guard lk(inbox_mu_);
        abort_all_ = true;
        stopping_ = true;
    }
    inbox_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

}  // namespace headroom
