#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"

namespace headroom {

using Clock = std::chrono::steady_clock;

// ---- Request ---------------------------------------------------------------

void Request::push(TokenEvent event) {
    {
        std::lock_guard lk(mu_);
        if (event.finish != FinishReason::None) done_ = true;
        // A reader that lags keeps half the vector taken: close the gap
        // rather than grow (erasing does not reallocate).
        if (head_ > 0 && 2 * head_ >= events_.size()) {
            events_.erase(events_.begin(), events_.begin() + static_cast<ptrdiff_t>(head_));
            head_ = 0;
        }
        events_.push_back(std::move(event));
    }
    cv_.notify_all();
}

bool Request::next(TokenEvent& event, std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return head_ < events_.size() || done_; })) return false;
    if (head_ == events_.size()) return false;
    event = std::move(events_[head_++]);
    if (head_ == events_.size()) {
        events_.clear();
        head_ = 0;
    }
    return true;
}

bool Request::finished() const {
    std::lock_guard lk(mu_);
    return done_ && head_ == events_.size();
}

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
    if (auto why = request.params.validate(); !why.empty()) return refuse(why);
    if (request.params.max_tokens == 0) return refuse("max_tokens must be at least 1");
    const auto n_prompt = static_cast<uint32_t>(request.prompt.size());
    if (auto why = scheduler_.check_admissible(n_prompt); !why.empty()) return refuse(why);
    for (int32_t t : request.prompt)
        if (t < 0 || t >= tokenizer_.n_vocab())
            return refuse(fmt::format("token id {} is outside the vocabulary (0..{})", t,
                                      tokenizer_.n_vocab() - 1));

    auto r = std::make_shared<Request>();
    r->id_ = next_id_.fetch_add(1);
    r->n_prompt_ = n_prompt;
    r->params_ = std::move(request.params);
    r->seq_.id = r->id_;
    r->seq_.n_prompt = n_prompt;
    r->seq_.max_total = static_cast<uint32_t>(
        std::min<uint64_t>(uint64_t{n_prompt} + r->params_.max_tokens, max_model_len()));
    r->seq_.tokens = std::move(request.prompt);
    r->seq_.tokens.reserve(r->seq_.max_total);
    r->sampler_ = std::make_unique<Sampler>(r->params_);
    r->decoder_ = std::make_unique<StreamDecoder>(tokenizer_, request.render_special);
    for (const auto& s : r->params_.stop)
        r->max_stop_bytes_ = std::max(r->max_stop_bytes_, s.size());
    r->t_arrival_ = Clock::now();
    r->events_.reserve(16);
    r->text_.reserve(64);
    {
        std::lock_guard lk(inbox_mu_);
        if (!accepting_) return refuse("the server is shutting down");
        inbox_.push_back(r);
        n_active_.fetch_add(1);
    }
    inbox_cv_.notify_one();
    return r;
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
        scheduler_.add(&r->seq_);
        by_seq_[&r->seq_] = r.get();
        metrics_.prompt_tokens.fetch_add(r->n_prompt_, std::memory_order_relaxed);
        active_.emplace(r->id_, std::move(r));
    }
    if (abort_all)
        for (const auto& [id, r] : active_) cancels.push_back(id);
    for (uint64_t id : cancels) {
        auto it = active_.find(id);
        if (it != active_.end()) finish(*it->second, FinishReason::Abort);
    }
    if (!incoming.empty() || !cancels.empty()) update_gauges();
}

namespace {

void store_traffic(const kernels::StepStats& s, TrafficCounters& c) {
    constexpr auto r = std::memory_order_relaxed;
    c.submits.store(s.n_submits, r);
    c.waits.store(s.n_waits, r);
    c.dispatches.store(s.n_dispatches, r);
    c.upload_bytes.store(s.upload_bytes, r);
    c.download_bytes.store(s.download_bytes, r);
}

}  // namespace

bool Engine::step() {
    drain_inbox();
    const uint64_t preempted_before = scheduler_.n_preemptions();
    const SchedulerOutput& out = scheduler_.schedule();
    metrics_.n_preemptions.fetch_add(scheduler_.n_preemptions() - preempted_before,
                                     std::memory_order_relaxed);
    if (out.empty()) {
        update_gauges();
        return false;
    }
    run_step(out);
    metrics_.n_steps.fetch_add(1, std::memory_order_relaxed);
    const kernels::Backend& be = runner_.backend();
    store_traffic(be.last_step(), metrics_.last_step);
    store_traffic(be.totals(), metrics_.step_totals);
    update_gauges();
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
        Request& r = *by_seq_.at(s.seq);
        r.n_cached_.store(s.seq->n_cached_prompt, std::memory_order_relaxed);
        r.n_prompt_done_.store(std::min(last + 1, s.seq->n_prompt), std::memory_order_relaxed);
    }
    metrics_.computed_prompt_tokens.fetch_add(n_prompt_computed, std::memory_order_relaxed);

    float* logits = runner_.forward(batch_);
    const int32_t n_vocab = static_cast<int32_t>(runner_.model().hparams().n_vocab);
    finished_this_step_.clear();
    size_t row = 0;
    for (const ScheduledSeq& s : out.seqs) {
        if (!s.sample) continue;
        Request& r = *by_seq_.at(s.seq);
        Sequence& seq = r.seq_;
        const std::span<float> l(logits + row * static_cast<size_t>(n_vocab),
                                 static_cast<size_t>(n_vocab));
        ++row;
        const std::span<const int32_t> prompt(seq.tokens.data(), seq.n_prompt);
        const std::span<const int32_t> output(seq.tokens.data() + seq.n_prompt, seq.n_output());
        const SampleResult res = r.sampler_->sample(
            l, prompt, output, reinterpret_cast<uint8_t*>(runner_.sampler_scratch()));
        seq.tokens.push_back(res.token);
        emit_token(r, res);
    }
    // Publish filled blocks before finishing, so finished prompts stay cached.
    for (const ScheduledSeq& s : out.seqs)
        runner_.cache().publish_full_blocks(s.seq->kv, s.seq->tokens);
    for (Request* r : finished_this_step_) finish(*r, r->finish_.load());
}

void Engine::emit_token(Request& r, const SampleResult& s) {
    const auto now = Clock::now();
    if (!r.first_token_seen_) {
        metrics_.ttft_s.observe(std::chrono::duration<double>(now - r.t_arrival_).count());
        r.first_token_seen_ = true;
    } else {
        metrics_.itl_s.observe(std::chrono::duration<double>(now - r.t_last_token_).count());
    }
    r.t_last_token_ = now;
    r.n_output_.fetch_add(1, std::memory_order_relaxed);
    metrics_.generation_tokens.fetch_add(1, std::memory_order_relaxed);

    TokenEvent ev;
    ev.token = s.token;
    ev.logprob = s.logprob;
    ev.top_logprobs = s.top;
    FinishReason reason = FinishReason::None;
    const auto& stop_ids = r.params_.stop_token_ids;
    if ((!r.params_.ignore_eos && tokenizer_.is_end_of_generation(s.token)) ||
        std::find(stop_ids.begin(), stop_ids.end(), s.token) != stop_ids.end()) {
        reason = FinishReason::Stop;
    } else {
        r.text_ += r.decoder_->push(s.token);
        // A stop string ends the output where it starts.
        size_t stop_at = std::string::npos;
        for (const auto& stop : r.params_.stop) {
            const size_t at = r.text_.find(stop, r.n_emitted_);
            if (at != std::string::npos && at < stop_at) stop_at = at;
        }
        if (stop_at != std::string::npos) {
            r.text_.resize(stop_at);
            reason = FinishReason::Stop;
            ev.text = r.text_.substr(r.n_emitted_);
            r.n_emitted_ = r.text_.size();
            r.decoder_.reset();  // nothing after the stop string is sent
        } else {
            // Hold back the longest tail that could still start a stop string.
            size_t hold = 0;
            const size_t pending = r.text_.size() - r.n_emitted_;
            for (size_t k = std::min(pending, r.max_stop_bytes_ ? r.max_stop_bytes_ - 1 : 0);
                 k > 0 && !hold; --k) {
                const std::string_view tail(r.text_.data() + r.text_.size() - k, k);
                for (const auto& stop : r.params_.stop)
                    if (stop.size() > k && std::string_view(stop).substr(0, k) == tail) hold = k;
            }
            ev.text = r.text_.substr(r.n_emitted_, pending - hold);
            // Only the held tail is kept: a stop string starts after what was sent.
            r.text_.erase(0, r.n_emitted_ + pending - hold);
            r.n_emitted_ = 0;
        }
    }
    if (reason == FinishReason::None && r.seq_.tokens.size() >= r.seq_.max_total)
        reason = FinishReason::Length;
    r.push(std::move(ev));
    if (reason != FinishReason::None) {
        r.finish_.store(reason);
        finished_this_step_.push_back(&r);
    }
}

void Engine::finish(Request& r, FinishReason reason) {
    TokenEvent closing;
    closing.finish = reason;
    if (r.decoder_) r.text_ += r.decoder_->flush();
    if (reason != FinishReason::Abort)
        closing.text = r.text_.substr(std::min(r.n_emitted_, r.text_.size()));
    r.n_emitted_ = r.text_.size();
    r.finish_.store(reason);
    scheduler_.remove(&r.seq_);
    metrics_.finished[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
    metrics_.e2e_s.observe(std::chrono::duration<double>(Clock::now() - r.t_arrival_).count());
    r.push(std::move(closing));
    by_seq_.erase(&r.seq_);
    const uint64_t id = r.id_;
    active_.erase(id);  // may destroy r if no reader holds it
    n_active_.fetch_sub(1);
}

void Engine::update_gauges() {
    metrics_.n_running.store(scheduler_.n_running(), std::memory_order_relaxed);
    metrics_.n_waiting.store(scheduler_.n_waiting(), std::memory_order_relaxed);
    metrics_.kv_blocks_used.store(runner_.cache().n_blocks_used(), std::memory_order_relaxed);
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
        {
            std::unique_lock lk(inbox_mu_);
            inbox_cv_.wait(lk, [&] {
                return stopping_ || abort_all_ || !inbox_.empty() || !cancels_.empty() ||
                       n_active_.load() > 0;
            });
            if (stopping_ && inbox_.empty() && n_active_.load() == 0) break;
        }
        step();
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
