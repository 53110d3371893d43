#include "cli/load-model.h"

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
            auto [p, ec] = std::from_chars(begin, end, d.index);
            if (ec != std::errc() || p != end)
                fail("--device '{}': expected vulkan:N with N a device number", text);
        }
        return d;
    }
    fail("--device '{}': expected cpu, vulkan or vulkan:N", text);
}

std::unique_ptr<kernels::Backend> make_backend(const BackendOptions& o, Ledger& host) {
    if (o.device.kind == DeviceKind::Vulkan) {
#if HEADROOM_VULKAN
        kernels::VulkanOptions v;
        v.device_index = o.device.index;
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

LoadedModel load_model(const std::string& path_or_name, const BackendOptions& options) {
    LoadedModel m;
    m.host_ledger = std::make_unique<Ledger>("host");
    m.backend = make_backend(options, *m.host_ledger);
    m.file =
        std::make_unique<gguf::GgufFile>(gguf::GgufFile::open(resolve_model_path(path_or_name)));
    m.model = Model::load(*m.file, *m.backend);
    m.tokenizer = Tokenizer::from_gguf(*m.file);
    m.desc = describe_gguf(*m.file);
    m.desc.tokenizer_bytes = m.tokenizer->memory_bytes();
    m.desc.weight_bytes += m.model->converted_bytes();
    return m;
}

}  // namespace headroom::cli
