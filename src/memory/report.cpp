#include "memory/report.h"

#include <fmt/format.h>

#include "core/units.h"

namespace headroom {

namespace {

uint64_t predicted(const DeviceTerms& d, Term t) {
    switch (t) {
        case Term::Weights:
            return d.weights_bytes;
        case Term::KvCache:
            return d.kv_cache_bytes;
        case Term::Activations:
            return d.activations_bytes;
        case Term::Runtime:
            return d.runtime_bytes;
    }
    return 0;
}

// What the plan predicted for one device (nothing for a device it does not name).
DeviceTerms predicted_for(const MemoryPlan& p, const std::string& device) {
    for (const auto& d : p.device_terms())
        if (d.device == device) return d;
    return {device};
}

DeviceTerms predicted_total(const MemoryPlan& p) {
    return {"all", p.weights_bytes, p.kv_cache_bytes, p.activations_bytes(), p.runtime_bytes()};
}

nlohmann::json terms_json(const LedgerSnapshot& ledger) {
    nlohmann::json terms = nlohmann::json::object();
    for (Term t : kTerms) {
        const auto& s = ledger[t];
        terms[std::string(name(t))] = {{"allocated_bytes", s.allocated_bytes},
                                       {"peak_bytes", s.peak_bytes},
                                       {"reserved_bytes", s.reserved_bytes}};
    }
    return terms;
}

nlohmann::json predicted_json(const DeviceTerms& d) {
    nlohmann::json pred = nlohmann::json::object();
    for (Term t : kTerms) pred[std::string(name(t))] = predicted(d, t);
    return pred;
}

}  // namespace

nlohmann::json engine_config_json(const EngineConfig& c) {
    return {{"max_model_len", c.max_model_len},
            {"max_num_seqs", c.max_num_seqs},
            {"max_num_batched_tokens", c.max_num_batched_tokens},
            {"kv_dtype", std::string(name(c.kv_dtype))},
            {"block_size", c.block_size},
            {"threads", c.n_threads},
            {"swa_full", c.swa_full},
            {"n_cpu_layers", c.n_cpu_layers},
            {"experts_on_cpu", c.experts_on_cpu}};
}

nlohmann::json traffic_json(const BackendTraffic& t) {
    auto stats = [](const kernels::StepStats& s) {
        return nlohmann::json{{"submits", s.n_submits},
                              {"waits", s.n_waits},
                              {"dispatches", s.n_dispatches},
                              {"barriers", s.n_barriers},
                              {"recorded", s.n_recorded},
                              {"upload_bytes", s.upload_bytes},
                              {"download_bytes", s.download_bytes}};
    };
    return {{"name", t.name},
            {"steps", t.n_steps},
            {"last_step", stats(t.last_step)},
            {"totals", stats(t.totals)}};
}

std::string traffic_line(const BackendTraffic& t) {
    if (t.totals.n_submits == 0) return "";
    const auto& s = t.last_step;
    return fmt::format(
        "  {}: the last of {} steps was {} submission and {} wait ({} dispatches, {} barriers, "
        "{}), {} up and {} down; {} up and {} down in all (the weights' upload included); {} of "
        "the steps recorded their commands, the others submitted recorded ones again\n",
        t.name, t.n_steps, s.n_submits, s.n_waits, s.n_dispatches, s.n_barriers,
        s.n_recorded ? "recorded" : "submitted again", format_bytes(s.upload_bytes),
        format_bytes(s.download_bytes), format_bytes(t.totals.upload_bytes),
        format_bytes(t.totals.download_bytes), t.totals.n_recorded);
}

void add_allocations(nlohmann::json& report, kernels::Backend& backend) {
    auto& d = report["devices"][backend.ledger().device()];
    const kernels::AllocationCount c = backend.allocations();
    d["allocations"] = c.count;
    d["largest_allocation_bytes"] = c.largest_bytes;
    if (backend.max_allocation_bytes() != UINT64_MAX)
        d["max_allocation_bytes"] = backend.max_allocation_bytes();
}

LedgerSnapshot sum_ledgers(std::span<const LedgerSnapshot> ledgers) {
    LedgerSnapshot sum;
    sum.device = "all";
    for (const auto& l : ledgers) {
        for (size_t i = 0; i < sum.terms.size(); ++i) {
            sum.terms[i].allocated_bytes += l.terms[i].allocated_bytes;
            sum.terms[i].peak_bytes += l.terms[i].peak_bytes;
            sum.terms[i].reserved_bytes += l.terms[i].reserved_bytes;
        }
    }
    return sum;
}

nlohmann::json memory_report_json(const MemoryPlan& plan, std::span<const LedgerSnapshot> ledgers,
                                  const KvCache& cache, const ProcessMemory& process) {
    const nlohmann::json terms = terms_json(sum_ledgers(ledgers));
    const nlohmann::json pred = predicted_json(predicted_total(plan));
    nlohmann::json devices = nlohmann::json::object();
    for (const auto& l : ledgers)
        devices[l.device] = {{"terms", terms_json(l)},
                             {"predicted", predicted_json(predicted_for(plan, l.device))}};
    nlohmann::json groups = nlohmann::json::array();
    uint64_t block_bytes = 0;
    for (size_t g = 0; g < cache.n_groups(); ++g) {
        const auto& gp = cache.group(g);
        block_bytes += gp.block_bytes;
        groups.push_back(
            {{"kind", gp.kind == AttentionKind::SlidingWindow ? "sliding_window" : "full"},
             {"window", gp.window},
             {"n_layers", gp.layers.size()},
             {"blocks_total", cache.pool(g).n_blocks()},
             {"blocks_used", cache.pool(g).n_used()},
             {"blocks_cached", cache.pool(g).n_cached()},
             {"block_bytes", gp.block_bytes},
             {"bytes_per_token", gp.bytes_per_token}});
    }
    const auto& c = plan.config;
    return {{"terms", terms},
            {"predicted", pred},
            {"devices", devices},
            {"budget_bytes", plan.budget_bytes},
            {"kv_blocks_total", cache.n_blocks_total()},
            {"kv_blocks_used", cache.n_blocks_used()},
            {"kv_block_bytes", block_bytes},
            {"kv_bytes_per_token", plan.kv_bytes_per_token},
            {"kv_groups", groups},
            {"rss_bytes", process.rss_bytes},
            {"rss_start_bytes", process.rss_start_bytes},
            {"rss_growth_bytes", process.rss_bytes > process.rss_start_bytes
                                     ? process.rss_bytes - process.rss_start_bytes
                                     : 0},
            {"config", engine_config_json(c)},
            {"prefix_cache",
             {{"query_tokens", cache.prefix_stats().query_tokens},
              {"hit_tokens", cache.prefix_stats().hit_tokens}}}};
}

std::string memory_report_table(const MemoryPlan& plan, std::span<const LedgerSnapshot> ledgers,
                                const KvCache& cache, const ProcessMemory& process) {
    std::string out;
    const auto& c = plan.config;
    out += fmt::format("headroom memory report: budget {} on {}\n", format_bytes(plan.budget_bytes),
                       plan.config.device);
    out += fmt::format("  {:<8} {:<12} {:>12} {:>12} {:>12} {:>12}\n", "device", "term",
                       "predicted", "reserved", "allocated", "peak");
    uint64_t tr = 0;
    for (const auto& ledger : ledgers) {
        const DeviceTerms d = predicted_for(plan, ledger.device);
        uint64_t dr = 0, da = 0, dk = 0;
        for (Term t : kTerms) {
            const auto& s = ledger[t];
            out +=
                fmt::format("  {:<8} {:<12} {:>12} {:>12} {:>12} {:>12}\n", ledger.device, name(t),
                            format_bytes(predicted(d, t)), format_bytes(s.reserved_bytes),
                            format_bytes(s.allocated_bytes), format_bytes(s.peak_bytes));
            dr += s.reserved_bytes;
            da += s.allocated_bytes;
            dk += s.peak_bytes;
        }
        out += fmt::format("  {:<8} {:<12} {:>12} {:>12} {:>12} {:>12}\n", ledger.device, "total",
                           format_bytes(d.total_bytes()), format_bytes(dr), format_bytes(da),
                           format_bytes(dk));
        if (ledger.device == "host") tr += dr;
    }
    for (size_t g = 0; g < cache.n_groups(); ++g) {
        const auto& gp = cache.group(g);
        const auto& pool = cache.pool(g);
        out += fmt::format(
            "  kv {}{}: {} layers, {} blocks of {} tokens ({} each), {} in use, {} cached\n",
            gp.kind == AttentionKind::SlidingWindow ? fmt::format("sliding window {}", gp.window)
                                                    : std::string("full attention"),
            gp.on_host && c.device != "host" ? " on the host" : "", gp.layers.size(),
            pool.n_blocks(), c.block_size, format_bytes(gp.block_bytes), pool.n_used(),
            pool.n_cached());
    }
    out += fmt::format(
        "  kv per token {} ({}), max_model_len {}, max_num_seqs {}: {} sequences fit at full "
        "length\n",
        format_bytes(plan.kv_bytes_per_token), name(c.kv_dtype), c.max_model_len, c.max_num_seqs,
        plan.max_num_seqs_at_max_model_len);
    const auto& ps = cache.prefix_stats();
    if (ps.query_tokens)
        out += fmt::format("  prefix cache: {} of {} prompt tokens hit ({:.1f}%)\n", ps.hit_tokens,
                           ps.query_tokens, 100.0 * ps.hit_tokens / ps.query_tokens);
    const uint64_t growth = process.rss_bytes > process.rss_start_bytes
                                ? process.rss_bytes - process.rss_start_bytes
                                : 0;
    out += fmt::format(
        "  process RSS {} (grew {} since start; the host ledger reserves {}, {:+.1f}%)\n",
        format_bytes(process.rss_bytes), format_bytes(growth), format_bytes(tr),
        tr ? 100.0 * (static_cast<double>(growth) - static_cast<double>(tr)) /
                 static_cast<double>(tr)
           : 0.0);
    if (ledgers.size() > 1)
        out +=
            "  (where a device's memory is the host's, as lavapipe's is, RSS also holds what the "
            "device's ledger counts)\n";
    return out;
}

std::string memory_summary_line(const MemoryPlan& plan, std::span<const LedgerSnapshot> ledgers,
                                const KvCache& cache, const ProcessMemory& process) {
    const LedgerSnapshot ledger = sum_ledgers(ledgers);
    const uint64_t kv_reserved = ledger[Term::KvCache].reserved_bytes;
    const uint32_t n_layer = static_cast<uint32_t>(cache.n_layers());
    const std::string where =
        plan.config.device == "host" ? ""
        : plan.split()
            ? fmt::format(" ({} layers on {}, {} on the host)", n_layer - plan.config.n_cpu_layers,
                          plan.config.device, plan.config.n_cpu_layers)
            : fmt::format(" (kv on {})", plan.config.device);
    return fmt::format(
        "memory{}: weights {}, kv {} ({:.1f}% used, {}), activations {}, runtime {}; RSS {}", where,
        format_bytes(ledger[Term::Weights].reserved_bytes), format_bytes(kv_reserved),
        kv_reserved ? 100.0 * ledger[Term::KvCache].peak_bytes / kv_reserved : 0.0,
        name(plan.config.kv_dtype), format_bytes(ledger[Term::Activations].reserved_bytes),
        format_bytes(ledger[Term::Runtime].reserved_bytes), format_bytes(process.rss_bytes));
}

}  // namespace headroom
