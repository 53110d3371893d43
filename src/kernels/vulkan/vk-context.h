// The Vulkan device: the instance, the physical devices this machine has
// (for `headroom devices` and the choice of --device vulkan:N), and one
// logical device with a compute queue, opened with the features the shaders
// need (buffer device addresses, 8- and 16-bit storage, 64-bit integers).
// Errors while opening throw headroom::Error naming the call and what is
// missing; so do failures of the device later (a lost device is not a
// state the engine can serve from).
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace headroom::kernels::vk {

struct HeapInfo {
    uint64_t size_bytes = 0;
    bool device_local = false;
    // From VK_EXT_memory_budget, where the driver has it.
    std::optional<uint64_t> budget_bytes;
    std::optional<uint64_t> usage_bytes;
};

struct DeviceInfo {
    uint32_t index = 0;
    std::string name;
    std::string type;    // "discrete GPU", "integrated GPU", "virtual GPU", "CPU", "other"
    std::string driver;  // driver name and version text
    uint32_t api_version = 0;
    uint32_t vendor_id = 0;
    uint32_t device_id = 0;
    std::vector<HeapInfo> heaps;
    uint32_t subgroup_size = 0;
    uint64_t max_storage_buffer_range = 0;
    // maxMemoryAllocationSize: the driver's advice on one allocation (some
    // allocate more); maxBufferSize (Vulkan 1.3, maintenance4): the hard cap
    // on one buffer, or 0 where the driver does not say.
    uint64_t max_allocation_bytes = 0;
    uint64_t max_buffer_bytes = 0;
    uint32_t max_shared_memory_bytes = 0;
    // What headroom needs that this device lacks, or empty.
    std::string missing;

    // The device-local heap the backend allocates from (the largest).
    const HeapInfo& main_heap() const;
    uint32_t main_heap_index() const;
    // What --device vulkan may take: usable and not a CPU (lavapipe).
    bool is_gpu() const { return missing.empty() && type != "CPU"; }
};

// The most one allocation takes on the device: maxMemoryAllocationSize (or
// maxBufferSize where lower), lowered to `lower` where nonzero, else to
// HEADROOM_VULKAN_MAX_ALLOCATION=BYTES where set (at least 1 MiB). The
// backend allocates no more at once, and the planner plans with it.
uint64_t allocation_limit(const DeviceInfo& info, uint64_t lower = 0);

// The device --device vulkan means among `devices`: the first usable
// discrete GPU, else integrated, else virtual, else any other usable GPU,
// else the first usable device of any type (a CPU such as lavapipe, which
// *note then says in one line); nullopt if none is usable.
std::optional<uint32_t> best_device(const std::vector<DeviceInfo>& devices,
                                    std::string* note = nullptr);

// The Vulkan devices of this machine. Empty with *why set when there are
// none (no loader, no driver, no device).
std::vector<DeviceInfo> list_devices(std::string* why);

// A Vulkan struct zeroed but for its type tag.
template <class T>
T make(VkStructureType type) {
    T v{};
    v.sType = type;
    return v;
}

// Throws headroom::Error "<what>: <VkResult>" if r is not VK_SUCCESS.
void check(VkResult r, const char* what);

class Context {
  public:
    // Opens device `index` of list_devices(). Throws headroom::Error if it
    // does not exist or lacks a feature.
    explicit Context(uint32_t index);
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    const DeviceInfo& info() const { return info_; }
    VkDevice device() const { return device_; }
    VkQueue queue() const { return queue_; }
    VkCommandPool command_pool() const { return pool_; }
    VkPhysicalDevice physical() const { return physical_; }

    // A memory type with `required` flags (and `preferred` ones if any type
    // has them) that `type_bits` allows; throws if none.
    uint32_t memory_type(uint32_t type_bits, VkMemoryPropertyFlags required,
                         VkMemoryPropertyFlags preferred = 0) const;
    // A device-local memory type on the heap the budget comes from
    // (DeviceInfo::main_heap), that `type_bits` allows, preferring one the
    // host can map (host-visible and coherent) if `mappable`; throws if none.
    uint32_t device_memory_type(uint32_t type_bits, bool mappable = false) const;
    VkMemoryPropertyFlags memory_flags(uint32_t type) const {
        return memory_.memoryTypes[type].propertyFlags;
    }
    // The heap a memory type draws from.
    uint32_t heap_of(uint32_t type) const { return memory_.memoryTypes[type].heapIndex; }
    // Nanoseconds per timestamp tick.
    double timestamp_period_ns() const { return timestamp_period_ns_; }
    // The heap's budget now (VK_EXT_memory_budget), if the driver reports one.
    std::optional<uint64_t> heap_budget(uint32_t heap) const;

    // Records with `record`, submits, waits: for work outside a step (weight
    // uploads, fills, block copies).
    template <class Fn>
    void run_once(Fn&& record) {
        VkCommandBuffer cb = begin_once();
        record(cb);
        end_once(cb);
    }

  private:
    VkCommandBuffer begin_once();
    void end_once(VkCommandBuffer cb);

    VkInstance instance_ = VK_NULL_HANDLE;
    VkPhysicalDevice physical_ = VK_NULL_HANDLE;
    VkDevice device_ = VK_NULL_HANDLE;
    VkQueue queue_ = VK_NULL_HANDLE;
    VkCommandPool pool_ = VK_NULL_HANDLE;
    VkCommandBuffer once_ = VK_NULL_HANDLE;
    VkFence once_fence_ = VK_NULL_HANDLE;
    VkPhysicalDeviceMemoryProperties memory_{};
    bool memory_budget_ = false;
    double timestamp_period_ns_ = 1;
    DeviceInfo info_;
};

}  // namespace headroom::kernels::vk
