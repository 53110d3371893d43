#include "memory/activation-layout.h"

#include <algorithm>

#include "kernels/moe.h"
#include "kernels/op-args.h"

namespace headroom {

namespace {

constexpr uint64_t kAlign = 64;
// Keys per attention tile: scores for one tile, then the online-softmax update.
constexpr uint32_t kAttnTile = 64;

uint64_t align_up(uint64_t n) {
    return (n + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

std::vector<uint64_t> ActivationLayout::device_ends() const {
    std::vector<uint64_t> ends;
    for (const ArenaBuffer* b : {&x, &xb, &q, &k, &v, &attn, &gate, &up, &router, &route, &moe_x,
                                 &acts_q, &logits, &thread_scratch})
        ends.push_back(
            std::max(ends.empty() ? 0 : ends.back(), align_up(b->offset + b->size_bytes)));
    ends.push_back(device_bytes);
    return ends;
}

ActivationLayout plan_activations(const HParams& hp, uint32_t n_tokens, uint32_t n_logit_rows,
                                  uint32_t n_threads, bool host_device) {
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
    const uint64_t routed = T * hp.n_expert_used;  // rows through the experts
    const uint64_t ff_rows = std::max(T * hp.n_ff, routed * hp.n_ff_exp);
    take(a.gate, ff_rows * 4);
    take(a.up, ff_rows * 4);
    if (hp.n_expert > 0) {
        take(a.router, T * hp.n_expert * 4);
        take(a.route, kernels::route_layout(T, hp.n_expert_used, hp.n_expert).bytes);
        take(a.moe_x, routed * hp.n_embd * 4);
    }
    // The CPU's: activations quantized for the integer matmuls, in the largest
    // layout any instruction set uses for inputs up to max_in wide
    // (kernels/cpu/act-format.h). A GPU's shaders take f32.
    const uint64_t acts_q =
        std::max(T * kernels::acts_row_bytes(max_in),
                 routed * kernels::acts_row_bytes(std::max(hp.n_embd, hp.n_ff_exp)));
    take(a.acts_q, host_device ? acts_q : 0);
    take(a.logits, uint64_t{n_logit_rows} * hp.n_vocab * 4);
    // The CPU's, per thread: a packed weight panel, attention tiles and
    // per-query states, or the reference kernels' dequantized rows, whichever
    // is largest.
    a.scratch_per_thread_bytes =
        host_device ? kernels::thread_scratch_bytes(
                          max_in, max_head, hp.n_head_kv ? hp.n_head / hp.n_head_kv : 1, hp.n_head)
                    : 0;
    take(a.thread_scratch, a.scratch_per_thread_bytes * n_threads);
    a.device_bytes = at;
    at = 0;
    take(a.sampler, uint64_t{hp.n_vocab} * 16);
    // Last: the GPU backend takes it itself, in host-visible memory.
    take(a.logits_host, host_device ? 0 : a.logits.size_bytes);
    a.staging_bytes = at;
    a.total_bytes = a.device_bytes + a.staging_bytes;
    return a;
}

}  // namespace headroom
