#include "memory/kv-cache.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <map>

#include "core/check.h"
#include "core/error.h"

namespace headroom {

uint64_t chain_hash(uint64_t previous, std::span<const int32_t> tokens) {
    return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), previous);
}

KvCache::KvCache(const MemoryPlan& plan, const HParams& hp, bool enable_prefix_caching,
                 kernels::Backend& backend, kernels::Backend* host)
    : groups_(plan.kv_groups),
      layer_group_(hp.n_layer, 0),
      layer_index_(hp.n_layer, 0),
      block_size_(plan.config.block_size),
      max_blocks_per_table_((plan.config.max_model_len + plan.config.block_size - 1) /
                            plan.config.block_size),
      prefix_caching_(enable_prefix_caching) {
    kernels::KvLayout& l = layout_;
    l.dtype = plan.config.kv_dtype;
    l.block_size = block_size_;
    l.n_head_kv = hp.n_head_kv;
    l.head_dim_k = hp.head_dim_k;
    l.head_dim_v = hp.head_dim_v;
    const TensorType t = tensor_type(l.dtype);
    l.k_row_bytes = row_bytes(t, hp.head_dim_k);
    l.v_row_bytes = row_bytes(t, hp.head_dim_v);
    l.layer_bytes = uint64_t{l.n_head_kv} * block_size_ * (l.k_row_bytes + l.v_row_bytes);
    l.group_of_layer.assign(hp.n_layer, 0);
    l.index_in_group.assign(hp.n_layer, 0);
    uint64_t device_bytes = 0;
    for (size_t g = 0; g < groups_.size(); ++g) {
        const KvGroupPlan& gp = groups_[g];
        kernels::Backend* b = gp.on_host ? host : &backend;
        HR_CHECK_MSG(b, "a plan with layers on the host needs the host's backend");
        backend_of_group_.push_back(b);
        regions_.emplace_back(*b, Term::KvCache, gp.n_blocks, gp.block_bytes,
                              gp.on_host ? "KV cache (host layers)" : "KV cache");
        if (!gp.on_host) device_bytes += gp.n_blocks * gp.block_bytes;
        if (gp.kind == AttentionKind::Latent)
            fail("latent (MLA) attention is planned but not run by this engine");
        HR_CHECK(gp.block_bytes == gp.layers.size() * l.layer_bytes);
        for (uint32_t i = 0; i < gp.layers.size(); ++i) {
            layer_group_[gp.layers[i]] = g;
            layer_index_[gp.layers[i]] = i;
            l.group_of_layer[gp.layers[i]] = static_cast<uint32_t>(g);
            l.index_in_group[gp.layers[i]] = i;
        }
        l.group_pieces.push_back(regions_.back().pieces());
        l.group_piece_blocks.push_back(static_cast<uint32_t>(regions_.back().units_per_piece()));
        l.group_block_bytes.push_back(gp.block_bytes);
        pools_.push_back(std::make_unique<KvBlockPool>(static_cast<uint32_t>(gp.n_blocks),
                                                       block_size_, gp.block_bytes));
    }
    HR_CHECK(device_bytes == plan.kv_cache_bytes);
}

uint64_t KvCache::capacity_bytes() const {
    uint64_t n = 0;
    for (const auto& r : regions_) n += r.size_bytes();
    return n;
}

uint64_t KvCache::host_capacity_bytes() const {
    uint64_t n = 0;
    for (size_t g = 0; g < groups_.size(); ++g)
        if (groups_[g].on_host) n += regions_[g].size_bytes();
    return n;
}

uint64_t KvCache::host_used_bytes() const {
    uint64_t n = 0;
    for (size_t g = 0; g < groups_.size(); ++g)
        if (groups_[g].on_host) n += uint64_t{pools_[g]->n_used()} * pools_[g]->block_bytes();
    return n;
}

uint64_t KvCache::used_bytes() const {
    uint64_t n = 0;
    for (const auto& p : pools_) n += uint64_t{p->n_used()} * p->block_bytes();
    return n;
}

uint64_t KvCache::n_blocks_total() const {
    uint64_t n = 0;
    for (const auto& p : pools_) n += p->n_blocks();
    return n;
}

uint64_t KvCache::n_blocks_used() const {
    uint64_t n = 0;
    for (const auto& p : pools_) n += p->n_used();
    return n;
}

uint32_t KvCache::first_needed_pos(size_t g, uint32_t n_tokens) const {
    const KvGroupPlan& gp = groups_[g];
    if (gp.kind != AttentionKind::SlidingWindow) return 0;
    // The first key a query at position n_tokens (the next one) sees.
    return kernels::first_visible(n_tokens, gp.window);
}

uint32_t KvCache::blocks_held_for(size_t g, uint32_t n_tokens) const {
    return request_kv_blocks(groups_[g], block_size_, n_tokens, n_tokens, 1);
}

bool KvCache::shares_partial_last(const SeqKv& seq, size_t g) const {
    if (seq.n_tokens % block_size_ == 0 || seq.tables.size() <= g) return false;
    const auto& table = seq.tables[g];
    return !table.empty() && table.back() >= 0 && pools_[g]->ref_count(table.back()) > 1;
}

uint32_t KvCache::blocks_to_grow(const SeqKv& seq, size_t g, uint32_t n_new,
                                 bool copies_last) const {
    if (n_new == 0) return 0;
    const uint32_t end = (seq.n_tokens + n_new + block_size_ - 1) / block_size_;
    const size_t have = seq.tables.size() > g ? seq.tables[g].size() : 0;
    const uint32_t fresh = end > have ? end - static_cast<uint32_t>(have) : 0;
    return fresh + (copies_last ? 1 : 0);
}

bool KvCache::can_grow(const SeqKv& seq, uint32_t n_new) const {
    if (n_new == 0) return true;
    for (size_t g = 0; g < pools_.size(); ++g) {
        const size_t have = seq.tables.size() > g ? seq.tables[g].size() : 0;
        const uint32_t need = blocks_to_grow(seq, g, n_new, shares_partial_last(seq, g));
        if (need == 0) continue;
        // Blocks this sequence will free from the window first.
        uint32_t freeable = 0;
        if (have > 0) {
            const uint32_t first_block = first_needed_pos(g, seq.n_tokens) / block_size_;
            for (uint32_t b = 0; b < first_block && b < have; ++b)
                if (seq.tables[g][b] >= 0 && pools_[g]->ref_count(seq.tables[g][b]) == 1)
                    ++freeable;
        }
        if (need > pools_[g]->n_free() + freeable) return false;
    }
    return true;
}

void KvCache::slide(SeqKv& seq) {
    for (size_t g = 0; g < seq.tables.size() && g < pools_.size(); ++g) {
        const uint32_t first_block = first_needed_pos(g, seq.n_tokens) / block_size_;
        auto& table = seq.tables[g];
        for (uint32_t b = 0; b < first_block && b < table.size(); ++b) {
            if (table[b] >= 0) {
                pools_[g]->release(table[b]);
                table[b] = -1;
            }
        }
    }
}

bool KvCache::grow(SeqKv& seq, uint32_t n_new) {
    if (n_new == 0) return true;
    if (seq.tables.size() < pools_.size()) seq.tables.resize(pools_.size());
    slide(seq);
    for (size_t g = 0; g < pools_.size(); ++g)
        if (!pools_[g]->can_allocate(blocks_to_grow(seq, g, n_new, shares_partial_last(seq, g))))
            return false;
    const uint32_t end = (seq.n_tokens + n_new + block_size_ - 1) / block_size_;
    for (size_t g = 0; g < pools_.size(); ++g) {
        auto& table = seq.tables[g];
        if (shares_partial_last(seq, g)) {
            // Copy on write: the shared partial block stays with the others.
            const int32_t copy = pools_[g]->allocate();
            HR_CHECK(copy >= 0);
            backend_of_group_[g]->copy_block(
                layout_.block_at(static_cast<uint32_t>(g), copy),
                layout_.block_at(static_cast<uint32_t>(g), table.back()),
                layout_.group_block_bytes[g]);
            pools_[g]->release(table.back());
            table.back() = copy;
        }
        while (table.size() < end) {
            const int32_t b = pools_[g]->allocate();
            HR_CHECK(b >= 0);
            table.push_back(b);
        }
    }
    seq.n_tokens += n_new;
    return true;
}

void KvCache::reserve_tables(SeqKv& seq) const {
    seq.tables.resize(pools_.size());
    for (auto& t : seq.tables) t.reserve(max_blocks_per_table_ + 1);
}

uint32_t KvCache::attach_prefix(SeqKv& seq, std::span<const int32_t> prompt) {
    HR_CHECK(seq.n_tokens == 0);
    reserve_tables(seq);
    for (auto& t : seq.tables) t.clear();
    if (!prefix_caching_ || prompt.size() < 2) return 0;
    const uint32_t max_blocks = static_cast<uint32_t>((prompt.size() - 1) / block_size_);
    // Hashes of the candidate blocks, and how far every full-attention group hits.
    std::vector<uint64_t> hashes;
    std::vector<std::vector<int32_t>> found(pools_.size());
    uint64_t h = 0;
    uint32_t n_hit = 0;
    for (uint32_t i = 0; i < max_blocks; ++i) {
        const auto tokens = prompt.subspan(size_t{i} * block_size_, block_size_);
        h = chain_hash(h, tokens);
        bool all_hit = true;
        for (size_t g = 0; g < pools_.size(); ++g) {
            const int32_t b = pools_[g]->find(h, tokens);
            found[g].push_back(b);
            if (b < 0 && groups_[g].kind != AttentionKind::SlidingWindow) all_hit = false;
        }
        if (!all_hit) break;
        hashes.push_back(h);
        n_hit = i + 1;
    }
    // Sliding-window groups need only the blocks a query at the attach
    // point can see; shorten the attach point until they are all cached.
    for (; n_hit > 0; --n_hit) {
        const uint32_t len = n_hit * block_size_;
        bool ok = true;
        for (size_t g = 0; g < pools_.size() && ok; ++g) {
            if (groups_[g].kind != AttentionKind::SlidingWindow) continue;
            for (uint32_t b = first_needed_pos(g, len) / block_size_; b < n_hit && ok; ++b)
                ok = found[g][b] >= 0;
        }
        if (ok) break;
    }
    if (n_hit == 0) return 0;
    const uint32_t len = n_hit * block_size_;
    for (size_t g = 0; g < pools_.size(); ++g) {
        const uint32_t first_block = first_needed_pos(g, len) / block_size_;
        auto& table = seq.tables[g];
        for (uint32_t b = 0; b < n_hit; ++b) {
            if (b < first_block) {
                table.push_back(-1);
            } else {
                pools_[g]->retain(found[g][b]);
                table.push_back(found[g][b]);
            }
        }
    }
    seq.n_tokens = len;
    seq.n_published = n_hit;
    seq.last_hash = hashes[n_hit - 1];
    return len;
}

void KvCache::publish_full_blocks(SeqKv& seq, std::span<const int32_t> tokens) {
    if (!prefix_caching_) return;
    HR_DCHECK(tokens.size() >= seq.n_tokens);
    while ((seq.n_published + 1) * block_size_ <= seq.n_tokens) {
        const uint32_t i = seq.n_published;
        const auto block_tokens = tokens.subspan(size_t{i} * block_size_, block_size_);
        const uint64_t h = chain_hash(seq.last_hash, block_tokens);
        for (size_t g = 0; g < pools_.size(); ++g) {
            const int32_t b = i < seq.tables[g].size() ? seq.tables[g][i] : -1;
            if (b >= 0) pools_[g]->publish(b, h, block_tokens);
        }
        seq.last_hash = h;
        ++seq.n_published;
    }
}

void KvCache::free(SeqKv& seq) {
    for (size_t g = 0; g < seq.tables.size(); ++g) {
        auto& table = seq.tables[g];
        for (auto it = table.rbegin(); it != table.rend(); ++it)
            if (*it >= 0) pools_[g]->release(*it);
        table.clear();
    }
    seq.n_tokens = 0;
    seq.n_published = 0;
    seq.last_hash = 0;
}

void KvCache::fork(const SeqKv& parent, SeqKv& child) {
    HR_CHECK(child.n_tokens == 0);
    reserve_tables(child);
    for (size_t g = 0; g < pools_.size(); ++g) {
        child.tables[g].clear();
        if (parent.tables.size() <= g) continue;
        for (int32_t b : parent.tables[g]) {
            if (b >= 0) pools_[g]->retain(b);
            child.tables[g].push_back(b);
        }
    }
    child.n_tokens = parent.n_tokens;
    child.n_published = parent.n_published;
    child.last_hash = parent.last_hash;
}

uint64_t KvCache::n_shared_refs() const {
    uint64_t n = 0;
    for (const auto& p : pools_) n += p->n_shared_refs();
    return n;
}

uint64_t KvCache::shared_bytes() const {
    uint64_t n = 0;
    for (const auto& p : pools_) n += p->n_shared_refs() * p->block_bytes();
    return n;
}

int32_t KvCache::slot(const SeqKv& seq, size_t g, uint32_t pos) const {
    const int32_t block = seq.tables[g][pos / block_size_];
    HR_DCHECK(block >= 0);
    return block * static_cast<int32_t>(block_size_) + static_cast<int32_t>(pos % block_size_);
}

std::string KvCache::check_invariants(std::span<const SeqKv* const> live) const {
    for (size_t g = 0; g < pools_.size(); ++g) {
        if (auto why = pools_[g]->check_invariants(); !why.empty())
            return fmt::format("group {}: {}", g, why);
        std::map<int32_t, int32_t> refs;
        for (const SeqKv* s : live) {
            if (s->tables.size() <= g) continue;
            for (int32_t b : s->tables[g])
                if (b >= 0) ++refs[b];
            const uint32_t held = static_cast<uint32_t>(std::count_if(
                s->tables[g].begin(), s->tables[g].end(), [](int32_t b) { return b >= 0; }));
            if (held > groups_[g].max_blocks_per_seq)
                return fmt::format(
                    "group {}: a sequence of {} tokens holds {} blocks, at most {} expected", g,
                    s->n_tokens, held, groups_[g].max_blocks_per_seq);
        }
        for (uint32_t b = 0; b < pools_[g]->n_blocks(); ++b) {
            const auto it = refs.find(static_cast<int32_t>(b));
            const int32_t expected = it == refs.end() ? 0 : it->second;
            if (pools_[g]->ref_count(static_cast<int32_t>(b)) != expected)
                return fmt::format("group {} block {}: refcount {}, held by {} tables", g, b,
                                   pools_[g]->ref_count(static_cast<int32_t>(b)), expected);
        }
    }
    return "";
}

}  // namespace headroom
