// How the KV region is addressed: where a layer's K and V rows of one block
// sit. Ownership (which blocks are free, refcounts, the prefix index) is the
// KV cache's business (memory/kv-cache.h); kernels only need this layout and
// a step's view of the block tables (kernels/step-view.h).
//
// Each layer group (full-attention layers, sliding-window layers; with a
// split model, the CPU's layers and the GPU's) has its own region, in the
// memory of the device that runs its layers. A block of a group with
// n_layers layers is laid out
//   [layer in group][K, V][kv_head][slot in block][head_dim]
// so one head's keys for a block are contiguous and attention streams them.
// Rows are in the KV dtype (a Q8_0 row is head_dim / 32 blocks of 34 bytes).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dev-ptr.h"
#include "kernels/kv-dtype.h"

namespace headroom::kernels {

// The first position a query at `pos` sees: keys pos - window + 1 .. pos of a
// sliding window, or all keys from 0 when window is 0 (full attention).
inline uint32_t first_visible(uint32_t pos, uint32_t window) {
    return window && pos + 1 > window ? pos + 1 - window : 0;
}

struct KvLayout {
    KvDtype dtype = KvDtype::F16;
    uint32_t block_size = 16;  // tokens per block
    uint32_t n_head_kv = 0;
    uint32_t head_dim_k = 0;
    uint32_t head_dim_v = 0;
    uint64_t k_row_bytes = 0;  // one head's K row of one token
    uint64_t v_row_bytes = 0;
    uint64_t layer_bytes = 0;  // one layer's K and V in one block
    // Per group: its region (in the memory of the backend that runs its
    // layers), and bytes per block (layer_bytes × its layers).
    std::vector<DevPtr> group_base;
    std::vector<uint64_t> group_block_bytes;
    // Per model layer: its group and its index within the group.
    std::vector<uint32_t> group_of_layer;
    std::vector<uint32_t> index_in_group;

    // The region a layer's rows are in.
    DevPtr base_of_layer(uint32_t layer) const { return group_base[group_of_layer[layer]]; }
    // Byte offsets from base_of_layer(layer) of block `block`, of head h's
    // keys (values) of a layer: block_size rows of k_row_bytes (v_row_bytes).
    uint64_t k_offset(uint32_t layer, int32_t block, uint32_t h) const {
        const uint32_t g = group_of_layer[layer];
        return static_cast<uint64_t>(block) * group_block_bytes[g] +
               index_in_group[layer] * layer_bytes + uint64_t{h} * block_size * k_row_bytes;
    }
    uint64_t v_offset(uint32_t layer, int32_t block, uint32_t h) const {
        return k_offset(layer, block, 0) + uint64_t{n_head_kv} * block_size * k_row_bytes +
               uint64_t{h} * block_size * v_row_bytes;
    }
};

}  // namespace headroom::kernels
