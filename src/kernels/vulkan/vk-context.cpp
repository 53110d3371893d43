#include "kernels/vulkan/vk-context.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/units.h"

namespace headroom::kernels::vk {

namespace {

const char* result_name(VkResult r) {
    switch (r) {
        case VK_SUCCESS:
            return "VK_SUCCESS";
        case VK_ERROR_OUT_OF_HOST_MEMORY:
            return "VK_ERROR_OUT_OF_HOST_MEMORY";
        case VK_ERROR_OUT_OF_DEVICE_MEMORY:
            return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
        case VK_ERROR_INITIALIZATION_FAILED:
            return "VK_ERROR_INITIALIZATION_FAILED";
        case VK_ERROR_DEVICE_LOST:
            return "VK_ERROR_DEVICE_LOST";
        case VK_ERROR_EXTENSION_NOT_PRESENT:
            return "VK_ERROR_EXTENSION_NOT_PRESENT";
        case VK_ERROR_FEATURE_NOT_PRESENT:
            return "VK_ERROR_FEATURE_NOT_PRESENT";
        case VK_ERROR_INCOMPATIBLE_DRIVER:
            return "VK_ERROR_INCOMPATIBLE_DRIVER";
        case VK_ERROR_TOO_MANY_OBJECTS:
            return "VK_ERROR_TOO_MANY_OBJECTS";
        case VK_ERROR_LAYER_NOT_PRESENT:
            return "VK_ERROR_LAYER_NOT_PRESENT";
        case VK_ERROR_MEMORY_MAP_FAILED:
            return "VK_ERROR_MEMORY_MAP_FAILED";
        case VK_TIMEOUT:
            return "VK_TIMEOUT";
        default:
            return "VkResult";
    }
}

VkInstance create_instance() {
    auto app = make<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
    app.pApplicationName = "headroom";
    app.apiVersion = VK_API_VERSION_1_2;
    auto ci = make<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
    ci.pApplicationInfo = &app;
    VkInstance instance = VK_NULL_HANDLE;
    check(vkCreateInstance(&ci, nullptr, &instance), "vkCreateInstance");
    return instance;
}

bool has_extension(VkPhysicalDevice d, const char* name) {
    uint32_t n = 0;
    vkEnumerateDeviceExtensionProperties(d, nullptr, &n, nullptr);
    std::vector<VkExtensionProperties> ext(n);
    vkEnumerateDeviceExtensionProperties(d, nullptr, &n, ext.data());
    return std::any_of(ext.begin(), ext.end(), [&](const VkExtensionProperties& e) {
        return !strcmp(e.extensionName, name);
    });
}

std::string type_name(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
            return "discrete GPU";
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
            return "integrated GPU";
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
            return "virtual GPU";
        case VK_PHYSICAL_DEVICE_TYPE_CPU:
            return "CPU";
        default:
            return "other";
    }
}

DeviceInfo describe(VkPhysicalDevice d, uint32_t index) {
    DeviceInfo info;
    info.index = index;
    auto subgroup = make<VkPhysicalDeviceSubgroupProperties>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
    auto m3 = make<VkPhysicalDeviceMaintenance3Properties>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
    auto driver =
        make<VkPhysicalDeviceDriverProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES);
    auto m4 = make<VkPhysicalDeviceMaintenance4Properties>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES);
    subgroup.pNext = &m3;
    m3.pNext = &driver;
    // (The instance asks for Vulkan 1.2: the 1.3 property is read through the extension.)
    const bool maintenance4 = has_extension(d, VK_KHR_MAINTENANCE_4_EXTENSION_NAME);
    if (maintenance4) driver.pNext = &m4;
    auto props = make<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
    props.pNext = &subgroup;
    vkGetPhysicalDeviceProperties2(d, &props);
    const auto& p = props.properties;
    info.name = p.deviceName;
    info.type = type_name(p.deviceType);
    info.driver = fmt::format("{} ({})", driver.driverName, driver.driverInfo);
    info.api_version = p.apiVersion;
    info.vendor_id = p.vendorID;
    info.device_id = p.deviceID;
    info.subgroup_size = subgroup.subgroupSize;
    info.max_storage_buffer_range = p.limits.maxStorageBufferRange;
    info.max_allocation_bytes = m3.maxMemoryAllocationSize;
    info.max_buffer_bytes = maintenance4 ? m4.maxBufferSize : 0;
    info.max_shared_memory_bytes = p.limits.maxComputeSharedMemorySize;

    const bool budget = has_extension(d, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    auto mb = make<VkPhysicalDeviceMemoryBudgetPropertiesEXT>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT);
    auto mem = make<VkPhysicalDeviceMemoryProperties2>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2);
    if (budget) mem.pNext = &mb;
    vkGetPhysicalDeviceMemoryProperties2(d, &mem);
    for (uint32_t h = 0; h < mem.memoryProperties.memoryHeapCount; ++h) {
        HeapInfo heap;
        heap.size_bytes = mem.memoryProperties.memoryHeaps[h].size;
        heap.device_local =
            (mem.memoryProperties.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
        if (budget) {
            heap.budget_bytes = mb.heapBudget[h];
            heap.usage_bytes = mb.heapUsage[h];
        }
        info.heaps.push_back(heap);
    }

    auto f11 = make<VkPhysicalDeviceVulkan11Features>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES);
    auto f12 = make<VkPhysicalDeviceVulkan12Features>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
    f11.pNext = &f12;
    auto f = make<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
    f.pNext = &f11;
    std::vector<std::string> missing;
    if (VK_API_VERSION_MINOR(p.apiVersion) < 2 && VK_API_VERSION_MAJOR(p.apiVersion) == 1) {
        missing.push_back("Vulkan 1.2");
    } else {
        vkGetPhysicalDeviceFeatures2(d, &f);
        if (!f12.bufferDeviceAddress) missing.push_back("bufferDeviceAddress");
        if (!f12.storageBuffer8BitAccess) missing.push_back("storageBuffer8BitAccess");
        if (!f11.storageBuffer16BitAccess) missing.push_back("storageBuffer16BitAccess");
        if (!f.features.shaderInt64) missing.push_back("shaderInt64");
    }
    if (info.max_shared_memory_bytes < 16384) missing.push_back("16 KiB of shared memory");
    for (size_t i = 0; i < missing.size(); ++i) info.missing += (i ? ", " : "") + missing[i];
    return info;
}

std::vector<VkPhysicalDevice> physical_devices(VkInstance instance) {
    uint32_t n = 0;
    check(vkEnumeratePhysicalDevices(instance, &n, nullptr), "vkEnumeratePhysicalDevices");
    std::vector<VkPhysicalDevice> devices(n);
    check(vkEnumeratePhysicalDevices(instance, &n, devices.data()), "vkEnumeratePhysicalDevices");
    return devices;
}

}  // namespace

void check(VkResult r, const char* what) {
    if (r != VK_SUCCESS) fail("{}: {} ({})", what, result_name(r), static_cast<int>(r));
}

const HeapInfo& DeviceInfo::main_heap() const {
    return heaps[main_heap_index()];
}

uint32_t DeviceInfo::main_heap_index() const {
    uint32_t best = 0;
    for (uint32_t i = 0; i < heaps.size(); ++i)
        if (heaps[i].device_local &&
            (!heaps[best].device_local || heaps[i].size_bytes > heaps[best].size_bytes))
            best = i;
    return best;
}

uint64_t allocation_limit(const DeviceInfo& info, uint64_t lower) {
    uint64_t limit = info.max_allocation_bytes;
    if (info.max_buffer_bytes) limit = std::min(limit, info.max_buffer_bytes);
    if (const char* e = std::getenv("HEADROOM_VULKAN_MAX_ALLOCATION"); !lower && e && *e) {
        lower = parse_bytes_or_throw(e, "HEADROOM_VULKAN_MAX_ALLOCATION");
        if (lower < MiB)
            fail("HEADROOM_VULKAN_MAX_ALLOCATION={}: at least 1 MiB", format_bytes(lower));
    }
    return lower ? std::min(limit, lower) : limit;
}

std::optional<uint32_t> best_device(const std::vector<DeviceInfo>& devices, std::string* note) {
    for (const char* type : {"discrete GPU", "integrated GPU", "virtual GPU", "other"})
        for (const auto& d : devices)
            if (d.missing.empty() && d.type == type) return d.index;
    for (const auto& d : devices)
        if (d.missing.empty()) {
            if (note)
                *note = fmt::format(
                    "no Vulkan GPU here: --device vulkan runs on vulkan:{} {}, a {} device, "
                    "whose shaders run as CPU code",
                    d.index, d.name, d.type);
            return d.index;
        }
    return std::nullopt;
}

std::vector<DeviceInfo> list_devices(std::string* why) {
    std::vector<DeviceInfo> out;
    VkInstance instance = VK_NULL_HANDLE;
    try {
        instance = create_instance();
        const auto devices = physical_devices(instance);
        for (uint32_t i = 0; i < devices.size(); ++i) out.push_back(describe(devices[i], i));
    } catch (const Error& e) {
        if (why) *why = e.what();
    }
    if (instance) vkDestroyInstance(instance, nullptr);
    if (out.empty() && why && why->empty())
        *why =
            "the Vulkan loader found no device (is a driver installed? Debian: "
            "mesa-vulkan-drivers for lavapipe, or the GPU vendor's driver)";
    return out;
}

Context::Context(uint32_t index) {
    instance_ = create_instance();
    const auto devices = physical_devices(instance_);
    if (devices.empty()) {
        vkDestroyInstance(instance_, nullptr);
        fail("--device vulkan:{}: the Vulkan loader found no device (is a driver installed?)",
             index);
    }
    if (index >= devices.size()) {
        const auto n = devices.size();
        vkDestroyInstance(instance_, nullptr);
        fail(
            "--device vulkan:{}: there {} {} Vulkan device{} (0..{}); `headroom devices` lists "
            "them",
            index, n == 1 ? "is" : "are", n, n == 1 ? "" : "s", n - 1);
    }
    physical_ = devices[index];
    info_ = describe(physical_, index);
    if (!info_.missing.empty()) {
        const std::string missing = info_.missing, name = info_.name;
        vkDestroyInstance(instance_, nullptr);
        fail("--device vulkan:{}: {} lacks what headroom's shaders need: {}", index, name, missing);
    }
    vkGetPhysicalDeviceMemoryProperties(physical_, &memory_);
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(physical_, &props);
    timestamp_period_ns_ = props.limits.timestampPeriod;
    memory_budget_ = has_extension(physical_, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);

    uint32_t n_families = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n_families, nullptr);
    std::vector<VkQueueFamilyProperties> families(n_families);
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n_families, families.data());
    uint32_t family = n_families;
    for (uint32_t i = 0; i < n_families && family == n_families; ++i)
        if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) family = i;
    if (family == n_families) fail("{}: no queue family can run compute shaders", info_.name);

    const float priority = 1.0f;
    auto qi = make<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
    qi.queueFamilyIndex = family;
    qi.queueCount = 1;
    qi.pQueuePriorities = &priority;
    auto f11 = make<VkPhysicalDeviceVulkan11Features>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES);
    auto f12 = make<VkPhysicalDeviceVulkan12Features>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
    f11.pNext = &f12;
    f11.storageBuffer16BitAccess = VK_TRUE;
    f12.bufferDeviceAddress = VK_TRUE;
    f12.storageBuffer8BitAccess = VK_TRUE;
    auto features = make<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
    features.pNext = &f11;
    features.features.shaderInt64 = VK_TRUE;
    std::vector<const char*> extensions;
    if (memory_budget_) extensions.push_back(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    auto di = make<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
    di.pNext = &features;
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos = &qi;
    di.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
    di.ppEnabledExtensionNames = extensions.data();
    check(vkCreateDevice(physical_, &di, nullptr, &device_), "vkCreateDevice");
    vkGetDeviceQueue(device_, family, 0, &queue_);

    auto pi = make<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
    pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pi.queueFamilyIndex = family;
    check(vkCreateCommandPool(device_, &pi, nullptr, &pool_), "vkCreateCommandPool");
    auto ai = make<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    check(vkAllocateCommandBuffers(device_, &ai, &once_), "vkAllocateCommandBuffers");
    auto fi = make<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
    check(vkCreateFence(device_, &fi, nullptr, &once_fence_), "vkCreateFence");
}

Context::~Context() {
    if (device_) {
        vkDeviceWaitIdle(device_);
        vkDestroyFence(device_, once_fence_, nullptr);
        vkDestroyCommandPool(device_, pool_, nullptr);
        vkDestroyDevice(device_, nullptr);
    }
    if (instance_) vkDestroyInstance(instance_, nullptr);
}

uint32_t Context::memory_type(uint32_t type_bits, VkMemoryPropertyFlags required,
                              VkMemoryPropertyFlags preferred) const {
    for (const VkMemoryPropertyFlags want : {required | preferred, required})
        for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i)
            if ((type_bits & (1u << i)) && (memory_.memoryTypes[i].propertyFlags & want) == want)
                return i;
    fail("{}: no memory type with the properties {:#x}", info_.name, required);
}

uint32_t Context::device_memory_type(uint32_t type_bits, bool mappable) const {
    const uint32_t heap = info_.main_heap_index();
    constexpr VkMemoryPropertyFlags kMapped =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    for (const VkMemoryPropertyFlags want :
         {VkMemoryPropertyFlags(VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | (mappable ? kMapped : 0)),
          VkMemoryPropertyFlags(VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)})
        for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i)
            if ((type_bits & (1u << i)) && memory_.memoryTypes[i].heapIndex == heap &&
                (memory_.memoryTypes[i].propertyFlags & want) == want)
                return i;
    return memory_type(type_bits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
}

std::optional<uint64_t> Context::heap_budget(uint32_t heap) const {
    if (!memory_budget_) return std::nullopt;
    auto mb = make<VkPhysicalDeviceMemoryBudgetPropertiesEXT>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT);
    auto mem = make<VkPhysicalDeviceMemoryProperties2>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2);
    mem.pNext = &mb;
    vkGetPhysicalDeviceMemoryProperties2(physical_, &mem);
    return mb.heapBudget[heap];
}

VkCommandBuffer Context::begin_once() {
    check(vkResetCommandBuffer(once_, 0), "vkResetCommandBuffer");
    auto bi = make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(vkBeginCommandBuffer(once_, &bi), "vkBeginCommandBuffer");
    return once_;
}

void Context::end_once(VkCommandBuffer cb) {
    check(vkEndCommandBuffer(cb), "vkEndCommandBuffer");
    auto si = make<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    check(vkResetFences(device_, 1, &once_fence_), "vkResetFences");
    check(vkQueueSubmit(queue_, 1, &si, once_fence_), "vkQueueSubmit");
    check(vkWaitForFences(device_, 1, &once_fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
}

}  // namespace headroom::kernels::vk
