// The KV block pool of one layer group: n_blocks fixed-size blocks of
// block_size tokens (K and V of every layer in the group). The pool owns
// block ids, refcounts and hashes, nothing else: where a block's bytes are
// is the KV layout's business (kernels/kv-layout.h). Every operation is O(1)
// and nothing is allocated after construction:
//  - a block is in use while its refcount is > 0 (sequences sharing a
//    cached prefix hold the same block);
//  - a free block that has a hash (a full block whose tokens are known) goes
//    on an LRU list and stays findable by the prefix index until it is
//    evicted; a free block without a hash goes on the free stack;
//  - allocate() takes the free stack first, then evicts the least recently
//    freed cached block (sequences release their blocks tail first, so the
//    tails of cached prefixes go before their heads);
//  - the prefix index is an open-addressing table from chained hash to
//    block; a hit also compares the block's tokens, so a hash collision can
//    never hand out the wrong KV.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace headroom {

class KvBlockPool {
  public:
    KvBlockPool(uint32_t n_blocks, uint32_t block_size, uint64_t block_bytes);

    uint32_t n_blocks() const { return n_blocks_; }
    uint32_t block_size() const { return block_size_; }
    uint64_t block_bytes() const { return block_bytes_; }
    uint32_t n_used() const { return n_used_; }              // refcount > 0
    uint32_t n_cached() const { return n_cached_; }          // free, still findable
    uint32_t n_free() const { return n_blocks_ - n_used_; }  // allocatable now
    uint64_t n_evictions() const { return n_evictions_; }

    bool can_allocate(uint32_t n) const { return n <= n_free(); }
    // A block with refcount 1 and no hash, or -1 when every block is in use.
    int32_t allocate();
    void retain(int32_t block);
    // Refcount - 1; at zero the block becomes cached (if hashed) or free.
    void release(int32_t block);
    int32_t ref_count(int32_t block) const { return ref_[block]; }
    // Sum of refcounts minus blocks in use: references that share a block.
    uint64_t n_shared_refs() const { return n_refs_ - n_used_; }

    // A block (in use or cached) holding exactly `tokens` under `hash`, or -1.
    // Does not change its refcount: call retain() to use it.
    int32_t find(uint64_t hash, std::span<const int32_t> tokens) const;
    // Makes a full, in-use block findable. Returns false (and leaves the
    // block unhashed) if another block already holds this hash.
    bool publish(int32_t block, uint64_t hash, std::span<const int32_t> tokens);
    bool is_published(int32_t block) const { return hashed_[block] != 0; }

    // For tests: every structure agrees with every other. Returns "" or what is wrong.
    std::string check_invariants() const;

  private:
    void lru_push_back(int32_t block);
    void lru_remove(int32_t block);
    void index_insert(int32_t block);
    void index_erase(int32_t block);
    uint32_t slot_of(uint64_t hash) const { return static_cast<uint32_t>(hash) & index_mask_; }

    uint32_t n_blocks_;
    uint32_t block_size_;
    uint64_t block_bytes_;

    std::vector<int32_t> ref_;
    std::vector<uint8_t> hashed_;
    std::vector<uint64_t> hash_;
    std::vector<int32_t> tokens_;  // (n_blocks, block_size): the tokens of hashed blocks
    std::vector<int32_t> free_stack_;
    // LRU of cached blocks: head is the next to evict.
    std::vector<int32_t> lru_prev_, lru_next_;
    int32_t lru_head_ = -1, lru_tail_ = -1;
    // Prefix index: power-of-two table of block ids (-1 empty), linear probing.
    std::vector<int32_t> index_;
    uint32_t index_mask_ = 0;

    uint32_t n_used_ = 0;
    uint64_t n_refs_ = 0;  // sum of refcounts
    uint32_t n_cached_ = 0;
    uint64_t n_evictions_ = 0;
};

}  // namespace headroom
