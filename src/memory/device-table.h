// The device a plan is for: a GPU from a small table of common ones, one
// detected with nvidia-smi, an explicit size, or this machine's memory.
//
// GPU sizes are nvidia-smi's memory.total, which is what the driver lets
// processes use (ECC and firmware reservations already taken out: an A10G
// sold as 24 GB reports 23028 MiB). Planning against the spec-sheet number
// would promise a gigabyte that is not there.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace headroom {

struct DeviceSpec {
    std::string_view name;    // "RTX 4090"
    std::string_view key;     // what --device matches, lowercase: "rtx-4090"
    uint64_t memory_mib = 0;  // nvidia-smi memory.total
};

const std::vector<DeviceSpec>& known_devices();

struct Device {
    std::string name;          // "RTX 4090", "this machine"
    uint64_t total_bytes = 0;  // memory the device has
    uint64_t used_bytes = 0;   // held by other processes when detected (nvidia-smi memory.used)
    bool gpu = false;
    std::string source;  // "--device rtx-4090 (nvidia-smi memory.total 24564 MiB)"
    // headroom's own Vulkan backend on device N (--device vulkan:N): the plan
    // is what it allocates, on "gpu<N>" and the host.
    std::optional<uint32_t> vulkan_index;
    // The most one allocation may take there (a Vulkan driver's limit); 0: none.
    uint64_t max_allocation_bytes = 0;
};

// Case-insensitive, ignoring spaces, dashes and underscores ("RTX 4090",
// "rtx4090", "a100-80"). nullopt for an unknown name.
std::optional<Device> find_device(std::string_view name);

// Parses `nvidia-smi --query-gpu=name,memory.total,memory.used
// --format=csv,noheader,nounits` output; the first GPU. nullopt when there
// is no line to read.
std::optional<Device> parse_nvidia_smi(std::string_view csv);

// Runs nvidia-smi when it is on PATH; nullopt when it is absent or fails.
std::optional<Device> detect_gpu();

// This machine's memory as the CPU engine budgets it (MemAvailable, capped
// by the cgroup limit: memory/budget.h).
Device host_device();

}  // namespace headroom
