#include "memory/deployment.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread-pool.h"
#include "kernels/backend.h"
#include "memory/budget.h"

namespace headroom {

BudgetSpec budget_for(const Device& device, const PlanSettings& s) {
    BudgetSpec b;
    b.device_bytes =
        device.total_bytes > s.reserve_bytes ? device.total_bytes - s.reserve_bytes : 0;
    b.mem_fraction = s.mem_fraction;
    b.kv_cache_bytes = s.kv_cache_bytes;
    b.device_context_bytes = device.vulkan_index ? kernels::kVulkanContextBytes
                             : device.gpu        ? kCudaContextBytes
                                                 : 0;
    b.max_allocation_bytes = device.max_allocation_bytes;
    // A GPU of this machine: a split's CPU part is in its memory, as run budgets it.
    if (device.vulkan_index) b.host_bytes = detect_host_memory().total_bytes;
    return b;
}

namespace {

// The host threads a plan counts (their stacks and attention tiles): the CPU
// engine's (--threads, else every physical core); on a GPU one host thread
// drives the device, but a split on headroom's GPU backend runs its CPU
// part on the CPU engine's.
uint32_t plan_threads(const Device& device, const EngineConfig& c) {
    const bool cpu_part = !device.gpu || (device.vulkan_index && c.n_cpu_layers > 0);
    if (device.vulkan_index && !cpu_part) return 1;
    if (c.n_threads) return c.n_threads;
    return cpu_part ? static_cast<uint32_t>(physical_core_count()) : 1;
}

// The configuration as the engine sees it on `device`.
EngineConfig on_device(const Device& device, EngineConfig c) {
    if (device.vulkan_index) c.device = fmt::format("gpu{}", *device.vulkan_index);
    c.n_threads = plan_threads(device, c);
    return c;
}

}  // namespace

uint64_t first_layers_bytes(const ModelDesc& d, uint32_t k) {
    uint64_t n = 0;
    for (uint32_t il = 0; il < k && il < d.layer_weight_bytes.size(); ++il)
        n += d.layer_weight_bytes[il];
    return n;
}

uint64_t experts_from(const ModelDesc& d, uint32_t first) {
    uint64_t n = 0;
    for (uint32_t il = first; il < d.layer_expert_parts.size(); ++il)
        n += d.layer_expert_parts[il].host;
    return n;
}

Plan evaluate(const ModelDesc& model, const Device& device, const PlanSettings& settings) {
    Plan p;
    p.settings = settings;
    EngineConfig& c = p.settings.config;
    c = on_device(device, c);
    const BudgetSpec budget = budget_for(device, p.settings);
    // An unpinned context fits by itself, as the engine fits it.
    p.mem = plan_memory_fitting(model, c, budget, &p.context_note);
    refuse_past_device(p.mem, device.name);
    if (p.mem.split()) {
        // headroom's own split: the host's share as planned.
        p.host_bytes = p.mem.host_weights_bytes + p.mem.host_kv_cache_bytes;
    } else if (c.n_cpu_layers > 0) {
        p.host_bytes += first_layers_bytes(model, c.n_cpu_layers);
        EngineConfig all = p.mem.config;
        all.n_cpu_layers = 0;
        BudgetSpec one;
        one.kv_cache_bytes = 1;
        const MemoryPlan whole = plan_memory(model, all, one);
        p.host_bytes += (whole.kv_bytes_per_seq - p.mem.kv_bytes_per_seq) * all.max_num_seqs;
    }
    if (p.mem.config.experts_on_cpu && !p.mem.split())
        p.host_bytes += p.mem.config.device != "host" ? p.mem.host_weights_bytes
                                                      : experts_from(model, c.n_cpu_layers);
    return p;
}

LayerPlacement place_layers(const ModelDesc& model, const EngineConfig& config,
                            const BudgetSpec& budget, GpuLayers layers, std::string_view gpu) {
    const uint32_t n_layer = model.hp.n_layer;
    const std::string_view device = gpu.empty() ? std::string_view(config.device) : gpu;
    // The plan with the first n_cpu layers on the CPU; one host thread when
    // there is no CPU part.
    auto with_cpu = [&](uint32_t n_cpu) {
        EngineConfig c = config;
        c.n_cpu_layers = n_cpu;
        if (n_cpu == 0 && c.device != "host") c.n_threads = 1;
        return c;
    };
    const auto room =
        static_cast<uint64_t>(static_cast<double>(budget.device_bytes) * budget.mem_fraction);
    auto check_room = [&](MemoryPlan p) {
        refuse_past_device(p, device);
        return p;
    };
    auto planned = [&](uint32_t n_cpu) {
        return check_room(plan_memory(model, with_cpu(n_cpu), budget));
    };
    LayerPlacement out;
    if (layers.kind != GpuLayers::Kind::Auto) {
        uint32_t n_gpu = n_layer;
        if (layers.kind == GpuLayers::Kind::Count) {
            if (layers.count > n_layer)
                fail("--n-gpu-layers {}: the model has {} layers (all puts every one on the GPU)",
                     layers.count, n_layer);
            n_gpu = layers.count;
        }
        if (n_gpu == 0) {
            out.on_gpu = false;
            out.n_cpu_layers = n_layer;
            out.note = "--n-gpu-layers 0: every layer on the CPU";
            return out;
        }
        out.n_cpu_layers = n_layer - n_gpu;
        out.plan =
            check_room(plan_memory_fitting(model, with_cpu(out.n_cpu_layers), budget, nullptr));
        if (!out.plan.fits)
            out.plan.refusal = fmt::format(
                "{} of the {} layers on {}: {} (--n-gpu-layers auto puts "
                "as many on it as fit)",
                n_gpu, n_layer, device, out.plan.refusal);
        return out;
    }
    const MemoryPlan all = planned(0);
    if (all.fits) {
        out.plan = all;
        return out;
    }
    // Fewer layers on the GPU take less of it: the most that fit, by
    // bisection. The host's share grows the other way: the plan of the
    // placement found says whether it fits host memory.
    auto fits = [&](uint32_t n_gpu) {
        const MemoryPlan p = planned(n_layer - n_gpu);
        return p.fits || p.host_short;
    };
    // What the note calls the device's budget (an explicit pool's plan
    // budgets its own terms).
    const uint64_t device_budget = budget.kv_cache_bytes > 0 ? room : all.budget_bytes;
    const uint32_t len = all.config.max_model_len;
    if (n_layer < 2 || !fits(1)) {
        const MemoryPlan one = planned(n_layer > 1 ? n_layer - 1 : 0);
        const DeviceTerms d = one.device_terms()[0];
        out.on_gpu = false;
        out.n_cpu_layers = n_layer;
        if (one.allocation_short)
            out.note = fmt::format(
                "no layer of the model can run on {}: {}; running every layer "
                "on the CPU",
                device, one.refusal);
        else
            out.note = fmt::format(
                "not even one of the model's {} layers fits {}: with one layer it holds {} of "
                "weights, {} of activations and runtime and needs {} of KV for a sequence of {} "
                "tokens, but its budget is {}: running every layer on the CPU",
                n_layer, device, format_bytes(d.weights_bytes),
                format_bytes(d.activations_bytes + d.runtime_bytes),
                format_bytes(one.kv_bytes_per_seq), len, format_bytes(device_budget));
        return out;
    }
    uint32_t lo = 1, hi = n_layer - 1;  // fits(lo), and the answer is at most hi
    while (lo < hi) {
        const uint32_t mid = lo + (hi - lo + 1) / 2;
        if (fits(mid))
            lo = mid;
        else
            hi = mid - 1;
    }
    out.n_cpu_layers = n_layer - lo;
    out.plan = planned(out.n_cpu_layers);
    const DeviceTerms d = all.device_terms()[0];
    out.note = fmt::format(
        "{} of the model's {} layers on {}, the first {} on the CPU: all {} would take {} of "
        "weights, {} of activations and runtime and {} of KV for a sequence of {} tokens, and its "
        "budget is {}",
        lo, n_layer, device, out.n_cpu_layers, n_layer, format_bytes(d.weights_bytes),
        format_bytes(d.activations_bytes + d.runtime_bytes), format_bytes(all.kv_bytes_per_seq),
        len, format_bytes(device_budget));
    if (config.max_model_len == 0 && all.fit_len > 0)
        out.note += fmt::format(" (--n-gpu-layers all --max-model-len {} keeps them all there)",
                                all.fit_len);
    return out;
}

namespace {

LayerPlacement place_for(const ModelDesc& model, const Device& device, const PlanSettings& settings,
                         GpuLayers layers) {
    // The threads of a CPU part (place_layers drops to one where there is none).
    EngineConfig c = settings.config;
    c.n_cpu_layers = 1;
    c = on_device(device, c);
    c.n_cpu_layers = settings.config.n_cpu_layers;
    return place_layers(model, c, budget_for(device, settings), layers, device.name);
}

}  // namespace

uint32_t Deployment::cpu_threads() const {
    const EngineConfig& c = plan.mem.config;
    if (!device.vulkan_index || c.n_cpu_layers > 0) return c.n_threads;
    return 0;
}

Deployment plan_deployment(const ModelDesc& model, const DeploymentRequest& r) {
    Deployment d;
    d.device = r.device;
    PlanSettings s = r.settings;
    const uint32_t n_layer = model.hp.n_layer;
    std::string explicit_refusal;  // an explicit count's refusal, with its layers
    if (r.device.gpu && n_layer > 0 && !r.cpu_layers_pinned) {
        Deployment::Auto a;
        a.n_layer = n_layer;
        a.placed = place_for(model, r.device, s, {});
        if (a.placed.on_gpu) {
            PlanSettings t = s;
            t.config.n_cpu_layers = a.placed.n_cpu_layers;
            a.plan = evaluate(model, r.device, t);
        }
        // headroom's own GPU places the layers by auto unless told; a GPU of
        // the table is planned as asked, auto reported beside it.
        if (r.gpu_layers || r.device.vulkan_index) {
            const LayerPlacement asked =
                r.gpu_layers ? place_for(model, r.device, s, *r.gpu_layers) : a.placed;
            d.placement_note = asked.note;
            if (asked.on_gpu) {
                s.config.n_cpu_layers = asked.n_cpu_layers;
                if (!asked.plan.fits) explicit_refusal = asked.plan.refusal;
            } else {
                d.device = host_device();
                d.on_cpu_instead = true;
                s.reserve_bytes = 0;
                s.config.n_cpu_layers = 0;
            }
        }
        d.auto_layers = std::move(a);
    } else if (r.gpu_layers && !r.device.gpu) {
        const GpuLayers g = *r.gpu_layers;
        if (g.kind != GpuLayers::Kind::Count || g.count != 0)
            fail(
                "--n-gpu-layers {} needs a GPU device (--device vulkan, a GPU of the table or "
                "--device-memory)",
                g.kind == GpuLayers::Kind::All    ? std::string("all")
                : g.kind == GpuLayers::Kind::Auto ? std::string("auto")
                                                  : std::to_string(g.count));
    }
    d.plan = evaluate(model, d.device, s);
    if (r.one_sequence_pool && s.kv_cache_bytes == 0) {
        s.kv_cache_bytes = d.plan.mem.kv_bytes_per_seq;
        s.config.max_model_len = d.plan.mem.config.max_model_len;
        d.plan = evaluate(model, d.device, s);
    }
    if (!d.plan.mem.fits && !explicit_refusal.empty()) d.plan.mem.refusal = explicit_refusal;
    return d;
}

}  // namespace headroom
