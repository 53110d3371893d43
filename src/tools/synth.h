// Synthetic models: a GGUF of a named shape (llama, qwen2, qwen3, gemma3,
// and the mixtures of experts llama (Mixtral), qwen2moe, qwen3moe, gpt-oss) with random
// weights and a working SentencePiece-style tokenizer (byte fallback, so any
// text tokenizes). Used by benchmarks (speed does not depend on the weights'
// values) and by tests (tiny shapes checked against an independent forward).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/tensor-type.h"

namespace headroom {

namespace gguf {
class GgufWriter;
}

struct SynthShape {
    std::string_view name;
    std::string_view arch;  // general.architecture
    uint32_t n_vocab, n_ctx, n_embd, n_layer, n_head, n_head_kv, n_ff;
    float rope_base;
    bool tied_embeddings;
    // gemma3, gpt-oss: local layers attend over `sliding_window` tokens;
    // every `swa_pattern`-th layer is global.
    uint32_t sliding_window = 0;
    uint32_t swa_pattern = 0;
    uint32_t head_dim = 0;  // 0: n_embd / n_head
    // Experts (0: a dense model): n_expert of width n_ff_exp, n_expert_used
    // per token, and a shared expert of width n_ff_shexp (qwen2moe). A llama
    // with experts (Mixtral) has experts of width n_ff.
    uint32_t n_expert = 0;
    uint32_t n_expert_used = 0;
    uint32_t n_ff_exp = 0;
    uint32_t n_ff_shexp = 0;
    // YaRN RoPE scaling (gpt-oss): factor (0: none) over orig_ctx positions.
    float yarn_factor = 0.0f;
    uint32_t yarn_orig_ctx = 0;

    uint32_t head_size() const { return head_dim ? head_dim : n_embd / n_head; }
};

const std::vector<SynthShape>& synth_shapes();
const SynthShape& find_synth_shape(std::string_view name);  // throws for an unknown name

struct SynthOptions {
    TensorType type = TensorType::Q4_0;
    uint64_t seed = 42;
    int n_threads = 1;
    bool progress = true;
};

// Builds the writer (metadata, tokenizer, tensors produced lazily while writing).
gguf::GgufWriter make_synth_model(const SynthShape& shape, const SynthOptions& opt);
void write_synth_model(const SynthShape& shape, const SynthOptions& opt, const std::string& path);

}  // namespace headroom
