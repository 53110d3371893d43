// A loaded model: hyperparameters, handles of its weights in a backend (or
// two: a split model's first layers on the CPU, shape/placement.h), and the
// forward pass of its architecture (one file per family: llama.cpp covers
// llama / qwen2 / qwen3 and their MoE variants, gemma3.cpp covers gemma3,
// gpt-oss.cpp covers gpt-oss).
//
// forward() takes one step's view (tokens of any number of sequences, their
// block tables), writes their K and V into the KV region, and leaves logits
// for the step's logit rows in the arena's logits buffer. It calls only
// backend ops and holds only handles: no pointer into weights, KV or
// activations is dereferenced here.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "shape/hparams.h"

namespace headroom {

namespace gguf {
class GgufFile;
}

using kernels::Weight;

// Matrices are (n_rows, n_cols) = (out, in); vectors are f32.
struct LayerWeights {
    Weight wq, wk, wv, wo;
    Weight w_gate, w_up, w_down;
    Weight attn_norm;                      // (n_embd)
    Weight ffn_norm;                       // (n_embd)
    Weight bq, bk, bv;                     // qwen2, gpt-oss biases, or absent
    Weight bo;                             // (n_embd) gpt-oss: Wo's bias
    Weight sinks;                          // (n_head) gpt-oss: attention sinks
    Weight q_norm, k_norm;                 // (head_dim_k) qwen3, gemma3
    Weight post_attn_norm, post_ffn_norm;  // (n_embd) gemma3
    Weight rope_freqs;                     // the model's, on this layer's device, or absent
    // A mixture-of-experts layer (kernels/moe.h) instead of w_gate, w_up, w_down:
    Weight router;                            // (n_expert, n_embd)
    Weight gate_exps, up_exps, down_exps;     // n_expert × (n_ff_exp, n_embd), (n_embd, n_ff_exp)
    Weight gate_shexp, up_shexp, down_shexp;  // the shared expert (Qwen2-MoE), or absent
    Weight shexp_gate;                        // (n_embd): its sigmoid gate's weights
    // gpt-oss: biases of the router (n_expert) and of each expert's outputs,
    // (n_expert × n_ff_exp) for gate and up, (n_expert × n_embd) for down.
    Weight router_b, gate_exps_b, up_exps_b, down_exps_b;
};

struct ModelWeights {
    Weight tok_embd;  // (n_vocab, n_embd)
    Weight output;    // (n_vocab, n_embd); tok_embd when tied
    Weight output_norm;
    Weight rope_freqs;  // (n_rot / 2) or absent
    std::vector<LayerWeights> layers;
};

// The activation arena's buffers (shapes in memory/activation-layout.h).
struct ForwardBuffers {
    kernels::DevPtr x, xb, q, k, v, attn, gate, up, logits;
    kernels::DevPtr router, route, moe_x;  // a MoE model's
};

// What one call of forward() runs: the embedding (or x as it is), layers
// [first_layer, end_layer), and the output (or not). A model on one device
// runs all of it at once; a split model its CPU part, then its GPU part.
struct ForwardPart {
    uint32_t first_layer = 0;
    uint32_t end_layer = 0;
    bool embed = true;
    bool output = true;
    // With output: the logit rows' final hidden states (after the output
    // norm), (n_logit_rows, n_embd) in buf.logits, in place of logits.
    bool hidden = false;
};

class Model {
  public:
    // Validates every tensor the architecture needs (presence, shape, type),
    // throwing headroom::Error naming the first missing or wrong one, and
    // uploads them to `backend`; with `cpu` and n_cpu_layers > 0, the first
    // n_cpu_layers layers (and what shape/placement.h puts with them) to `cpu`.
    static std::unique_ptr<Model> load(const gguf::GgufFile& file, kernels::Backend& backend,
                                       kernels::Backend* cpu = nullptr, uint32_t n_cpu_layers = 0);
    // Layers on the CPU backend (0: all on the one backend).
    uint32_t n_cpu_layers() const { return n_cpu_layers_; }
    virtual ~Model() = default;

    const HParams& hparams() const { return hp_; }
    const ModelWeights& weights() const { return w_; }
    // Bytes of 1-D tensors converted to f32 at load (resident, not mapped).
    uint64_t converted_bytes() const;

    // Runs `part` of one step on `be` (the backend its layers are on); with
    // part.output, logits for step.logit_rows land in buf.logits,
    // (n_logit_rows, n_vocab). Precondition: the KV cache has grown for every
    // token and the step fits the arena.
    virtual void forward(const kernels::StepView& step, const kernels::KvLayout& kv,
                         const ForwardBuffers& buf, kernels::Backend& be,
                         const ForwardPart& part) const = 0;
    // All of the step, on a model that is not split.
    void forward(const kernels::StepView& step, const kernels::KvLayout& kv,
                 const ForwardBuffers& buf, kernels::Backend& be, bool hidden = false) const {
        forward(step, kv, buf, be, {0, hp_.n_layer, true, true, hidden});
    }

  protected:
    Model(const gguf::GgufFile& file, HParams hp, kernels::Backend& backend, kernels::Backend* cpu,
          uint32_t n_cpu_layers);
    // Tensor lookups that validate shape and type, and upload the tensor to
    // the backend shape/placement.h puts it on.
    Weight matrix(const std::string& name, int64_t n_cols, int64_t n_rows,
                  kernels::WeightUse use = kernels::WeightUse::Matmul);
    Weight vector(const std::string& name, int64_t n, bool required = true);
    // A layer's experts: a tensor of hp_.n_expert (n_rows, n_cols) matrices.
    Weight experts(const std::string& name, int64_t n_cols, int64_t n_rows);
    // Uploads a vector to the backend(s) shape/placement.h puts it on.
    Weight upload_vector(const std::string& name, const float* values, int64_t n,
                         uint64_t stored_bytes);
    // token_embd, output (or the tied embedding) and output_norm, into w_.
    void load_embedding_and_output();
    // The output matrix of a model whose embedding is tied: the embedding
    // itself, or (split) its copy on the GPU.
    Weight tied_output();
    // w as layer il's device holds it (a tensor on both devices has a copy
    // on the CPU for a split model's CPU layers).
    Weight on_layer_device(const Weight& w, uint32_t il) const;

    // Shared pieces of the forward passes.
    // ys[i] = x @ ws[i]^T for up to 4 matrices of the same input width.
    static void project(kernels::Backend& be, kernels::DevPtr x, int64_t n_tokens,
                        std::initializer_list<const Weight*> ws,
                        std::initializer_list<kernels::DevPtr> ys);
    // RoPE of n_head heads of head_dim_k with the model's rotary dimensions,
    // scaling (linear and YaRN) and pairing, at frequency base `base`.
    kernels::RopeArgs rope_args(uint32_t n_head, float base) const;
    // Attention of the buffers' q into attn; the caller sets the layer (and
    // the window of a sliding-window layer).
    kernels::AttentionOp attention_op(const ForwardBuffers& buf) const;
    // Loads layer weights l's experts (and shared expert, if the file has
    // one) for prefix p ("blk.N.").
    void load_experts(const std::string& p, LayerWeights& l);
    // x += the MoE feed-forward of xb, the normed x (kernels/moe.h), with
    // the shared expert's gated output if the layer has one. Leaves xb
    // undefined.
    void moe_ffn(const LayerWeights& l, const kernels::StepView& step, const ForwardBuffers& buf,
                 kernels::Backend& be) const;
    // Gathers the rows that need logits, normalizes them, and projects them
    // onto the vocabulary (part.hidden: leaves them normalized in buf.logits).
    void output_logits(const kernels::StepView& step, const ForwardBuffers& buf,
                       kernels::Backend& be, float norm_offset, const ForwardPart& part) const;

    const gguf::GgufFile& file_;
    HParams hp_;
    kernels::Backend& backend_;
    kernels::Backend* cpu_;
    uint32_t n_cpu_layers_;
    ModelWeights w_;
    // Tensors on both devices of a split: the main backend's handle id and
    // the CPU's copy.
    std::vector<std::pair<uint32_t, Weight>> cpu_copies_;
    // f32 copies of 1-D tensors stored in other types (each buffer stays put).
    std::vector<std::vector<float>> converted_;
};

std::unique_ptr<Model> make_llama_model(const gguf::GgufFile& file, HParams hp,
                                        kernels::Backend& backend, kernels::Backend* cpu,
                                        uint32_t n_cpu_layers);
std::unique_ptr<Model> make_gemma3_model(const gguf::GgufFile& file, HParams hp,
                                         kernels::Backend& backend, kernels::Backend* cpu,
                                         uint32_t n_cpu_layers);
std::unique_ptr<Model> make_gpt_oss_model(const gguf::GgufFile& file, HParams hp,
                                          kernels::Backend& backend, kernels::Backend* cpu,
                                          uint32_t n_cpu_layers);

}  // namespace headroom
