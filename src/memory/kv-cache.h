// The KV cache: one block pool per layer group (full-attention layers,
// sliding-window layers), whose blocks live in one region of the backend's
// memory (in pieces of whole blocks where the device limits allocations),
// plus each sequence's block tables. This is KV *ownership*; how a block is
// addressed is the layout (kernels/kv-layout.h), which the backend's kernels
// read with a step's view of the tables. The scheduler asks
// can_grow()/grow() before it schedules tokens; the engine frees a
// sequence's blocks when it finishes or is preempted.
//
// Prefix caching: block i of a sequence is identified by the chained hash
// h_i = xxh3(tokens of block i, seed h_{i-1}); full blocks are published
// after the step that filled them; a new sequence attaches the longest run
// of cached blocks of its prompt (never the whole prompt: the last token is
// always computed, to produce logits). Sliding-window groups need only the
// blocks within the window before the attach point.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "kernels/kv-layout.h"
#include "memory/kv-block-pool.h"
#include "memory/terms.h"

namespace headroom {

// A sequence's view of the cache.
struct SeqKv {
    std::vector<std::vector<int32_t>> tables;  // per group: block ids, -1 once out of the window
    uint32_t n_tokens = 0;                     // positions with K/V written (or being written)
    uint32_t n_published = 0;                  // leading full blocks already hashed
    uint64_t last_hash = 0;                    // hash of block n_published - 1
};

struct PrefixCacheStats {
    uint64_t query_tokens = 0;
    uint64_t hit_tokens = 0;
};

class KvCache {
  public:
    // Takes each group's region from the backend that runs its layers (`host`
    // for the groups the plan puts on the host, `backend` for the others) and
    // builds one pool per group.
    KvCache(const MemoryPlan& plan, const HParams& hp, bool enable_prefix_caching,
            kernels::Backend& backend, kernels::Backend* host = nullptr);

    uint32_t block_size() const { return block_size_; }
    size_t n_groups() const { return pools_.size(); }
    const KvBlockPool& pool(size_t group) const { return *pools_[group]; }
    const KvGroupPlan& group(size_t g) const { return groups_[g]; }
    // Model layers, and the group and index within the group of one.
    size_t n_layers() const { return layer_group_.size(); }
    size_t group_of_layer(uint32_t layer) const { return layer_group_[layer]; }
    uint32_t index_in_group(uint32_t layer) const { return layer_index_[layer]; }

    // Blocks in use and allocatable, summed over groups.
    uint64_t used_bytes() const;
    uint64_t capacity_bytes() const;
    // Bytes of the groups on the host, and in use there.
    uint64_t host_capacity_bytes() const;
    uint64_t host_used_bytes() const;
    // Where the blocks are: what the backend's kernels read.
    const kernels::KvLayout& layout() const { return layout_; }
    uint64_t n_blocks_total() const;
    uint64_t n_blocks_used() const;

    // True if `seq` can take `n_new` more tokens now.
    bool can_grow(const SeqKv& seq, uint32_t n_new) const;
    // Allocates blocks for positions [n_tokens, n_tokens + n_new) and
    // advances n_tokens; in sliding-window groups first frees blocks that no
    // query from position n_tokens on can see. A last, partial block that
    // other sequences share (a fork) is copied first: copy on write. Returns
    // false and changes nothing if the blocks are not there.
    bool grow(SeqKv& seq, uint32_t n_new);
    // Releases the blocks of sliding-window groups that no query from
    // position n_tokens on can see (grow does it too).
    void slide(SeqKv& seq);
    // Blocks pool g must hand out for `n_new` more tokens of `seq`: new table
    // entries, plus the copy of a shared partial last block when
    // `copies_last` (see grow). Blocks a slide would free are not subtracted.
    uint32_t blocks_to_grow(const SeqKv& seq, size_t g, uint32_t n_new, bool copies_last) const;
    // True if the last block of seq in group g is partial and shared: the next write copies it.
    bool shares_partial_last(const SeqKv& seq, size_t g) const;
    // Blocks one sequence of `n_tokens` holds at once in group g.
    uint32_t blocks_held_for(size_t g, uint32_t n_tokens) const;

    // Makes room in seq's block tables for max_model_len tokens, so growing
    // them never allocates (attach_prefix does it at admission).
    void reserve_tables(SeqKv& seq) const;
    // For a new (empty) sequence: reserves its tables and attaches the
    // longest cached prefix of `prompt` (whole blocks, at most
    // prompt.size() - 1 tokens). Returns the number of tokens attached;
    // seq.n_tokens is set to it.
    uint32_t attach_prefix(SeqKv& seq, std::span<const int32_t> prompt);
    // Publishes the blocks that `tokens` (the sequence's tokens so far, at
    // least seq.n_tokens of them) have filled.
    void publish_full_blocks(SeqKv& seq, std::span<const int32_t> tokens);
    // Releases every block, tail first (so cached tails are evicted first).
    void free(SeqKv& seq);
    // child (empty) shares every block of parent, the partial last one
    // included: each is retained, nothing is copied or allocated. The first
    // of the two to write into the shared partial block copies it (grow).
    void fork(const SeqKv& parent, SeqKv& child);
    // References beyond the first, summed over blocks and groups: the blocks
    // that sharing (forks, cached prefixes) saves against private copies.
    uint64_t n_shared_refs() const;
    // Bytes those references would take as private blocks.
    uint64_t shared_bytes() const;

    // Counts one admitted prompt: its length and the tokens attach_prefix found.
    void count_prefix_query(uint64_t query_tokens, uint64_t hit_tokens) {
        prefix_stats_.query_tokens += query_tokens;
        prefix_stats_.hit_tokens += hit_tokens;
    }
    const PrefixCacheStats& prefix_stats() const { return prefix_stats_; }
    bool prefix_caching() const { return prefix_caching_; }

    KvDtype dtype() const { return layout_.dtype; }
    // Slot of position `pos` of `seq` in the layer group g:
    // block × block_size + pos % block_size. Precondition: the block is allocated.
    int32_t slot(const SeqKv& seq, size_t g, uint32_t pos) const;

    // For tests.
    std::string check_invariants(std::span<const SeqKv* const> live) const;

  private:
    uint32_t first_needed_pos(size_t g, uint32_t n_tokens) const;

    std::vector<KvGroupPlan> groups_;
    std::vector<size_t> layer_group_;
    std::vector<uint32_t> layer_index_;
    uint32_t block_size_;
    uint32_t max_blocks_per_table_;  // table entries of a max_model_len sequence
    bool prefix_caching_;
    std::vector<kernels::Backend*> backend_of_group_;
    std::vector<kernels::SplitBuffer> regions_;  // per group
    kernels::KvLayout layout_;
    std::vector<std::unique_ptr<KvBlockPool>> pools_;
    PrefixCacheStats prefix_stats_;
};

// The chained hash of one block: xxh3 of its tokens, seeded with the previous block's hash.
uint64_t chain_hash(uint64_t previous, std::span<const int32_t> tokens);

}  // namespace headroom
