// Mixture-of-experts routing: which k of a layer's n_expert experts each
// token goes to, with what weight, and the expert-sorted order in which the
// experts' matmuls read their tokens.
//
// A step of T tokens makes T × k routed rows. The router writes one route
// buffer (in the activation arena) holding, at route_layout()'s offsets:
//   expert (T, k) int32    token t's chosen experts, by falling weight
//   weight (T, k) f32      their weights
//   row    (T, k) int32    where (t, j) is in the sorted order
//   token  (T × k) int32   the token of each sorted row
//   start  (n_expert + 1) int32
//                          expert e's rows are [start[e], start[e + 1]),
//                          ordered by token
// so each expert's tokens are one contiguous run of rows: a batch reads each
// expert's weights once for all its tokens, and a decode step reads only the
// k chosen experts.
//
// The FFN of a MoE layer, for x (T, n_embd) normed:
//   logits = x @ Wrouter^T                   (T, n_expert)
//   route  = route_experts(logits)
//   xs     = x[token[i]] for each sorted row i          (T×k, n_embd)
//   h      = silu(xs @ Wgate_e^T) ⊙ (xs @ Wup_e^T)    rows of expert e
//   ys     = h @ Wdown_e^T                              (T×k, n_embd)
//   out[t] = Σ_j weight[t, j] · ys[row[t, j]]           (T, n_embd)
// gpt-oss adds a bias to the router's logits and to each expert's gate, up
// and down outputs (add_expert_bias), and uses swiglu_oai for silu(·) ⊙ (·).
#pragma once

#include <cstdint>

namespace headroom::kernels {

// How the router turns a token's logits into the chosen experts' weights.
enum class ExpertGating {
    // p = softmax(logits) over all experts; the k largest p, by weight p
    // (normalized to sum 1 if asked): Mixtral, Qwen2-MoE, Qwen3-MoE.
    Softmax,
    // The k largest logits; weights = softmax over those k: gpt-oss.
    SoftmaxOfTopK,
};

// Experts a model may have, and experts per token: past these a file is
// damaged (the largest published models have 384 and 8..16).
inline constexpr uint32_t kMaxExperts = 1024;
inline constexpr uint32_t kMaxExpertsUsed = 64;

struct RouteLayout {
    uint64_t expert = 0, weight = 0, row = 0, token = 0, start = 0;  // byte offsets
    uint64_t bytes = 0;
};

inline RouteLayout route_layout(uint64_t n_tokens, uint32_t n_used, uint32_t n_expert) {
    const uint64_t n = n_tokens * n_used * 4;
    RouteLayout r;
    r.expert = 0;
    r.weight = n;
    r.row = 2 * n;
    r.token = 3 * n;
    r.start = 4 * n;
    r.bytes = 4 * n + (uint64_t{n_expert} + 1) * 4;
    return r;
}

// A step's routing as the MoE ops take it: the route buffer and its shape.
struct RouteArgs {
    uint8_t* route = nullptr;  // host address of the route buffer
    int64_t n_tokens = 0;
    uint32_t n_expert = 0;
    uint32_t n_used = 0;
    int32_t* expert() const { return reinterpret_cast<int32_t*>(route + layout().expert); }
    float* weight() const { return reinterpret_cast<float*>(route + layout().weight); }
    int32_t* row() const { return reinterpret_cast<int32_t*>(route + layout().row); }
    int32_t* token() const { return reinterpret_cast<int32_t*>(route + layout().token); }
    int32_t* start() const { return reinterpret_cast<int32_t*>(route + layout().start); }
    RouteLayout layout() const { return route_layout(n_tokens, n_used, n_expert); }
};

// The host implementations of the routing ops (the CPU backend's, and the
// reference the tests check a device against).
// Fills r's route buffer from logits (n_tokens, n_expert). Ties go to the
// lower expert index.
void route_experts(const float* logits, const RouteArgs& r, ExpertGating gating, bool normalize);
// out (T×k, n_cols) = x[token[i]] for every sorted row i.
void gather_routed(const float* x, int64_t n_cols, const RouteArgs& r, float* out);
// out (T, n_cols) = Σ_j weight[t, j] · ys[row[t, j]], j in order.
void combine_routed(const float* ys, int64_t n_cols, const RouteArgs& r, float* out);
// y[i] += bias[e] for each sorted row i of expert e; y (T×k, n_cols), bias
// (n_expert, n_cols): gpt-oss's per-expert biases.
void add_expert_bias(float* y, const float* bias, int64_t n_cols, const RouteArgs& r);
// gpt-oss's SwiGLU constants (llama.cpp's and the reference's).
inline constexpr float kSwigluOaiAlpha = 1.702f;
inline constexpr float kSwigluOaiLimit = 7.0f;
// gpt-oss's SwiGLU, n elements: with g = min(gate, limit),
// u = clamp(up, -limit, limit), gate = g · sigmoid(alpha · g) · (u + 1).
void swiglu_oai(float* gate, const float* up, int64_t n, float alpha, float limit);

}  // namespace headroom::kernels
