#include "kernels/vulkan/vulkan-backend.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/check.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/units.h"
#include "kernels/vulkan/spirv.h"

namespace headroom::kernels {

using vk::check;
using vk::make;

namespace {

constexpr uint64_t kStagingBytes = 64ull << 20;
constexpr uint32_t kPushBytes = 128;
constexpr uint32_t kMaxGroups = 65535;
constexpr uint32_t kMaxQueries = 4096;

uint64_t align_up(uint64_t n, uint64_t a) {
    return (n + a - 1) / a * a;
}

uint32_t div_up(uint64_t n, uint64_t d) {
    return static_cast<uint32_t>((n + d - 1) / d);
}

// The shaders' name for a tensor type, or null when no shader takes it.
const char* shader_type(TensorType t) {
    switch (t) {
        case TensorType::F32:
            return "f32";
        case TensorType::F16:
            return "f16";
        case TensorType::BF16:
            return "bf16";
        case TensorType::Q8_0:
            return "q8_0";
        case TensorType::Q4_0:
            return "q4_0";
        case TensorType::Q4_1:
            return "q4_1";
        case TensorType::Q5_0:
            return "q5_0";
        case TensorType::Q5_1:
            return "q5_1";
        case TensorType::Q4_K:
            return "q4_k";
        case TensorType::Q5_K:
            return "q5_k";
        case TensorType::Q6_K:
            return "q6_k";
        default:
            return nullptr;
    }
}

const char* kv_name(KvDtype d) {
    switch (d) {
        case KvDtype::F32:
            return "f32";
        case KvDtype::F16:
            return "f16";
        case KvDtype::BF16:
            return "bf16";
        case KvDtype::Q8_0:
            return "q8_0";
    }
    return "f16";
}

// A 1-D grid of n invocations in workgroups of `local`, 2-D past 65535 groups.
std::pair<uint32_t, uint32_t> grid_1d(uint64_t n, uint32_t local) {
    const uint64_t groups = (n + local - 1) / local;
    if (groups <= kMaxGroups) return {static_cast<uint32_t>(std::max<uint64_t>(groups, 1)), 1};
    return {kMaxGroups, div_up(groups, kMaxGroups)};
}

// A shader module's name built on the stack: a step names ~15 per layer and
// allocates nothing.
class ShaderName {
  public:
    template <class... Args>
    explicit ShaderName(fmt::format_string<Args...> f, Args&&... args) {
        n_ = fmt::format_to_n(buf_, sizeof(buf_), f, std::forward<Args>(args)...).size;
    }
    operator std::string_view() const { return {buf_, std::min(n_, sizeof(buf_))}; }

  private:
    char buf_[48];
    size_t n_ = 0;
};

// Push constants, laid out as the shaders declare them (std430: 8-byte
// addresses first, then 4-byte fields). No padding is left undefined: a
// step's commands are compared byte for byte with recorded ones, so a
// struct of an odd number of words ends with an explicit zero word.
struct MatmulArgs {
    uint64_t w0, w1, w2, x, y0, y1, y2;
    uint32_t n_rows0, n_rows1, n_rows2, end0, end1, n_cols, n_tokens, row_bytes, x_stride, pad;
};
struct NormArgs {
    uint64_t x, w, out, y;
    uint32_t n_rows, n;
    float eps, weight_offset;
};
struct ElementwiseArgs {
    uint64_t x, y;
    uint32_t n, n_cols;
};
struct RopeShaderArgs {
    uint64_t x, positions, freqs, x2;
    uint32_t n_tokens, n_head, head_dim, n_rot, neox, n_head2;
};
struct RowsArgs {
    uint64_t src, index, out;
    uint32_t n_cols, row_bytes;
    float scale;
    uint32_t pad = 0;
};
struct StoreKvArgs {
    uint64_t k, v, pieces, slots;
    uint32_t piece_blocks, layer_offset, block_bytes, block_size, k_row_bytes, v_row_bytes, v_start,
        n_head_kv, head_dim_k, head_dim_v;
};
struct AttentionArgsGpu {
    uint64_t q, out, pieces, step;
    uint32_t piece_blocks, layer_offset, at_positions, at_seq_of_token, at_table_start, at_tables,
        block_bytes, block_size, k_row_bytes, v_row_bytes, v_start, n_head, n_head_kv, head_dim_k,
        head_dim_v, window;
    float scale;
    uint32_t heads;
};
static_assert(sizeof(AttentionArgsGpu) <= kPushBytes);

// A matmul kernel of matmul.comp: its module suffix and a workgroup's rows
// and tokens.
struct MatmulKernel {
    const char* suffix;
    uint32_t rows, tokens;
};
constexpr MatmulKernel kMatVec{"t1", 16, 1}, kMatVec4{"t4", 16, 4}, kTiled{"mm", 64, 64};
// Calls of more tokens than this take the tiled kernel.
constexpr int64_t kTiledAbove = 8;

// Query heads of one KV head that an attention workgroup takes together,
// reading each K and V row once for them: the largest divisor of the group
// up to 8. (Taking fewer to have more workgroups in a decode step of few
// sequences reads the cache several times: slower even on lavapipe.)
uint32_t attention_heads_per_workgroup(uint32_t n_head, uint32_t n_head_kv) {
    HR_CHECK(n_head_kv > 0 && n_head % n_head_kv == 0);
    const uint32_t group = n_head / n_head_kv;
    uint32_t h = std::min<uint32_t>(group, 8);
    while (group % h != 0) --h;
    return h;
}
static_assert(sizeof(MatmulArgs) == 96 && sizeof(NormArgs) == 48 && sizeof(ElementwiseArgs) == 24 &&
              sizeof(RopeShaderArgs) == 56 && sizeof(RowsArgs) == 40 && sizeof(StoreKvArgs) == 72 &&
              sizeof(AttentionArgsGpu) == 104);

// $XDG_CACHE_HOME/headroom/vulkan-<vendor>-<device>.pipelines (else under
// ~/.cache), or "" where neither variable is set.
std::string pipeline_cache_file(const vk::DeviceInfo& info) {
    std::string dir;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
        dir = x;
    else if (const char* h = std::getenv("HOME"); h && *h)
        dir = std::string(h) + "/.cache";
    if (dir.empty()) return "";
    return fmt::format("{}/headroom/vulkan-{:04x}-{:04x}.pipelines", dir, info.vendor_id,
                       info.device_id);
}

std::vector<char> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return {};
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

VulkanBackend::VulkanBackend(Ledger& host, const VulkanOptions& o)
    : Backend(host, false),
      ctx_(std::make_unique<vk::Context>(o.device_index)),
      ledger_(fmt::format("gpu{}", o.device_index)),
      progress_(o.progress) {
    const vk::HeapInfo& heap = ctx_->info().main_heap();
    if (o.device_memory_bytes) {
        device_bytes_ = o.device_memory_bytes;
        device_bytes_source_ = fmt::format("--device-memory {}", format_bytes(device_bytes_));
    } else {
        const uint64_t have = heap.budget_bytes ? *heap.budget_bytes : heap.size_bytes;
        if (o.reserve_bytes >= have)
            fail("--reserve {} leaves nothing of {}'s {} {}", format_bytes(o.reserve_bytes),
                 ctx_->info().name, format_bytes(have), heap.budget_bytes ? "budget" : "heap");
        device_bytes_ = have - o.reserve_bytes;
        device_bytes_source_ = fmt::format(
            "{} {}{}", heap.budget_bytes ? "heap budget" : "heap", format_bytes(have),
            o.reserve_bytes ? fmt::format(" less --reserve {}", format_bytes(o.reserve_bytes))
                            : "");
    }
    budget_bytes_ = static_cast<uint64_t>(static_cast<double>(device_bytes_) * o.mem_fraction);
    max_allocation_ = vk::allocation_limit(ctx_->info(), o.max_allocation_bytes);
    // One tensor past the advice is still tried, up to the hard cap where
    // the driver gives one (and the limit where the options lowered it).
    const vk::DeviceInfo& info = ctx_->info();
    const bool lowered = max_allocation_ < vk::allocation_limit(info, UINT64_MAX);
    allocation_cap_ = lowered ? max_allocation_ : std::max(max_allocation_, info.max_buffer_bytes);

    // The driver checks the data's header (vendor, device, cache UUID) and
    // ignores data from another driver.
    pipeline_cache_file_ = pipeline_cache_file(ctx_->info());
    const std::vector<char> cached =
        pipeline_cache_file_.empty() ? std::vector<char>{} : read_file(pipeline_cache_file_);
    auto ci = make<VkPipelineCacheCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO);
    ci.initialDataSize = cached.size();
    ci.pInitialData = cached.data();
    if (vkCreatePipelineCache(ctx_->device(), &ci, nullptr, &pipeline_cache_) != VK_SUCCESS) {
        ci.initialDataSize = 0;
        check(vkCreatePipelineCache(ctx_->device(), &ci, nullptr, &pipeline_cache_),
              "vkCreatePipelineCache");
    }

    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
    auto li = make<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
    li.pushConstantRangeCount = 1;
    li.pPushConstantRanges = &range;
    check(vkCreatePipelineLayout(ctx_->device(), &li, nullptr, &layout_), "vkCreatePipelineLayout");
    auto ai = make<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
    ai.commandPool = ctx_->command_pool();
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    check(vkAllocateCommandBuffers(ctx_->device(), &ai, &step_cb_), "vkAllocateCommandBuffers");
    auto fi = make<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
    check(vkCreateFence(ctx_->device(), &fi, nullptr, &step_fence_), "vkCreateFence");
    tables_ = new_allocation(Term::Runtime, kContextBytes, false, "RoPE and KV tables");
    ledger_.allocate(Term::Runtime, kContextBytes);
    if (const char* p = std::getenv("HEADROOM_VULKAN_PROFILE"); p && *p && *p != '0') {
        auto qi = make<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
        qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
        qi.queryCount = kMaxQueries;
        check(vkCreateQueryPool(ctx_->device(), &qi, nullptr, &queries_), "vkCreateQueryPool");
        timestamp_ns_ = ctx_->timestamp_period_ns();
    }
}

VulkanBackend::~VulkanBackend() {
    VkDevice d = ctx_->device();
    vkDeviceWaitIdle(d);
    if (queries_) {
        std::vector<std::pair<double, std::string>> rows;
        double total = 0;
        for (const auto& [name, t] : profile_) {
            rows.emplace_back(t.first,
                              fmt::format("{:>10.1f} ms {:>8} calls  {}", t.first, t.second, name));
            total += t.first;
        }
        std::sort(rows.rbegin(), rows.rend());
        fmt::print(stderr, "vulkan profile: {:.1f} ms of device time\n", total);
        for (const auto& r : rows) fmt::print(stderr, "  {}\n", r.second);
        vkDestroyQueryPool(d, queries_, nullptr);
    }
    for (auto& [name, p] : pipelines_) vkDestroyPipeline(d, p, nullptr);
    save_pipeline_cache();
    vkDestroyPipelineCache(d, pipeline_cache_, nullptr);
    vkDestroyPipelineLayout(d, layout_, nullptr);
    vkDestroyFence(d, step_fence_, nullptr);
    for (auto& a : allocations_) {
        if (!a.live) continue;
        vkDestroyBuffer(d, a.buffer, nullptr);
        vkFreeMemory(d, a.memory, nullptr);
    }
}

std::string VulkanBackend::name() const {
    return fmt::format("vulkan {} ({})", ctx_->info().name, ctx_->info().type);
}

// ---- memory ---------------------------------------------------------------------

DevPtr VulkanBackend::new_allocation(Term term, uint64_t bytes, bool host_visible, const char* what,
                                     bool mapped) {
    Ledger& book = host_visible ? host_ledger() : ledger_;
    bytes = std::max<uint64_t>(bytes, 16);
    if (!host_visible) {
        uint64_t held = 0;
        for (Term t : kTerms) held += ledger_.snapshot()[t].reserved_bytes;
        if (held + bytes > budget_bytes_)
            fail("{}: {} does not fit {}'s budget: {} of {} is taken ({} = {} × mem-fraction)",
                 what, format_bytes(bytes), ctx_->info().name, format_bytes(held),
                 format_bytes(budget_bytes_), format_bytes(budget_bytes_), device_bytes_source_);
    }
    if (bytes > allocation_cap_)
        fail(
            "{}: {} is more than {} allocates at once ({}{}); a KV block, an activation buffer "
            "or a weight tensor must fit one allocation",
            what, format_bytes(bytes), ctx_->info().name, format_bytes(allocation_cap_),
            allocation_cap_ < ctx_->info().max_allocation_bytes ? ", lowered by the options" : "");
    VkDevice d = ctx_->device();
    Allocation a;
    a.size = bytes;
    a.term = term;
    a.host = host_visible;
    auto bi = make<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
    bi.size = bytes;
    bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
               VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
    bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    check(vkCreateBuffer(d, &bi, nullptr, &a.buffer), "vkCreateBuffer");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(d, a.buffer, &req);
    const uint32_t type = host_visible ? ctx_->memory_type(req.memoryTypeBits,
                                                           VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                                               VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                                           VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
                                       : ctx_->device_memory_type(req.memoryTypeBits, mapped);
    auto flags = make<VkMemoryAllocateFlagsInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO);
    flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    auto mi = make<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
    mi.pNext = &flags;
    mi.allocationSize = req.size;
    mi.memoryTypeIndex = type;
    const VkResult r = vkAllocateMemory(d, &mi, nullptr, &a.memory);
    if (r != VK_SUCCESS) {
        vkDestroyBuffer(d, a.buffer, nullptr);
        fail("{}: {} could not take {} of {} memory ({}); {} of the ledger's budget {} was free",
             what, ctx_->info().name, format_bytes(bytes), host_visible ? "host-visible" : "device",
             static_cast<int>(r), host_visible ? "host" : ledger_.device(),
             format_bytes(budget_bytes_));
    }
    check(vkBindBufferMemory(d, a.buffer, a.memory, 0), "vkBindBufferMemory");
    auto ai = make<VkBufferDeviceAddressInfo>(VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO);
    ai.buffer = a.buffer;
    a.address = vkGetBufferDeviceAddress(d, &ai);
    constexpr VkMemoryPropertyFlags kMappable =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    if (host_visible || (mapped && (ctx_->memory_flags(type) & kMappable) == kMappable)) {
        void* p = nullptr;
        check(vkMapMemory(d, a.memory, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
        a.mapped = static_cast<uint8_t*>(p);
    }
    a.live = true;
    book.reserve(term, bytes);
    allocations_.push_back(a);
    return {static_cast<uint32_t>(allocations_.size()), 0};
}

AllocationCount VulkanBackend::allocations() const {
    AllocationCount c;
    for (const auto& a : allocations_)
        if (a.live && !a.host) {
            ++c.count;
            c.largest_bytes = std::max(c.largest_bytes, a.size);
        }
    return c;
}

DevPtr VulkanBackend::allocate(Term term, uint64_t bytes, const char* what) {
    return new_allocation(term, bytes, false, what);
}

DevPtr VulkanBackend::allocate_step_view(uint64_t bytes) {
    return new_allocation(Term::Runtime, bytes, false, "step view", true);
}

void VulkanBackend::release(DevPtr buffer) {
    if (!buffer) return;
    Allocation& a = allocations_[buffer.buffer - 1];
    HR_CHECK(a.live);
    VkDevice d = ctx_->device();
    vkDeviceWaitIdle(d);
    vkDestroyBuffer(d, a.buffer, nullptr);
    vkFreeMemory(d, a.memory, nullptr);
    (a.host ? host_ledger() : ledger_).unreserve(a.term, a.size);
    a = Allocation{};
}

void VulkanBackend::copy_through_staging(DevPtr dst, const uint8_t* src, uint64_t bytes) {
    if (!staging_) {
        staging_bytes_ = std::min(kStagingBytes, max_allocation_);
        staging_ = new_allocation(Term::Runtime, staging_bytes_, true, "upload staging");
    }
    const Allocation& s = allocation(staging_);
    const Allocation& d = allocation(dst);
    for (uint64_t done = 0; done < bytes;) {
        const uint64_t n = std::min(staging_bytes_, bytes - done);
        std::memcpy(s.mapped, src + done, n);
        ctx_->run_once([&](VkCommandBuffer cb) {
            VkBufferCopy c{0, dst.offset + done, n};
            vkCmdCopyBuffer(cb, s.buffer, d.buffer, 1, &c);
        });
        done += n;
    }
    totals_.upload_bytes += bytes;
}

void VulkanBackend::upload(DevPtr dst, const void* src, uint64_t bytes) {
    copy_through_staging(dst, static_cast<const uint8_t*>(src), bytes);
}

void VulkanBackend::download(void* dst, DevPtr src, uint64_t bytes) {
    if (!staging_) {
        staging_bytes_ = std::min(kStagingBytes, max_allocation_);
        staging_ = new_allocation(Term::Runtime, staging_bytes_, true, "upload staging");
    }
    const Allocation& s = allocation(staging_);
    const Allocation& a = allocation(src);
    for (uint64_t done = 0; done < bytes;) {
        const uint64_t n = std::min(staging_bytes_, bytes - done);
        ctx_->run_once([&](VkCommandBuffer cb) {
            VkBufferCopy c{src.offset + done, 0, n};
            vkCmdCopyBuffer(cb, a.buffer, s.buffer, 1, &c);
        });
        std::memcpy(static_cast<uint8_t*>(dst) + done, s.mapped, n);
        done += n;
    }
    totals_.download_bytes += bytes;
}

void VulkanBackend::copy_block(DevPtr dst, DevPtr src, uint64_t bytes) {
    HR_CHECK(!recording_);
    const Allocation& d = allocation(dst);
    const Allocation& s = allocation(src);
    ctx_->run_once([&](VkCommandBuffer cb) {
        VkBufferCopy c{src.offset, dst.offset, bytes};
        vkCmdCopyBuffer(cb, s.buffer, d.buffer, 1, &c);
    });
}

// ---- weights ------------------------------------------------------------------

void VulkanBackend::begin_weights(std::span<const uint8_t> file_data, bool mapped) {
    file_data_ = file_data;
    file_mapped_ = mapped;
    kept_pages_.clear();
}

Weight VulkanBackend::upload_matrix(const HostTensor& t, WeightUse use) {
    HR_CHECK_MSG(t.n_expert == 0, "expert tensors reach only a backend that runs experts");
    if (!shader_type(t.type))
        fail("the Vulkan backend has no shaders for {} weights", headroom::name(t.type));
    if (use != WeightUse::Rows) {
        for (const MatmulKernel* k : {&kMatVec, &kMatVec4, &kTiled})
            wanted_modules_.push_back(fmt::format("matmul-{}-{}", shader_type(t.type), k->suffix));
    }
    if (use != WeightUse::Matmul)
        wanted_modules_.push_back(fmt::format("get-rows-{}", shader_type(t.type)));
    WeightEntry e;
    e.w = {t.type, t.n_rows, t.n_cols, t.row_bytes, static_cast<uint32_t>(weights_.size() + 1)};
    e.host = t.data;
    e.bytes = t.row_bytes * static_cast<uint64_t>(t.n_rows);
    weights_.push_back(e);
    return e.w;
}

Weight VulkanBackend::upload_vector(const float* values, int64_t n, uint64_t) {
    WeightEntry e;
    const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(float);
    e.w = {TensorType::F32, 1, n, bytes, static_cast<uint32_t>(weights_.size() + 1)};
    e.host = reinterpret_cast<const uint8_t*>(values);
    e.bytes = bytes;
    e.values = values;
    weights_.push_back(e);
    return e.w;
}

void VulkanBackend::end_weights() {
    // The tensors since the last end_weights (a backend may hold several models').
    const size_t begin = n_uploaded_;
    n_uploaded_ = weights_.size();
    uint64_t total = 0;
    for (size_t i = begin; i < weights_.size(); ++i) total += device_weight_slot(weights_[i].bytes);
    uint64_t held = 0;
    for (Term t : kTerms) held += ledger_.snapshot()[t].reserved_bytes;
    if (held + total > budget_bytes_)
        fail(
            "the weights take {} on {} but its budget is {} ({} × mem-fraction, {} already "
            "taken): use a smaller weight type (headroom plan --compare-quant), a larger "
            "--mem-fraction or --device-memory, or the CPU (--device cpu)",
            format_bytes(total), ctx_->info().name, format_bytes(budget_bytes_),
            device_bytes_source_, format_bytes(held));
    // Chunks of at most 1 GiB (or what the device allocates at once), each
    // exactly the tensors packed into it.
    const uint64_t max_chunk = std::min<uint64_t>(max_allocation_, 1ull << 30);
    Progress bar("uploading weights", total, progress_ && total > (256ull << 20));
    uint64_t done = 0;
    for (size_t first = begin; first < weights_.size();) {
        uint64_t chunk = 0;
        size_t last = first;
        while (last < weights_.size() &&
               (last == first || chunk + device_weight_slot(weights_[last].bytes) <= max_chunk))
            chunk += device_weight_slot(weights_[last++].bytes);
        const DevPtr base = new_allocation(Term::Weights, chunk, false, "weights");
        ledger_.allocate(Term::Weights, chunk);
        uint64_t at = 0;
        for (size_t i = first; i < last; ++i) {
            WeightEntry& e = weights_[i];
            e.at = base + at;
            copy_through_staging(e.at, e.host, e.bytes);
            at += device_weight_slot(e.bytes);
            done += device_weight_slot(e.bytes);
            bar.update(done, format_bytes(done));
        }
        first = last;
    }
    bar.finish(format_bytes(total));
    // The file's pages of what went up are not read again: the device has
    // them (whole pages inside each tensor; what the host also reads keeps its pages).
    if (file_mapped_) {
        constexpr uint64_t kPage = 4096;
        for (size_t i = begin; i < weights_.size(); ++i) {
            const auto* p = weights_[i].host;
            if (std::find(kept_pages_.begin(), kept_pages_.end(), p) != kept_pages_.end()) continue;
            if (p < file_data_.data() ||
                p + weights_[i].bytes > file_data_.data() + file_data_.size())
                continue;
            const auto lo = (reinterpret_cast<uintptr_t>(p) + kPage - 1) & ~(kPage - 1);
            const auto hi = reinterpret_cast<uintptr_t>(p + weights_[i].bytes) & ~(kPage - 1);
            if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
        }
    }
    if (staging_) {
        release(staging_);
        staging_ = {};
    }
}

// ---- steps ----------------------------------------------------------------------

void VulkanBackend::set_workspace(const Workspace& ws) {
    // Every pipeline a step of this model may bind, built now rather than
    // while the first step records.
    for (const char* m : {"norm", "rope", "add", "add-bias", "silu-mul", "gelu-mul", "gather-rows"})
        wanted_modules_.emplace_back(m);
    wanted_modules_.push_back(fmt::format("store-kv-{}", kv_name(ws.kv_dtype)));
    wanted_modules_.push_back(fmt::format("attention-{}", kv_name(ws.kv_dtype)));
    for (const auto& m : wanted_modules_) pipeline(m);
    wanted_modules_.clear();
    // Recorded steps copy into the old logits readback: recorded no more.
    for (auto& r : recorded_) vkFreeCommandBuffers(ctx_->device(), ctx_->command_pool(), 1, &r.cb);
    recorded_.clear();
    step_device_ = ws.step_view;
    step_device_bytes_ = ws.step_view_bytes;
    uint8_t* mapped = step_device_ ? allocation(step_device_).mapped : nullptr;
    step_mapped_ = mapped ? mapped + step_device_.offset : nullptr;
    if (logits_host_) release(logits_host_);
    logits_host_bytes_ = ws.logits_host_bytes;
    logits_host_ = new_allocation(Term::Activations, logits_host_bytes_, true, "logits readback");
}

void VulkanBackend::save_pipeline_cache() const {
    if (pipeline_cache_file_.empty() || pipelines_.empty()) return;
    size_t n = 0;
    VkDevice d = ctx_->device();
    if (vkGetPipelineCacheData(d, pipeline_cache_, &n, nullptr) != VK_SUCCESS || n == 0) return;
    std::vector<char> data(n);
    if (vkGetPipelineCacheData(d, pipeline_cache_, &n, data.data()) != VK_SUCCESS) return;
    // A cache is only a saving: a directory that cannot be written costs the
    // next run its compiles, nothing else. Written whole, then renamed, so
    // that two processes never read half a file.
    std::error_code ec;
    const std::filesystem::path path(pipeline_cache_file_);
    std::filesystem::create_directories(path.parent_path(), ec);
    const std::string tmp = fmt::format("{}.{}", pipeline_cache_file_, ::getpid());
    std::ofstream out(tmp, std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(n));
    out.close();
    if (!out) {
        std::filesystem::remove(tmp, ec);
        return;
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) std::filesystem::remove(tmp, ec);
}

const VulkanBackend::Pipeline& VulkanBackend::pipeline(std::string_view name) {
    if (auto it = pipelines_.find(name); it != pipelines_.end()) return *it;
    if (recording_) ++pipelines_built_in_steps_;
    const vk::SpirvModule* m = vk::find_spirv(name);
    HR_CHECK_MSG(m, "a shader module the build did not make");
    VkDevice d = ctx_->device();
    auto si = make<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
    si.codeSize = m->n_words * 4;
    si.pCode = m->words;
    VkShaderModule module = VK_NULL_HANDLE;
    check(vkCreateShaderModule(d, &si, nullptr, &module), "vkCreateShaderModule");
    auto pi = make<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
    pi.stage =
        make<VkPipelineShaderStageCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO);
    pi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    pi.stage.module = module;
    pi.stage.pName = "main";
    pi.layout = layout_;
    VkPipeline p = VK_NULL_HANDLE;
    const VkResult r = vkCreateComputePipelines(d, pipeline_cache_, 1, &pi, nullptr, &p);
    vkDestroyShaderModule(d, module, nullptr);
    check(r, "vkCreateComputePipelines");
    return *pipelines_.emplace(std::string(name), p).first;
}

bool VulkanBackend::Command::operator==(const Command& o) const {
    return kind == o.kind && pipeline == o.pipeline && push_bytes == o.push_bytes &&
           std::memcmp(push.data(), o.push.data(), push_bytes) == 0 && groups == o.groups;
}

void VulkanBackend::barrier() {
    Command c;
    c.kind = Command::Kind::Barrier;
    commands_.push_back(c);
    ++step_counters_.n_barriers;
    written_.clear();
    read_.clear();
}

bool VulkanBackend::hazard(std::initializer_list<Span> reads,
                           std::initializer_list<Span> writes) const {
    auto overlaps = [](const Span& a, const std::vector<Span>& set) {
        return std::any_of(set.begin(), set.end(), [&](const Span& b) {
            return a.buffer == b.buffer && a.lo < b.hi && b.lo < a.hi;
        });
    };
    bool found = false;
    for (const Span& r : reads) found = found || overlaps(r, written_);
    for (const Span& w : writes) found = found || overlaps(w, written_) || overlaps(w, read_);
    return found;
}

void VulkanBackend::access(std::initializer_list<Span> reads, std::initializer_list<Span> writes) {
    if (hazard(reads, writes)) barrier();
    read_.insert(read_.end(), reads.begin(), reads.end());
    written_.insert(written_.end(), writes.begin(), writes.end());
}

template <class Push>
void VulkanBackend::dispatch(std::string_view shader, const Push& push,
                             std::initializer_list<Span> reads, std::initializer_list<Span> writes,
                             uint32_t gx, uint32_t gy, uint32_t gz) {
    static_assert(sizeof(Push) <= kPushBytes);
    HR_CHECK_MSG(recording_, "an op outside begin_step / end_step");
    // Timed one at a time: the profile's per-shader times need each
    // dispatch to finish before the next one starts.
    if (queries_ && !commands_.empty() && commands_.back().kind != Command::Kind::Barrier)
        barrier();
    access(reads, writes);
    Command c;
    const Pipeline& p = pipeline(shader);
    c.pipeline = p.second;
    c.shader = &p.first;
    c.push_bytes = sizeof(Push);
    std::memcpy(c.push.data(), &push, sizeof(Push));
    c.groups = {gx, gy, gz};
    commands_.push_back(c);
    ++step_counters_.n_dispatches;
}

void VulkanBackend::update(DevPtr dst, const void* src, uint64_t bytes) {
    HR_CHECK(recording_);
    if (bytes == 0) return;
    access({}, {span(dst, bytes)});
    Command c;
    c.kind = Command::Kind::Update;
    c.dst = dst;
    c.payload.assign(static_cast<const uint8_t*>(src), static_cast<const uint8_t*>(src) + bytes);
    commands_.push_back(std::move(c));
    step_counters_.upload_bytes += bytes;
    replayable_ = false;
}

void VulkanBackend::begin_step(const StepView& step) {
    HR_CHECK(!recording_);
    step_counters_ = {};
    commands_.clear();
    written_.clear();
    read_.clear();
    replayable_ = true;
    recording_ = true;
    // First, what earlier submissions wrote (the last step, a block copied
    // between steps) is made visible to this one's reads and writes.
    barrier();
    const uint64_t bytes = uint64_t{step.n_words} * 4;
    HR_CHECK(bytes <= step_device_bytes_);
    if (step_mapped_) {
        // Host-visible device memory: written here (the last step's work is
        // done), visible to the device at the submission.
        std::memcpy(step_mapped_, step.words, bytes);
        step_counters_.upload_bytes += bytes;
    } else {
        update(step_device_, step.words, bytes);
    }
}

void VulkanBackend::upload_in_step(DevPtr dst, const void* src, uint64_t bytes) {
    update(dst, src, bytes);
}

void VulkanBackend::record(VkCommandBuffer cb, DevPtr logits, uint64_t bytes) {
    check(vkResetCommandBuffer(cb, 0), "vkResetCommandBuffer");
    auto bi = make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    check(vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer");
    uint32_t n_queries = 0;
    if (queries_) {
        vkCmdResetQueryPool(cb, queries_, 0, kMaxQueries);
        vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, n_queries++);
    }
    auto barrier = [&](VkAccessFlags src, VkAccessFlags dst, VkPipelineStageFlags from,
                       VkPipelineStageFlags to) {
        auto b = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
        b.srcAccessMask = src;
        b.dstAccessMask = dst;
        vkCmdPipelineBarrier(cb, from, to, 0, 1, &b, 0, nullptr, 0, nullptr);
    };
    constexpr VkPipelineStageFlags kWork =
        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    constexpr VkAccessFlags kWrites = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    constexpr VkAccessFlags kAll =
        kWrites | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT;
    VkPipeline bound = VK_NULL_HANDLE;
    for (const Command& c : commands_) switch (c.kind) {
            case Command::Kind::Dispatch:
                if (c.pipeline != bound) {
                    vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, c.pipeline);
                    bound = c.pipeline;
                }
                vkCmdPushConstants(cb, layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, c.push_bytes,
                                   c.push.data());
                vkCmdDispatch(cb, c.groups[0], c.groups[1], c.groups[2]);
                if (queries_ && n_queries < kMaxQueries)
                    vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, queries_,
                                        n_queries++);
                break;
            case Command::Kind::Barrier:
                barrier(kWrites, kAll, kWork, kWork);
                break;
            case Command::Kind::Update: {
                // vkCmdUpdateBuffer takes 64 KiB a call, its data kept in the commands.
                const Allocation& a = allocation(c.dst);
                for (uint64_t done = 0; done < c.payload.size(); done += 65536)
                    vkCmdUpdateBuffer(cb, a.buffer, c.dst.offset + done,
                                      std::min<uint64_t>(65536, c.payload.size() - done),
                                      c.payload.data() + done);
                break;
            }
        }
    // The step's writes made visible to the logits copy and to what runs
    // after the step outside one (a block copy, a download), then the copy's
    // to the host.
    barrier(kWrites, kAll, kWork, kWork);
    if (bytes) {
        VkBufferCopy copy{logits.offset, 0, bytes};
        vkCmdCopyBuffer(cb, allocation(logits).buffer, allocation(logits_host_).buffer, 1, &copy);
    }
    barrier(kWrites, VK_ACCESS_HOST_READ_BIT, kWork, VK_PIPELINE_STAGE_HOST_BIT);
    check(vkEndCommandBuffer(cb), "vkEndCommandBuffer");
    ++step_counters_.n_recorded;
}

float* VulkanBackend::end_step(DevPtr logits, uint64_t n_floats) {
    HR_CHECK(recording_);
    recording_ = false;
    const uint64_t bytes = n_floats * 4;
    HR_CHECK(bytes <= logits_host_bytes_);
    // A step whose commands carry no data (the step view is in mapped
    // memory; no tables or host rows were written) is kept as recorded, and
    // a later step of the same commands (a decode step of the same batch
    // shape: the addresses and sizes are the same, what changes is in the
    // step view) submits it again without recording.
    Recorded* r = nullptr;
    if (replayable_)
        for (auto& e : recorded_)
            if (e.logits == logits && e.logits_bytes == bytes && e.commands == commands_) r = &e;
    if (!r && replayable_) {
        if (recorded_.size() < kMaxRecorded) {
            Recorded e;
            auto ai =
                make<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
            ai.commandPool = ctx_->command_pool();
            ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
            ai.commandBufferCount = 1;
            check(vkAllocateCommandBuffers(ctx_->device(), &ai, &e.cb), "vkAllocateCommandBuffers");
            recorded_.push_back(std::move(e));
            r = &recorded_.back();
        } else {
            r = &*std::min_element(
                recorded_.begin(), recorded_.end(),
                [](const Recorded& a, const Recorded& b) { return a.last_use < b.last_use; });
        }
        record(r->cb, logits, bytes);
        r->commands = commands_;
        r->logits = logits;
        r->logits_bytes = bytes;
    }
    VkCommandBuffer cb = step_cb_;
    if (r) {
        cb = r->cb;
        r->last_use = ++n_steps_;
    } else {
        record(step_cb_, logits, bytes);
    }
    auto si = make<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    check(vkResetFences(ctx_->device(), 1, &step_fence_), "vkResetFences");
    check(vkQueueSubmit(ctx_->queue(), 1, &si, step_fence_), "vkQueueSubmit");
    check(vkWaitForFences(ctx_->device(), 1, &step_fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    if (queries_) {
        std::vector<const std::string*> shaders;
        for (const Command& c : commands_)
            if (c.kind == Command::Kind::Dispatch && shaders.size() + 1 < kMaxQueries)
                shaders.push_back(c.shader);
        std::vector<uint64_t> ts(shaders.size() + 1);
        check(vkGetQueryPoolResults(ctx_->device(), queries_, 0, static_cast<uint32_t>(ts.size()),
                                    ts.size() * 8, ts.data(), 8,
                                    VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
              "vkGetQueryPoolResults");
        for (size_t i = 0; i < shaders.size(); ++i) {
            auto& p = profile_[*shaders[i]];
            p.first += static_cast<double>(ts[i + 1] - ts[i]) * timestamp_ns_ * 1e-6;
            ++p.second;
        }
    }
    step_counters_.n_submits = 1;
    step_counters_.n_waits = 1;
    step_counters_.download_bytes = bytes;
    totals_.n_submits += 1;
    totals_.n_waits += 1;
    totals_.n_dispatches += step_counters_.n_dispatches;
    totals_.n_barriers += step_counters_.n_barriers;
    totals_.n_recorded += step_counters_.n_recorded;
    totals_.upload_bytes += step_counters_.upload_bytes;
    totals_.download_bytes += bytes;
    return reinterpret_cast<float*>(allocation(logits_host_).mapped);
}

// ---- ops --------------------------------------------------------------------------

void VulkanBackend::get_rows(const Weight& table, const StepView& step, float scale, DevPtr out) {
    RowsArgs a{address(table),
               step_address(step.at.tokens),
               address(out),
               static_cast<uint32_t>(table.n_cols),
               static_cast<uint32_t>(table.row_bytes),
               scale};
    const uint64_t out_bytes = uint64_t{step.n_tokens} * table.n_cols * 4;
    dispatch(ShaderName("get-rows-{}", shader_type(table.type)), a, {step_span()},
             {span(out, out_bytes)}, div_up(table.n_cols, 64), step.n_tokens);
}

void VulkanBackend::gather_rows(DevPtr x, int64_t n_cols, const StepView& step, DevPtr out) {
    if (step.n_logit_rows == 0) return;
    RowsArgs a{address(x),
               step_address(step.at.logit_rows),
               address(out),
               static_cast<uint32_t>(n_cols),
               0,
               1.0f};
    dispatch("gather-rows", a, {span(x, uint64_t{step.n_tokens} * n_cols * 4), step_span()},
             {span(out, uint64_t{step.n_logit_rows} * n_cols * 4)}, div_up(n_cols, 64),
             step.n_logit_rows);
}

void VulkanBackend::rmsnorm(DevPtr x, const Weight& w, float weight_offset, float eps,
                            int64_t n_rows, int64_t n, DevPtr out) {
    NormArgs a{address(x),
               address(w),
               address(out),
               0,
               static_cast<uint32_t>(n_rows),
               static_cast<uint32_t>(n),
               eps,
               weight_offset};
    const auto n_groups = static_cast<uint64_t>(n_rows);
    const uint64_t bytes = static_cast<uint64_t>(n_rows) * n * 4;
    const auto gx = static_cast<uint32_t>(std::min<uint64_t>(n_groups, kMaxGroups));
    const uint32_t gy = div_up(n_groups, kMaxGroups);
    // x += y just before, alone since the last barrier (a residual add
    // before the next norm): one dispatch does both, row by row.
    const size_t n_cmd = commands_.size();
    if (!queries_ && n_cmd >= 2 && commands_[n_cmd - 2].kind == Command::Kind::Barrier &&
        commands_[n_cmd - 1].kind == Command::Kind::Dispatch &&
        *commands_[n_cmd - 1].shader == "add") {
        ElementwiseArgs add;
        std::memcpy(&add, commands_.back().push.data(), sizeof(add));
        // Row by row, the dispatch reads x and y before it writes out: out may
        // be x or y, or apart from both, not across them.
        const auto apart = [&](uint64_t at) { return a.out + bytes <= at || at + bytes <= a.out; };
        if (add.x == a.x && uint64_t{add.n} * 4 == bytes &&
            (a.out == add.x || a.out == add.y || (apart(add.x) && apart(add.y)))) {
            a.y = add.y;
            Command& c = commands_.back();
            const Pipeline& norm = pipeline("norm");
            c.pipeline = norm.second;
            c.shader = &norm.first;
            c.push_bytes = sizeof(a);
            std::memcpy(c.push.data(), &a, sizeof(a));
            c.groups = {gx, gy, 1};
            written_.push_back(span(out, bytes));  // the add's spans are the others
            return;
        }
    }
    dispatch("norm", a, {span(x, bytes)}, {span(out, bytes)}, gx, gy);
}

void VulkanBackend::matmul(std::span<const Weight* const> ws, DevPtr x, int64_t n_tokens,
                           std::span<const DevPtr> ys) {
    HR_CHECK(ws.size() == ys.size());
    // The kernel (matmul.comp; all three sum in one order, so the choice
    // never changes a bit): matrix × vector for one token, 4 tokens a
    // workgroup for a few, tiles of 64 rows × 64 tokens through shared
    // memory past that.
    const MatmulKernel& k = n_tokens == 1 ? kMatVec : n_tokens <= kTiledAbove ? kMatVec4 : kTiled;
    const auto T = static_cast<uint64_t>(n_tokens);
    // Runs of up to 3 matrices of one type (so of one row size: the width is
    // the same) in one dispatch each.
    for (size_t first = 0; first < ws.size();) {
        size_t end = first + 1;
        while (end < ws.size() && end - first < 3 && ws[end]->type == ws[first]->type) ++end;
        const Weight& w = *ws[first];
        MatmulArgs a{};
        a.x = address(x);
        a.n_cols = static_cast<uint32_t>(w.n_cols);
        a.n_tokens = static_cast<uint32_t>(n_tokens);
        a.row_bytes = static_cast<uint32_t>(w.row_bytes);
        a.x_stride = static_cast<uint32_t>(w.n_cols);
        uint64_t* wa[3] = {&a.w0, &a.w1, &a.w2};
        uint64_t* ya[3] = {&a.y0, &a.y1, &a.y2};
        uint32_t* rows[3] = {&a.n_rows0, &a.n_rows1, &a.n_rows2};
        uint32_t* ends[2] = {&a.end0, &a.end1};
        Span writes[3];
        uint32_t groups = 0;
        for (size_t i = first; i < end; ++i) {
            const size_t m = i - first;
            HR_CHECK(ws[i]->n_cols == w.n_cols && ws[i]->row_bytes == w.row_bytes);
            *wa[m] = address(*ws[i]);
            *ya[m] = address(ys[i]);
            *rows[m] = static_cast<uint32_t>(ws[i]->n_rows);
            groups += div_up(ws[i]->n_rows, k.rows);
            if (m < 2) *ends[m] = groups;
            writes[m] = span(ys[i], T * ws[i]->n_rows * 4);
        }
        if (end - first == 1) a.end1 = a.end0;
        HR_CHECK_MSG(groups <= kMaxGroups,
                     "matrices of more than 65,535 workgroups of rows in one dispatch");
        dispatch(ShaderName("matmul-{}-{}", shader_type(w.type), k.suffix), a,
                 {span(x, T * w.n_cols * 4)}, {writes[0], writes[1], writes[2]}, groups,
                 div_up(n_tokens, k.tokens));
        first = end;
    }
}

void VulkanBackend::add_bias(DevPtr y, const Weight& bias, int64_t n_rows) {
    const uint64_t n = static_cast<uint64_t>(n_rows) * bias.n_cols;
    ElementwiseArgs a{address(y), address(bias), static_cast<uint32_t>(n),
                      static_cast<uint32_t>(bias.n_cols)};
    const auto [gx, gy] = grid_1d(n, 256);
    dispatch("add-bias", a, {}, {span(y, n * 4)}, gx, gy);
}

void VulkanBackend::silu_mul(DevPtr gate, DevPtr up, int64_t n) {
    ElementwiseArgs a{address(gate), address(up), static_cast<uint32_t>(n), 0};
    const auto [gx, gy] = grid_1d(n, 256);
    dispatch("silu-mul", a, {span(up, uint64_t(n) * 4)}, {span(gate, uint64_t(n) * 4)}, gx, gy);
}

void VulkanBackend::gelu_mul(DevPtr gate, DevPtr up, int64_t n) {
    ElementwiseArgs a{address(gate), address(up), static_cast<uint32_t>(n), 0};
    const auto [gx, gy] = grid_1d(n, 256);
    dispatch("gelu-mul", a, {span(up, uint64_t(n) * 4)}, {span(gate, uint64_t(n) * 4)}, gx, gy);
}

void VulkanBackend::add(DevPtr x, DevPtr y, int64_t n) {
    ElementwiseArgs a{address(x), address(y), static_cast<uint32_t>(n), 0};
    const auto [gx, gy] = grid_1d(n, 256);
    dispatch("add", a, {span(y, uint64_t(n) * 4)}, {span(x, uint64_t(n) * 4)}, gx, gy);
}

uint64_t VulkanBackend::add_table(const void* data, uint64_t bytes, const char* what) {
    if (tables_used_ + bytes > kContextBytes) {
        recording_ = false;  // the step is abandoned; the next one starts afresh
        fail(
            "{}: the backend's {} of tables are full ({} taken, {} more asked): a KV pool in "
            "fewer pieces (a larger HEADROOM_VULKAN_MAX_ALLOCATION) needs fewer",
            what, format_bytes(kContextBytes), format_bytes(tables_used_), format_bytes(bytes));
    }
    // Written by the step's commands, before its first use.
    const uint64_t at = tables_used_;
    update(tables_ + at, data, bytes);
    tables_used_ += align_up(bytes, 16);
    return at;
}

uint64_t VulkanBackend::rope_table(const RopeArgs& args, const Weight& factors) {
    for (const auto& t : rope_configs_)
        if (t.base == args.base && t.position_scale == args.position_scale &&
            t.n_rot == args.n_rot && t.factors == factors.id)
            return address(tables_) + t.offset;
    // freq_i = scale × base^(-2i / n_rot) / factor_i in double (rope_theta's
    // terms), as the fraction of a turn it advances per position: 64 bits of
    // fixed point, high word first (rope.comp).
    const uint32_t half = args.n_rot / 2;
    std::vector<uint32_t> table(2 * half);
    const float* f = factors ? weights_[factors.id - 1].values : nullptr;
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    for (uint32_t i = 0; i < half; ++i) {
        double freq = static_cast<double>(args.position_scale) *
                      std::pow(static_cast<double>(args.base), -2.0 * i / args.n_rot);
        if (f) freq /= f[i];
        double turns = freq / kTwoPi;
        turns -= std::floor(turns);
        const double hi = std::floor(std::ldexp(turns, 32));
        const double lo = std::floor(std::ldexp(std::ldexp(turns, 32) - hi, 32));
        table[2 * i] = static_cast<uint32_t>(hi);
        table[2 * i + 1] = static_cast<uint32_t>(lo);
    }
    const uint64_t at = add_table(table.data(), uint64_t{half} * 8, "RoPE frequencies");
    rope_configs_.push_back({args.base, args.position_scale, args.n_rot, factors.id, at});
    return address(tables_) + at;
}

uint64_t VulkanBackend::piece_table(const KvLayout& kv, uint32_t group) {
    const std::vector<DevPtr>& pieces = kv.group_pieces[group];
    for (const auto& [p, at] : piece_tables_)
        if (p == pieces) return address(tables_) + at;
    // Allocations are never reused within a backend, so the pieces name one region.
    std::vector<uint64_t> table;
    for (const DevPtr& p : pieces) table.push_back(address(p));
    const uint64_t at = add_table(table.data(), table.size() * 8, "KV piece addresses");
    piece_tables_.emplace_back(pieces, at);
    return address(tables_) + at;
}

void VulkanBackend::rope(DevPtr x, const StepView& step, const RopeArgs& args,
                         const Weight& freq_factors) {
    HR_CHECK_MSG(args.yarn_factor == 0, "YaRN RoPE on a backend without it");
    const uint64_t freqs = rope_table(args, freq_factors);
    RopeShaderArgs a{address(x),
                     step_address(step.at.positions),
                     freqs,
                     0,
                     step.n_tokens,
                     args.n_head,
                     args.head_dim,
                     args.n_rot,
                     args.mode == RopeMode::NeoX ? 1u : 0u,
                     0};
    const uint64_t bytes = uint64_t{step.n_tokens} * args.n_head * args.head_dim * 4;
    const Span x_span = span(x, bytes);
    // k right after q, rotated the same way, and touching nothing the
    // dispatches since the last barrier (q's rope among them) touch: the
    // same dispatch takes its heads after q's.
    if (!queries_ && !commands_.empty() && commands_.back().kind == Command::Kind::Dispatch &&
        *commands_.back().shader == "rope" && !hazard({step_span(), tables_span()}, {x_span})) {
        Command& c = commands_.back();
        RopeShaderArgs q;
        std::memcpy(&q, c.push.data(), sizeof(q));
        if (q.n_head2 == 0 && q.positions == a.positions && q.freqs == a.freqs &&
            q.n_tokens == a.n_tokens && q.head_dim == a.head_dim && q.n_rot == a.n_rot &&
            q.neox == a.neox) {
            q.x2 = a.x;
            q.n_head2 = a.n_head;
            std::memcpy(c.push.data(), &q, sizeof(q));
            c.groups[1] += args.n_head;
            written_.push_back(x_span);
            return;
        }
    }
    dispatch("rope", a, {step_span(), tables_span()}, {x_span}, div_up(args.n_rot / 2, 64),
             args.n_head, step.n_tokens);
}

void VulkanBackend::store_kv(const KvLayout& kv, uint32_t layer, const StepView& step, DevPtr k,
                             DevPtr v) {
    const uint32_t g = kv.group_of_layer[layer];
    StoreKvArgs a{address(k),
                  address(v),
                  piece_table(kv, g),
                  step_address(step.at.slots + g * step.n_tokens),
                  kv.group_piece_blocks[g],
                  static_cast<uint32_t>(kv.k_offset(layer, 0, 0)),
                  static_cast<uint32_t>(kv.group_block_bytes[g]),
                  kv.block_size,
                  static_cast<uint32_t>(kv.k_row_bytes),
                  static_cast<uint32_t>(kv.v_row_bytes),
                  static_cast<uint32_t>(kv.v_offset(layer, 0, 0) - kv.k_offset(layer, 0, 0)),
                  kv.n_head_kv,
                  kv.head_dim_k,
                  kv.head_dim_v};
    const uint32_t width = std::max(kv.head_dim_k, kv.head_dim_v);
    const uint32_t items = kv.dtype == KvDtype::Q8_0 ? div_up(width, 32) : width;
    const uint64_t rows = uint64_t{step.n_tokens} * kv.n_head_kv;
    dispatch(ShaderName("store-kv-{}", kv_name(kv.dtype)), a,
             {span(k, rows * kv.head_dim_k * 4), span(v, rows * kv.head_dim_v * 4), step_span(),
              tables_span()},
             {kv_span(kv, g)}, div_up(items, 64), kv.n_head_kv, step.n_tokens);
}

void VulkanBackend::attention(const KvLayout& kv, const StepView& step, const AttentionOp& op) {
    HR_CHECK_MSG(op.head_dim_k <= 256 && op.head_dim_v <= 256, "heads wider than 256");
    HR_CHECK_MSG(!op.sinks, "attention sinks on a backend without them");
    const uint32_t g = kv.group_of_layer[op.layer];
    AttentionArgsGpu a{
        address(op.q),
        address(op.out),
        piece_table(kv, g),
        address(step_device_),
        kv.group_piece_blocks[g],
        static_cast<uint32_t>(kv.k_offset(op.layer, 0, 0)),
        step.at.positions,
        step.at.seq_of_token,
        step.at.table_start + g * step.n_seqs,
        step.at.tables,
        static_cast<uint32_t>(kv.group_block_bytes[g]),
        kv.block_size,
        static_cast<uint32_t>(kv.k_row_bytes),
        static_cast<uint32_t>(kv.v_row_bytes),
        static_cast<uint32_t>(kv.v_offset(op.layer, 0, 0) - kv.k_offset(op.layer, 0, 0)),
        op.n_head,
        op.n_head_kv,
        op.head_dim_k,
        op.head_dim_v,
        op.window,
        op.scale,
        attention_heads_per_workgroup(op.n_head, op.n_head_kv)};
    const uint64_t heads = uint64_t{step.n_tokens} * op.n_head;
    dispatch(ShaderName("attention-{}", kv_name(kv.dtype)), a,
             {span(op.q, heads * op.head_dim_k * 4), kv_span(kv, g), step_span(), tables_span()},
             {span(op.out, heads * op.head_dim_v * 4)}, op.n_head / a.heads, step.n_tokens);
}

}  // namespace headroom::kernels
