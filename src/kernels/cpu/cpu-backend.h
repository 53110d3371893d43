// The CPU backend: its device is the host. Buffers are host Regions, the
// model file's tensors are used where they are mapped, and matrices the
// kernels read faster in another layout are repacked at end_weights (its
// "upload"): the packed copies replace the file's pages. Ops run the kernel
// table chosen for this CPU (kernels/cpu/ops.h) on a pool of worker threads; a step
// is synchronous, and end_step hands back the arena's own logits rows.
// With HEADROOM_CPU_PROFILE set (not "0"), it times every op and prints the
// wall time per op, and the weight read rate of the matmuls, when it closes.
#pragma once

#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/region.h"
#include "core/thread-pool.h"
#include "kernels/backend.h"
#include "kernels/cpu/ops.h"

namespace headroom::kernels {

class CpuBackend final : public Backend {
  public:
    // Runs `ops` (default: the best table for this CPU, kernels::ops()) on
    // n_threads workers; counts in `host`.
    CpuBackend(Ledger& host, int n_threads, const Ops* ops = nullptr);
    ~CpuBackend() override;

    const Ops& ops() const { return ops_; }
    ThreadPool& pool() { return pool_; }
    // How far ahead a decode matmul asks for its weights (Context).
    uint64_t decode_prefetch_bytes() const { return ctx_.decode_prefetch_bytes; }
    // The host address of p: valid while its allocation lives. For this
    // backend's own use and for tests that fill buffers directly.
    uint8_t* host(DevPtr p) const;
    // Bytes of matrices repacked at end_weights (resident, anonymous memory).
    uint64_t packed_bytes() const {
        uint64_t n = 0;
        for (const auto& r : packed_) n += r.size_bytes();
        return n;
    }
    // Weight bytes the matmuls have read since the backend opened: each
    // matrix of a call once, and of expert tensors the experts with rows.
    uint64_t matmul_bytes_read() const { return matmul_bytes_read_; }
    // The matrix (or vector) behind a weight; expert e's of an expert tensor.
    const Matrix& matrix(const Weight& w, uint32_t e = 0) const { return weights_[w.id - 1 + e]; }

    std::string name() const override;
    Ledger& ledger() override { return host_ledger(); }

    DevPtr allocate(Term term, uint64_t bytes, const char* what) override;
    AllocationCount allocations() const override;
    void release(DevPtr buffer) override;
    void upload(DevPtr dst, const void* src, uint64_t bytes) override;
    void download(void* dst, DevPtr src, uint64_t bytes) override;
    void copy_block(DevPtr dst, DevPtr src, uint64_t bytes) override;

    void begin_weights(std::span<const uint8_t> file_data, bool mapped) override;
    Weight upload_matrix(const HostTensor& t, WeightUse use) override;
    Weight upload_vector(const float* values, int64_t n, uint64_t stored_bytes) override;
    void end_weights() override;
    void make_resident(bool progress) override;

    void set_workspace(const Workspace& ws) override;
    void set_act_precision(ActPrecision p) override { ctx_.act_precision = p; }
    void begin_step(const StepView&) override {}
    void upload_in_step(DevPtr dst, const void* src, uint64_t bytes) override {
        upload(dst, src, bytes);
    }
    const void* host_view(DevPtr p) const override { return host(p); }
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

    bool runs_experts() const override { return true; }
    void route_experts(DevPtr logits, const Routing& r, ExpertGating gating,
                       bool normalize) override;
    void gather_routed(DevPtr x, int64_t n_cols, const Routing& r, DevPtr out) override;
    void matmul_experts(std::span<const Weight* const> ws, DevPtr x, const Routing& r,
                        std::span<const DevPtr> ys) override;
    void combine_routed(DevPtr y, int64_t n_cols, const Routing& r, DevPtr out) override;
    void sigmoid_scale(DevPtr y, DevPtr s, int64_t n_rows, int64_t n_cols) override;
    void add_expert_bias(DevPtr y, const Weight& bias, int64_t n_cols, const Routing& r) override;
    void swiglu_oai(DevPtr gate, DevPtr up, int64_t n, float alpha, float limit) override;
    bool runs_yarn_and_sinks() const override { return true; }

  private:
    class Profile;
    class Timed;
    void count_weight(uint64_t bytes);
    struct Allocation {
        Region region;
        Term term = Term::Activations;
        bool live = false;
    };
    float* f32(DevPtr p) const { return reinterpret_cast<float*>(host(p)); }
    const float* vec(const Weight& w) const {
        return reinterpret_cast<const float*>(matrix(w).data);
    }
    RouteArgs route_args(const Routing& r) const {
        return {host(r.route), r.n_tokens, r.n_expert, r.n_used};
    }

    const Ops& ops_;
    ThreadPool pool_;
    Context ctx_;
    // Buffer id i - 1; ids are never reused.
    std::vector<Allocation> allocations_;
    // The model file's tensor data (not owned) and the weights' matrices.
    std::span<const uint8_t> file_data_;
    bool file_mapped_ = false;
    std::vector<Matrix> weights_;  // Weight::id - 1
    struct ToPack {
        uint32_t id;  // a matrix read by matmul, not yet repacked
        bool expert;  // one expert's of an expert tensor
    };
    std::vector<ToPack> to_pack_;
    std::vector<Region> packed_;     // their repacked copies, a region per end_weights
    std::deque<PackedParts> parts_;  // where copies are cut into parts (Matrix::parts)
    uint64_t matmul_bytes_read_ = 0;
    std::vector<ExpertGroup> groups_;   // matmul_experts' groups (kMaxExperts, taken once)
    std::unique_ptr<Profile> profile_;  // null unless HEADROOM_CPU_PROFILE
};

}  // namespace headroom::kernels
