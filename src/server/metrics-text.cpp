#include "server/metrics-text.h"

#include <fmt/format.h>

#include <string_view>

namespace headroom::server {

namespace {

class Exposition {
  public:
    void family(std::string_view name, std::string_view type, std::string_view help) {
        out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    }
    void sample(std::string_view name, double value, std::string_view labels = {}) {
        if (labels.empty())
            out_ += fmt::format("{} {}\n", name, value);
        else
            out_ += fmt::format("{}{{{}}} {}\n", name, labels, value);
    }
    void sample(std::string_view name, uint64_t value, std::string_view labels = {}) {
        if (labels.empty())
            out_ += fmt::format("{} {}\n", name, value);
        else
            out_ += fmt::format("{}{{{}}} {}\n", name, labels, value);
    }
    void gauge(std::string_view name, std::string_view help, double value) {
        family(name, "gauge", help);
        sample(name, value);
    }
    void gauge(std::string_view name, std::string_view help, uint64_t value) {
        family(name, "gauge", help);
        sample(name, value);
    }
    void counter(std::string_view name, std::string_view help, uint64_t value) {
        family(name, "counter", help);
        sample(name, value);
    }
    // `labels` (k="v",...) go on every sample, before le.
    void histogram(std::string_view name, std::string_view help, const Histogram& h,
                   std::string_view labels = {}) {
        family(name, "histogram", help);
        const auto& bounds = h.bounds();
        const std::string pre = labels.empty() ? "" : fmt::format("{},", labels);
        // Buckets, sum and count are separate atomics: take +Inf from the
        // buckets so the family stays consistent under concurrent updates.
        uint64_t n_total = 0;
        for (size_t i = 0; i < bounds.size(); ++i)
            sample(fmt::format("{}_bucket", name), h.cumulative_count(i),
                   fmt::format("{}le=\"{}\"", pre, bounds[i]));
        n_total = h.cumulative_count(bounds.size());
        sample(fmt::format("{}_bucket", name), n_total, fmt::format("{}le=\"+Inf\"", pre));
        sample(fmt::format("{}_sum", name), h.sum(), labels);
        sample(fmt::format("{}_count", name), n_total, labels);
    }
    void labelled(std::string_view type, std::string_view name, std::string_view help,
                  uint64_t value, std::string_view labels) {
        family(name, type, help);
        sample(name, value, labels);
    }
    void labelled(std::string_view type, std::string_view name, std::string_view help, double value,
                  std::string_view labels) {
        family(name, type, help);
        sample(name, value, labels);
    }
    std::string take() { return std::move(out_); }

  private:
    std::string out_;
};

uint64_t load(const std::atomic<uint64_t>& a) {
    return a.load(std::memory_order_relaxed);
}

// A label value as the text format writes it: backslash, quote and newline escaped.
std::string label_value(std::string_view v) {
    std::string out;
    for (char c : v) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

// vLLM's names for the same series, with its model_name label, so that
// dashboards and endpoint pickers made for vLLM read headroom unchanged.
void vllm_series(Exposition& x, const EngineMetrics& m, std::string_view model_name) {
    const std::string l = fmt::format("model_name=\"{}\"", label_value(model_name));
    x.labelled("gauge", "vllm:num_requests_running", "Requests in the running batch",
               load(m.n_running), l);
    x.labelled("gauge", "vllm:num_requests_waiting", "Requests waiting for admission",
               load(m.n_waiting), l);
    const uint64_t used = load(m.kv_blocks_used), total = load(m.kv_blocks_total);
    const double usage = total ? static_cast<double>(used) / static_cast<double>(total) : 0.0;
    x.labelled("gauge", "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
               usage, l);
    x.labelled("gauge", "vllm:gpu_cache_usage_perc",
               "KV-cache usage. 1 means 100 percent usage (the older name).", usage, l);
    x.labelled("counter", "vllm:prefix_cache_queries_total",
               "Prefix cache queries, in tokens (prompt tokens looked up)",
               load(m.prefix_query_tokens), l);
    x.labelled("counter", "vllm:prefix_cache_hits_total",
               "Prefix cache hits, in tokens (prompt tokens found)", load(m.prefix_hit_tokens), l);
    x.labelled("counter", "vllm:prompt_tokens_total", "Prompt tokens of admitted requests",
               load(m.prompt_tokens), l);
    x.labelled("counter", "vllm:generation_tokens_total", "Generated tokens",
               load(m.generation_tokens), l);
    x.labelled("counter", "vllm:num_preemptions_total", "Preemptions (recomputed later)",
               load(m.n_preemptions), l);
    x.histogram("vllm:time_to_first_token_seconds", "Time to first token in seconds.", m.ttft_s, l);
    x.histogram("vllm:e2e_request_latency_seconds", "End to end request latency in seconds.",
                m.e2e_s, l);
    x.histogram("vllm:inter_token_latency_seconds", "Inter-token latency in seconds.", m.itl_s, l);
    x.family("vllm:request_success_total", "counter", "Finished requests, by finish reason");
    for (FinishReason r : {FinishReason::Stop, FinishReason::Length, FinishReason::Abort})
        x.sample("vllm:request_success_total", load(m.finished[static_cast<size_t>(r)]),
                 fmt::format("{},finished_reason=\"{}\"", l, name(r)));
}

}  // namespace

std::string prometheus_text(const MetricsSnapshot& s) {
    const EngineMetrics& m = *s.engine;
    Exposition x;
    x.gauge("headroom_num_requests_running", "Requests in the running batch", load(m.n_running));
    x.gauge("headroom_num_sequences_running",
            "Sequences in the running batch (each sample or beam of a request is one)",
            load(m.n_running_seqs));
    x.gauge("headroom_num_requests_waiting", "Requests queued for admission", load(m.n_waiting));

    const uint64_t used = load(m.kv_blocks_used), total = load(m.kv_blocks_total);
    x.gauge("headroom_kv_cache_usage_ratio", "KV blocks in use over KV blocks in the pool",
            total ? static_cast<double>(used) / static_cast<double>(total) : 0.0);
    x.gauge("headroom_kv_blocks_used", "KV blocks in use", used);
    x.gauge("headroom_kv_blocks_total", "KV blocks in the pool", total);
    x.gauge("headroom_kv_blocks_shared",
            "KV block references beyond each block's first holder (n samples, beams and cached "
            "prefixes sharing blocks instead of copying them)",
            load(m.kv_blocks_shared));
    x.gauge("headroom_kv_shared_bytes", "Bytes the shared KV block references save now",
            load(m.kv_shared_bytes));
    x.gauge("headroom_kv_shared_bytes_peak", "Most bytes shared KV block references ever saved",
            load(m.kv_shared_bytes_peak));
    x.counter("headroom_request_kv_blocks_total",
              "KV blocks finished requests held at their peak, summed (owned, each block once)",
              load(m.request_kv_blocks));
    x.counter(
        "headroom_request_kv_blocks_shared_total",
        "Block table entries of finished requests beyond their own blocks, summed (what their "
        "samples or beams shared instead of copying)",
        load(m.request_kv_blocks_shared));

    struct TermField {
        const char* metric;
        const char* help;
        uint64_t TermSnapshot::*field;
    };
    const TermField fields[] = {
        {"headroom_memory_allocated_bytes", "Bytes in use now, by memory term",
         &TermSnapshot::allocated_bytes},
        {"headroom_memory_reserved_bytes", "Bytes set aside at start-up, by memory term",
         &TermSnapshot::reserved_bytes},
        {"headroom_memory_peak_bytes", "Most bytes ever in use, by memory term",
         &TermSnapshot::peak_bytes},
    };
    for (const auto& f : fields) {
        x.family(f.metric, "gauge", f.help);
        for (const auto& l : s.ledgers)
            for (Term t : kTerms)
                x.sample(f.metric, l[t].*f.field,
                         fmt::format("term=\"{}\",device=\"{}\"", name(t), l.device));
    }
    x.gauge("headroom_process_resident_memory_bytes", "Resident set size of the process",
            s.rss_bytes);

    x.counter("headroom_preemptions_total", "Sequences preempted for KV blocks (recomputed later)",
              load(m.n_preemptions));
    x.counter("headroom_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache",
              load(m.prefix_query_tokens));
    x.counter("headroom_prefix_cache_hits_total", "Prompt tokens found in the prefix cache",
              load(m.prefix_hit_tokens));
    x.counter("headroom_prompt_tokens_total", "Prompt tokens of admitted requests",
              load(m.prompt_tokens));
    x.counter("headroom_prompt_tokens_computed_total",
              "Prompt tokens computed (prefix cache misses and recomputation after preemption)",
              load(m.computed_prompt_tokens));
    x.counter("headroom_generation_tokens_total", "Tokens generated", load(m.generation_tokens));
    x.counter("headroom_engine_steps_total", "Engine steps (forward passes)", load(m.n_steps));

    x.histogram("headroom_time_to_first_token_seconds", "From arrival to the first generated token",
                m.ttft_s);
    x.histogram("headroom_inter_token_latency_seconds", "Between consecutive tokens of a request",
                m.itl_s);
    x.histogram("headroom_e2e_request_latency_seconds", "From arrival to finish", m.e2e_s);
    x.histogram("headroom_grammar_mask_seconds",
                "Computing one constrained sequence's token mask (overlaps the forward pass)",
                m.grammar_mask_s);

    x.family("headroom_requests_finished_total", "counter", "Requests finished, by finish reason");
    for (FinishReason r :
         {FinishReason::Stop, FinishReason::Length, FinishReason::Abort, FinishReason::Error})
        x.sample("headroom_requests_finished_total", load(m.finished[static_cast<size_t>(r)]),
                 fmt::format("finish_reason=\"{}\"", name(r)));
    x.counter("headroom_requests_refused_total",
              "Requests the engine refused at submission (invalid, too long, shutting down)",
              load(m.requests_refused));

    if (s.http) {
        x.family("headroom_http_responses_total", "counter", "HTTP responses, by status code");
        for (size_t code = 100; code < s.http->n_responses_by_status.size(); ++code)
            if (const uint64_t n = load(s.http->n_responses_by_status[code]))
                x.sample("headroom_http_responses_total", n, fmt::format("code=\"{}\"", code));
        x.counter("headroom_client_disconnects_total",
                  "Clients gone before their response ended (their requests were cancelled)",
                  load(s.http->n_disconnects));
    }
    vllm_series(x, m, s.model_name);
    return x.take();
}

}  // namespace headroom::server
