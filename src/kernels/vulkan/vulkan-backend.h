// The Vulkan backend: weights, the KV region and the activation arena in a
// GPU's memory, every op a compute shader (shaders/*.comp).
//
// Memory: a few large allocations, each one VkBuffer with a device address,
// carved by headroom (the weights of a model are packed into chunks that
// hold exactly their tensors; the arena is carved by the activation
// layout), in memory of the heap the budget is read from. No allocation is
// larger than max_allocation_bytes(): drivers refuse single allocations past
// 2-4 GiB, so the KV regions and the arena come in pieces of whole blocks
// and buffers (SplitBuffer), and the shaders find a block's piece in a
// table of their addresses. Every byte is counted in the device's ledger ("gpu<N>"); host
// memory the device reads or writes (upload staging, the logits readback)
// is counted in the host's. The budget is the device heap's (its
// VK_EXT_memory_budget budget where the driver reports one, else its size)
// less --reserve, times --mem-fraction; or --device-memory BYTES in place of
// the heap, to stand in for a smaller GPU. An allocation past the budget is
// refused with the numbers, before the device is asked. Allocations are not
// cleared: where device memory is the host's (lavapipe) the pages of a KV
// pool stay untouched until its blocks are used.
//
// Pipelines are built before the first step (set_workspace: the shaders of
// the uploaded weight types and the KV dtype) through a VkPipelineCache
// kept on disk, so a second run of the same model does not compile them again.
//
// A step is one command buffer. The ops of a step add dispatches to a list,
// each with the spans of memory it reads and writes, and a barrier only
// where one reads or writes what an earlier dispatch since the last barrier
// wrote (q, k and v projections run together; gate and up too). end_step
// records the list, then the copy of the logits rows to host memory,
// submits once and waits once. The step view is written by the host into
// mapped device memory where the device has it (ReBAR, or a device whose
// memory is the host's), else carried in the commands. A step whose
// commands carry no data is kept recorded: a later step with the same
// commands (decode steps of one batch shape) is submitted again as it is.
// Nothing else crosses between host and device within a step.
#pragma once

#include <array>
#include <initializer_list>
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
    // The most one allocation takes, below the device's own limit (0: the
    // device's, or HEADROOM_VULKAN_MAX_ALLOCATION=BYTES where set:
    // vk::allocation_limit).
    uint64_t max_allocation_bytes = 0;
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
    // Device memory the backend holds for itself (the RoPE and KV piece
    // tables): the runtime term's device context.
    static constexpr uint64_t kContextBytes = kVulkanContextBytes;
    uint64_t device_context_bytes() const override { return kContextBytes; }
    // The last step's counters, and the totals since the backend opened
    // (uploads and downloads outside steps included).
    StepStats last_step() const override { return step_counters_; }
    StepStats totals() const override { return totals_; }
    // The driver's maxMemoryAllocationSize (its maxBufferSize where lower),
    // or the option's limit where lower still: what SplitBuffer cuts at and
    // weight chunks keep under.
    uint64_t max_allocation_bytes() const override { return max_allocation_; }
    // Sets that limit for the allocations that follow (tests of the split).
    void limit_allocations(uint64_t bytes) { max_allocation_ = allocation_cap_ = bytes; }
    AllocationCount allocations() const override;
    // Pipelines built while a step was recorded (0 once set_workspace has
    // built those of the model's weight types and KV dtype).
    uint64_t pipelines_built_in_steps() const { return pipelines_built_in_steps_; }
    // Where compiled pipelines are kept between runs:
    // $XDG_CACHE_HOME/headroom (else ~/.cache/headroom), one file per device
    // model; empty where neither is set.
    std::string pipeline_cache_path() const { return pipeline_cache_file_; }

    std::string name() const override;
    Ledger& ledger() override { return ledger_; }

    DevPtr allocate(Term term, uint64_t bytes, const char* what) override;
    DevPtr allocate_step_view(uint64_t bytes) override;
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

    // Device memory, or host memory the device reads (`host_visible`,
    // counted in the host's ledger); `mapped`: device memory the host
    // writes in place where the heap has such a type (ReBAR).
    DevPtr new_allocation(Term term, uint64_t bytes, bool host_visible, const char* what,
                          bool mapped = false);
    uint64_t address(DevPtr p) const { return allocations_[p.buffer - 1].address + p.offset; }
    uint64_t address(const Weight& w) const { return address(weights_[w.id - 1].at); }
    const Allocation& allocation(DevPtr p) const { return allocations_[p.buffer - 1]; }
    // A shader's pipeline (built on first use) and its name as kept.
    using Pipeline = std::pair<const std::string, VkPipeline>;
    const Pipeline& pipeline(std::string_view name);

    // Bytes [lo, hi) of one allocation, as a dispatch reads or writes them.
    struct Span {
        uint32_t buffer = 0;
        uint64_t lo = 0, hi = 0;
    };
    static Span span(DevPtr p, uint64_t bytes) { return {p.buffer, p.offset, p.offset + bytes}; }
    Span step_span() const { return span(step_device_, step_device_bytes_); }
    Span tables_span() const { return span(tables_, kContextBytes); }
    // A KV group's whole region (all its pieces), named by its first piece.
    static Span kv_span(const KvLayout& kv, uint32_t g) {
        return {kv.group_pieces[g][0].buffer, 0, UINT64_MAX};
    }
    // One command of the step being built; recorded into a command buffer by
    // end_step (or found already recorded).
    struct Command {
        enum class Kind : uint8_t { Dispatch, Barrier, Update } kind = Kind::Dispatch;
        VkPipeline pipeline = VK_NULL_HANDLE;  // Dispatch
        const std::string* shader = nullptr;   // its name, for the profile
        uint32_t push_bytes = 0;
        std::array<uint8_t, 128> push{};
        std::array<uint32_t, 3> groups{};
        DevPtr dst;                    // Update: bytes written from the commands
        std::vector<uint8_t> payload;  // Update
        // Equal dispatches and barriers (updates never compare: their steps are not kept).
        bool operator==(const Command& o) const;
    };
    // A step's commands recorded into a command buffer, kept for replay.
    struct Recorded {
        VkCommandBuffer cb = VK_NULL_HANDLE;
        std::vector<Command> commands;
        DevPtr logits;
        uint64_t logits_bytes = 0;
        uint64_t last_use = 0;
    };
    static constexpr size_t kMaxRecorded = 8;

    // A dispatch of `shader` that reads and writes these spans (the weights,
    // never written in a step, are left out): a barrier goes before it only
    // where it reads or writes what a dispatch since the last barrier wrote,
    // or writes what one read.
    template <class Push>
    void dispatch(std::string_view shader, const Push& push, std::initializer_list<Span> reads,
                  std::initializer_list<Span> writes, uint32_t gx, uint32_t gy = 1,
                  uint32_t gz = 1);
    void access(std::initializer_list<Span> reads, std::initializer_list<Span> writes);
    // Whether such a dispatch would need a barrier before it.
    bool hazard(std::initializer_list<Span> reads, std::initializer_list<Span> writes) const;
    void barrier();
    // Host bytes into device memory within the step, carried by the commands.
    void update(DevPtr dst, const void* src, uint64_t bytes);
    // The step's commands into `cb`, then the copy of the logits rows.
    void record(VkCommandBuffer cb, DevPtr logits, uint64_t bytes);
    // Where the step view's array at word offset `at` is on the device.
    uint64_t step_address(uint32_t at) const { return address(step_device_) + 4ull * at; }
    // The frequency table of a RoPE configuration (made and uploaded on first use).
    uint64_t rope_table(const RopeArgs& args, const Weight& freq_factors);
    // The device address of a table of a KV group's piece addresses (made
    // and uploaded on first use).
    uint64_t piece_table(const KvLayout& kv, uint32_t group);
    // Room for `bytes` in the table buffer, written in the step's commands.
    uint64_t add_table(const void* data, uint64_t bytes, const char* what);
    void copy_through_staging(DevPtr dst, const uint8_t* src, uint64_t bytes);
    void save_pipeline_cache() const;

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
    // Compiled pipelines kept between runs (pipeline_cache_path()), and the
    // modules the uploaded weights need, built by set_workspace.
    VkPipelineCache pipeline_cache_ = VK_NULL_HANDLE;
    std::string pipeline_cache_file_;
    std::vector<std::string> wanted_modules_;
    uint64_t pipelines_built_in_steps_ = 0;
    VkCommandBuffer step_cb_ = VK_NULL_HANDLE;  // steps that are not kept
    VkFence step_fence_ = VK_NULL_HANDLE;
    bool recording_ = false;            // between begin_step and end_step
    std::vector<Command> commands_;     // the step's
    std::vector<Span> written_, read_;  // since its last barrier
    bool replayable_ = false;           // no command carries data
    std::vector<Recorded> recorded_;
    uint64_t n_steps_ = 0;

    DevPtr staging_;  // host-visible, for uploads and downloads outside a step
    uint64_t staging_bytes_ = 0;
    DevPtr step_device_;  // the step view, on the device
    uint64_t step_device_bytes_ = 0;
    uint8_t* step_mapped_ = nullptr;  // where the host writes it, if the device memory is mapped
    DevPtr logits_host_;              // host-visible: the logits rows each step downloads
    uint64_t logits_host_bytes_ = 0;
    DevPtr tables_;  // device: kContextBytes of RoPE frequencies and KV piece addresses
    std::vector<RopeTable> rope_configs_;
    std::vector<std::pair<std::vector<DevPtr>, uint64_t>> piece_tables_;  // pieces, address
    uint64_t tables_used_ = 0;
    uint64_t max_allocation_ = 0;  // what SplitBuffer and weight chunks keep under
    uint64_t allocation_cap_ = 0;  // what one allocation may be at all

    StepStats step_counters_, totals_;

    // HEADROOM_VULKAN_PROFILE=1: a timestamp after every dispatch, and the
    // device time per shader printed to stderr when the backend closes.
    VkQueryPool queries_ = VK_NULL_HANDLE;
    std::map<std::string, std::pair<double, uint64_t>, std::less<>> profile_;  // ms, calls
    double timestamp_ns_ = 1;
};

}  // namespace headroom::kernels
