// Where a model's tensors live when its layers are split between the CPU and
// a GPU (--n-gpu-layers): the first n_cpu_layers transformer blocks run on
// the CPU, the rest on the GPU. The embedding table stays on the CPU (the
// lookup reads one row per token and needs no GPU memory); the output matrix
// and its norm go to the GPU (the largest matmul of a step). A tied
// embedding is both, so it is on both. Small tensors every layer reads (RoPE
// frequency factors) are on both. The model uploads by this rule and the
// byte accounting predicts by it, so the two agree.
//
// With n_cpu_layers == 0 everything is on the one device the model runs on.
#pragma once

#include <charconv>
#include <cstdint>
#include <string_view>

namespace headroom {

enum class TensorRole {
    Embedding,  // token_embd.weight
    Output,     // output.weight
    OutputNorm,
    Layer,  // blk.N.*
    Other,  // rope_freqs and the like
};

// The tensor's role, and for Layer its block index.
inline TensorRole tensor_role(std::string_view name, uint32_t* layer) {
    if (name == "token_embd.weight") return TensorRole::Embedding;
    if (name == "output.weight") return TensorRole::Output;
    if (name == "output_norm.weight") return TensorRole::OutputNorm;
    if (name.starts_with("blk.")) {
        const auto rest = name.substr(4);
        uint32_t il = 0;
        const auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), il);
        if (ec == std::errc() && p != rest.data() + rest.size() && *p == '.') {
            if (layer) *layer = il;
            return TensorRole::Layer;
        }
    }
    return TensorRole::Other;
}

struct Placement {
    bool on_cpu = false;
    bool on_gpu = false;
};

// For a split (n_cpu_layers > 0); `tied`: the embedding is also the output.
inline Placement place_tensor(TensorRole role, uint32_t layer, uint32_t n_cpu_layers, bool tied) {
    switch (role) {
        case TensorRole::Embedding:
            return {true, tied};
        case TensorRole::Output:
        case TensorRole::OutputNorm:
            return {false, true};
        case TensorRole::Layer:
            return {layer < n_cpu_layers, layer >= n_cpu_layers};
        case TensorRole::Other:
            return {true, true};
    }
    return {true, true};
}

}  // namespace headroom
