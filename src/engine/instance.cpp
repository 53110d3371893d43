#include "engine/instance.h"

#include <fmt/format.h>

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "checkpoint/open.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "core/units.h"
#include "kernels/cpu/cpu-backend.h"
#include "memory/budget.h"
#include "memory/weight-estimate.h"
#include "model/registry.h"
#include "tools/quantize.h"
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
        if (o.device_memory_bytes) {
            r.device.total_bytes = o.device_memory_bytes;
            r.device.source =
                fmt::format("--device-memory {}", format_bytes(o.device_memory_bytes));
        }
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
    const DeploymentRequest request = deployment_request(open_backend(o), o);
    // A pre-quantized checkpoint's repacked weights are written out too.
    if (!o.quantization.empty() || file_->has_producers()) quantize_weights(request, o);
    build(plan_deployment(desc_, request), o);
}

namespace {

// The name of a quantized copy: the model's name, its type, and a hash of
// what it was made from (the path, each file's size and modification time)
// and of the type, so a changed checkpoint is quantized again.
std::string cache_name(const std::string& path, const HParams& hp, const std::string& type) {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::string identity = fs::absolute(path, ec).string() + "|" + type + "|v1";
    std::vector<fs::path> files;
    if (fs::is_directory(path, ec)) {
        for (const auto& e : fs::directory_iterator(path, ec))
            if (e.is_regular_file(ec)) files.push_back(e.path());  // not a cache folder inside
    } else {
        files.push_back(path);
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
        const auto size = fs::file_size(f, ec);
        const auto time = fs::last_write_time(f, ec).time_since_epoch().count();
        identity += fmt::format("|{}:{}:{}", f.filename().string(), ec ? 0 : size, time);
    }
    std::string stem = hp.name.empty() ? fs::path(path).filename().string() : hp.name;
    for (char& c : stem)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '-';
    return fmt::format("{}-{}-{:016x}.gguf", stem.substr(0, 64), type,
                       XXH64(identity.data(), identity.size(), 0));
}

}  // namespace

void Instance::quantize_weights(const DeploymentRequest& request, const InstanceOptions& o) {
    // The candidates, best first; nullopt is the weights as stored.
    std::vector<std::optional<WeightType>> candidates;
    const bool automatic = o.quantization == "auto";
    if (o.quantization.empty()) {
        candidates.push_back(std::nullopt);  // written out as it is
    } else if (automatic) {
        candidates.push_back(std::nullopt);
        for (const auto& t : weight_types())
            if (t.gguf && t.candidate && t.quality_cost > 0) candidates.push_back(t.type);
    } else {
        const auto t = weight_type_from_name(o.quantization);
        if (!t || !info(*t).gguf)
            fail(
                "--quantization '{}': expected auto or a GGUF file type such as q8_0, q6_k, "
                "q5_k_m, q4_k_m, q4_0",
                o.quantization);
        candidates.push_back(*t);
    }
    // A type's options; nullopt: every tensor written in its own type.
    auto options_for = [&](std::optional<WeightType> t) {
        QuantizeOptions q;
        if (t) {
            q.recipe = gguf_recipe(*t);
            q.file_type = gguf_file_type_code(*t);
        } else {
            q.keep_types = true;
        }
        q.n_threads = static_cast<int>(std::max<uint32_t>(1, o.settings.config.n_threads));
        q.progress = o.progress;
        return q;
    };
    // The first whose deployment fits, planned from the tensor table the
    // quantized file will have: every sequence at the context asked (the
    // trained one by default); failing that, the first that fits with the
    // context cut to what the budget leaves.
    std::vector<std::pair<std::optional<WeightType>, ModelDesc>> descs;
    for (const auto& c : candidates) {
        if (!c) {
            descs.emplace_back(c, desc_);
            continue;
        }
        try {
            descs.emplace_back(c, describe_gguf(quantized_view(*file_, options_for(*c))));
        } catch (const Error&) {
            if (!automatic) throw;  // else a type the quantizers cannot produce
        }
    }
    auto label = [](const std::optional<WeightType>& c, const ModelDesc& d) {
        return c ? std::string(info(*c).label) : "as stored (" + d.weight_type + ")";
    };
    const uint32_t asked_len = request.settings.config.max_model_len
                                   ? request.settings.config.max_model_len
                                   : desc_.hp.n_ctx_train;
    std::optional<WeightType> chosen = descs.front().first;
    if (automatic) {
        std::string tried;
        bool found = false;
        for (const bool whole_context : {true, false}) {
            for (const auto& [c, d] : descs) {
                const Deployment dep = plan_deployment(d, request);
                const bool fits = whole_context ? dep.plan.fits_all() &&
                                                      dep.mem().config.max_model_len >= asked_len
                                                : dep.mem().fits;
                if (fits) {
                    chosen = c;
                    found = true;
                    if (o.progress)
                        fmt::print(stderr, "quantization auto: {} (weights {}){}{}\n", label(c, d),
                                   format_bytes(d.weight_bytes),
                                   whole_context ? "" : ", with the context cut to fit",
                                   tried.empty()
                                       ? ""
                                       : fmt::format(": {} do not fit the {} "
                                                     "budget with {} x {} tokens",
                                                     tried, format_bytes(dep.mem().budget_bytes),
                                                     dep.mem().config.max_num_seqs, asked_len));
                    break;
                }
                if (whole_context)
                    tried += fmt::format("{}{} {}", tried.empty() ? "" : ", ", label(c, d),
                                         format_bytes(d.weight_bytes));
            }
            if (found) break;
        }
        if (!found)
            fail(
                "--quantization auto: no weight type fits the budget ({} do not); lower "
                "--max-model-len or --max-num-seqs",
                tried);
    }
    if (!chosen && !file_->has_producers()) return;

    const QuantizeOptions q = options_for(chosen);
    const std::string type_label =
        chosen ? std::string(info(*chosen).label) : "repacked-" + desc_.weight_type;
    std::string path;
    bool temporary = o.quantized_cache.empty();
    if (temporary) {
        const char* tmp = std::getenv("TMPDIR");
        path = fmt::format("{}/headroom-quantized-{}-{}.gguf", tmp && *tmp ? tmp : "/tmp",
                           ::getpid(), type_label);
    } else {
        std::error_code ec;
        std::filesystem::create_directories(o.quantized_cache, ec);
        if (ec)
            fail("--quantized-cache {}: cannot create the folder: {}", o.quantized_cache,
                 ec.message());
        path = (std::filesystem::path(o.quantized_cache) /
                cache_name(file_->path(), desc_.hp, type_label))
                   .string();
    }
    if (temporary || !std::filesystem::exists(path)) {
        const std::string part = path + ".part";
        try {
            quantize_model(*file_, part, q);
        } catch (...) {
            std::remove(part.c_str());
            throw;
        }
        if (std::rename(part.c_str(), path.c_str()) != 0)
            fail("{}: cannot move the quantized model into place: {}", path, std::strerror(errno));
    } else if (o.progress) {
        fmt::print(stderr, "quantization: {} from the cache ({})\n", type_label, path);
    }
    auto quantized = std::make_unique<gguf::GgufFile>(open_model_file(path));
    // Mapped: the file's pages stay reachable once its name is gone.
    if (temporary) std::remove(path.c_str());
    source_ = std::move(file_);
    file_ = std::move(quantized);
    desc_ = describe_gguf(*file_);
    desc_.tokenizer_bytes = tokenizer_->memory_bytes();
}

kernels::Backend& Instance::open_backend(const InstanceOptions& o) {
    HR_CHECK_MSG(!backend_, "an instance opens its backend once");
    backend_ = make_backend(o, *host_ledger_);
    return *backend_;
}

void Instance::build(const Deployment& deployment, const InstanceOptions& o) {
    HR_CHECK_MSG(backend_ && !runner_, "build() once, after open_backend()");
    HR_CHECK_MSG(!file_->has_producers(), "a repacked checkpoint is written out by load()");
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
