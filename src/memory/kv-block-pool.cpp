#include "memory/kv-block-pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace headroom {

KvBlockPool::KvBlockPool(uint32_t n_blocks, uint32_t block_size, uint64_t block_bytes)
    : n_blocks_(n_blocks),
      block_size_(block_size),
      block_bytes_(block_bytes),
      ref_(n_blocks, 0),
      hashed_(n_blocks, 0),
      hash_(n_blocks, 0),
      tokens_(static_cast<size_t>(n_blocks) * block_size, 0),
      lru_prev_(n_blocks, -1),
      lru_next_(n_blocks, -1) {
    free_stack_.reserve(n_blocks);
    // Lowest ids on top of the stack: blocks are handed out in address order.
    for (uint32_t i = n_blocks; i > 0; --i) free_stack_.push_back(static_cast<int32_t>(i - 1));
    uint32_t capacity = 16;
    while (capacity < 2 * n_blocks) capacity *= 2;
    index_.assign(capacity, -1);
    index_mask_ = capacity - 1;
}

int32_t KvBlockPool::allocate() {
    int32_t block = -1;
    if (!free_stack_.empty()) {
        block = free_stack_.back();
        free_stack_.pop_back();
    } else if (lru_head_ >= 0) {
        block = lru_head_;
        lru_remove(block);
        index_erase(block);
        hashed_[block] = 0;
        --n_cached_;
        ++n_evictions_;
    } else {
        return -1;
    }
    HR_DCHECK(ref_[block] == 0);
    ref_[block] = 1;
    ++n_used_;
    ++n_refs_;
    return block;
}

void KvBlockPool::retain(int32_t block) {
    HR_DCHECK(block >= 0 && static_cast<uint32_t>(block) < n_blocks_);
    if (ref_[block] == 0) {
        // A cached block comes back into use.
        HR_DCHECK(hashed_[block]);
        lru_remove(block);
        --n_cached_;
        ++n_used_;
    }
    ++ref_[block];
    ++n_refs_;
}

void KvBlockPool::release(int32_t block) {
    HR_DCHECK(block >= 0 && static_cast<uint32_t>(block) < n_blocks_ && ref_[block] > 0);
    --n_refs_;
    if (--ref_[block] > 0) return;
    --n_used_;
    if (hashed_[block]) {
        lru_push_back(block);
        ++n_cached_;
    } else {
        free_stack_.push_back(block);
    }
}

int32_t KvBlockPool::find(uint64_t hash, std::span<const int32_t> tokens) const {
    if (tokens.size() != block_size_) return -1;
    for (uint32_t slot = slot_of(hash);; slot = (slot + 1) & index_mask_) {
        const int32_t b = index_[slot];
        if (b < 0) return -1;
        if (hash_[b] == hash && std::equal(tokens.begin(), tokens.end(),
                                           tokens_.begin() + static_cast<int64_t>(b) * block_size_))
            return b;
    }
}

bool KvBlockPool::publish(int32_t block, uint64_t hash, std::span<const int32_t> tokens) {
    HR_DCHECK(ref_[block] > 0 && tokens.size() == block_size_);
    if (hashed_[block]) return hash_[block] == hash;
    for (uint32_t slot = slot_of(hash);; slot = (slot + 1) & index_mask_) {
        const int32_t b = index_[slot];
        if (b < 0) break;
        if (hash_[b] == hash) return false;
    }
    hash_[block] = hash;
    hashed_[block] = 1;
    std::copy(tokens.begin(), tokens.end(),
              tokens_.begin() + static_cast<int64_t>(block) * block_size_);
    index_insert(block);
    return true;
}

void KvBlockPool::lru_push_back(int32_t block) {
    lru_prev_[block] = lru_tail_;
    lru_next_[block] = -1;
    if (lru_tail_ >= 0)
        lru_next_[lru_tail_] = block;
    else
        lru_head_ = block;
    lru_tail_ = block;
}

void KvBlockPool::lru_remove(int32_t block) {
    const int32_t prev = lru_prev_[block], next = lru_next_[block];
    if (prev >= 0)
        lru_next_[prev] = next;
    else
        lru_head_ = next;
    if (next >= 0)
        lru_prev_[next] = prev;
    else
        lru_tail_ = prev;
    lru_prev_[block] = lru_next_[block] = -1;
}

void KvBlockPool::index_insert(int32_t block) {
    uint32_t slot = slot_of(hash_[block]);
    while (index_[slot] >= 0) slot = (slot + 1) & index_mask_;
    index_[slot] = block;
}

// Linear-probing deletion by backward shift: no tombstones, so lookups never
// slow down over a long run.
void KvBlockPool::index_erase(int32_t block) {
    uint32_t slot = slot_of(hash_[block]);
    while (index_[slot] != block) slot = (slot + 1) & index_mask_;
    uint32_t hole = slot;
    for (uint32_t next = (hole + 1) & index_mask_; index_[next] >= 0;
         next = (next + 1) & index_mask_) {
        const uint32_t home = slot_of(hash_[index_[next]]);
        // Move `next` into the hole unless its home lies cyclically in (hole, next].
        const bool stays =
            hole <= next ? (home > hole && home <= next) : (home > hole || home <= next);
        if (!stays) {
            index_[hole] = index_[next];
            hole = next;
        }
    }
    index_[hole] = -1;
}

std::string KvBlockPool::check_invariants() const {
    uint32_t used = 0, cached = 0;
    uint64_t refs = 0;
    for (uint32_t b = 0; b < n_blocks_; ++b) {
        if (ref_[b] < 0) return fmt::format("block {} has refcount {}", b, ref_[b]);
        refs += static_cast<uint64_t>(ref_[b]);
        if (ref_[b] > 0)
            ++used;
        else if (hashed_[b])
            ++cached;
    }
    if (used != n_used_) return fmt::format("{} blocks in use, counter says {}", used, n_used_);
    if (refs != n_refs_) return fmt::format("refcounts sum to {}, counter says {}", refs, n_refs_);
    if (cached != n_cached_)
        return fmt::format("{} cached blocks, counter says {}", cached, n_cached_);
    if (free_stack_.size() + cached + used != n_blocks_)
        return fmt::format("free {} + cached {} + used {} != {} blocks", free_stack_.size(), cached,
                           used, n_blocks_);
    for (int32_t b : free_stack_)
        if (ref_[b] != 0 || hashed_[b]) return fmt::format("free block {} is in use or hashed", b);
    uint32_t n_lru = 0;
    for (int32_t b = lru_head_, prev = -1; b >= 0; prev = b, b = lru_next_[b]) {
        if (ref_[b] != 0 || !hashed_[b])
            return fmt::format("LRU block {} is in use or unhashed", b);
        if (lru_prev_[b] != prev) return fmt::format("LRU links broken at block {}", b);
        if (++n_lru > n_blocks_) return "LRU list has a cycle";
    }
    if (n_lru != n_cached_)
        return fmt::format("LRU holds {} blocks, {} are cached", n_lru, n_cached_);
    uint32_t n_indexed = 0;
    for (int32_t b : index_) {
        if (b < 0) continue;
        ++n_indexed;
        if (!hashed_[b]) return fmt::format("index holds unhashed block {}", b);
        if (find(hash_[b], std::span(tokens_.data() + static_cast<int64_t>(b) * block_size_,
                                     block_size_)) != b)
            return fmt::format("block {} is indexed but not findable", b);
    }
    uint32_t n_hashed = 0;
    for (uint32_t b = 0; b < n_blocks_; ++b) n_hashed += hashed_[b];
    if (n_indexed != n_hashed) return fmt::format("{} indexed, {} hashed", n_indexed, n_hashed);
    return "";
}

}  // namespace headroom
