// The activation arena: every buffer one forward step needs, laid out once
// from the model's shape and the largest step (max_num_batched_tokens tokens,
// max_logit_rows rows of logits). It has two parts: the device part, what
// the backend's kernels read and write (in its device's memory), and host
// staging, what the host reads each step (the logits rows downloaded from a
// device, the sampler's scratch). The byte accounting sums both; the runner
// carves its buffers from them at these offsets. Nothing here grows with the
// context length: attention is flash-style over KV blocks, with only
// per-thread tiles.
#pragma once

#include <cstdint>
#include <vector>

#include "shape/hparams.h"

namespace headroom {

struct ArenaBuffer {
    uint64_t offset = 0;
    uint64_t size_bytes = 0;
};

struct ActivationLayout {
    uint32_t n_tokens = 0;      // tokens per step (rows of the buffers below)
    uint32_t n_logit_rows = 0;  // rows of logits per step
    uint32_t n_threads = 1;
    uint32_t attn_tile = 0;  // keys per attention tile
    // f32 unless noted.
    ArenaBuffer x;     // (n_tokens, n_embd) residual stream
    ArenaBuffer xb;    // (n_tokens, n_embd) normed input to a matmul
    ArenaBuffer q;     // (n_tokens, n_head * head_dim_k)
    ArenaBuffer k;     // (n_tokens, n_head_kv * head_dim_k)
    ArenaBuffer v;     // (n_tokens, n_head_kv * head_dim_v)
    ArenaBuffer attn;  // (n_tokens, n_head * head_dim_v) attention output
    ArenaBuffer gate;  // (n_tokens, n_ff), or a MoE's (n_tokens × k, n_ff_exp) if larger
    ArenaBuffer up;    // as gate
    // A mixture of experts' (kernels/moe.h; k = n_expert_used), else empty:
    ArenaBuffer router;  // (n_tokens, n_expert) router logits
    ArenaBuffer route;   // the route buffer
    ArenaBuffer moe_x;   // (n_tokens × k, n_embd) routed rows in, then out of the experts
    ArenaBuffer acts_q;  // (rows, max_in) activations quantized for the matmul kernels, rows
                         // the most any matmul takes (n_tokens × k with experts)
    ArenaBuffer logits;  // (n_logit_rows, n_vocab)
    ArenaBuffer thread_scratch;  // n_threads × scratch_per_thread_bytes
    uint64_t scratch_per_thread_bytes = 0;
    uint64_t device_bytes = 0;  // the buffers above

    // Where each buffer of the device part ends, its alignment included, in
    // order; the last is device_bytes. A device that takes the arena in
    // pieces cuts it only there.
    std::vector<uint64_t> device_ends() const;
    // Host staging; offsets from its start.
    ArenaBuffer sampler;      // (n_vocab) × (prob, index, mark, raw logit) for sampling
    ArenaBuffer logits_host;  // (n_logit_rows, n_vocab), a GPU's readback (its own allocation)
    uint64_t staging_bytes = 0;
    uint64_t total_bytes = 0;  // device_bytes + staging_bytes
};

// Buffers are 64-byte aligned; empty ones take no room. `host_device`: the
// kernels run in host memory (the CPU backend), which reads its logits in
// place and needs per-thread scratch; a GPU needs a readback buffer instead.
ActivationLayout plan_activations(const HParams& hp, uint32_t n_tokens, uint32_t n_logit_rows,
                                  uint32_t n_threads, bool host_device);

}  // namespace headroom
