// headroom devices: the Vulkan devices this machine has, with their memory
// heaps (and the driver's budget and usage where VK_EXT_memory_budget
// exists), and whether headroom can run on each: what --device vulkan:N picks.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/units.h"
#if HEADROOM_VULKAN
#include "kernels/vulkan/vk-context.h"
#endif

namespace headroom::cli {

namespace {

#if HEADROOM_VULKAN
void print_devices(bool as_json) {
    std::string why;
    const auto devices = kernels::vk::list_devices(&why);
    std::string note;
    const auto best = kernels::vk::best_device(devices, &note);
    if (as_json) {
        nlohmann::json list = nlohmann::json::array();
        for (const auto& d : devices) {
            nlohmann::json heaps = nlohmann::json::array();
            for (const auto& h : d.heaps) {
                nlohmann::json j = {{"size_bytes", h.size_bytes}, {"device_local", h.device_local}};
                if (h.budget_bytes) j["budget_bytes"] = *h.budget_bytes;
                if (h.usage_bytes) j["usage_bytes"] = *h.usage_bytes;
                heaps.push_back(j);
            }
            list.push_back(
                {{"device", fmt::format("vulkan:{}", d.index)},
                 {"name", d.name},
                 {"type", d.type},
                 {"driver", d.driver},
                 {"api_version", fmt::format("{}.{}.{}", VK_API_VERSION_MAJOR(d.api_version),
                                             VK_API_VERSION_MINOR(d.api_version),
                                             VK_API_VERSION_PATCH(d.api_version))},
                 {"heaps", heaps},
                 {"subgroup_size", d.subgroup_size},
                 {"max_storage_buffer_range_bytes", d.max_storage_buffer_range},
                 {"max_allocation_bytes", d.max_allocation_bytes},
                 {"max_buffer_bytes", d.max_buffer_bytes},
                 {"is_default", best == d.index},
                 {"max_shared_memory_bytes", d.max_shared_memory_bytes},
                 {"usable", d.missing.empty()},
                 {"missing", d.missing}});
        }
        nlohmann::json out = {{"devices", list}};
        if (devices.empty()) out["why"] = why;
        if (best) out["vulkan"] = fmt::format("vulkan:{}", *best);
        if (!note.empty()) out["note"] = note;
        fmt::print("{}\n", out.dump(2));
        return;
    }
    fmt::print("cpu        this machine's processor (--device cpu, the default)\n");
    if (devices.empty()) {
        fmt::print("no Vulkan device: {}\n", why);
        return;
    }
    for (const auto& d : devices) {
        fmt::print("vulkan:{:<3} {} ({}), Vulkan {}.{}, {}\n", d.index, d.name, d.type,
                   VK_API_VERSION_MAJOR(d.api_version), VK_API_VERSION_MINOR(d.api_version),
                   d.driver);
        for (size_t h = 0; h < d.heaps.size(); ++h) {
            const auto& heap = d.heaps[h];
            std::string budget;
            if (heap.budget_bytes)
                budget = fmt::format(", budget {}, in use {}", format_bytes(*heap.budget_bytes),
                                     format_bytes(heap.usage_bytes.value_or(0)));
            else
                budget = ", no budget reported (VK_EXT_memory_budget absent)";
            fmt::print("           heap {}: {}{}{}\n", h, format_bytes(heap.size_bytes),
                       heap.device_local ? " device-local" : " host", budget);
        }
        fmt::print(
            "           subgroup {}, shared memory {}, largest binding {}, largest "
            "allocation {}{}\n",
            d.subgroup_size, format_bytes(uint64_t{d.max_shared_memory_bytes}),
            format_bytes(d.max_storage_buffer_range), format_bytes(d.max_allocation_bytes),
            d.max_buffer_bytes
                ? fmt::format(", largest buffer {}", format_bytes(d.max_buffer_bytes))
                : "");
        if (!d.missing.empty()) fmt::print("           cannot run headroom: lacks {}\n", d.missing);
    }
    if (best)
        fmt::print("--device vulkan means vulkan:{}{}\n", *best,
                   note.empty() ? " (the first GPU: discrete, then integrated, then virtual)"
                                : fmt::format("\nnote: {}", note));
}
#endif

}  // namespace

void add_devices_command(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "devices",
        "List the devices headroom can run on: the CPU and each Vulkan GPU, with memory");
    auto json = std::make_shared<bool>(false);
    cmd->add_flag("--json", *json, "Print JSON");
    cmd->callback([json] {
#if HEADROOM_VULKAN
        print_devices(*json);
#else
        if (*json)
            fmt::print("{{\"devices\": [], \"why\": \"built without the Vulkan backend\"}}\n");
        else
            fmt::print(
                "cpu        this machine's processor\nno Vulkan device: this headroom was "
                "built without the Vulkan backend (-DHEADROOM_VULKAN=OFF)\n");
#endif
    });
}

}  // namespace headroom::cli
