// headroom plan: how many bytes each memory term takes for a model and a
// configuration on a device, whether it fits, and what does when it does not.
// A table for people (verdict first), --json for tools.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/plan-model.h"
#include "cli/plan-svg.h"
#include "core/error.h"
#include "core/units.h"
#include "engine/instance.h"
#include "memory/planner.h"
#include "memory/report.h"
#include "model/registry.h"
#include "shape/model-table.h"
#if HEADROOM_VULKAN
#include "kernels/vulkan/vk-context.h"
#endif

namespace headroom::cli {

namespace {

using nlohmann::json;

struct PlanOptions {
    std::string model;
    std::string hf_config;
    std::string weight_type;
    std::string device;
    std::string device_memory;
    std::string reserve;
    double mem_fraction = 0.9;
    std::string kv_cache_memory;
    std::string grammar_cache;  // serve's --grammar-cache; empty: none
    uint32_t max_model_len = 0;
    uint32_t max_num_seqs = 1;
    uint32_t max_num_batched_tokens = 0;
    uint32_t block_size = 16;
    std::string kv_dtype = "f16";
    uint32_t threads = 0;
    uint32_t cpu_layers = 0;
    bool cpu_moe = false;
    std::string n_gpu_layers;  // auto, all or N
    bool swa_full = false;
    bool fit = false;
    bool compare_quant = false;
    bool json = false;
    std::string svg;  // write the plan as an SVG picture here
    bool list_models = false;
    bool list_devices = false;
    // One request of several answers: --n samples (or --best-of), or beams.
    uint32_t n_choices = 1;
    uint32_t best_of = 0;
    uint32_t beam_width = 0;
    uint32_t prompt_tokens = 0;  // 0: half the context
    uint32_t max_tokens = 0;     // 0: the rest of the context
    uint32_t width() const { return std::max({n_choices, best_of, beam_width}); }
};

// The KV of one request of several candidates against as many separate
// requests, by the function the scheduler admits it with.
struct RequestKv {
    uint32_t n_candidates = 1, n_prompt = 0, n_total = 0;
    uint64_t shared_blocks = 0, separate_blocks = 0;  // summed over layer groups
    uint64_t shared_bytes = 0, separate_bytes = 0;
    uint64_t pool_blocks = 0;  // the smallest group's pool
    bool fits = true;          // every group's blocks fit its pool, the seats max_num_seqs
    std::string why;
};

RequestKv request_kv(const PlanOptions& o, const MemoryPlan& mp) {
    RequestKv r;
    const auto& c = mp.config;
    r.n_candidates = o.width();
    r.n_prompt = o.prompt_tokens ? o.prompt_tokens : std::max<uint32_t>(1, c.max_model_len / 2);
    r.n_prompt = std::min(r.n_prompt, c.max_model_len - 1);
    const uint32_t out = o.max_tokens ? o.max_tokens : c.max_model_len - r.n_prompt;
    r.n_total =
        static_cast<uint32_t>(std::min<uint64_t>(uint64_t{r.n_prompt} + out, c.max_model_len));
    r.pool_blocks = UINT64_MAX;
    for (const auto& g : mp.kv_groups) {
        // A sequence of n tokens computes K/V for n - 1: its last is sampled, never fed.
        const uint32_t one = request_kv_blocks(g, c.block_size, r.n_prompt, r.n_total - 1, 1,
                                               c.max_num_batched_tokens);
        const uint32_t all = request_kv_blocks(g, c.block_size, r.n_prompt, r.n_total - 1,
                                               r.n_candidates, c.max_num_batched_tokens);
        r.shared_blocks += all;
        r.separate_blocks += uint64_t{one} * r.n_candidates;
        r.shared_bytes += all * g.block_bytes;
        r.separate_bytes += uint64_t{one} * r.n_candidates * g.block_bytes;
        r.pool_blocks = std::min(r.pool_blocks, g.n_blocks);
        if (all > g.n_blocks && r.fits) {
            r.fits = false;
            r.why = fmt::format("it needs {} blocks, the pool has {}", all, g.n_blocks);
        }
    }
    if (r.n_candidates > c.max_num_seqs) {
        r.fits = false;
        r.why = fmt::format("it runs {} sequences, --max-num-seqs is {}", r.n_candidates,
                            c.max_num_seqs);
    }
    return r;
}

void print_request_kv(const PlanOptions& o, const RequestKv& r) {
    const char* what = o.beam_width ? "beams" : "samples";
    fmt::print(
        "\n  one request of {} {} ({}-token prompt, up to {} tokens each): {} KV blocks ({}), "
        "the prompt's full blocks once and each one's own tail\n",
        r.n_candidates, what, r.n_prompt, r.n_total, r.shared_blocks, format_bytes(r.shared_bytes));
    fmt::print("  as {} separate requests: {} blocks ({}), {:.2f}x more; {}\n", r.n_candidates,
               r.separate_blocks, format_bytes(r.separate_bytes),
               r.shared_blocks ? double(r.separate_blocks) / double(r.shared_blocks) : 0.0,
               r.fits ? std::string("the request fits") : "refused: " + r.why);
}

PlanModel resolve_model(const PlanOptions& o) {
    return resolve_plan_model(o.model, o.hf_config, o.weight_type);
}

// --device vulkan[:N]: the device's heap (its budget where the driver
// reports one), or --device-memory in its place; planned as headroom's
// Vulkan backend allocates.
Device vulkan_device(const PlanOptions& o) {
    DeviceChoice choice = parse_device(o.device);
    Device d;
    d.gpu = true;
#if HEADROOM_VULKAN
    std::string why;
    const auto devices = kernels::vk::list_devices(&why);
    if (!choice.index) choice.index = kernels::vk::best_device(devices).value_or(0);
    d.vulkan_index = *choice.index;
    if (*choice.index < devices.size()) {
        const auto& info = devices[*choice.index];
        const auto& heap = info.main_heap();
        d.name = info.name;
        d.total_bytes = heap.budget_bytes ? *heap.budget_bytes : heap.size_bytes;
        d.max_allocation_bytes = kernels::vk::allocation_limit(info);
        d.source =
            fmt::format("vulkan:{} {} ({} {})", *choice.index, info.name,
                        heap.budget_bytes ? "heap budget" : "heap", format_bytes(d.total_bytes));
    } else if (o.device_memory.empty()) {
        fail("--device {}: {}", o.device,
             devices.empty()
                 ? why
                 : fmt::format("there are {} Vulkan devices (headroom devices)", devices.size()));
    }
#else
    d.vulkan_index = choice.index.value_or(0);
    if (o.device_memory.empty())
        fail(
            "--device {}: this headroom was built without the Vulkan backend; give "
            "--device-memory BYTES to plan for it anyway",
            o.device);
#endif
    if (!o.device_memory.empty()) {
        d.total_bytes = parse_bytes_or_throw(o.device_memory, "--device-memory");
        if (d.total_bytes == 0) fail("--device-memory must be more than 0");
        if (d.name.empty()) d.name = fmt::format("Vulkan device {}", *d.vulkan_index);
        d.source =
            fmt::format("vulkan:{} with --device-memory {}", *d.vulkan_index, o.device_memory);
    }
    return d;
}

Device resolve_device(const PlanOptions& o) {
    const bool cpu = o.device == "cpu" || o.device == "host";
    if (o.device == "vulkan" || o.device.starts_with("vulkan:")) return vulkan_device(o);
    if (!o.device_memory.empty()) {
        Device d;
        d.total_bytes = parse_bytes_or_throw(o.device_memory, "--device-memory");
        if (d.total_bytes == 0) fail("--device-memory must be more than 0");
        d.gpu = !cpu;
        d.name =
            fmt::format("{} {}", cpu ? "a CPU with" : "a GPU with", format_bytes(d.total_bytes));
        d.source = fmt::format("--device-memory {}", o.device_memory);
        return d;
    }
    if (cpu) return host_device();
    if (!o.device.empty()) {
        if (auto d = find_device(o.device)) return *d;
        std::string names;
        for (const auto& d : known_devices())
            names += (names.empty() ? "" : ", ") + std::string(d.key);
        fail(
            "--device '{}' is not in the table (known: cpu, {}); give --device-memory BYTES "
            "instead",
            o.device, names);
    }
    if (auto d = detect_gpu()) return *d;
    return host_device();
}

std::string seqs_text(uint64_t n) {
    return fmt::format("{} {}", n, n == 1 ? "sequence" : "sequences");
}

std::string verdict_text(const PlanModel& m, const Device& d, const Plan& p, const Capacity& cap) {
    const auto& c = p.mem.config;
    if (!p.mem.fits)
        return fmt::format("DOES NOT FIT: {} on {}: {}", m.name, d.name, p.mem.refusal);
    if (p.fits_all())
        return fmt::format("FITS: {} on {}: {} of {} tokens at once (room for {})", m.name, d.name,
                           seqs_text(c.max_num_seqs), c.max_model_len,
                           cap.max_num_seqs_at_max_model_len);
    return fmt::format(
        "FITS, PARTLY: {} on {}: {} of {} {} of {} tokens at once; the others wait for KV blocks",
        m.name, d.name, p.mem.max_num_seqs_at_max_model_len, c.max_num_seqs,
        c.max_num_seqs == 1 ? "sequence" : "sequences", c.max_model_len);
}

std::string capacity_text(const Plan& p, const Capacity& cap) {
    const auto& c = p.mem.config;
    const std::string who =
        c.max_num_seqs == 1 ? "one sequence" : fmt::format("{} sequences", c.max_num_seqs);
    if (cap.max_num_seqs_at_max_model_len == 0 && cap.max_model_len_at_max_num_seqs == 0)
        return fmt::format("no sequence of {} tokens fits, and {} cannot have any context",
                           c.max_model_len, who);
    return fmt::format("at {} tokens: up to {} at once; {}: up to {} tokens each{}",
                       c.max_model_len, seqs_text(cap.max_num_seqs_at_max_model_len), who,
                       format_count(cap.max_model_len_at_max_num_seqs),
                       cap.len_is_trained_context ? " (the trained context)" : "");
}

std::string budget_text(const Device& d, const Plan& p) {
    const auto& s = p.settings;
    if (s.kv_cache_bytes)
        return fmt::format("--kv-cache-memory {}: the budget is the terms' sum",
                           format_bytes(s.kv_cache_bytes));
    std::string t =
        fmt::format("{:.0f}% of {}", s.mem_fraction * 100,
                    format_bytes(d.total_bytes - std::min(d.total_bytes, s.reserve_bytes)));
    if (s.reserve_bytes)
        t += fmt::format(" ({} less {} reserved)", format_bytes(d.total_bytes),
                         format_bytes(s.reserve_bytes));
    return t;
}

json suggestion_json(const Suggestion& s) {
    const auto& c = s.plan.mem.config;
    return {
        {"changes", s.changes},
        {"cost", s.cost},
        {"weight_type", s.weight_type ? json(std::string(name(*s.weight_type))) : json(nullptr)},
        {"kv_dtype", std::string(name(c.kv_dtype))},
        {"max_model_len", c.max_model_len},
        {"max_num_seqs", c.max_num_seqs},
        {"n_cpu_layers", c.n_cpu_layers},
        {"experts_on_cpu", c.experts_on_cpu},
        {"total_bytes", s.plan.mem.total_bytes()},
        {"budget_bytes", s.plan.mem.budget_bytes},
        {"weights_bytes", s.plan.mem.weights_bytes},
        {"kv_cache_bytes", s.plan.mem.kv_cache_bytes},
        {"host_bytes", s.plan.host_bytes},
        {"headroom", s.headroom_cmd},
        {"vllm", s.vllm_cmd.empty() ? json(nullptr) : json(s.vllm_cmd)},
        {"llama_cpp", s.llama_cpp_cmd.empty() ? json(nullptr) : json(s.llama_cpp_cmd)}};
}

// The terms by device (one entry on the CPU; the GPU's, then the host's).
json devices_json(const MemoryPlan& mp) {
    json out = json::array();
    for (const auto& dt : mp.device_terms())
        out.push_back({{"device", dt.device},
                       {"weights_bytes", dt.weights_bytes},
                       {"kv_cache_bytes", dt.kv_cache_bytes},
                       {"activations_bytes", dt.activations_bytes},
                       {"runtime_bytes", dt.runtime_bytes},
                       {"total_bytes", dt.total_bytes()}});
    return out;
}

// What --n-gpu-layers auto does on a GPU with these settings: the engine's
// placement, as n_gpu_layers and the other engines' flags.
using AutoLayers = std::optional<Deployment::Auto>;

json auto_layers_json(const PlanModel& m, const Device& d, const AutoLayers& auto_layers) {
    if (!auto_layers) return nullptr;
    const Deployment::Auto& a = *auto_layers;
    const bool on = a.placed.on_gpu && a.plan.mem.fits;
    return {{"n_gpu_layers", a.n_gpu_layers()},
            {"n_cpu_layers", a.placed.on_gpu ? a.placed.n_cpu_layers : a.n_layer},
            {"n_layer", a.n_layer},
            {"note", a.placed.note.empty() ? json(nullptr) : json(a.placed.note)},
            {"headroom", on ? json(headroom_command(m, d, a.plan)) : json(nullptr)},
            {"llama_cpp", on && !llama_cpp_command(m, d, a.plan).empty()
                              ? json(llama_cpp_command(m, d, a.plan))
                              : json(nullptr)},
            {"vllm", on && !vllm_command(m, d, a.plan).empty() ? json(vllm_command(m, d, a.plan))
                                                               : json(nullptr)}};
}

json plan_json(const PlanModel& m, const Device& d, const Plan& p, const Capacity& cap,
               const std::vector<Suggestion>& sugg, const std::vector<QuantRow>* quant,
               const AutoLayers& auto_layers) {
    const MemoryPlan& mp = p.mem;
    const auto& c = mp.config;
    const TermFormulas f = formulas(m, p);
    json groups = json::array();
    for (size_t i = 0; i < mp.kv_groups.size(); ++i) {
        const auto& g = mp.kv_groups[i];
        groups.push_back({{"kind", g.kind == AttentionKind::Full            ? "full"
                                   : g.kind == AttentionKind::SlidingWindow ? "sliding_window"
                                                                            : "latent"},
                          {"window", g.window},
                          {"n_layers", g.layers.size()},
                          {"bytes_per_token", g.bytes_per_token},
                          {"blocks", g.n_blocks},
                          {"block_bytes", g.block_bytes},
                          {"max_blocks_per_seq", g.max_blocks_per_seq},
                          {"formula", f.kv_groups[i]}});
    }
    json out = {
        {"fits", mp.fits},
        {"fits_all_seqs", p.fits_all()},
        {"verdict", verdict_text(m, d, p, cap)},
        {"model",
         {{"source", m.source},
          {"kind", m.kind},
          {"name", m.name},
          {"arch", m.desc.hp.arch},
          {"n_params", m.desc.n_params},
          {"weight_type", m.weight_type ? std::string(name(*m.weight_type)) : m.file_type},
          {"weights_exact", !m.weight_type}}},
        {"device",
         {{"name", d.name},
          {"gpu", d.gpu},
          {"total_bytes", d.total_bytes},
          {"reserve_bytes", p.settings.reserve_bytes},
          {"max_allocation_bytes",
           d.max_allocation_bytes ? json(d.max_allocation_bytes) : json(nullptr)},
          {"source", d.source}}},
        {"budget_bytes", mp.budget_bytes},
        {"mem_fraction", p.settings.mem_fraction},
        {"config", engine_config_json(c)},
        {"terms",
         {{"weights", {{"bytes", mp.weights_bytes}, {"formula", f.weights}}},
          {"kv_cache",
           {{"bytes", mp.kv_cache_bytes},
            {"bytes_per_token", mp.kv_bytes_per_token},
            {"bytes_per_seq", mp.kv_bytes_per_seq},
            {"groups", groups},
            {"allocations", mp.kv_allocations},
            {"formula", f.kv_pool}}},
          {"activations", {{"bytes", mp.activations_bytes()}, {"formula", f.activations}}},
          {"runtime",
           {{"bytes", mp.runtime_bytes()},
            {"formula", f.runtime},
            {"tokenizer_bytes", mp.runtime.tokenizer_bytes},
            {"sequences_bytes", mp.runtime.sequences_bytes},
            {"prefix_index_bytes", mp.runtime.prefix_index_bytes},
            {"thread_stacks_bytes", mp.runtime.thread_stacks_bytes},
            {"grammar_bytes", mp.runtime.grammar_bytes},
            {"device_context_bytes", mp.runtime.device_context_bytes}}}}},
        {"total_bytes", mp.total_bytes()},
        {"devices", devices_json(mp)},
        {"context_note", p.context_note.empty() ? json(nullptr) : json(p.context_note)},
        {"free_bytes", p.free_bytes()},
        {"host_bytes", p.host_bytes},
        {"max_num_seqs_at_max_model_len", cap.max_num_seqs_at_max_model_len},
        {"max_model_len_at_max_num_seqs", cap.max_model_len_at_max_num_seqs},
        {"max_model_len_is_trained_context", cap.len_is_trained_context},
        {"pool_max_num_seqs_at_max_model_len", mp.max_num_seqs_at_max_model_len},
        {"refusal", mp.fits ? json(nullptr) : json(mp.refusal)},
        {"commands",
         {{"headroom", headroom_command(m, d, p)},
          {"vllm", vllm_command(m, d, p).empty() ? json(nullptr) : json(vllm_command(m, d, p))},
          {"llama_cpp",
           llama_cpp_command(m, d, p).empty() ? json(nullptr) : json(llama_cpp_command(m, d, p))}}},
    };
    json js = json::array();
    for (const auto& s : sugg) js.push_back(suggestion_json(s));
    out["suggestions"] = js;
    out["gpu_layers_auto"] = auto_layers_json(m, d, auto_layers);
    if (quant) {
        json rows = json::array();
        for (const auto& r : *quant)
            rows.push_back(
                {{"weight_type", r.type ? json(std::string(name(*r.type))) : json(nullptr)},
                 {"label", r.label},
                 {"bits", r.bits},
                 {"weights_bytes", r.plan.mem.weights_bytes},
                 {"kv_cache_bytes", r.plan.mem.kv_cache_bytes},
                 {"kv_bytes_per_seq", r.plan.mem.kv_bytes_per_seq},
                 {"kv_needed_bytes", r.kv_needed_bytes},
                 {"total_needed_bytes", r.total_needed_bytes},
                 {"total_bytes", r.plan.mem.total_bytes()},
                 {"fits", r.plan.mem.fits},
                 {"fits_all_seqs", r.plan.fits_all()},
                 {"max_num_seqs_at_max_model_len", r.plan.mem.max_num_seqs_at_max_model_len}});
        out["compare_quant"] = rows;
    }
    return out;
}

void print_suggestions(const std::vector<Suggestion>& sugg, const Plan& base) {
    if (sugg.empty()) {
        fmt::print("\nnothing fits by changing what was not pinned on the command line\n");
        return;
    }
    fmt::print("\nconfigurations that fit, best first (changing only what was not given):\n");
    for (size_t i = 0; i < sugg.size(); ++i) {
        const Suggestion& s = sugg[i];
        const auto& c = s.plan.mem.config;
        std::string what;
        for (const auto& ch : s.changes) what += (what.empty() ? "" : "; ") + ch;
        fmt::print("\n  {}. {}\n", i + 1, what.empty() ? "as given" : what);
        fmt::print(
            "     {} of {} budget: {} × {} tokens at once, weights {}, KV {}{}\n",
            format_bytes(s.plan.mem.total_bytes()), format_bytes(s.plan.mem.budget_bytes),
            c.max_num_seqs, c.max_model_len, format_bytes(s.plan.mem.weights_bytes),
            format_bytes(s.plan.mem.kv_cache_bytes),
            s.plan.host_bytes ? fmt::format(", host {}", format_bytes(s.plan.host_bytes)) : "");
        fmt::print("     headroom   {}\n", s.headroom_cmd);
        if (!s.vllm_cmd.empty()) fmt::print("     vLLM       {}\n", s.vllm_cmd);
        if (!s.llama_cpp_cmd.empty()) fmt::print("     llama.cpp  {}\n", s.llama_cpp_cmd);
    }
    (void)base;
}

void print_compare(const PlanModel& m, const Device& d, const Plan& base,
                   const std::vector<QuantRow>& rows) {
    const auto& c = base.mem.config;
    fmt::print("\n{} by weight type, {} × {} tokens, KV {}, on {} (budget {}):\n", m.name,
               c.max_num_seqs, c.max_model_len, name(c.kv_dtype), d.name,
               format_bytes(base.mem.budget_bytes));
    fmt::print("  {:<18} {:<7} {:>10} {:>9} {:>10} {:>10}  {}\n", "weights", "bits", "weights",
               "(GB)", "KV needed", "total", "verdict");
    std::string summary;
    for (const auto& r : rows) {
        const auto& mp = r.plan.mem;
        const std::string verdict =
            !mp.fits            ? "does not fit"
            : r.plan.fits_all() ? "fits"
                                : fmt::format("fits {} of {} sequences at once",
                                              mp.max_num_seqs_at_max_model_len, c.max_num_seqs);
        fmt::print("  {:<18} {:<7} {:>10} {:>9} {:>10} {:>10}  {}\n", r.label, r.bits,
                   format_bytes(mp.weights_bytes), format_gb(mp.weights_bytes),
                   format_bytes(r.kv_needed_bytes), format_bytes(r.total_needed_bytes), verdict);
        if (r.type &&
            (r.bits == "16-bit" || *r.type == WeightType::Q8_0 || *r.type == WeightType::Q4_K_M))
            summary += fmt::format("{}{} {}", summary.empty() ? "" : " / ", r.label,
                                   format_gb(mp.weights_bytes));
    }
    fmt::print("  {}: {}, plus {} of KV per {}-token sequence\n", m.name, summary,
               format_bytes(base.mem.kv_bytes_per_seq), c.max_model_len);
}

void print_auto_layers(const PlanModel& m, const Device& d, const AutoLayers& auto_layers) {
    if (!auto_layers) return;
    const Deployment::Auto& a = *auto_layers;
    fmt::print("\n--n-gpu-layers auto (what run and serve place): ");
    if (!a.placed.on_gpu) {
        fmt::print("every layer on the CPU: {}\n", a.placed.note);
        return;
    }
    if (a.placed.n_cpu_layers == 0)
        fmt::print("all {} layers on {}\n", a.n_layer, d.name);
    else
        fmt::print("{}\n", a.placed.note);
    fmt::print("     headroom   {}\n", headroom_command(m, d, a.plan));
    const std::string llama = llama_cpp_command(m, d, a.plan), vllm = vllm_command(m, d, a.plan);
    if (!llama.empty()) fmt::print("     llama.cpp  {}\n", llama);
    if (!vllm.empty()) fmt::print("     vLLM       {}\n", vllm);
}

void print_human(const PlanModel& m, const Device& d, const Plan& p, const Capacity& cap,
                 const std::vector<Suggestion>& sugg, const PlanOptions& o,
                 const std::vector<QuantRow>* quant, const AutoLayers& auto_layers) {
    const MemoryPlan& mp = p.mem;
    const auto& c = mp.config;
    const TermFormulas f = formulas(m, p);
    fmt::print("{}\n", verdict_text(m, d, p, cap));
    if (!p.context_note.empty()) fmt::print("  note: {}\n", p.context_note);
    fmt::print("  total {} of a {} budget ({}), {} to spare\n\n", format_bytes(mp.budgeted_bytes()),
               format_bytes(mp.budget_bytes), budget_text(d, p), format_bytes(p.free_bytes()));
    const int w = 12;
    fmt::print("  {:<13}{:>{}}  {}\n", "term", "bytes", w, "how");
    // Each term on every device (a split's host share included).
    fmt::print("  {:<13}{:>{}}  {}\n", "weights",
               format_bytes(mp.weights_bytes + mp.host_weights_bytes), w, f.weights);
    for (size_t i = 0; i < f.kv_groups.size(); ++i)
        fmt::print("  {:<13}{:>{}}  {}\n", i == 0 ? "kv_cache" : "",
                   i == 0 ? format_bytes(mp.kv_cache_bytes + mp.host_kv_cache_bytes) : "", w,
                   f.kv_groups[i]);
    fmt::print("  {:<13}{:>{}}  {}\n", "", "", w, f.kv_pool);
    if (mp.budget_spec.max_allocation_bytes && mp.kv_allocations > 1)
        fmt::print(
            "  {:<13}{:>{}}  in {} allocations of whole blocks ({} allocates at most {} at once)\n",
            "", "", w, mp.kv_allocations, d.name,
            format_bytes(mp.budget_spec.max_allocation_bytes));
    fmt::print("  {:<13}{:>{}}  {}\n", "activations",
               format_bytes(mp.activations_bytes() + mp.host_activations.device_bytes), w,
               f.activations);
    fmt::print("  {:<13}{:>{}}  {}\n", "runtime", format_bytes(mp.runtime_bytes()), w, f.runtime);
    if (mp.split())
        fmt::print("  {:<13}{:>{}}  {} of it on {} (its budget {}), the rest on the host\n",
                   "total", format_bytes(mp.total_bytes()), w, format_bytes(mp.budgeted_bytes()),
                   c.device, format_bytes(mp.budget_bytes));
    else
        fmt::print("  {:<13}{:>{}}  budget {}\n", "total", format_bytes(mp.total_bytes()), w,
                   format_bytes(mp.budget_bytes));
    if (p.host_bytes && !mp.split()) {
        std::string what;
        if (c.n_cpu_layers) what = fmt::format("weights and KV of {} layers", c.n_cpu_layers);
        if (c.experts_on_cpu) what += std::string(what.empty() ? "" : " and ") + "experts";
        fmt::print("  {:<13}{:>{}}  {} kept on the CPU\n", "host memory",
                   format_bytes(p.host_bytes), w, what);
    }
    const auto devices = mp.device_terms();
    if (devices.size() > 1) {
        // A plan on two devices: each one's terms.
        fmt::print("\n  {:<13}", "by device");
        for (const auto& dt : devices) fmt::print("{:>{}}", dt.device, w);
        fmt::print("\n");
        const std::pair<const char*, uint64_t DeviceTerms::*> rows[] = {
            {"weights", &DeviceTerms::weights_bytes},
            {"kv_cache", &DeviceTerms::kv_cache_bytes},
            {"activations", &DeviceTerms::activations_bytes},
            {"runtime", &DeviceTerms::runtime_bytes}};
        for (const auto& [label, field] : rows) {
            fmt::print("  {:<13}", label);
            for (const auto& dt : devices) fmt::print("{:>{}}", format_bytes(dt.*field), w);
            fmt::print("\n");
        }
        fmt::print("  {:<13}", "total");
        for (const auto& dt : devices) fmt::print("{:>{}}", format_bytes(dt.total_bytes()), w);
        fmt::print("  ({} budget {})\n", devices[0].device, format_bytes(mp.budget_bytes));
    }
    fmt::print("\n  {}\n", capacity_text(p, cap));
    fmt::print("  model {} ({} parameters, {}), {} layers, {} KV heads of {}\n", m.source,
               format_count(m.desc.n_params),
               m.weight_type ? std::string(info(*m.weight_type).label) + " estimate" : m.file_type,
               m.desc.hp.n_layer, m.desc.hp.n_head_kv, m.desc.hp.head_dim_k);
    fmt::print(
        "  config max_model_len {}, max_num_seqs {}, kv {}, {} tokens per step, block {}, "
        "threads {}\n",
        c.max_model_len, c.max_num_seqs, name(c.kv_dtype), c.max_num_batched_tokens, c.block_size,
        c.n_threads);
    fmt::print("  device {}\n", d.source);
    if (!p.fits_all()) {
        if (o.fit)
            print_suggestions(sugg, p);
        else if (!sugg.empty())
            print_suggestions({sugg.front()}, p), fmt::print("\n  (--fit lists more)\n");
    } else if (o.fit) {
        fmt::print("\nit fits as asked: nothing to change\n");
    }
    if (o.fit || !o.n_gpu_layers.empty()) print_auto_layers(m, d, auto_layers);
    if (quant) print_compare(m, d, p, *quant);
    if (o.width() > 1 || o.prompt_tokens) print_request_kv(o, request_kv(o, mp));
}

SvgBar plan_bar(std::string label, const Plan& p) {
    SvgBar b;
    b.label = std::move(label);
    b.terms = p.mem.device_terms()[0];
    b.budget = p.mem.budget_bytes;
    b.fits = p.mem.fits;
    return b;
}

SvgPlan svg_plan(const PlanModel& m, const Device& d, const Plan& p, const Capacity& cap,
                 const std::vector<Suggestion>* sugg, const std::vector<QuantRow>* quant) {
    const MemoryPlan& mp = p.mem;
    SvgPlan svg;
    svg.title = verdict_text(m, d, p, cap);
    svg.subtitle =
        fmt::format("total {} of a {} budget ({}), {} to spare; {}",
                    format_bytes(mp.budgeted_bytes()), format_bytes(mp.budget_bytes),
                    budget_text(d, p), format_bytes(p.free_bytes()), capacity_text(p, cap));
    const auto devices = mp.device_terms();
    for (size_t i = 0; i < devices.size(); ++i) {
        SvgBar b;
        b.label = devices.size() == 1 ? d.name : devices[i].device;
        b.terms = devices[i];
        b.fits = mp.fits;
        if (i == 0) {
            b.budget = mp.budget_bytes;
            b.note = fmt::format("{} of a {} budget", format_bytes(devices[i].total_bytes()),
                                 format_bytes(mp.budget_bytes));
        } else {
            b.note = fmt::format("{} of host memory", format_bytes(devices[i].total_bytes()));
        }
        svg.devices.push_back(std::move(b));
    }
    auto terms_note = [](const DeviceTerms& t, uint64_t budget) {
        return fmt::format("weights {} + KV {} = {} of {}", format_bytes(t.weights_bytes),
                           format_bytes(t.kv_cache_bytes), format_bytes(t.total_bytes()),
                           format_bytes(budget));
    };
    if (sugg && !sugg->empty()) {
        SvgSection s;
        s.title = "configurations that fit, best first (--fit)";
        for (size_t i = 0; i < sugg->size(); ++i) {
            const Suggestion& c = (*sugg)[i];
            std::string what;
            for (const auto& ch : c.changes) what += (what.empty() ? "" : "; ") + ch;
            SvgBar b =
                plan_bar(fmt::format("{}. {}", i + 1, what.empty() ? "as given" : what), c.plan);
            b.note = terms_note(b.terms, b.budget);
            s.bars.push_back(std::move(b));
        }
        svg.sections.push_back(std::move(s));
    }
    if (quant && !quant->empty()) {
        SvgSection s;
        s.title = fmt::format("by weight type, every sequence at {} tokens (--compare-quant)",
                              mp.config.max_model_len);
        for (const QuantRow& r : *quant) {
            SvgBar b = plan_bar(fmt::format("{} ({})", r.label, r.bits), r.plan);
            // The KV cache every sequence needs at full length, not what is left for it.
            b.terms.kv_cache_bytes = r.kv_needed_bytes;
            b.fits = r.plan.mem.fits && r.total_needed_bytes <= r.plan.mem.budget_bytes;
            b.note = terms_note(b.terms, b.budget) + (b.fits ? "" : ": does not fit");
            s.bars.push_back(std::move(b));
        }
        svg.sections.push_back(std::move(s));
    }
    return svg;
}

void write_svg(const std::string& path, const SvgPlan& svg) {
    const std::string text = plan_svg(svg);
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) fail("--svg {}: cannot write: {}", path, std::strerror(errno));
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !ok)
        fail("--svg {}: writing failed: {}", path, std::strerror(errno));
}

// The settings the flags give (the reserve: nvidia-smi's memory in use
// unless --reserve).
PlanSettings plan_settings(const PlanOptions& o, const Device& device, const Pins& pins) {
    PlanSettings s;
    s.mem_fraction = o.mem_fraction;
    if (!o.kv_cache_memory.empty()) {
        s.kv_cache_bytes = parse_bytes_or_throw(o.kv_cache_memory, "--kv-cache-memory");
        if (s.kv_cache_bytes == 0) fail("--kv-cache-memory must be more than 0");
    }
    s.reserve_bytes =
        o.reserve.empty() ? device.used_bytes : parse_bytes_or_throw(o.reserve, "--reserve");
    if (s.reserve_bytes >= device.total_bytes)
        fail("--reserve {} leaves nothing of the device's {}", format_bytes(s.reserve_bytes),
             format_bytes(device.total_bytes));
    if (!o.grammar_cache.empty())
        s.config.grammar_cache_bytes = parse_bytes_or_throw(o.grammar_cache, "--grammar-cache");
    s.config.max_model_len = o.max_model_len;
    // Each sample or beam of a request takes a sequence seat.
    s.config.max_num_seqs =
        pins.max_num_seqs ? o.max_num_seqs : std::max(o.max_num_seqs, o.width());
    s.config.max_num_batched_tokens = o.max_num_batched_tokens;
    s.config.swa_full = o.swa_full;
    s.config.block_size = o.block_size;
    s.config.n_threads = o.threads;
    s.config.n_cpu_layers = o.cpu_layers;
    s.config.experts_on_cpu = o.cpu_moe;
    if (o.cpu_moe && !device.gpu)
        fail(
            "--cpu-moe needs a GPU device (--device vulkan, a GPU of the table or "
            "--device-memory): on the CPU every expert is in host memory already");
    const auto dtype = kv_dtype_from_name(o.kv_dtype);
    if (!dtype) fail("--kv-dtype '{}': expected f16, bf16, f32 or q8_0", o.kv_dtype);
    s.config.kv_dtype = *dtype;
    return s;
}

// JSON or text, for the plan and what was searched and compared around it.
void print_plan(const PlanOptions& o, const PlanModel& model, const Device& device,
                const Plan& plan, const Capacity& cap, const std::vector<Suggestion>& sugg,
                const std::vector<QuantRow>* quant, const AutoLayers& auto_layers) {
    if (o.json) {
        json j = plan_json(model, device, plan, cap, sugg, quant, auto_layers);
        if (o.width() > 1 || o.prompt_tokens) {
            const RequestKv r = request_kv(o, plan.mem);
            j["request"] = {{"candidates", r.n_candidates},
                            {"prompt_tokens", r.n_prompt},
                            {"max_total_tokens", r.n_total},
                            {"kv_blocks", r.shared_blocks},
                            {"kv_bytes", r.shared_bytes},
                            {"separate_kv_blocks", r.separate_blocks},
                            {"separate_kv_bytes", r.separate_bytes},
                            {"fits", r.fits},
                            {"why", r.why}};
        }
        fmt::print("{}\n", j.dump(2));
    } else {
        print_human(model, device, plan, cap, sugg, o, quant, auto_layers);
    }
}

// `headroom plan` once its flags are read: `pins` the knobs given, which
// --fit leaves alone.
void run_plan(const PlanOptions& o, Pins pins, bool n_gpu_layers_given) {
    if (o.list_models || o.list_devices) {
        if (o.list_models)
            for (const auto& b : builtin_models())
                fmt::print("{:<14} {:<44} {}\n", b.name, b.description, b.source);
        if (o.list_devices)
            for (const auto& d : known_devices())
                fmt::print("{:<12} {:<16} {:>7} MiB\n", d.key, d.name, d.memory_mib);
        return;
    }
    const PlanModel model = resolve_model(o);
    Device device = resolve_device(o);
    PlanSettings s = plan_settings(o, device, pins);

    // The deployment run and serve would make (placement by --n-gpu-layers,
    // auto on headroom's own GPU; a GPU of the table as asked, auto
    // reported with --fit and --json).
    DeploymentRequest request;
    request.device = device;
    request.settings = s;
    request.cpu_layers_pinned = pins.cpu_layers;
    if (n_gpu_layers_given) request.gpu_layers = parse_gpu_layers(o.n_gpu_layers);
    const Deployment deployment = plan_deployment(model.desc, request);
    if (deployment.auto_layers && (request.gpu_layers || device.vulkan_index))
        pins.cpu_layers = true;
    if (deployment.on_cpu_instead && !o.json) fmt::print("note: {}\n", deployment.placement_note);
    device = deployment.device;
    // The searches and comparisons start from the deployment's placement.
    s.config.n_cpu_layers = deployment.plan.settings.config.n_cpu_layers;
    s.reserve_bytes = deployment.plan.settings.reserve_bytes;
    const AutoLayers& auto_layers = deployment.auto_layers;

    if (device.vulkan_index && model.desc.hp.n_expert > 0 && !o.json)
        fmt::print(
            "note: headroom's Vulkan backend does not run mixtures of experts yet (run and "
            "serve refuse this model on it): this is the memory it would take\n");
    const Plan& plan = deployment.plan;
    const Capacity cap = capacity(model, device, s);
    // Searching and comparing start from the context the plan resolved.
    s.config.max_model_len = plan.mem.config.max_model_len;
    std::vector<Suggestion> sugg;
    if (!plan.fits_all()) sugg = fit_search(model, device, s, pins, o.fit || o.json ? 8 : 1);
    std::vector<QuantRow> quant;
    if (o.compare_quant) quant = compare_quant(model, device, s);
    if (!o.svg.empty()) {
        write_svg(o.svg, svg_plan(model, device, plan, cap, o.fit ? &sugg : nullptr,
                                  o.compare_quant ? &quant : nullptr));
        if (!o.json) fmt::print(stderr, "plan: wrote {}\n", o.svg);
    }
    print_plan(o, model, device, plan, cap, sugg, o.compare_quant ? &quant : nullptr, auto_layers);
}

}  // namespace

void add_plan_command(CLI::App& app) {
    auto o = std::make_shared<PlanOptions>();
    auto* cmd = app.add_subcommand("plan",
                                   "Say how much memory a model takes before loading it, and which "
                                   "configuration fits a device");
    cmd->add_option(
        "model", o->model,
        "GGUF file, Hugging Face checkpoint folder, short name (smollm2-135m, gemma3-270m) or "
        "built-in model (llama-3-8b, "
        "qwen2.5-14b, deepseek-v3... see --list-models)");
    cmd->add_option("-m,--model", o->model, "Same as the positional MODEL");
    auto* hf = cmd->add_option("--hf-config", o->hf_config,
                               "Plan from a Hugging Face config.json instead");
    auto* wt = cmd->add_option(
        "--weight-type", o->weight_type,
        "Weight type to plan for: f32, f16, bf16, fp8, q8_0, q6_k, q5_k_m, q4_k_m, q4_1, "
        "q4_0, mxfp4, nf4, awq, gptq (default: the checkpoint's own)");
    (void)hf;
    cmd->add_option("--device", o->device,
                    "GPU from the table (rtx-4090, a100-80, h100, l4... see --list-devices) or cpu "
                    "(default: nvidia-smi's first GPU, else this machine)");
    cmd->add_option("--device-memory", o->device_memory,
                    "Device memory (24GiB, 80GB...); a GPU unless --device cpu");
    cmd->add_option(
        "--reserve", o->reserve,
        "Memory other processes keep (default: what nvidia-smi shows in use); taken off before "
        "--mem-fraction");
    auto* mem = cmd->add_option("--mem-fraction", o->mem_fraction,
                                "Fraction of the device (after --reserve) for all four terms")
                    ->capture_default_str()
                    ->check(CLI::Range(0.01, 1.0));
    cmd->add_option("--kv-cache-memory", o->kv_cache_memory,
                    "Give the KV cache exactly this much instead")
        ->excludes(mem);
    cmd->add_option("--grammar-cache", o->grammar_cache,
                    "Plan serve's compiled-grammar cache of this size (its default: 64MiB) and "
                    "each sequence's grammar state (default: none, as run has)");
    auto* len = cmd->add_option("--max-model-len", o->max_model_len,
                                "Longest sequence (default: the trained context)");
    auto* seqs = cmd->add_option("--max-num-seqs", o->max_num_seqs, "Sequences at once")
                     ->capture_default_str();
    cmd->add_option("--max-num-batched-tokens", o->max_num_batched_tokens,
                    "Tokens per step (default: 512)");
    cmd->add_option("--block-size", o->block_size, "Tokens per KV block")->capture_default_str();
    auto* kv = cmd->add_option("--kv-dtype", o->kv_dtype, "KV element type: f16, bf16, f32, q8_0")
                   ->capture_default_str();
    cmd->add_option("-t,--threads", o->threads,
                    "CPU engine threads (default: physical cores; 1 on a GPU)");
    auto* cpu =
        cmd->add_option("--cpu-layers", o->cpu_layers,
                        "Keep the first N layers' weights and KV in host memory (GPU plans)");
    auto* ngl =
        cmd->add_option("--n-gpu-layers", o->n_gpu_layers,
                        "Layers on the GPU (-ngl), the first ones on the CPU: auto (the most "
                        "that fit, as run and serve place them), all, or a number")
            ->excludes(cpu);
    auto* moe = cmd->add_flag(
        "--cpu-moe", o->cpu_moe,
        "Keep every GPU layer's experts in host memory, run by the CPU, and the dense and "
        "attention weights on the GPU (llama.cpp's --cpu-moe; a mixture of experts on a GPU "
        "plan; headroom's GPU backend does not run experts yet)");
    cmd->add_flag("--swa-full", o->swa_full,
                  "Plan as if sliding-window layers cached the whole context (every layer global)");
    cmd->add_flag("--fit", o->fit, "When it does not fit: list configurations that do, best first");
    cmd->add_flag("--compare-quant", o->compare_quant,
                  "Compare weight types at this configuration");
    cmd->add_flag("--json", o->json, "Print JSON for tools");
    cmd->add_option(
           "--svg", o->svg,
           "Also write the plan as a picture (SVG) to FILE: the budget bar with its four "
           "terms per device, and with --fit / --compare-quant the candidates side by side")
        ->option_text("FILE");
    cmd->add_flag("--list-models", o->list_models, "List the built-in models");
    cmd->add_flag("--list-devices", o->list_devices, "List the GPU table");
    cmd->add_option("--n", o->n_choices,
                    "KV of one request of this many samples sharing its prompt (with "
                    "--prompt-tokens, --max-tokens)")
        ->check(CLI::Range(1u, 128u));
    cmd->add_option("--best-of", o->best_of, "Samples drawn for the request")
        ->check(CLI::Range(1u, 128u));
    cmd->add_option("--beam-width", o->beam_width, "Beams of the request")
        ->check(CLI::Range(1u, 128u));
    cmd->add_option("--prompt-tokens", o->prompt_tokens,
                    "Prompt of the request (default: half the context)");
    cmd->add_option("--max-tokens", o->max_tokens,
                    "Tokens each sample or beam may generate (default: the rest of the context)");
    cmd->callback([o, wt, len, seqs, kv, cpu, ngl, moe] {
        Pins pins;
        pins.max_model_len = len->count() > 0;
        pins.max_num_seqs = seqs->count() > 0;
        pins.kv_dtype = kv->count() > 0;
        pins.weight_type = wt->count() > 0;
        pins.cpu_layers = cpu->count() > 0;
        pins.cpu_moe = moe->count() > 0;
        run_plan(*o, pins, ngl->count() > 0);
    });
}

}  // namespace headroom::cli
