#include "kernels/cpu/cpu-backend.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <string_view>
#include <utility>

#include "core/check.h"
#include "core/progress.h"
#include "core/share-queue.h"
#include "core/units.h"
#include "kernels/cpu/ref/quant.h"

namespace headroom::kernels {

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kPackAlign = 64;

uint64_t pack_size(uint64_t n) {
    return (n + kPackAlign - 1) / kPackAlign * kPackAlign;
}

// A matmul's profile row: the weight type, a decode step's single token
// apart from batches, and the shape of the n matrices run as one piece of
// work ("2048+256+256 x 2048": their rows, then the width they share), so a
// slow read rate can be traced to the calls that make it.
std::string matmul_row(const Matrix* const* ms, int n, int64_t n_tokens) {
    std::string rows = std::to_string(ms[0]->n_rows);
    for (int i = 1; i < n; ++i) rows += fmt::format("+{}", ms[i]->n_rows);
    return fmt::format("matmul {}, {}, {} x {}", name(ms[0]->type),
                       n_tokens == 1 ? "1 token" : "batch", rows, ms[0]->n_cols);
}

}  // namespace

// HEADROOM_CPU_PROFILE: wall time per op (the calling thread's, from the call
// to the return, the pool's work included), a row per op name. Matmul rows
// also count the weight bytes they read, so that their read rate stands
// beside the machine's (`headroom bench`): what a decode step spends outside
// the matmuls, and how fast the matmuls stream, explain its fraction of the
// read bandwidth.
class CpuBackend::Profile {
  public:
    struct Row {
        double seconds = 0;
        uint64_t calls = 0;
        uint64_t bytes = 0;  // weights read (matmuls)
    };

    Row& row(std::string_view name) {
        auto it = rows_.find(name);
        if (it == rows_.end()) it = rows_.emplace(std::string(name), Row{}).first;
        return it->second;
    }

    // Slowest first, to stderr.
    void print() const {
        double total = 0;
        uint64_t calls = 0;
        std::vector<std::pair<double, std::string>> lines;
        for (const auto& [name, r] : rows_) {
            total += r.seconds;
            calls += r.calls;
        }
        for (const auto& [name, r] : rows_) {
            std::string line =
                fmt::format("{:>10.1f} ms {:>5.1f}% {:>8} calls  {}", r.seconds * 1e3,
                            total > 0 ? 100 * r.seconds / total : 0.0, r.calls, name);
            if (r.bytes)
                line += fmt::format(": {:.1f} MB of weights read, {:.1f} GB/s", r.bytes / 1e6,
                                    r.seconds > 0 ? r.bytes / r.seconds / 1e9 : 0.0);
            lines.emplace_back(r.seconds, std::move(line));
        }
        std::sort(lines.rbegin(), lines.rend());
        fmt::print(stderr, "cpu profile: {:.1f} ms in {} op calls\n", total * 1e3, calls);
        for (const auto& l : lines) fmt::print(stderr, "  {}\n", l.second);
    }

  private:
    std::map<std::string, Row, std::less<>> rows_;
};

// Adds the time its scope takes to the profile's row `name` (no profile:
// nothing, not even a clock read).
class CpuBackend::Timed {
  public:
    Timed(Profile* p, std::string_view name, uint64_t bytes = 0) {
        if (!p) return;
        row_ = &p->row(name);
        row_->bytes += bytes;
        t0_ = Clock::now();
    }
    ~Timed() {
        if (!row_) return;
        row_->seconds += std::chrono::duration<double>(Clock::now() - t0_).count();
        ++row_->calls;
    }
    Timed(const Timed&) = delete;
    Timed& operator=(const Timed&) = delete;

  private:
    using Clock = std::chrono::steady_clock;
    Profile::Row* row_ = nullptr;
    Clock::time_point t0_;
};

CpuBackend::CpuBackend(Ledger& host, int n_threads, const Ops* ops)
    : Backend(host, true),
      ops_(ops ? *ops : kernels::ops()),
      pool_(n_threads),
      groups_(kMaxExperts) {
    ctx_.pool = &pool_;
    ctx_.decode_prefetch_bytes = kernels::decode_prefetch_bytes(ops_);
    if (const char* p = std::getenv("HEADROOM_CPU_PROFILE"); p && *p && *p != '0')
        profile_ = std::make_unique<Profile>();
}

CpuBackend::~CpuBackend() {
    if (profile_) profile_->print();
    for (auto& a : allocations_)
        if (a.live) ledger().unreserve(a.term, a.region.size_bytes());
}

std::string CpuBackend::name() const {
    return fmt::format("cpu {}", ops_.name);
}

uint8_t* CpuBackend::host(DevPtr p) const {
    if (!p) return nullptr;
    HR_DCHECK(p.buffer <= allocations_.size() && allocations_[p.buffer - 1].live);
    return allocations_[p.buffer - 1].region.data() + p.offset;
}

DevPtr CpuBackend::allocate(Term term, uint64_t bytes, const char* what) {
    Allocation a;
    a.region = Region(bytes, what);
    a.term = term;
    a.live = true;
    ledger().reserve(term, bytes);
    allocations_.push_back(std::move(a));
    return {static_cast<uint32_t>(allocations_.size()), 0};
}

AllocationCount CpuBackend::allocations() const {
    AllocationCount c;
    for (const auto& a : allocations_)
        if (a.live) {
            ++c.count;
            c.largest_bytes = std::max<uint64_t>(c.largest_bytes, a.region.size_bytes());
        }
    return c;
}

void CpuBackend::release(DevPtr buffer) {
    if (!buffer) return;
    Allocation& a = allocations_[buffer.buffer - 1];
    HR_CHECK(a.live);
    ledger().unreserve(a.term, a.region.size_bytes());
    a.region = Region();
    a.live = false;
}

void CpuBackend::upload(DevPtr dst, const void* src, uint64_t bytes) {
    std::memcpy(host(dst), src, bytes);
}

void CpuBackend::download(void* dst, DevPtr src, uint64_t bytes) {
    std::memcpy(dst, host(src), bytes);
}

void CpuBackend::copy_block(DevPtr dst, DevPtr src, uint64_t bytes) {
    std::memcpy(host(dst), host(src), bytes);
}

// ---- weights ----------------------------------------------------------------

void CpuBackend::begin_weights(std::span<const uint8_t> file_data, bool mapped) {
    file_data_ = file_data;
    file_mapped_ = mapped;
}

void CpuBackend::count_weight(uint64_t bytes) {
    ledger().reserve(Term::Weights, bytes);
    ledger().allocate(Term::Weights, bytes);
}

// A tensor is read where it is mapped (or from its repacked copy, which
// takes its place): its file bytes are this backend's.
// An expert tensor is its experts' matrices, each a Matrix of its own (and
// repacked on its own), under consecutive ids.
Weight CpuBackend::upload_matrix(const HostTensor& t, WeightUse use) {
    const uint64_t matrix_bytes = t.row_bytes * static_cast<uint64_t>(t.n_rows);
    const uint32_t n = std::max<uint32_t>(t.n_expert, 1);
    HR_CHECK(t.n_expert == 0 || use == WeightUse::Matmul);
    count_weight(matrix_bytes * n);
    const auto first = static_cast<uint32_t>(weights_.size() + 1);
    // A matrix get_rows also reads (a tied embedding, which is the output
    // matrix too) is repacked as well when the file is mapped: the output
    // matmul reads the copy (as stored it ran at half the speed or less, 16
    // rows read as 16 interleaved streams), get_rows the file, whose dropped
    // pages come back a looked-up row's page at a time: clean pages of the
    // file, which the kernel takes back under memory pressure, as it would
    // the whole matrix's before. A file read into memory could not drop its
    // bytes, so there the matrix stays as stored rather than be held twice.
    const bool pack = use == WeightUse::Matmul || (use == WeightUse::MatmulAndRows && file_mapped_);
    for (uint32_t e = 0; e < n; ++e) {
        Matrix m{t.data + matrix_bytes * e, t.type, t.n_rows, t.n_cols, t.row_bytes};
        weights_.push_back(m);
        if (pack && ops_.packed_bytes(m) > 0)
            to_pack_.push_back({static_cast<uint32_t>(weights_.size()), t.n_expert > 0});
    }
    return {t.type, t.n_rows, t.n_cols, t.row_bytes, first, t.n_expert};
}

Weight CpuBackend::upload_vector(const float* values, int64_t n, uint64_t stored_bytes) {
    const auto* p = reinterpret_cast<const uint8_t*>(values);
    const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(float);
    // The file's bytes, and an f32 copy the model made outside the file.
    count_weight(stored_bytes);
    if (p < file_data_.data() || p + bytes > file_data_.data() + file_data_.size())
        count_weight(bytes);
    weights_.push_back(Matrix{p, TensorType::F32, 1, n, bytes});
    const auto id = static_cast<uint32_t>(weights_.size());
    return {TensorType::F32, 1, n, bytes, id};
}

// The repacked copies. With a pool of S > 1 threads, each matrix (but an
// expert's, whose decode reads only the routed experts) is cut into S parts
// of whole row groups, part t holding groups [G t / S, G (t + 1) / S) of its
// G; the region holds part 0 of every matrix in load order (the order the
// model reads them), then part 1 of every matrix, and so on, then the
// experts' copies whole. So thread t, given part t of each matrix of a decode
// matmul (IntMatmul), streams its weights from one matmul into the next.
void CpuBackend::end_weights() {
    const int n_parts = pool_.n_threads() <= ShareQueue::kMaxShares ? pool_.n_threads() : 1;
    const int64_t group_rows = ops_.packed_group_rows;
    std::vector<PackedParts*> cut(to_pack_.size(), nullptr);
    if (n_parts > 1) {
        for (size_t k = 0; k < to_pack_.size(); ++k) {
            if (to_pack_[k].expert) continue;
            const Matrix& m = weights_[to_pack_[k].id - 1];
            const int64_t n_groups = (m.n_rows + group_rows - 1) / group_rows;
            PackedParts& p = parts_.emplace_back();
            for (int t = 0; t <= n_parts; ++t)
                p.row0.push_back(n_groups * t / n_parts * group_rows);
            p.data.assign(n_parts, nullptr);
            cut[k] = &p;
        }
    }
    auto part_bytes = [&](size_t k, int t) {
        const Matrix& m = weights_[to_pack_[k].id - 1];
        return pack_size(static_cast<uint64_t>(cut[k]->row0[t + 1] - cut[k]->row0[t]) *
                         m.row_bytes);
    };
    uint64_t total = 0;
    for (size_t k = 0; k < to_pack_.size(); ++k) {
        if (!cut[k]) {
            total += pack_size(ops_.packed_bytes(weights_[to_pack_[k].id - 1]));
            continue;
        }
        for (int t = 0; t < n_parts; ++t) total += part_bytes(k, t);
    }
    if (total == 0) return;
    uint8_t* region = packed_.emplace_back(total, "repacked weights").data();
    // Where each copy (or part) goes: parts first, part by part, then whole copies.
    uint64_t at = 0;
    for (int t = 0; t < n_parts; ++t)
        for (size_t k = 0; k < to_pack_.size(); ++k)
            if (cut[k]) {
                cut[k]->data[t] = region + at;
                at += part_bytes(k, t);
            }
    for (size_t k = 0; k < to_pack_.size(); ++k) {
        Matrix& m = weights_[to_pack_[k].id - 1];
        uint8_t* dst = region + at;
        if (cut[k]) {
            m.parts = cut[k];
            dst = const_cast<uint8_t*>(cut[k]->data[0]);
        } else {
            at += pack_size(ops_.packed_bytes(m));
        }
        ops_.repack(m, dst, ctx_);
        m.packed = dst;
        m.packed_for = &ops_;
        // The file's pages of this matrix are not read again: drop them from
        // this process (whole pages inside the matrix only). Memory that is
        // not a mapping of the file stays: dropping it would zero it.
        if (!file_mapped_) continue;
        const auto begin = (reinterpret_cast<uintptr_t>(m.data) + kPage - 1) & ~(kPage - 1);
        const auto end =
            (reinterpret_cast<uintptr_t>(m.data) + m.row_bytes * m.n_rows) & ~(kPage - 1);
        if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    }
    HR_CHECK(at == total);
    to_pack_.clear();
}

void CpuBackend::make_resident(bool progress) {
    // The tensors of one file are contiguous in its data section: walk from
    // the lowest to the highest tensor address, skipping matrices repacked at
    // load (their copies are resident; their file pages stay out).
    const uint8_t* lo = nullptr;
    const uint8_t* hi = nullptr;
    std::vector<std::pair<const uint8_t*, const uint8_t*>> skip;
    for (const Matrix& m : weights_) {
        const uint8_t* end = m.data + m.row_bytes * static_cast<uint64_t>(m.n_rows);
        if (m.data < file_data_.data() || end > file_data_.data() + file_data_.size()) continue;
        lo = lo ? std::min(lo, m.data) : m.data;
        hi = hi ? std::max(hi, end) : end;
        if (m.packed) skip.emplace_back(m.data, end);
    }
    if (!lo) return;
    std::sort(skip.begin(), skip.end());
    const uint64_t n_bytes = static_cast<uint64_t>(hi - lo);
    constexpr uint64_t kChunk = 64ull << 20;
    const bool show = progress && n_bytes > (256ull << 20);
    Progress bar("loading weights", n_bytes, show);
    volatile uint8_t sink = 0;
    size_t next_skip = 0;
    for (uint64_t off = 0; off < n_bytes; off += kChunk) {
        const uint64_t n = std::min(kChunk, n_bytes - off);
        const auto* base = lo + off;
        uint8_t acc = 0;
        for (uint64_t i = 0; i < n; i += kPage) {
            const uint8_t* p = base + i;
            while (next_skip < skip.size() && skip[next_skip].second <= p) ++next_skip;
            if (next_skip < skip.size() && skip[next_skip].first <= p) continue;
            acc ^= *p;
        }
        sink = sink ^ acc;
        bar.update(off + n, format_bytes(off + n));
    }
    if (show) bar.finish(format_bytes(n_bytes));
}

// ---- steps --------------------------------------------------------------------

void CpuBackend::set_workspace(const Workspace& ws) {
    ctx_.acts_q = host(ws.acts_q);
    ctx_.acts_q_bytes = ws.acts_q_bytes;
    ctx_.scratch = host(ws.thread_scratch);
    ctx_.scratch_per_thread_bytes = ws.scratch_per_thread_bytes;
}

float* CpuBackend::end_step(DevPtr logits, uint64_t) {
    // The arena is host memory: the sampler reads its logits rows in place.
    return f32(logits);
}

// ---- ops ------------------------------------------------------------------------

void CpuBackend::get_rows(const Weight& table, const StepView& step, float scale, DevPtr out) {
    const Timed timed(profile_.get(), "embedding rows");
    const Matrix& e = matrix(table);
    const int32_t* tokens = step.tokens();
    float* x = f32(out);
    for (uint32_t t = 0; t < step.n_tokens; ++t) {
        const int32_t id = tokens[t];
        HR_CHECK(id >= 0 && id < e.n_rows);
        float* row = x + static_cast<uint64_t>(t) * e.n_cols;
        ref::dequantize_row(e.type, e.data + static_cast<uint64_t>(id) * e.row_bytes, row,
                            e.n_cols);
        if (scale != 1.0f)
            for (int64_t i = 0; i < e.n_cols; ++i) row[i] *= scale;
    }
}

void CpuBackend::rmsnorm(DevPtr x, const Weight& w, float weight_offset, float eps, int64_t n_rows,
                         int64_t n, DevPtr out) {
    const Timed timed(profile_.get(), "rmsnorm");
    ops_.rmsnorm(f32(x), vec(w), weight_offset, eps, n_rows, n, f32(out), ctx_);
}

// Activations are prepared once per weight type; consecutive matrices of one
// type run as one piece of work (ops.matmul_n).
void CpuBackend::matmul(std::span<const Weight* const> ws, DevPtr x, int64_t n_tokens,
                        std::span<const DevPtr> ys) {
    HR_CHECK(ws.size() == ys.size() && !ws.empty() && ws.size() <= 4);
    const Matrix* ms[4];
    float* out[4];
    uint64_t bytes[4];  // each matrix's
    const int n = static_cast<int>(ws.size());
    for (int i = 0; i < n; ++i) {
        ms[i] = &matrix(*ws[i]);
        out[i] = f32(ys[i]);
        bytes[i] = ms[i]->row_bytes * static_cast<uint64_t>(ms[i]->n_rows);
        matmul_bytes_read_ += bytes[i];
    }
    const float* xf = f32(x);
    const int64_t n_in = ms[0]->n_cols;
    Acts acts;
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && ms[j]->type == ms[i]->type) ++j;
        if (i == 0 || ms[i]->type != acts.w_type) {
            const Timed timed(profile_.get(), "quantize activations");
            acts = ops_.prepare(xf, n_tokens, n_in, ms[i]->type, ctx_);
        }
        const Timed timed(profile_.get(), profile_ ? matmul_row(ms + i, j - i, n_tokens) : "",
                          profile_ ? std::accumulate(bytes + i, bytes + j, uint64_t{0}) : 0);
        if (j - i == 1)
            ops_.matmul(*ms[i], acts, out[i], ctx_);
        else
            ops_.matmul_n(ms + i, out + i, j - i, acts, ctx_);
        i = j;
    }
}

void CpuBackend::add_bias(DevPtr y, const Weight& bias, int64_t n_rows) {
    const Timed timed(profile_.get(), "add bias");
    float* yf = f32(y);
    const float* b = vec(bias);
    for (int64_t r = 0; r < n_rows; ++r) ops_.add(yf + r * bias.n_cols, b, bias.n_cols, ctx_);
}

void CpuBackend::rope(DevPtr x, const StepView& step, const RopeArgs& args,
                      const Weight& freq_factors) {
    const Timed timed(profile_.get(), "rope");
    RopeArgs a = args;
    a.freq_factors = freq_factors ? vec(freq_factors) : nullptr;
    ops_.rope(f32(x), step.n_tokens, step.positions(), a, ctx_);
}

void CpuBackend::store_kv(const KvLayout& kv, uint32_t layer, const StepView& step, DevPtr k,
                          DevPtr v) {
    const Timed timed(profile_.get(), "store K/V");
    const uint32_t g = kv.group_of_layer[layer];
    const float* kf = f32(k);
    const float* vf = f32(v);
    uint8_t* base = host(kv.base_of_layer(layer));
    for (uint32_t t = 0; t < step.n_tokens; ++t) {
        const int32_t slot = step.slot(g, t);
        HR_DCHECK(slot >= 0);
        const int32_t block = slot / static_cast<int32_t>(kv.block_size);
        const uint32_t r = static_cast<uint32_t>(slot) % kv.block_size;
        for (uint32_t h = 0; h < kv.n_head_kv; ++h) {
            ops_.store_row(kf + (uint64_t{t} * kv.n_head_kv + h) * kv.head_dim_k, kv.head_dim_k,
                           kv.dtype, base + kv.k_offset(layer, block, h) + r * kv.k_row_bytes);
            ops_.store_row(vf + (uint64_t{t} * kv.n_head_kv + h) * kv.head_dim_v, kv.head_dim_v,
                           kv.dtype, base + kv.v_offset(layer, block, h) + r * kv.v_row_bytes);
        }
    }
}

void CpuBackend::attention(const KvLayout& kv, const StepView& step, const AttentionOp& op) {
    const Timed timed(profile_.get(), "attention");
    AttentionArgs a;
    static_cast<AttentionShape&>(a) = op;
    a.q = f32(op.q);
    a.out = f32(op.out);
    a.n_tokens = step.n_tokens;
    a.positions = step.positions();
    a.seq_of_token = step.seq_of_token();
    a.step = &step;
    a.kv = &kv;
    a.kv_base = host(kv.base_of_layer(op.layer));
    a.sinks = op.sinks ? vec(op.sinks) : nullptr;
    ops_.attention(a, ctx_);
}

void CpuBackend::silu_mul(DevPtr gate, DevPtr up, int64_t n) {
    const Timed timed(profile_.get(), "silu x up");
    ops_.silu_mul(f32(gate), f32(up), n, ctx_);
}

void CpuBackend::gelu_mul(DevPtr gate, DevPtr up, int64_t n) {
    const Timed timed(profile_.get(), "gelu x up");
    ops_.gelu_mul(f32(gate), f32(up), n, ctx_);
}

void CpuBackend::add(DevPtr x, DevPtr y, int64_t n) {
    const Timed timed(profile_.get(), "add");
    ops_.add(f32(x), f32(y), n, ctx_);
}

void CpuBackend::gather_rows(DevPtr x, int64_t n_cols, const StepView& step, DevPtr out) {
    const Timed timed(profile_.get(), "gather logit rows");
    const float* src = f32(x);
    float* dst = f32(out);
    const uint32_t* rows = step.logit_rows();
    for (uint32_t r = 0; r < step.n_logit_rows; ++r)
        std::memcpy(dst + static_cast<uint64_t>(r) * n_cols,
                    src + static_cast<uint64_t>(rows[r]) * n_cols, n_cols * sizeof(float));
}

// ---- mixture-of-experts ops --------------------------------------------------

void CpuBackend::route_experts(DevPtr logits, const Routing& r, ExpertGating gating,
                               bool normalize) {
    const Timed timed(profile_.get(), "route experts");
    kernels::route_experts(f32(logits), route_args(r), gating, normalize);
}

void CpuBackend::gather_routed(DevPtr x, int64_t n_cols, const Routing& r, DevPtr out) {
    const Timed timed(profile_.get(), "gather routed rows");
    kernels::gather_routed(f32(x), n_cols, route_args(r), f32(out));
}

// The activations are prepared once for all T×k rows; each expert with rows
// is one group of the grouped matmul.
void CpuBackend::matmul_experts(std::span<const Weight* const> ws, DevPtr x, const Routing& r,
                                std::span<const DevPtr> ys) {
    HR_CHECK(ws.size() == ys.size() && !ws.empty() && ws.size() <= 2);
    const RouteArgs ra = route_args(r);
    const int32_t* start = ra.start();
    const int64_t n_rows = r.n_tokens * r.n_used;
    const Matrix& first = matrix(*ws[0]);
    Acts acts;
    {
        const Timed timed(profile_.get(), "quantize activations");
        acts = ops_.prepare(f32(x), n_rows, first.n_cols, first.type, ctx_);
    }
    const uint64_t read0 = matmul_bytes_read_;
    int n_groups = 0;
    for (uint32_t e = 0; e < r.n_expert; ++e) {
        if (start[e + 1] == start[e]) continue;
        ExpertGroup& g = groups_[n_groups++];
        for (size_t i = 0; i < ws.size(); ++i) {
            HR_DCHECK(ws[i]->n_expert == r.n_expert);
            g.ws[i] = &matrix(*ws[i], e);
            matmul_bytes_read_ += g.ws[i]->row_bytes * static_cast<uint64_t>(g.ws[i]->n_rows);
        }
        g.row0 = start[e];
        g.n_tok = start[e + 1] - start[e];
    }
    float* out[2] = {f32(ys[0]), ys.size() > 1 ? f32(ys[1]) : nullptr};
    const Timed timed(profile_.get(),
                      profile_ ? fmt::format("matmul experts {}", headroom::name(first.type)) : "",
                      matmul_bytes_read_ - read0);
    ops_.matmul_experts(groups_.data(), n_groups, static_cast<int>(ws.size()), acts, out, ctx_);
}

void CpuBackend::combine_routed(DevPtr y, int64_t n_cols, const Routing& r, DevPtr out) {
    const Timed timed(profile_.get(), "combine experts");
    kernels::combine_routed(f32(y), n_cols, route_args(r), f32(out));
}

void CpuBackend::sigmoid_scale(DevPtr y, DevPtr s, int64_t n_rows, int64_t n_cols) {
    const Timed timed(profile_.get(), "sigmoid gate");
    float* yf = f32(y);
    const float* sf = f32(s);
    for (int64_t r = 0; r < n_rows; ++r) {
        const float g = 1.0f / (1.0f + std::exp(-sf[r]));
        for (int64_t c = 0; c < n_cols; ++c) yf[r * n_cols + c] *= g;
    }
}

void CpuBackend::add_expert_bias(DevPtr y, const Weight& bias, int64_t n_cols, const Routing& r) {
    const Timed timed(profile_.get(), "add expert bias");
    HR_CHECK(bias.n_cols == n_cols * r.n_expert);
    kernels::add_expert_bias(f32(y), vec(bias), n_cols, route_args(r));
}

void CpuBackend::swiglu_oai(DevPtr gate, DevPtr up, int64_t n, float alpha, float limit) {
    const Timed timed(profile_.get(), "swiglu (gpt-oss)");
    kernels::swiglu_oai(f32(gate), f32(up), n, alpha, limit);
}

}  // namespace headroom::kernels
