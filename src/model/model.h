// A loaded model: hyperparameters, views of its weights in the mapped GGUF
// file, and the forward pass of its architecture (one file per family:
// llama.cpp covers llama / qwen2 / qwen3, gemma3.cpp covers gemma3).
//
// forward() takes a batch of tokens from any number of sequences, writes
// their K and V into the cache, and leaves logits for the batch's
// logit_tokens in the arena's logits buffer. It allocates nothing: every
// buffer is carved from the activation arena laid out by
// memory/activation-layout.h.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/region.h"
#include "kernels/kernels.h"
#include "memory/activation-layout.h"
#include "model/batch.h"
#include "model/hparams.h"

namespace headroom {

namespace gguf {
class GgufFile;
}
class KvCache;

struct LayerWeights {
    kernels::Matrix wq, wk, wv, wo;
    kernels::Matrix w_gate, w_up, w_down;
    const float* attn_norm = nullptr;  // (n_embd)
    const float* ffn_norm = nullptr;   // (n_embd)
    const float* bq = nullptr;         // qwen2 biases, or null
    const float* bk = nullptr;
    const float* bv = nullptr;
    const float* q_norm = nullptr;  // (head_dim_k) qwen3, gemma3
    const float* k_norm = nullptr;
    const float* post_attn_norm = nullptr;  // (n_embd) gemma3
    const float* post_ffn_norm = nullptr;
};

struct ModelWeights {
    kernels::Matrix tok_embd;  // (n_vocab, n_embd)
    kernels::Matrix output;    // (n_vocab, n_embd); tok_embd when tied
    const float* output_norm = nullptr;
    const float* rope_freqs = nullptr;  // (n_rot / 2) or null
    std::vector<LayerWeights> layers;
};

// The arena's buffers as typed pointers (shapes in activation-layout.h).
struct ForwardBuffers {
    float* x;
    float* xb;
    float* q;
    float* k;
    float* v;
    float* attn;
    float* gate;
    float* up;
    float* logits;
    kernels::Context ctx;
};
ForwardBuffers carve_buffers(const ActivationLayout& layout, uint8_t* arena, ThreadPool* pool);

class Model {
  public:
    // Validates every tensor the architecture needs (presence, shape, type)
    // and throws headroom::Error naming the first missing or wrong one.
    static std::unique_ptr<Model> load(const gguf::GgufFile& file);
    virtual ~Model() = default;

    const HParams& hparams() const { return hp_; }
    const ModelWeights& weights() const { return w_; }
    // Bytes of 1-D tensors converted to f32 at load (resident, not mapped).
    uint64_t converted_bytes() const;
    // Bytes of matrices repacked at load into the backend's layout (resident,
    // anonymous); their mapped pages are released. Equal to the matrices' size
    // in the file, rounded up to whole row groups.
    uint64_t packed_bytes() const { return packed_.size_bytes(); }

    // Runs the batch; logits for batch.logit_tokens land in buf.logits,
    // (n_logit_tokens, n_vocab). Precondition: the cache has grown for every
    // token and the batch fits the arena.
    virtual void forward(const Batch& batch, const KvCache& cache, const ForwardBuffers& buf,
                         const kernels::Ops& ops) const = 0;

  protected:
    Model(const gguf::GgufFile& file, HParams hp);
    // Tensor lookups that validate shape and type.
    kernels::Matrix matrix(const std::string& name, int64_t n_cols, int64_t n_rows) const;
    const float* vector(const std::string& name, int64_t n, bool required = true);

    // Shared pieces of the forward passes.
    void embed(const Batch& batch, float* x, float scale) const;
    void write_kv(const Batch& batch, const KvCache& cache, uint32_t layer, const float* k,
                  const float* v, const kernels::Ops& ops) const;
    // ys[i] = x @ ws[i]^T for matrices (at most 4) of the same input width:
    // activations are prepared once per weight type and matrices of one type
    // run as one piece of work (ops.matmul_n).
    void project(const float* x, int64_t n_tokens, int64_t n_in,
                 std::initializer_list<const kernels::Matrix*> ws, std::initializer_list<float*> ys,
                 const kernels::Ops& ops, const kernels::Context& ctx) const;
    // Attention arguments for this batch and the buffers; the caller sets
    // the layer (and the window of a sliding-window layer).
    kernels::AttentionArgs attention_args(const Batch& batch, const KvCache& cache,
                                          const ForwardBuffers& buf) const;
    void output_logits(const Batch& batch, const ForwardBuffers& buf, const kernels::Ops& ops,
                       float norm_offset) const;

    const gguf::GgufFile& file_;
    HParams hp_;
    ModelWeights w_;
    // f32 copies of 1-D tensors stored in other types (each buffer stays put).
    std::vector<std::vector<float>> converted_;
    // Repacked matrices (Matrix::packed points here).
    Region packed_;

  private:
    // Repacks the matrices `ops` has a faster layout for (all but a tied
    // output, which the embedding lookup also reads) and releases their
    // mapped pages.
    void pack_weights(const kernels::Ops& ops);
};

std::unique_ptr<Model> make_llama_model(const gguf::GgufFile& file, HParams hp);
std::unique_ptr<Model> make_gemma3_model(const gguf::GgufFile& file, HParams hp);

}  // namespace headroom
