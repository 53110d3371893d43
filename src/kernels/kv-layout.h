// How the KV region is addressed: where a layer's K and V rows of one block
// sit. Ownership (which blocks are free, refcounts, the prefix index) is the
// KV cache's business (memory/kv-cache.h); kernels only need this layout and
// a step's view of the block tables (kernels/step-view.h).
//
// Each layer group (full-attention layers, sliding-window layers; with a
// split model, the CPU's layers and the GPU's) has its own region, in the
// memory of the device that runs its layers. A region is one or more
// pieces, each a run of whole blocks (a GPU driver refuses allocations past
// a limit, 2-4 GiB on many): block b of group g is block b % piece_blocks of
// piece b / piece_blocks. A block of a group with n_layers layers is laid out
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
    // Per group: the pieces of its region (in the memory of the backend
    // that runs its layers), blocks per piece (all but the last piece hold
    // that many), and bytes per block (layer_bytes × its layers).
    std::vector<std::vector<DevPtr>> group_pieces;
    std::vector<uint32_t> group_piece_blocks;
    std::vector<uint64_t> group_block_bytes;
    // Per model layer: its group and its index within the group.
    std::vector<uint32_t> group_of_layer;
    std::vector<uint32_t> index_in_group;

    // Where block `block` of group g starts.
    DevPtr block_at(uint32_t g, int32_t block) const {
        const auto b = static_cast<uint32_t>(block);
        return group_pieces[g][b / group_piece_blocks[g]] +
               uint64_t{b % group_piece_blocks[g]} * group_block_bytes[g];
    }
    // The region a layer's rows are in, for a backend whose regions are one
    // piece (the host's: it has no allocation limit).
    DevPtr base_of_layer(uint32_t layer) const {
        const auto& pieces = group_pieces[group_of_layer[layer]];
        return pieces.size() == 1 ? pieces[0] : DevPtr{};
    }
    // Byte offsets from base_of_layer(layer) of block `block`, of head h's
    // keys (values) of a layer: block_size rows of k_row_bytes (v_row_bytes).
    // With block 0, the offsets within any block.
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
