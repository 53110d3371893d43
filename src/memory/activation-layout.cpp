#include "memory/activation-layout.h"

#include <algorithm>

#include "format/tensor-type.h"

namespace headroom {

namespace {

constexpr uint64_t kAlign = 64;
// Keys per attention tile: scores for one tile, then the online-softmax update.
constexpr uint32_t kAttnTile = 64;

uint64_t align_up(uint64_t n) {
    return (n + kAlign - 1) / kAlign * kAlign;
}

// Bytes of one row of activations quantized for a kernel: the largest of the
// block formats the matmul kernels use (Q8_0, Q8_1 for 32-element weight
// blocks, Q8_K for 256-element ones), or f32 when no block size fits.
uint64_t quantized_row_bytes(uint64_t n) {
    uint64_t bytes = n * 4;
    if (n % 32 == 0)
        bytes = std::max({row_bytes(TensorType::Q8_0, n), row_bytes(TensorType::Q8_1, n)});
    if (n % 256 == 0) bytes = std::max(bytes, row_bytes(TensorType::Q8_K, n));
    return std::max<uint64_t>(bytes, n * 2);  // f16/bf16 activations for f16/bf16 weights
}

}  // namespace

ActivationLayout plan_activations(const HParams& hp, uint32_t n_tokens, uint32_t n_logit_rows,
                                  uint32_t n_threads) {
    ActivationLayout a;
    a.n_tokens = n_tokens;
    a.n_logit_rows = n_logit_rows;
    a.n_threads = n_threads;
    a.attn_tile = kAttnTile;
    const uint64_t T = n_tokens;
    const uint64_t q_dim = uint64_t{hp.n_head} * hp.head_dim_k;
    const uint64_t k_dim = uint64_t{hp.n_head_kv} * hp.head_dim_k;
    const uint64_t v_dim = uint64_t{hp.n_head_kv} * hp.head_dim_v;
    const uint64_t attn_dim = uint64_t{hp.n_head} * hp.head_dim_v;
    const uint64_t max_in = std::max<uint64_t>({hp.n_embd, hp.n_ff, attn_dim});
    const uint64_t max_head = std::max(hp.head_dim_k, hp.head_dim_v);

    uint64_t at = 0;
    auto take = [&](ArenaBuffer& b, uint64_t size_bytes) {
        b.offset = at;
        b.size_bytes = size_bytes;
        at = align_up(at + size_bytes);
    };
    take(a.x, T * hp.n_embd * 4);
    take(a.xb, T * std::max<uint64_t>(hp.n_embd, q_dim) * 4);
    take(a.q, T * q_dim * 4);
    take(a.k, T * k_dim * 4);
    take(a.v, T * v_dim * 4);
    take(a.attn, T * attn_dim * 4);
    take(a.gate, T * hp.n_ff * 4);
    take(a.up, T * hp.n_ff * 4);
    take(a.acts_q, T * quantized_row_bytes(max_in));
    take(a.logits, uint64_t{n_logit_rows} * hp.n_vocab * 4);
    // Per thread: a tile of scores, dequantized K and V tiles, the output
    // accumulator, and a dequantized weight row (for the reference matmul).
    a.scratch_per_thread_bytes =
        align_up(kAttnTile * 4 + 2 * uint64_t{kAttnTile} * max_head * 4 + max_head * 4 +
                 max_in * 4 + std::max<uint64_t>(hp.n_embd, max_in) * 4);
    take(a.thread_scratch, a.scratch_per_thread_bytes * n_threads);
    take(a.sampler, uint64_t{hp.n_vocab} * 16);
    a.total_bytes = at;
    return a;
}

}  // namespace headroom
