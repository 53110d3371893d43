// Nothing bypasses the backend: a test-only backend that counts its calls
// and hands out handles of its own (buffer and weight ids offset from the
// CPU backend's it runs on, translated back on every call) runs the whole
// forward pass of a model, through the runner and the engine. A handle that
// did not come from it, or memory touched outside it, would not give the
// logits of the plain CPU backend bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "engine/engine.h"
#include "format/gguf-reader.h"
#include "format/gguf-writer.h"
#include "kernels/cpu/cpu-backend.h"
#include "tools/synth.h"

namespace headroom {
namespace {

using kernels::DevPtr;
using kernels::Weight;

class CountingBackend final : public kernels::Backend {
  public:
    static constexpr uint32_t kBufferOffset = 1000;
    static constexpr uint32_t kWeightOffset = 5000;

    explicit CountingBackend(Ledger& host) : Backend(host, true), inner_(host, 1) {}

    std::map<std::string, int> calls;

    std::string name() const override { return "counting"; }
    Ledger& ledger() override { return inner_.ledger(); }

    DevPtr allocate(Term term, uint64_t bytes, const char* what) override {
        ++calls["allocate"];
        return out(inner_.allocate(term, bytes, what));
    }
    void release(DevPtr b) override {
        ++calls["release"];
        inner_.release(in(b));
    }
    void upload(DevPtr dst, const void* src, uint64_t n) override {
        ++calls["upload"];
        inner_.upload(in(dst), src, n);
    }
    void download(void* dst, DevPtr src, uint64_t n) override {
        ++calls["download"];
        inner_.download(dst, in(src), n);
    }
    void copy_block(DevPtr dst, DevPtr src, uint64_t n) override {
        ++calls["copy_block"];
        inner_.copy_block(in(dst), in(src), n);
    }
    void begin_weights(std::span<const uint8_t> file, bool mapped) override {
        inner_.begin_weights(file, mapped);
    }
    Weight upload_matrix(const kernels::HostTensor& t, kernels::WeightUse use) override {
        ++calls["upload_matrix"];
        return out(inner_.upload_matrix(t, use));
    }
    Weight upload_vector(const float* v, int64_t n, uint64_t stored) override {
        ++calls["upload_vector"];
        return out(inner_.upload_vector(v, n, stored));
    }
    void end_weights() override { inner_.end_weights(); }
    void make_resident(bool progress) override { inner_.make_resident(progress); }
    void set_workspace(const kernels::Workspace& ws) override {
        kernels::Workspace w = ws;
        w.acts_q = in(ws.acts_q);
        w.thread_scratch = in(ws.thread_scratch);
        inner_.set_workspace(w);
    }
    void set_act_precision(kernels::ActPrecision p) override { inner_.set_act_precision(p); }
    void begin_step(const kernels::StepView& s) override {
        ++calls["begin_step"];
        inner_.begin_step(s);
    }
    void upload_in_step(DevPtr dst, const void* src, uint64_t n) override {
        ++calls["upload_in_step"];
        inner_.upload_in_step(in(dst), src, n);
    }
    const void* host_view(DevPtr p) const override { return inner_.host_view(in(p)); }
    float* end_step(DevPtr logits, uint64_t n) override {
        ++calls["end_step"];
        return inner_.end_step(in(logits), n);
    }
    void get_rows(const Weight& t, const kernels::StepView& s, float scale, DevPtr o) override {
        ++calls["get_rows"];
        inner_.get_rows(in(t), s, scale, in(o));
    }
    void rmsnorm(DevPtr x, const Weight& w, float off, float eps, int64_t r, int64_t n,
                 DevPtr o) override {
        ++calls["rmsnorm"];
        inner_.rmsnorm(in(x), in(w), off, eps, r, n, in(o));
    }
    void matmul(std::span<const Weight* const> ws, DevPtr x, int64_t n,
                std::span<const DevPtr> ys) override {
        ++calls["matmul"];
        calls["matmul_matrices"] += static_cast<int>(ws.size());
        Weight w[4];
        const Weight* wp[4];
        DevPtr y[4];
        for (size_t i = 0; i < ws.size(); ++i) {
            w[i] = in(*ws[i]);
            wp[i] = &w[i];
            y[i] = in(ys[i]);
        }
        inner_.matmul({wp, ws.size()}, in(x), n, {y, ys.size()});
    }
    void add_bias(DevPtr y, const Weight& b, int64_t r) override {
        ++calls["add_bias"];
        inner_.add_bias(in(y), in(b), r);
    }
    void rope(DevPtr x, const kernels::StepView& s, const kernels::RopeArgs& a,
              const Weight& f) override {
        ++calls["rope"];
        inner_.rope(in(x), s, a, f ? in(f) : f);
    }
    void store_kv(const kernels::KvLayout& kv, uint32_t l, const kernels::StepView& s, DevPtr k,
                  DevPtr v) override {
        ++calls["store_kv"];
        inner_.store_kv(in(kv), l, s, in(k), in(v));
    }
    void attention(const kernels::KvLayout& kv, const kernels::StepView& s,
                   const kernels::AttentionOp& op) override {
        ++calls["attention"];
        kernels::AttentionOp o = op;
        o.q = in(op.q);
        o.out = in(op.out);
        inner_.attention(in(kv), s, o);
    }
    void silu_mul(DevPtr g, DevPtr u, int64_t n) override {
        ++calls["silu_mul"];
        inner_.silu_mul(in(g), in(u), n);
    }
    void gelu_mul(DevPtr g, DevPtr u, int64_t n) override {
        ++calls["gelu_mul"];
        inner_.gelu_mul(in(g), in(u), n);
    }
    void add(DevPtr x, DevPtr y, int64_t n) override {
        ++calls["add"];
        inner_.add(in(x), in(y), n);
    }
    void gather_rows(DevPtr x, int64_t c, const kernels::StepView& s, DevPtr o) override {
        ++calls["gather_rows"];
        inner_.gather_rows(in(x), c, s, in(o));
    }

  private:
    // Handles out of this backend carry offset ids; every call checks and
    // strips the offset, so a handle from anywhere else fails loudly.
    static DevPtr out(DevPtr p) { return {p.buffer + kBufferOffset, p.offset}; }
    static DevPtr in(DevPtr p) {
        EXPECT_GT(p.buffer, kBufferOffset) << "a buffer handle this backend did not make";
        return {p.buffer - kBufferOffset, p.offset};
    }
    static Weight out(Weight w) {
        if (w) w.id += kWeightOffset;
        return w;
    }
    static Weight in(const Weight& w) {
        EXPECT_GT(w.id, kWeightOffset) << "a weight handle this backend did not make";
        Weight v = w;
        v.id -= kWeightOffset;
        return v;
    }
    static kernels::KvLayout in(const kernels::KvLayout& kv) {
        kernels::KvLayout l = kv;
        for (auto& pieces : l.group_pieces)
            for (auto& b : pieces) b = in(b);
        return l;
    }

    kernels::CpuBackend inner_;
};

struct Synth {
    std::vector<uint8_t> bytes;
    std::unique_ptr<gguf::GgufFile> file;
    explicit Synth(const char* shape) {
        SynthOptions opt;
        opt.type = TensorType::Q8_0;
        opt.progress = false;
        bytes = make_synth_model(find_synth_shape(shape), opt).to_bytes();
        file = std::make_unique<gguf::GgufFile>(gguf::GgufFile::parse(bytes, "synth.gguf"));
    }
};

// The logits of one prefill step of two sequences through the runner, and
// the greedy tokens of two requests the engine runs together.
struct RunResult {
    std::vector<float> logits;
    std::vector<std::vector<int32_t>> tokens;
};

std::vector<int32_t> prompt(int i) {
    std::vector<int32_t> p;
    for (int t = 0; t < 9 + 5 * i; ++t) p.push_back((t * 7 + i) % 100 + 3);
    return p;
}

RunResult run(const gguf::GgufFile& file, kernels::Backend& backend, const Model& model) {
    const auto tokenizer = Tokenizer::from_gguf(file);
    ModelDesc desc = describe_gguf(file);
    desc.tokenizer_bytes = tokenizer->memory_bytes();
    // The CPU's f32 copies of vectors stored in another type, as the
    // description counts them from the tensor table.
    EXPECT_EQ(desc.vector_copy_bytes, model.converted_bytes());
    RunnerOptions ro;
    ro.config.max_model_len = 128;
    ro.config.max_num_seqs = 2;
    ro.config.max_num_batched_tokens = 32;
    ro.config.n_threads = 1;
    ro.budget.kv_cache_bytes = 1 << 20;
    RunResult r;
    {
        Runner runner(model, desc, ro, backend);
        SeqKv seqs[2];
        Batch batch;
        for (int i = 0; i < 2; ++i) {
            const auto p = prompt(i);
            EXPECT_TRUE(runner.cache().grow(seqs[i], static_cast<uint32_t>(p.size())));
            const uint32_t s = batch.add_seq(&seqs[i]);
            for (size_t t = 0; t < p.size(); ++t)
                batch.add_token(p[t], static_cast<uint32_t>(t), s, t + 1 == p.size());
        }
        const float* logits = runner.forward(batch);
        r.logits.assign(logits, logits + 2 * model.hparams().n_vocab);
        for (auto& s : seqs) runner.cache().free(s);
    }
    Runner runner(model, desc, ro, backend);
    EngineMetrics metrics;
    Engine engine(runner, *tokenizer, metrics);
    std::vector<std::shared_ptr<Request>> reqs;
    for (int i = 0; i < 2; ++i) {
        GenerateRequest g;
        g.prompt = prompt(i);
        g.params.temperature = 0;
        g.params.max_tokens = 6;
        g.params.ignore_eos = true;
        std::string error;
        reqs.push_back(engine.submit(std::move(g), &error));
        EXPECT_TRUE(reqs.back()) << error;
    }
    while (engine.step()) {
    }
    r.tokens.resize(2);
    for (int i = 0; i < 2; ++i) {
        TokenEvent ev;
        while (reqs[i]->next(ev, std::chrono::milliseconds(0)))
            if (ev.token >= 0) r.tokens[i].push_back(ev.token);
    }
    return r;
}

class BackendSeam : public ::testing::TestWithParam<const char*> {};

TEST_P(BackendSeam, ACountingBackendRunsTheWholeForwardPass) {
    const Synth synth(GetParam());
    Ledger plain_ledger, counted_ledger;
    kernels::CpuBackend plain(plain_ledger, 1);
    CountingBackend counting(counted_ledger);
    const auto plain_model = Model::load(*synth.file, plain);
    const auto counted_model = Model::load(*synth.file, counting);
    const HParams& hp = counted_model->hparams();

    const RunResult a = run(*synth.file, plain, *plain_model);
    counting.calls.clear();
    const RunResult b = run(*synth.file, counting, *counted_model);
    ASSERT_EQ(a.logits.size(), b.logits.size());
    EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0)
        << "the counting backend's logits differ from the CPU backend's";
    EXPECT_EQ(a.tokens, b.tokens);
    ASSERT_EQ(b.tokens[0].size(), 6u);

    // One step through the runner, then six through the engine (the first
    // prefills both prompts, five decode both).
    const int steps = counting.calls["begin_step"];
    EXPECT_EQ(steps, 7);
    EXPECT_EQ(counting.calls["end_step"], steps);
    EXPECT_EQ(counting.calls["get_rows"], steps);
    EXPECT_EQ(counting.calls["gather_rows"], steps);
    const int L = static_cast<int>(hp.n_layer);
    EXPECT_EQ(counting.calls["store_kv"], steps * L);
    EXPECT_EQ(counting.calls["attention"], steps * L);
    EXPECT_EQ(counting.calls["rope"], steps * L * 2);
    // Per layer: QKV in one call, O, gate and up in one call, down; then the output.
    EXPECT_EQ(counting.calls["matmul"], steps * (4 * L + 1));
    EXPECT_EQ(counting.calls["matmul_matrices"], steps * (7 * L + 1));
    EXPECT_EQ(counting.calls["add"], steps * 2 * L);
    const bool gemma = hp.arch == "gemma3";
    EXPECT_EQ(counting.calls[gemma ? "gelu_mul" : "silu_mul"], steps * L);
    EXPECT_EQ(counting.calls["add_bias"], hp.arch == "qwen2" ? steps * 3 * L : 0);
    // Norms: two per layer (Gemma: four, and q/k; Qwen3 would add q/k), one at the output.
    EXPECT_EQ(counting.calls["rmsnorm"], steps * ((gemma ? 6 : 2) * L + 1));
    // Nothing was copied behind the forward pass's back.
    EXPECT_EQ(counting.calls["upload"] + counting.calls["download"], 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BackendSeam,
                         ::testing::Values("tiny", "tiny-qwen2", "tiny-gemma3"),
                         [](const auto& info) {
                             std::string n = info.param;
                             for (auto& c : n)
                                 if (c == '-') c = '_';
                             return n;
                         });

}  // namespace
}  // namespace headroom
