#include "cli/load-model.h"

#include <fmt/format.h>

#include <charconv>

#include "core/error.h"
#include "core/thread-pool.h"
#include "kernels/cpu/cpu-backend.h"
#include "model/registry.h"
#if HEADROOM_VULKAN
#include "kernels/vulkan/vulkan-backend.h"
#endif

namespace headroom::cli {

DeviceChoice parse_device(const std::string& text) {
    DeviceChoice d;
    if (text == "cpu" || text == "host") return d;
    if (text == "vulkan" || text.starts_with("vulkan:")) {
        d.kind = DeviceKind::Vulkan;
        if (text.size() > 7) {
            const char* begin = text.data() + 7;
            const char* end = text.data() + text.size();
            uint32_t index = 0;
            auto [p, ec] = std::from_chars(begin, end, index);
            if (ec != std::errc() || p != end)
                fail("--device '{}': expected vulkan:N with N a device number", text);
            d.index = index;
        }
        return d;
    }
    fail("--device '{}': expected cpu, vulkan or vulkan:N", text);
}

uint32_t vulkan_index(const DeviceChoice& choice, bool say) {
    if (choice.index) return *choice.index;
#if HEADROOM_VULKAN
    std::string why, note;
    const auto devices = kernels::vk::list_devices(&why);
    if (devices.empty()) fail("--device vulkan: {}", why);
    const auto best = kernels::vk::best_device(devices, &note);
    if (!best)
        fail("--device vulkan: no Vulkan device here can run headroom's shaders ({} lacks {})",
             devices[0].name, devices[0].missing);
    if (say && !note.empty()) fmt::print(stderr, "note: {}\n", note);
    return *best;
#else
    (void)say;
    return 0;
#endif
}

GpuLayers parse_gpu_layers(const std::string& text) {
    GpuLayers g;
    if (text == "auto") return g;
    if (text == "all") {
        g.kind = GpuLayers::Kind::All;
        return g;
    }
    g.kind = GpuLayers::Kind::Count;
    const char* end = text.data() + text.size();
    auto [p, ec] = std::from_chars(text.data(), end, g.count);
    if (text.empty() || ec != std::errc() || p != end)
        fail("--n-gpu-layers '{}': expected auto, all or a number of layers", text);
    return g;
}

std::unique_ptr<kernels::Backend> make_backend(const BackendOptions& o, Ledger& host) {
    if (o.device.kind == DeviceKind::Vulkan) {
#if HEADROOM_VULKAN
        kernels::VulkanOptions v;
        v.device_index = vulkan_index(o.device, o.progress);
        v.device_memory_bytes = o.device_memory_bytes;
        v.reserve_bytes = o.reserve_bytes;
        v.mem_fraction = o.mem_fraction;
        v.progress = o.progress;
        return std::make_unique<kernels::VulkanBackend>(host, v);
#else
        fail(
            "--device vulkan: this headroom was built without the Vulkan backend "
            "(-DHEADROOM_VULKAN=OFF)");
#endif
    }
    const int n_threads = o.n_threads ? static_cast<int>(o.n_threads) : physical_core_count();
    return std::make_unique<kernels::CpuBackend>(host, n_threads);
}

uint64_t device_budget_bytes(const kernels::Backend& backend) {
#if HEADROOM_VULKAN
    if (const auto* v = dynamic_cast<const kernels::VulkanBackend*>(&backend))
        return v->device_bytes();
#endif
    (void)backend;
    return 0;
}

LoadedModel open_model(const std::string& path_or_name, const BackendOptions& options) {
    LoadedModel m;
    m.host_ledger = std::make_unique<Ledger>("host");
    m.backend = make_backend(options, *m.host_ledger);
    m.file =
        std::make_unique<gguf::GgufFile>(gguf::GgufFile::open(resolve_model_path(path_or_name)));
    m.tokenizer = Tokenizer::from_gguf(*m.file);
    m.desc = describe_gguf(*m.file);
    m.desc.tokenizer_bytes = m.tokenizer->memory_bytes();
    return m;
}

namespace {

void upload(LoadedModel& m, uint32_t n_cpu_layers) {
    m.model = Model::load(*m.file, *m.backend, m.cpu.get(), n_cpu_layers);
    m.desc.weight_bytes += m.model->converted_bytes();
}

}  // namespace

void load_weights(LoadedModel& m, RunnerOptions& ro, const BackendOptions& options) {
    if (m.backend->is_host()) return upload(m, 0);
    const RunnerOptions on_host = ro;
    const uint32_t host_threads = ro.config.n_threads;
    ro.budget.host_bytes = ro.budget.device_bytes;
    ro.budget.device_bytes = device_budget_bytes(*m.backend);
    ro.budget.device_context_bytes = m.backend->device_context_bytes();
    if (m.backend->max_allocation_bytes() != UINT64_MAX)
        ro.budget.max_allocation_bytes = m.backend->max_allocation_bytes();
    EngineConfig c = ro.config;
    c.device = m.backend->ledger().device();
    const LayerPlacement placed = place_layers(m.desc, c, ro.budget, options.gpu_layers);
    if (!placed.on_gpu) {
        // Every layer on the CPU: its backend and the host's budget.
        fmt::print(stderr, "note: {}\n", placed.note);
        m.backend.reset();
        BackendOptions cpu = options;
        cpu.device = {};
        m.backend = make_backend(cpu, *m.host_ledger);
        ro = on_host;
        return upload(m, 0);
    }
    if (!placed.plan.fits) throw Error(placed.plan.refusal);
    if (placed.n_cpu_layers > 0) {
        if (!placed.note.empty()) fmt::print(stderr, "note: {}\n", placed.note);
        m.cpu =
            std::make_unique<kernels::CpuBackend>(*m.host_ledger, static_cast<int>(host_threads));
    } else {
        // One host thread drives the device: no worker pool, no worker stacks.
        ro.config.n_threads = 1;
    }
    upload(m, placed.n_cpu_layers);
}

void make_resident(LoadedModel& m, bool progress) {
    if (m.cpu) m.cpu->make_resident(progress);
    m.backend->make_resident(progress);
}

LoadedModel load_model(const std::string& path_or_name, const BackendOptions& options) {
    LoadedModel m = open_model(path_or_name, options);
    upload(m, 0);
    return m;
}

}  // namespace headroom::cli
