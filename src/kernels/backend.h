// The seam between the forward pass and a device. A backend owns its
// device's memory (the weights it uploaded, the KV region, the activation
// arena), counts every byte it takes in its device's ledger, and runs the
// ops the forward pass calls. The model and the engine hold only handles
// (DevPtr for buffers, Weight for tensors); no pointer into weights, KV or
// activations is dereferenced outside a backend.
//
// Life of a backend:
//   load     begin_weights, upload_matrix / upload_vector per tensor,
//            end_weights (the CPU repacks here; a GPU copies to its memory)
//   start-up allocate the KV region and the activation arena, set_workspace
//   a step   begin_step(view) (a GPU uploads the view and starts recording),
//            the model's ops, end_step(logits) (a GPU submits once, waits
//            once and downloads the logits rows): the host logits
// Ops are asynchronous with respect to the host on a GPU: their inputs are
// device memory or the step view; nothing is read back before end_step.
//
// Every op's contract (shapes are rows × columns, f32 unless noted; "rows"
// of activations are tokens):
//   get_rows     out (n_tokens, n_cols) = table[tokens[t]] × scale
//   rmsnorm      out[r] = x[r] / rms(x[r]) × (w + weight_offset); out may be x
//   matmul       ys[i] (n_tokens, ws[i].n_rows) = x (n_tokens, n_cols) @ ws[i]^T
//                for up to 4 matrices of one input width; each element's
//                reduction order depends only on its row and column
//                (batch invariance)
//   add_bias     y[r] += b for every row
//   rope         rotates x (n_tokens, n_head, head_dim) at each token's position
//   store_kv     K and V rows of the step's tokens into their slots
//   attention    causal flash attention of each token over its sequence's
//                cached keys (a window of them on sliding-window layers)
//   silu_mul     gate = silu(gate) × up;  gelu_mul: gate = gelu_tanh(gate) × up
//   add          x += y
//   gather_rows  out (n_logit_rows, n_cols) = x[logit_rows[r]]
// and a mixture-of-experts layer's (kernels/moe.h has the route buffer and
// the layer's equations; T×k rows are in expert-sorted order):
//   route_experts   the route buffer from router logits (n_tokens, n_expert)
//   gather_routed   out (T×k, n_cols) = x[token[i]]
//   matmul_experts  ys[i] (T×k, rows) = x (T×k, cols) @ ws[i][e]^T, each row by
//                   its expert e, for 1 or 2 expert tensors of one type
//   combine_routed  out (T, n_cols) = Σ_j weight[t, j] · y[row[t, j]]
//   sigmoid_scale   y[r] *= sigmoid(s[r]) for y (n_rows, n_cols), s (n_rows)
//   add_expert_bias y[i] += b[e] for each sorted row i of expert e, b (n_expert, n_cols)
//   swiglu_oai      gate = min(g, L) sigmoid(a min(g, L)) (clamp(up, -L, L) + 1)
//                   (gpt-oss's experts: alpha a, limit L)
//   copy_block   dst = src, bytes (forking a KV block); outside a step
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/ledger.h"
#include "format/tensor-type.h"
#include "kernels/dev-ptr.h"
#include "kernels/kv-layout.h"
#include "kernels/moe.h"
#include "kernels/op-args.h"
#include "kernels/step-view.h"

namespace headroom::kernels {

// A GPU backend keeps each weight tensor as stored (vectors as f32) in a
// slot of its bytes plus 16 (its shaders read whole words, a few bytes past
// a block) rounded up to 256: the planner predicts its weights by this rule.
inline constexpr uint64_t device_weight_slot(uint64_t bytes) {
    return (bytes + 16 + 255) / 256 * 256;
}

// Device memory the Vulkan backend holds for itself (its RoPE tables): the
// runtime term's device context, in the plan and in the ledger.
inline constexpr uint64_t kVulkanContextBytes = 64 * 1024;

// A tensor a backend holds: (n_rows, n_cols) in `type`. Vectors (norm
// weights, biases, RoPE factors) are f32 with one row. A layer's experts are
// one tensor of n_expert such matrices, one after another.
struct Weight {
    TensorType type = TensorType::F32;
    int64_t n_rows = 0;
    int64_t n_cols = 0;
    uint64_t row_bytes = 0;
    uint32_t id = 0;        // the backend's handle; 0: absent (an optional tensor)
    uint32_t n_expert = 0;  // 0: one matrix

    explicit operator bool() const { return id != 0; }
};

// A tensor as stored in the model file (mapped host memory), to upload.
struct HostTensor {
    const uint8_t* data = nullptr;
    TensorType type = TensorType::F32;
    int64_t n_rows = 0;
    int64_t n_cols = 0;
    uint64_t row_bytes = 0;
    uint32_t n_expert = 0;  // 0: one matrix; else that many, one after another
};

// What a matrix is read by: matmul, get_rows (the embedding), or both (a
// tied embedding is also the output matrix).
enum class WeightUse { Matmul, Rows, MatmulAndRows };

// One layer's attention: q (n_tokens, n_head, head_dim_k) and out
// (n_tokens, n_head, head_dim_v) in the arena; keys and values from the KV
// region through the step's block tables.
struct AttentionOp : AttentionShape {
    DevPtr q;
    DevPtr out;
    Weight sinks;  // (n_head) attention sinks (kernels::AttentionArgs), or absent
};

// A step's expert routing on a device: the route buffer (kernels/moe.h) and
// its shape.
struct Routing {
    DevPtr route;
    int64_t n_tokens = 0;
    uint32_t n_expert = 0;
    uint32_t n_used = 0;
};

// Scratch a backend's kernels use within a step, carved from the arena by
// the activation layout (memory/activation-layout.h); empty where a backend
// needs none.
struct Workspace {
    DevPtr acts_q;  // activations quantized for integer matmuls (the CPU)
    uint64_t acts_q_bytes = 0;
    DevPtr thread_scratch;  // n_threads × scratch_per_thread_bytes (the CPU)
    uint64_t scratch_per_thread_bytes = 0;
    // A device that is not the host: where begin_step puts the step view,
    // and the host memory it downloads the logits rows into, which it takes
    // itself (host-visible memory) and counts in the host's ledger.
    DevPtr step_view;
    uint64_t step_view_bytes = 0;
    uint64_t logits_host_bytes = 0;
    // The KV dtype the steps store and read (a GPU builds its pipelines for
    // it before the first step).
    KvDtype kv_dtype = KvDtype::F16;
};

// What crossed between host and device in a step, and how often the host
// waited for the device (a GPU: one submission and one wait per step).
struct StepStats {
    uint64_t n_submits = 0;
    uint64_t n_waits = 0;
    uint64_t n_dispatches = 0;
    uint64_t n_barriers = 0;  // between dispatches (a GPU: only where one reads what one wrote)
    uint64_t n_recorded = 0;  // command buffers recorded (0: a recorded one was submitted again)
    uint64_t upload_bytes = 0;
    uint64_t download_bytes = 0;
};

// A device's allocations: how many it holds, and the largest of them.
struct AllocationCount {
    uint64_t count = 0;
    uint64_t largest_bytes = 0;
};

class Backend {
  public:
    virtual ~Backend() = default;
    Backend(const Backend&) = delete;
    Backend& operator=(const Backend&) = delete;

    // What runs, for people: "cpu avx2", "vulkan: NVIDIA H200".
    virtual std::string name() const = 0;
    // The ledger of this backend's device, and the host's (the same one for
    // the CPU): host staging and mapped files are counted there.
    virtual Ledger& ledger() = 0;
    Ledger& host_ledger() { return host_ledger_; }
    // The device's memory is the host's (the CPU backend): its buffers are
    // host memory and the ledger is the host's.
    bool is_host() const { return is_host_; }
    // Device memory the backend holds for itself from the start (a GPU's
    // tables, pipelines' scratch): the runtime term's device context.
    virtual uint64_t device_context_bytes() const { return 0; }
    // The last step's traffic, and all of it since the backend opened (zero
    // for the CPU, whose memory is the host's).
    virtual StepStats last_step() const { return {}; }
    virtual StepStats totals() const { return {}; }
    // The most one allocation of device memory may take (a GPU driver's
    // limit): the KV regions and the activation arena are taken in pieces
    // no larger (SplitBuffer). Unlimited for the host.
    virtual uint64_t max_allocation_bytes() const { return UINT64_MAX; }
    // The device memory allocations held now: how many, and the largest.
    virtual AllocationCount allocations() const { return {}; }
    // Every ledger this backend counts in: its device's, then the host's if
    // that is another one.
    std::vector<const Ledger*> ledgers() {
        std::vector<const Ledger*> l{&ledger()};
        if (!is_host_) l.push_back(&host_ledger_);
        return l;
    }
    std::vector<LedgerSnapshot> snapshots() {
        std::vector<LedgerSnapshot> s;
        for (const Ledger* l : ledgers()) s.push_back(l->snapshot());
        return s;
    }

    // ---- memory ----
    // Takes `bytes` of device memory, reserved in the device ledger under
    // `term`; its contents are not defined (nothing reads what it did not
    // write: a KV slot is stored before attention reads it). Throws
    // headroom::Error naming `what`, the size and what the device has left if
    // it cannot be had.
    virtual DevPtr allocate(Term term, uint64_t bytes, const char* what) = 0;
    // The device's copy of the step view (runtime term): a GPU takes it where
    // the host can write it in place (host-visible device memory) if it has such.
    virtual DevPtr allocate_step_view(uint64_t bytes) {
        return allocate(Term::Runtime, bytes, "step view");
    }
    // Gives an allocation back, and its reservation. Null is ignored.
    virtual void release(DevPtr buffer) = 0;
    virtual void upload(DevPtr dst, const void* src, uint64_t bytes) = 0;
    virtual void download(void* dst, DevPtr src, uint64_t bytes) = 0;
    virtual void copy_block(DevPtr dst, DevPtr src, uint64_t bytes) = 0;

    // ---- weights, once at load ----
    // The model file's tensor data (host memory); tensors uploaded next point
    // into it. `mapped`: it is a read-only mapping of the file, whose pages
    // may be dropped once copied (they would be read back from the file);
    // else memory the caller owns. Each backend counts what it keeps of the
    // tensors it is given (the CPU: their mapped bytes, where it reads them).
    virtual void begin_weights(std::span<const uint8_t> file_data, bool mapped) = 0;
    virtual Weight upload_matrix(const HostTensor& t, WeightUse use) = 0;
    // n f32 values: a vector of `stored_bytes` in the file, which the model
    // converted to f32 if the file stores it in another type.
    virtual Weight upload_vector(const float* values, int64_t n, uint64_t stored_bytes) = 0;
    // The host also reads these bytes of the file (another backend computes
    // with them): end_weights keeps their pages.
    virtual void keep_host_pages(const void* data) { (void)data; }
    virtual void end_weights() = 0;
    // Brings the weights into memory before the first request, with a
    // progress bar on stderr if asked.
    virtual void make_resident(bool progress) = 0;

    // ---- steps ----
    virtual void set_workspace(const Workspace& ws) = 0;
    virtual void set_act_precision(ActPrecision p) = 0;
    virtual void begin_step(const StepView& step) = 0;
    // Within a step: bytes of host memory into device memory (a split
    // model's hidden state, from the CPU's layers to the GPU's).
    virtual void upload_in_step(DevPtr dst, const void* src, uint64_t bytes) = 0;
    // The host address of p where the backend's memory is the host's (the
    // CPU), else null.
    virtual const void* host_view(DevPtr p) const = 0;
    // Ends the step: the logits (n_floats f32 at `logits`) in host memory,
    // writable (the sampler applies penalties in place), valid until the
    // next step.
    virtual float* end_step(DevPtr logits, uint64_t n_floats) = 0;

    // ---- ops (contracts in the file comment) ----
    virtual void get_rows(const Weight& table, const StepView& step, float scale, DevPtr out) = 0;
    virtual void rmsnorm(DevPtr x, const Weight& w, float weight_offset, float eps, int64_t n_rows,
                         int64_t n, DevPtr out) = 0;
    virtual void matmul(std::span<const Weight* const> ws, DevPtr x, int64_t n_tokens,
                        std::span<const DevPtr> ys) = 0;
    virtual void add_bias(DevPtr y, const Weight& bias, int64_t n_rows) = 0;
    // args.freq_factors is ignored: the factors are `freq_factors` (or none).
    virtual void rope(DevPtr x, const StepView& step, const RopeArgs& args,
                      const Weight& freq_factors) = 0;
    virtual void store_kv(const KvLayout& kv, uint32_t layer, const StepView& step, DevPtr k,
                          DevPtr v) = 0;
    virtual void attention(const KvLayout& kv, const StepView& step, const AttentionOp& op) = 0;
    virtual void silu_mul(DevPtr gate, DevPtr up, int64_t n) = 0;
    virtual void gelu_mul(DevPtr gate, DevPtr up, int64_t n) = 0;
    virtual void add(DevPtr x, DevPtr y, int64_t n) = 0;
    virtual void gather_rows(DevPtr x, int64_t n_cols, const StepView& step, DevPtr out) = 0;

    // ---- mixture-of-experts ops ----
    // A backend without them refuses MoE models at load (Model::load), so
    // the defaults are never reached.
    virtual bool runs_experts() const { return false; }
    virtual void route_experts(DevPtr logits, const Routing& r, ExpertGating gating,
                               bool normalize) {
        (void)logits, (void)r, (void)gating, (void)normalize;
        no_experts();
    }
    virtual void gather_routed(DevPtr x, int64_t n_cols, const Routing& r, DevPtr out) {
        (void)x, (void)n_cols, (void)r, (void)out;
        no_experts();
    }
    virtual void matmul_experts(std::span<const Weight* const> ws, DevPtr x, const Routing& r,
                                std::span<const DevPtr> ys) {
        (void)ws, (void)x, (void)r, (void)ys;
        no_experts();
    }
    virtual void combine_routed(DevPtr y, int64_t n_cols, const Routing& r, DevPtr out) {
        (void)y, (void)n_cols, (void)r, (void)out;
        no_experts();
    }
    virtual void sigmoid_scale(DevPtr y, DevPtr s, int64_t n_rows, int64_t n_cols) {
        (void)y, (void)s, (void)n_rows, (void)n_cols;
        no_experts();
    }
    virtual void add_expert_bias(DevPtr y, const Weight& bias, int64_t n_cols, const Routing& r) {
        (void)y, (void)bias, (void)n_cols, (void)r;
        no_experts();
    }
    virtual void swiglu_oai(DevPtr gate, DevPtr up, int64_t n, float alpha, float limit) {
        (void)gate, (void)up, (void)n, (void)alpha, (void)limit;
        no_experts();
    }
    // YaRN RoPE (RopeArgs::yarn_factor) and attention sinks
    // (AttentionOp::sinks): a backend without them refuses models that use
    // them at load.
    virtual bool runs_yarn_and_sinks() const { return false; }

  protected:
    Backend(Ledger& host_ledger, bool is_host) : host_ledger_(host_ledger), is_host_(is_host) {}

  private:
    [[noreturn]] static void no_experts() {
        HR_CHECK_MSG(false, "a mixture-of-experts op on a backend without them");
        __builtin_unreachable();
    }

    Ledger& host_ledger_;
    bool is_host_;
};

// An allocation that gives itself back when destroyed.
class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    DeviceBuffer(Backend& backend, Term term, uint64_t bytes, const char* what)
        : backend_(&backend), ptr_(backend.allocate(term, bytes, what)), size_bytes_(bytes) {}
    // Takes over an allocation the backend made.
    DeviceBuffer(Backend& backend, DevPtr ptr, uint64_t bytes)
        : backend_(&backend), ptr_(ptr), size_bytes_(bytes) {}
    ~DeviceBuffer() {
        if (backend_) backend_->release(ptr_);
    }
    DeviceBuffer(DeviceBuffer&& o) noexcept
        : backend_(o.backend_), ptr_(o.ptr_), size_bytes_(o.size_bytes_) {
        o.backend_ = nullptr;
    }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            if (backend_) backend_->release(ptr_);
            backend_ = o.backend_;
            ptr_ = o.ptr_;
            size_bytes_ = o.size_bytes_;
            o.backend_ = nullptr;
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    DevPtr ptr() const { return ptr_; }
    uint64_t size_bytes() const { return size_bytes_; }

  private:
    Backend* backend_ = nullptr;
    DevPtr ptr_;
    uint64_t size_bytes_ = 0;
};

// Device memory taken as pieces of at most backend.max_allocation_bytes(),
// cut only between units (KV blocks, arena buffers) so that every unit is
// whole in one piece. The pieces add up to exactly the bytes asked: a
// region's split changes what the device allocates at once, never what it
// holds. A unit larger than the limit is a piece of its own, which the
// backend refuses if the device cannot allocate it.
class SplitBuffer {
  public:
    SplitBuffer() = default;
    // n_units units of unit_bytes each (a KV region: blocks).
    SplitBuffer(Backend& backend, Term term, uint64_t n_units, uint64_t unit_bytes,
                const char* what);
    // Units that end at `ends` (ascending byte offsets; the last is the size):
    // an arena of buffers.
    SplitBuffer(Backend& backend, Term term, std::span<const uint64_t> ends, const char* what);

    // Where byte `offset` of the whole is (a unit's start).
    DevPtr at(uint64_t offset) const;
    std::vector<DevPtr> pieces() const;
    // Units per piece, with the uniform constructor (the last may hold fewer).
    uint64_t units_per_piece() const { return units_per_piece_; }
    uint64_t size_bytes() const { return size_bytes_; }

  private:
    void take(Backend& backend, Term term, uint64_t offset, uint64_t bytes, const char* what);

    std::vector<uint64_t> starts_;  // per piece, its offset in the whole
    std::vector<DeviceBuffer> buffers_;
    uint64_t units_per_piece_ = 0;
    uint64_t size_bytes_ = 0;
};

}  // namespace headroom::kernels
