// What the ops of every backend take besides their tensors: how matmuls
// take activations, RoPE's arguments and its angle (the CPU applies it, a
// GPU's table is filled from it), and the sizes of the host kernels'
// scratch, which the activation arena plans (memory/activation-layout.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace headroom::kernels {

// How the fast tables feed activations to matmuls against quantized
// weights. Int8 is llama.cpp's scheme (an int8 per element, a scale per
// block) and the fastest. Int16 carries 15 significant bits as two int8
// halves, a = 256 * hi + lo, for twice the multiply-adds. F32 does not
// quantize: weights are dequantized and multiplied in f32, as the reference
// does, at f32 FMA speed. Against transformers' f32 logits, the largest
// difference on SmolLM2-135M (Gemma-3-270M) is 0.91 (2.0) with Int8, 5e-3
// (8e-3) with Int16, 2e-4 (5e-4) with F32 (tests/kernels/test_act_precision_logits.py).
enum class ActPrecision : uint8_t { Int8, Int16, F32 };

// The precision a Runner's Context starts with unless told: Int8, or
// HEADROOM_ACT_PRECISION (int8, int16, f32).
ActPrecision default_act_precision();
// Parses "int8", "int16", "f32"; nullopt otherwise.
std::optional<ActPrecision> act_precision_from_name(std::string_view name);
std::string_view name(ActPrecision p);

enum class RopeMode { Normal, NeoX };

struct RopeArgs {
    uint32_t n_head = 0;
    uint32_t head_dim = 0;
    uint32_t n_rot = 0;  // leading dims rotated (even)
    float base = 10000.0f;
    float position_scale = 1.0f;          // linear RoPE scaling: theta uses pos × scale
    const float* freq_factors = nullptr;  // (n_rot / 2), divides each frequency (Llama 3.1)
    RopeMode mode = RopeMode::Normal;
    // YaRN context extension (0: none): pair i's angle blends the plain one
    // (theta_e) with it divided by the factor (theta_i), theta = theta_i
    // (1 - r_i) + theta_e r_i, where the ramp r_i falls from 1 to 0 between
    // the pairs that turn beta_fast and beta_slow times over orig_ctx
    // positions (rounded out to whole pairs unless !yarn_truncate, as
    // gpt-oss's reference computes it); cos and sin are scaled by
    // 1 + 0.1 ln(factor) (rope_yarn_mscale).
    float yarn_factor = 0.0f;
    uint32_t yarn_orig_ctx = 0;
    float yarn_beta_fast = 32.0f;
    float yarn_beta_slow = 1.0f;
    bool yarn_truncate = true;
};

// The angle rope() turns pair i of a token at `position` by.
double rope_theta(uint32_t position, uint32_t i, const RopeArgs& args);
// What rope() scales cos and sin by: 1, or YaRN's 1 + 0.1 ln(factor).
float rope_yarn_mscale(const RopeArgs& args);

// Bytes each pool thread needs in the CPU kernels' per-thread scratch for any table, for a
// model whose matmul inputs are at most max_in wide, whose heads are at most
// max_head wide, with `group` query heads per KV head and n_head in all.
uint64_t thread_scratch_bytes(uint64_t max_in, uint64_t max_head, uint64_t group, uint64_t n_head);
// Bytes of the quantized activations (Context::acts_q) one token of n activations needs for any
// table.
uint64_t acts_row_bytes(uint64_t n);

// One layer's attention, whoever holds its tensors: the layer, n_head query
// heads sharing n_head_kv key and value heads, their widths, the scale of
// q·k and the sliding window. A backend's op (AttentionOp) and the CPU
// kernels' arguments (AttentionArgs) both start with it.
struct AttentionShape {
    uint32_t layer = 0;
    uint32_t n_head = 0;
    uint32_t n_head_kv = 0;
    uint32_t head_dim_k = 0;
    uint32_t head_dim_v = 0;
    float scale = 1.0f;   // applied to q·k
    uint32_t window = 0;  // 0: full attention; else keys p - window + 1 .. p
};

}  // namespace headroom::kernels
