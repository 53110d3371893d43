#include "engine/instance.h"

#include <fmt/format.h>

#include <charconv>

#include "checkpoint/open.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "kernels/cpu/cpu-backend.h"
#include "memory/budget.h"
#include "model/registry.h"
#if HEADROOM_VULKAN
#include "kernels/vulkan/vulkan-backend.h"
#endif

namespace headroom {

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

std::unique_ptr<kernels::Backend> make_backend(const InstanceOptions& o, Ledger& host) {
    if (o.device.kind == DeviceKind::Vulkan) {
#if HEADROOM_VULKAN
        kernels::VulkanOptions v;
        v.device_index = vulkan_index(o.device, o.progress);
        v.device_memory_bytes = o.device_memory_bytes;
        v.reserve_bytes = o.reserve_bytes;
        v.mem_fraction = o.settings.mem_fraction;
        v.progress = o.progress;
        return std::make_unique<kernels::VulkanBackend>(host, v);
#else
        fail(
            "--device vulkan: this headroom was built without the Vulkan backend "
            "(-DHEADROOM_VULKAN=OFF)");
#endif
    }
    const uint32_t n = o.settings.config.n_threads;
    return std::make_unique<kernels::CpuBackend>(host,
                                                 n ? static_cast<int>(n) : physical_core_count());
}

DeploymentRequest deployment_request(kernels::Backend& backend, const InstanceOptions& o) {
    DeploymentRequest r;
    r.settings = o.settings;
    r.settings.reserve_bytes = 0;  // a GPU backend's memory is net of --reserve already
    r.gpu_layers = o.gpu_layers;
    r.one_sequence_pool = o.one_sequence_pool;
    if (backend.is_host()) {
        r.device = host_device();
        return r;
    }
    Device& d = r.device;
    d.gpu = true;
    d.name = backend.ledger().device();  // "gpu0": what the ledgers and the notes call it
#if HEADROOM_VULKAN
    if (const auto* v = dynamic_cast<const kernels::VulkanBackend*>(&backend)) {
        d.total_bytes = v->device_bytes();
        d.source = v->device_bytes_source();
        d.vulkan_index = v->info().index;
    }
#endif
    if (backend.max_allocation_bytes() != UINT64_MAX)
        d.max_allocation_bytes = backend.max_allocation_bytes();
    return r;
}

Instance::Instance(const std::string& path_or_name) {
    host_ledger_ = std::make_unique<Ledger>("host");
    file_ = std::make_unique<gguf::GgufFile>(open_model_file(resolve_model_path(path_or_name)));
    tokenizer_ = Tokenizer::from_gguf(*file_);
    desc_ = describe_gguf(*file_);
    desc_.tokenizer_bytes = tokenizer_->memory_bytes();
}

Instance::~Instance() = default;

void Instance::load(const InstanceOptions& o) {
    build(plan_deployment(desc_, deployment_request(open_backend(o), o)), o);
}

kernels::Backend& Instance::open_backend(const InstanceOptions& o) {
    HR_CHECK_MSG(!backend_, "an instance opens its backend once");
    backend_ = make_backend(o, *host_ledger_);
    return *backend_;
}

void Instance::build(const Deployment& deployment, const InstanceOptions& o) {
    HR_CHECK_MSG(backend_ && !runner_, "build() once, after open_backend()");
    deployment_ = deployment;
    const Deployment& d = deployment_;
    auto say = [&](const std::string& line) {
        if (!line.empty()) fmt::print(stderr, "note: {}\n", line);
    };
    if (d.on_cpu_instead) {
        // Every layer on the CPU: its backend and the host's budget.
        say(d.placement_note);
        backend_.reset();
        InstanceOptions cpu = o;
        cpu.device = {};
        backend_ = make_backend(cpu, *host_ledger_);
    } else if (d.mem().fits && d.mem().config.n_cpu_layers > 0) {
        say(d.placement_note);
    }
    if (!d.mem().fits) throw Error(d.mem().refusal);
    say(d.plan.context_note);
    const uint32_t n_cpu_layers = d.mem().config.n_cpu_layers;
    if (n_cpu_layers > 0)
        cpu_ =
            std::make_unique<kernels::CpuBackend>(*host_ledger_, static_cast<int>(d.cpu_threads()));
    model_ = Model::load(*file_, *backend_, cpu_.get(), n_cpu_layers);
    runner_ = std::make_unique<Runner>(*model_, d.mem(), o.runner, *backend_, cpu_.get());
    if (cpu_) cpu_->make_resident(o.progress);
    backend_->make_resident(o.progress);
}

Engine& Instance::engine() {
    HR_CHECK_MSG(runner_, "load() the instance before its engine");
    if (!engine_) engine_ = std::make_unique<Engine>(*runner_, *tokenizer_, metrics_);
    return *engine_;
}

}  // namespace headroom
