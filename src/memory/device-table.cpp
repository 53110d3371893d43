#include "memory/device-table.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cstdio>

#include "core/units.h"
#include "memory/budget.h"

namespace headroom {

namespace {

std::string squash(std::string_view s) {
    std::string out;
    for (char c : s)
        if (std::isalnum(static_cast<unsigned char>(c)))
            out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    return out;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
}

std::optional<uint64_t> parse_u64(std::string_view s) {
    s = trim(s);
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
    return v;
}

}  // namespace

const std::vector<DeviceSpec>& known_devices() {
    // memory.total as nvidia-smi prints it for each card (the "N MiB" column
    // of its summary table), read off published nvidia-smi outputs.
    static const std::vector<DeviceSpec> kDevices = {
        {"RTX 3060 12GB", "rtx-3060", 12288},
        {"RTX 4070 12GB", "rtx-4070", 12288},
        {"RTX 3090 Ti", "rtx-3090-ti", 24564},
        {"RTX 4090", "rtx-4090", 24564},
        {"Tesla T4", "t4", 15360},
        {"V100 16GB", "v100-16", 16160},
        {"A10", "a10", 23028},
        {"A10G", "a10g", 23028},
        {"L4", "l4", 23034},
        {"A40", "a40", 46068},
        {"L40S", "l40s", 46068},
        {"RTX A6000", "rtx-a6000", 46068},
        {"A100 40GB", "a100-40", 40960},
        {"A100 80GB", "a100-80", 81920},
        {"H100 80GB", "h100", 81559},
        {"H800 80GB", "h800", 81559},
        {"H200", "h200", 143771},
    };
    return kDevices;
}

std::optional<Device> find_device(std::string_view name) {
    const std::string want = squash(name);
    for (const auto& d : known_devices()) {
        if (want != squash(d.key) && want != squash(d.name)) continue;
        Device dev;
        dev.name = std::string(d.name);
        dev.total_bytes = d.memory_mib * MiB;
        dev.gpu = true;
        dev.source =
            fmt::format("--device {} (nvidia-smi memory.total {} MiB)", d.key, d.memory_mib);
        return dev;
    }
    return std::nullopt;
}

std::optional<Device> parse_nvidia_smi(std::string_view csv) {
    const size_t eol = csv.find('\n');
    const std::string_view line = trim(csv.substr(0, eol));
    const size_t c1 = line.find(',');
    if (c1 == std::string_view::npos) return std::nullopt;
    const size_t c2 = line.find(',', c1 + 1);
    const auto total_mib =
        parse_u64(line.substr(c1 + 1, c2 == std::string_view::npos ? line.npos : c2 - c1 - 1));
    if (!total_mib || *total_mib == 0) return std::nullopt;
    Device d;
    d.name = std::string(trim(line.substr(0, c1)));
    d.total_bytes = *total_mib * MiB;
    if (c2 != std::string_view::npos)
        if (auto used = parse_u64(line.substr(c2 + 1))) d.used_bytes = *used * MiB;
    d.gpu = true;
    d.source = fmt::format("nvidia-smi: {}, memory.total {} MiB, {} in use", d.name, *total_mib,
                           format_bytes(d.used_bytes));
    return d;
}

std::optional<Device> detect_gpu() {
    FILE* pipe = popen(
        "nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader,nounits "
        "2>/dev/null",
        "r");
    if (!pipe) return std::nullopt;
    std::string out;
    std::array<char, 512> buf{};
    while (fgets(buf.data(), static_cast<int>(buf.size()), pipe)) out += buf.data();
    const int rc = pclose(pipe);
    if (rc != 0) return std::nullopt;
    return parse_nvidia_smi(out);
}

Device host_device() {
    const DeviceMemory m = detect_host_memory();
    Device d;
    d.name = "this machine (CPU)";
    d.total_bytes = m.total_bytes;
    d.gpu = false;
    d.source = m.source;
    return d;
}

}  // namespace headroom
