#include "memory/budget.h"

#include <fmt/format.h>

#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "core/units.h"

namespace headroom {

namespace {

uint64_t read_meminfo_kib(const std::string& key) {
    std::ifstream f("/proc/meminfo");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind(key + ":", 0) == 0) {
            std::istringstream is(line.substr(key.size() + 1));
            uint64_t kib = 0;
            is >> kib;
            return kib;
        }
    }
    return 0;
}

// Returns max() when the file is missing or says "max".
uint64_t read_limit(const std::string& path) {
    std::ifstream f(path);
    std::string s;
    if (!(f >> s) || s == "max") return std::numeric_limits<uint64_t>::max();
    try {
        return std::stoull(s);
    } catch (...) {
        return std::numeric_limits<uint64_t>::max();
    }
}

}  // namespace

DeviceMemory detect_host_memory() {
    DeviceMemory d;
    const uint64_t available = read_meminfo_kib("MemAvailable") * 1024;
    d.total_bytes = available;
    d.source = fmt::format("MemAvailable {}", format_bytes(available));
    uint64_t cg_room = std::numeric_limits<uint64_t>::max();
    const uint64_t v2_max = read_limit("/sys/fs/cgroup/memory.max");
    if (v2_max != std::numeric_limits<uint64_t>::max()) {
        const uint64_t used = read_limit("/sys/fs/cgroup/memory.current");
        cg_room =
            used == std::numeric_limits<uint64_t>::max() || used > v2_max ? v2_max : v2_max - used;
    } else {
        const uint64_t v1 = read_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes");
        // v1 reports a huge number for "no limit".
        if (v1 < (uint64_t{1} << 60)) {
            const uint64_t used = read_limit("/sys/fs/cgroup/memory/memory.usage_in_bytes");
            cg_room = used > v1 ? 0 : v1 - used;
        }
    }
    if (cg_room != std::numeric_limits<uint64_t>::max()) {
        d.source += fmt::format(", cgroup room {}", format_bytes(cg_room));
        if (cg_room < d.total_bytes) d.total_bytes = cg_room;
    } else {
        d.source += " (no cgroup limit)";
    }
    return d;
}

}  // namespace headroom
