// How much memory the device has. On the CPU: the smaller of MemAvailable
// and the cgroup's limit (memory.max minus memory.current, cgroup v2; v1's
// limit_in_bytes), read once at start-up.
#pragma once

#include <cstdint>
#include <string>

namespace headroom {

struct DeviceMemory {
    uint64_t total_bytes = 0;  // what the budget is a fraction of
    std::string source;        // e.g. "MemAvailable 22.1 GiB (cgroup: no limit)"
};

DeviceMemory detect_host_memory();

}  // namespace headroom
