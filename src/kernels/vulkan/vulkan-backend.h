// The Vulkan backend: weights, the KV region and the activation arena in a
// GPU's memory, every op a compute shader (shaders/*.comp).
//
// Memory: a few large allocations, each one VkBuffer with a device address,
// carved by headroom (the weights of a model are packed into chunks that
// hold exactly their tensors; the arena is carved by the activation
// layout). Every byte is counted in the device's ledger ("gpu<N>"); host
// memory the device reads or writes (upload staging, the logits readback)
// is counted in the host's. The budget is the device heap's (its
// VK_EXT_memory_budget budget where the driver reports one, else its size)
// less --reserve, times --mem-fraction; or --device-memory BYTES in place of
// the heap, to stand in for a smaller GPU. An allocation past the budget is
// refused with the numbers, before the device is asked. Allocations are not
// cleared: where device memory is the host's (lavapipe) the pages of a KV
// pool stay untouched until its blocks are used.
//
// A step is one command buffer: begin_step records the upload of the step
// view, every op records one dispatch and a barrier, end_step records the
// copy of the logits rows to host memory, submits once and waits once.
// Nothing else crosses between host and device within a step.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.h"
#include "kernels/vulkan/vk-context.h"

namespace headroom::kernels {

struct VulkanOptions {
    uint32_t device_index = 0;
    uint64_t device_memory_bytes = 0;  // in place of the heap's size (0: the heap)
    uint64_t reserve_bytes = 0;        // left to other users of the device
    double mem_fraction = 0.9;
    bool progress = true;  // a bar while weights upload
};

class VulkanBackend final : public Backend {
  public:
    // Opens device options.device_index; throws headroom::Error if it cannot.
    VulkanBackend(Ledger& host, const VulkanOptions& options);
    ~VulkanBackend() override;

    const vk::DeviceInfo& info() const { return ctx_->info(); }
    // The total the budget is a fraction of, and where it came from.
    uint64_t device_bytes() const { return device_bytes_; }
    const std::string& device_bytes_source() const { return device_bytes_source_; }
    // device_bytes × mem_fraction: what allocations may take.
    uint64_t budget_bytes() const { return budget_bytes_; }
    // Device memory the backend holds for itself (the RoPE tables): the
    // runtime term's device context.
    static constexpr uint64_t kContextBytes = kVulkanContextBytes;
    uint64_t device_context_bytes() const override { return kContextBytes; }
    // The last step's counters, and the totals since the backend opened
    // (uploads and downloads outside steps included).
    StepStats last_step() const override { return step_counters_; }
    StepStats totals() const override { return totals_; }

    std::string name() const override;
    Ledger& ledger() override { return ledger_; }

    DevPtr allocate(Term term, uint64_t bytes, const char* what) override;
    void release(DevPtr buffer) override;
    void upload(DevPtr dst, const void* src, uint64_t bytes) override;
    void download(void* dst, DevPtr src, uint64_t bytes) override;
    void copy_block(DevPtr dst, DevPtr src, uint64_t bytes) override;

    void begin_weights(std::span<const uint8_t> file_data, bool mapped) override;
    Weight upload_matrix(const HostTensor& t, WeightUse use) override;
    Weight upload_vector(const float* values, int64_t n, uint64_t stored_bytes) override;
    void keep_host_pages(const void* data) override { kept_pages_.push_back(data); }
    void end_weights() override;
    void make_resident(bool) override {}

    void set_workspace(const Workspace& ws) override;
    void set_act_precision(ActPrecision) override {}
    void begin_step(const StepView& step) override;
    void upload_in_step(DevPtr dst, const void* src, uint64_t bytes) override;
    const void* host_view(DevPtr) const override { return nullptr; }
    float* end_step(DevPtr logits, uint64_t n_floats) override;

    void get_rows(const Weight& table, const StepView& step, float scale, DevPtr out) override;
    void rmsnorm(DevPtr x, const Weight& w, float weight_offset, float eps, int64_t n_rows,
                 int64_t n, DevPtr out) override;
    void matmul(std::span<const Weight* const> ws, DevPtr x, int64_t n_tokens,
                std::span<const DevPtr> ys) override;
    void add_bias(DevPtr y, const Weight& bias, int64_t n_rows) override;
    void rope(DevPtr x, const StepView& step, const RopeArgs& args,
              const Weight& freq_factors) override;
    void store_kv(const KvLayout& kv, uint32_t layer, const StepView& step, DevPtr k,
                  DevPtr v) override;
    void attention(const KvLayout& kv, const StepView& step, const AttentionOp& op) override;
    void silu_mul(DevPtr gate, DevPtr up, int64_t n) override;
    void gelu_mul(DevPtr gate, DevPtr up, int64_t n) override;
    void add(DevPtr x, DevPtr y, int64_t n) override;
    void gather_rows(DevPtr x, int64_t n_cols, const StepView& step, DevPtr out) override;

  private:
    struct Allocation {
        VkBuffer buffer = VK_NULL_HANDLE;
        VkDeviceMemory memory = VK_NULL_HANDLE;
        uint64_t size = 0;
        uint64_t address = 0;
        uint8_t* mapped = nullptr;  // host-visible allocations
        Term term = Term::Activations;
        bool host = false;  // counted in the host ledger
        bool live = false;
    };
    struct WeightEntry {
        Weight w;
        DevPtr at;                      // set by end_weights
        const uint8_t* host = nullptr;  // the bytes to upload
        uint64_t bytes = 0;             // on the device
        const float* values = nullptr;  // vectors: the host's values (RoPE factors)
    };
    struct RopeTable {
        double base;
        float position_scale;
        uint32_t n_rot;
        uint32_t factors;  // Weight::id of the frequency factors, or 0
        uint64_t offset;   // in the RoPE table buffer
    };

    DevPtr new_allocation(Term term, uint64_t bytes, bool host_visible, const char* what);
    uint64_t address(DevPtr p) const { return allocations_[p.buffer - 1].address + p.offset; }
    uint64_t address(const Weight& w) const { return address(weights_[w.id - 1].at); }
    const Allocation& allocation(DevPtr p) const { return allocations_[p.buffer - 1]; }
    VkPipeline pipeline(std::string_view name);
    template <class Push>
    void dispatch(std::string_view shader, const Push& push, uint32_t gx, uint32_t gy = 1,
                  uint32_t gz = 1);
    void record_barrier();
    // Where the step view's array at word offset `at` is on the device.
    uint64_t step_address(uint32_t at) const { return address(step_device_) + 4ull * at; }
    // The frequency table of a RoPE configuration (made and uploaded on first use).
    uint64_t rope_table(const RopeArgs& args, const Weight& freq_factors);
    void copy_through_staging(DevPtr dst, const uint8_t* src, uint64_t bytes);

    std::unique_ptr<vk::Context> ctx_;
    Ledger ledger_;
    uint64_t device_bytes_ = 0;
    std::string device_bytes_source_;
    uint64_t budget_bytes_ = 0;
    bool progress_;
    std::vector<Allocation> allocations_;  // DevPtr::buffer - 1
    std::vector<WeightEntry> weights_;     // Weight::id - 1
    size_t n_uploaded_ = 0;                // weights_[0, n) are on the device
    std::span<const uint8_t> file_data_;
    bool file_mapped_ = false;
    std::vector<const void*> kept_pages_;  // keep_host_pages: tensors the host reads too

    VkPipelineLayout layout_ = VK_NULL_HANDLE;
    std::map<std::string, VkPipeline, std::less<>> pipelines_;
    VkCommandBuffer step_cb_ = VK_NULL_HANDLE;
    VkFence step_fence_ = VK_NULL_HANDLE;
    VkPipeline bound_ = VK_NULL_HANDLE;
    bool recording_ = false;

    DevPtr staging_;  // host-visible, for uploads and downloads outside a step
    uint64_t staging_bytes_ = 0;
    DevPtr step_device_;  // the step view, on the device
    uint64_t step_device_bytes_ = 0;
    DevPtr logits_host_;  // host-visible: the logits rows each step downloads
    uint64_t logits_host_bytes_ = 0;
    DevPtr rope_tables_;  // device: kContextBytes of frequency tables
    std::vector<RopeTable> rope_configs_;
    uint64_t rope_used_ = 0;

    StepStats step_counters_, totals_;

    // HEADROOM_VULKAN_PROFILE=1: a timestamp after every dispatch, and the
    // device time per shader printed to stderr when the backend closes.
    VkQueryPool queries_ = VK_NULL_HANDLE;
    uint32_t n_queries_ = 0;
    std::vector<const std::string*> query_shader_;  // the shader each timestamp ends
    std::map<std::string, std::pair<double, uint64_t>, std::less<>> profile_;  // ms, calls
    double timestamp_ns_ = 1;
};

}  // namespace headroom::kernels
