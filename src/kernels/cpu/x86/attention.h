// Flash-style attention for the x86 tables (templates over the vector
// traits V), decode and prefill alike.
//
// Keys are visited in chunks of up to kMaxChunkKeys consecutive positions
// (chunk_keys(); chunk i covers [i * ck, (i + 1) * ck), whatever the KV block
// size), each loaded as tiles of kLanes keys. A work item is one KV head and
// a window of up to kQueryWindow batch tokens; the tokens of one sequence in
// the window ("a run") share each chunk: its K rows are converted to f32 once
// (and transposed, Kt: head_dim x kLanes per tile, unless the model has at
// most kRowDotMaxGroup query heads per KV head), its V rows converted once,
// then every query of the run (tokens x the KV head's query heads) takes it,
// one softmax step per chunk:
//   s = scale * q . Kt            (per tile, lanes = keys, or row dot
//                                  products summed across lanes; keys outside
//                                  the query's valid [first, pos] set to -inf)
//   m' = max(m, max(s));  c = e^(m - m');  p = e^(s - m') (0 outside)
//   l = l * c + sum(p);   acc = acc * c + sum_j p_j * v_j   (j in order)
// The steps start afresh at each segment of keys (kSegmentKeys, a whole
// number of chunks, starting at multiples of its size), and the segments'
// states are folded in order (fold_segment). So a decode step with fewer KV
// heads than work for the threads splits over keys instead: each (KV head,
// segment) is a work item writing its state to the scratch, then the states
// are folded per query. out = acc / l (with a sink, kernels::attention_finish).
// A query's operations depend only on its own position, window and the cached
// K/V, never on which other tokens share the call or how the work is split.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "core/thread-pool.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/x86/elementwise.h"
#include "kernels/cpu/x86/tables.h"

namespace headroom::kernels::x86 {

// Per-thread scratch attention takes (thread_scratch_bytes in dispatch.cpp
// covers it for kLanes <= 16).
template <class V>
struct AttnScratch {
    float* kt;     // per tile of the chunk: (head_dim_k, kLanes), or rows (kLanes, head_dim_k)
    float* v;      // (chunk keys, head_dim_v)
    float* state;  // per query: m, l, acc (head_dim_v) of the current segment
    float* total;  // per query: the same of the segments before it
    uint32_t ck;   // keys per chunk: chunk_keys()
};

// Elements [d0, d0 + kLanes) of a cached K or V row, as f32.
template <class V, KvDtype D>
HR_KERNEL_INLINE typename V::F load_kv_vec(const uint8_t* row, uint32_t d0) {
    if constexpr (D == KvDtype::F32) {
        return V::fload(reinterpret_cast<const float*>(row) + d0);
    } else if constexpr (D == KvDtype::F16) {
        return V::load_f16(row + 2 * d0);
    } else if constexpr (D == KvDtype::BF16) {
        return V::load_bf16(row + 2 * d0);
    } else {  // Q8_0: {f16 d; i8 q[32]} per 32 elements
        const uint8_t* blk = row + 34 * (d0 / 32);
        uint16_t h;
        std::memcpy(&h, blk, 2);
        return V::fmul(V::fset1(f16_to_f32(h)), V::load_i8(blk + 2 + d0 % 32));
    }
}

// One tile of keys into f32: K (kTransposeK: Kt, head_dim_k x kLanes,
// transposed straight from the cached rows; else kLanes rows of head_dim_k)
// and the V rows. k_rows[j] / v_rows[j] are key j's cached rows, or null where
// no query of the run needs it: its K is zero and its V row is left as it is
// (no query reads it).
template <class V, KvDtype D, bool kTransposeK>
void load_tile(const uint8_t* const* k_rows, const uint8_t* const* v_rows, uint32_t hk, uint32_t hv,
               const AttnScratch<V>& sc) {
    using F = typename V::F;
    constexpr int L = V::kLanes;
    if constexpr (kTransposeK) {
        for (uint32_t d0 = 0; d0 < hk; d0 += L) {
            F rows[L];
            for (int j = 0; j < L; ++j)
                rows[j] = k_rows[j] ? load_kv_vec<V, D>(k_rows[j], d0) : V::fzero();
            V::transpose_square(rows);
            for (int j = 0; j < L; ++j) V::fstore(sc.kt + (d0 + j) * L, rows[j]);
        }
    } else {
        for (int j = 0; j < L; ++j)
            for (uint32_t d0 = 0; d0 < hk; d0 += L)
                V::fstore(sc.kt + j * hk + d0,
                          k_rows[j] ? load_kv_vec<V, D>(k_rows[j], d0) : V::fzero());
    }
    for (int j = 0; j < L; ++j) {
        if (!v_rows[j]) continue;
        for (uint32_t d0 = 0; d0 < hv; d0 += L)
            V::fstore(sc.v + j * hv + d0, load_kv_vec<V, D>(v_rows[j], d0));
    }
}

template <class V>
using TileLoader = void (*)(const uint8_t* const*, const uint8_t* const*, uint32_t, uint32_t,
                            const AttnScratch<V>&);

template <class V, bool kTransposeK>
TileLoader<V> tile_loader(KvDtype dtype) {
    switch (dtype) {
        case KvDtype::F32:
            return &load_tile<V, KvDtype::F32, kTransposeK>;
        case KvDtype::F16:
            return &load_tile<V, KvDtype::F16, kTransposeK>;
        case KvDtype::BF16:
            return &load_tile<V, KvDtype::BF16, kTransposeK>;
        case KvDtype::Q8_0:
            break;
    }
    return &load_tile<V, KvDtype::Q8_0, kTransposeK>;
}

// Up to this many query heads per KV head, scores are dot products of K rows
// (each then summed across its lanes) rather than multiply-adds over a
// transposed tile: transposing costs as much as the multiply-adds of about two
// heads. The choice depends on the model alone, never on the batch.
inline constexpr uint32_t kRowDotMaxGroup = 2;

// Keys per softmax step ("chunk"): a whole number of tiles, at most
// kMaxChunkKeys, whose f32 K (and V) fit kChunkFloats (one tile if even that
// does not). Chunks start at multiples of their size, so a query's steps
// depend only on its position and the head size.
template <class V>
uint32_t chunk_keys(uint32_t hk, uint32_t hv) {
    constexpr uint32_t L = V::kLanes;
    static_assert(kMaxChunkKeys % L == 0);
    const uint32_t by_size = kChunkFloats / std::max(hk, hv) / L * L;
    return std::clamp<uint32_t>(by_size, L, kMaxChunkKeys);
}

// Keys per segment with chunks of ck keys: the largest multiple of ck up to
// kSegmentKeys (one chunk at least).
inline uint32_t segment_keys(uint32_t ck) {
    return std::max(ck, kSegmentKeys / ck * ck);
}

// Folds a segment's softmax state seg (m, l, acc; a key of the segment
// visible, so m is finite) into total, the state of the segments before it,
// both rescaled to the larger max:
//   m' = max(m, m_s);  l = l e^(m - m') + l_s e^(m_s - m');
//   acc = acc e^(m - m') + acc_s e^(m_s - m').
// Into the empty state (m = -inf, l = 0, acc = 0) this copies seg exactly.
template <class V>
void fold_segment(float* total, const float* seg, uint32_t hv) {
    using F = typename V::F;
    constexpr int L = V::kLanes;
    const float m = std::max(total[0], seg[0]);
    const float c = std::exp(total[0] - m), cs = std::exp(seg[0] - m);
    total[0] = m;
    total[1] = total[1] * c + seg[1] * cs;
    const F vc = V::fset1(c), vcs = V::fset1(cs);
    for (uint32_t d = 0; d < hv; d += L)
        V::fstore(total + 2 + d,
                  V::fma(V::fload(seg + 2 + d), vcs, V::fmul(V::fload(total + 2 + d), vc)));
}

inline void empty_state(float* st, uint32_t hv) {
    st[0] = -std::numeric_limits<float>::infinity();
    st[1] = 0.0f;
    std::fill(st + 2, st + 2 + hv, 0.0f);
}

// out (hv) = the attention of a query from its folded state.
template <class V>
void finish_query(const float* st, const float* sink, uint32_t hv, float* out) {
    using F = typename V::F;
    constexpr int L = V::kLanes;
    if (sink) {
        attention_finish(st + 2, st[0], st[1], sink, hv, out);
        return;
    }
    const F l = V::fset1(st[1]);
    for (uint32_t d = 0; d < hv; d += L) V::fstore(out + d, V::fdiv(V::fload(st + 2 + d), l));
}

// QB query heads of one token (consecutive heads: q rows hk apart, states
// stride apart) against the current chunk of keys, keys [j0, j1) of it
// valid: the steps of the file comment, interleaved across the heads for
// instruction-level parallelism (kRowDot: the chunk's K is in rows, see
// kRowDotMaxGroup, and each head's scores take their own 16 chains). Each
// head's operations and their order are a single head's, and a token's heads
// are always grouped the same way.
template <class V, int QB, bool kRowDot>
__attribute__((noinline)) void attend_heads(const float* q, float* st, uint64_t stride,
                                            const AttnScratch<V>& sc, uint32_t hk, uint32_t hv,
                                            int j0, int j1, float scale) {
    using F = typename V::F;
    constexpr int L = V::kLanes;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    alignas(64) float pj[QB][kMaxChunkKeys];
    const int tile0 = j0 / L, tile1 = (j1 - 1) / L + 1;  // tiles holding valid keys
    F mx[QB];
    for (int h = 0; h < QB; ++h) mx[h] = V::fset1(neg_inf);
    for (int ti = tile0; ti < tile1; ++ti) {
        const float* kt = sc.kt + static_cast<uint64_t>(ti) * hk * L;
        F sv[QB];
        if constexpr (kRowDot) {
            for (int h = 0; h < QB; ++h) {
                F part[L];
                for (int j = 0; j < L; ++j) part[j] = V::fzero();
                for (uint32_t d = 0; d < hk; d += L) {
                    const F qv = V::fload(q + h * hk + d);
                    for (int j = 0; j < L; ++j)
                        part[j] = V::fma(qv, V::fload(kt + j * hk + d), part[j]);
                }
                sv[h] = V::sum_rows(part);
            }
        } else {
            F s[QB][4];
            for (int h = 0; h < QB; ++h)
                for (int k = 0; k < 4; ++k) s[h][k] = V::fzero();
            for (uint32_t d = 0; d < hk; d += 4) {
                for (int k = 0; k < 4; ++k) {
                    const F kv = V::fload(kt + (d + k) * L);
                    for (int h = 0; h < QB; ++h)
                        s[h][k] = V::fma(V::fbcast(q + h * hk + d + k), kv, s[h][k]);
                }
            }
            for (int h = 0; h < QB; ++h)
                sv[h] = V::fadd(V::fadd(s[h][0], s[h][1]), V::fadd(s[h][2], s[h][3]));
        }
        const int a = std::max(j0 - ti * L, 0), b = std::min(j1 - ti * L, L);
        for (int h = 0; h < QB; ++h) {
            const F x = V::fkeep(V::fmul(sv[h], V::fset1(scale)), a, b, neg_inf);
            V::fstore(pj[h] + ti * L, x);
            mx[h] = V::fmax(mx[h], x);
        }
    }
    float c[QB];
    for (int h = 0; h < QB; ++h) {
        float* sth = st + h * stride;
        const float m_new = std::max(sth[0], V::reduce_max(mx[h]));
        c[h] = std::exp(sth[0] - m_new);
        const F m = V::fset1(m_new);
        F sum = V::fzero();
        for (int ti = tile0; ti < tile1; ++ti) {
            const int a = std::max(j0 - ti * L, 0), b = std::min(j1 - ti * L, L);
            const F p = V::fkeep(exp<V>(V::fsub(V::fload(pj[h] + ti * L), m)), a, b, 0.0f);
            V::fstore(pj[h] + ti * L, p);
            sum = V::fadd(sum, p);
        }
        sth[0] = m_new;
        sth[1] = sth[1] * c[h] + V::reduce_halving(sum);
    }
    // acc = acc * c + sum_j p_j v_j, DB vectors of each head at a time: QB x
    // DB independent chains of multiply-adds, each in the order of j. Three
    // or more heads are enough chains by themselves (more measured slower).
    constexpr int DB = QB >= 3 ? 1 : L / QB;
    for (uint32_t d0 = 0; d0 < hv; d0 += DB * L) {
        const int nd = static_cast<int>(std::min<uint32_t>(DB, (hv - d0) / L));
        F o[QB][DB];
        for (int h = 0; h < QB; ++h)
            for (int k = 0; k < nd; ++k)
                o[h][k] = V::fmul(V::fload(st + h * stride + 2 + d0 + k * L), V::fset1(c[h]));
        for (int j = j0; j < j1; ++j) {
            for (int k = 0; k < nd; ++k) {
                const F vj = V::fload(sc.v + j * hv + d0 + k * L);
                for (int h = 0; h < QB; ++h) o[h][k] = V::fma(V::fset1(pj[h][j]), vj, o[h][k]);
            }
        }
        for (int h = 0; h < QB; ++h)
            for (int k = 0; k < nd; ++k) V::fstore(st + h * stride + 2 + d0 + k * L, o[h][k]);
    }
}

// One chunk of keys [c0, c0 + ck), loaded into sc, for the queries of tokens
// [t0, t1) on KV head kv_h that see a key of it: each query's softmax state
// in `state` ((t1 - t0) x group states of hv + 2 floats) takes the chunk's
// keys it sees. row_dot: a group of at most kRowDotMaxGroup heads, which
// dots the keys row by row.
template <class V>
void attend_chunk(const AttentionArgs& a, uint32_t kv_h, int64_t t0, int64_t t1, uint32_t c0,
                  uint32_t ck, float* state, const AttnScratch<V>& sc, bool row_dot) {
    const uint32_t group = a.n_head / a.n_head_kv;
    const uint32_t hk = a.head_dim_k, hv = a.head_dim_v;
    const uint64_t state_stride = hv + 2;
    for (int64_t t = t0; t < t1; ++t) {
        const uint32_t pos = a.positions[t];
        const uint32_t first = first_visible(pos, a.window);
        if (pos < c0 || first >= c0 + ck) continue;
        const int j0 = static_cast<int>(std::max(first, c0) - c0);
        const int j1 = static_cast<int>(std::min(pos + 1, c0 + ck) - c0);
        const float* q = a.q + (t * a.n_head + kv_h * group) * hk;
        float* st = state + (t - t0) * group * state_stride;
        if (row_dot) {
            static_assert(kRowDotMaxGroup == 2, "one attend_heads per group size");
            if (group == 2)
                attend_heads<V, 2, true>(q, st, state_stride, sc, hk, hv, j0, j1, a.scale);
            else
                attend_heads<V, 1, true>(q, st, state_stride, sc, hk, hv, j0, j1, a.scale);
            continue;
        }
        for (uint32_t gi = 0; gi < group; gi += 4) {
            const uint32_t n = std::min<uint32_t>(4, group - gi);
            const float* qs = q + gi * hk;
            float* sts = st + gi * state_stride;
            if (n == 4)
                attend_heads<V, 4, false>(qs, sts, state_stride, sc, hk, hv, j0, j1, a.scale);
            else if (n == 3)
                attend_heads<V, 3, false>(qs, sts, state_stride, sc, hk, hv, j0, j1, a.scale);
            else if (n == 2)
                attend_heads<V, 2, false>(qs, sts, state_stride, sc, hk, hv, j0, j1, a.scale);
            else
                attend_heads<V, 1, false>(qs, sts, state_stride, sc, hk, hv, j0, j1, a.scale);
        }
    }
}

// The queries of tokens [t0, t1) (one sequence) on KV head kv_h, against the
// keys of [seg_lo, seg_hi) they see. Without seg_states: every key (seg_lo =
// 0, seg_hi = UINT32_MAX), segment by segment, folded, into a.out. With it:
// one segment's keys, each query's state of them into seg_states ((t1 - t0)
// x group states of hv + 2 floats; left empty where a query sees none).
template <class V>
void attend_run(const AttentionArgs& a, const int32_t* table, uint32_t kv_h, int64_t t0, int64_t t1,
                const AttnScratch<V>& sc, uint32_t seg_lo = 0, uint32_t seg_hi = UINT32_MAX,
                float* seg_states = nullptr) {
    constexpr int L = V::kLanes;
    const uint32_t group = a.n_head / a.n_head_kv;
    const uint32_t hk = a.head_dim_k, hv = a.head_dim_v;
    const KvLayout& kv = *a.kv;
    const uint32_t bs = kv.block_size;
    const bool row_dot = group <= kRowDotMaxGroup;
    const TileLoader<V> load =
        row_dot ? tile_loader<V, false>(kv.dtype) : tile_loader<V, true>(kv.dtype);
    const uint64_t state_stride = hv + 2;
    const uint32_t ck = sc.ck, sk = segment_keys(ck);
    float* const state = seg_states ? seg_states : sc.state;

    // Key range any query of the run sees.
    uint32_t lo_pos = UINT32_MAX, hi_pos = 0;
    for (int64_t t = t0; t < t1; ++t) {
        const uint32_t pos = a.positions[t];
        const uint32_t first = first_visible(pos, a.window);
        lo_pos = std::min(lo_pos, first);
        hi_pos = std::max(hi_pos, pos);
    }
    lo_pos = std::max(lo_pos, seg_lo);
    hi_pos = std::min(hi_pos, seg_hi - 1);
    const int64_t n_q = (t1 - t0) * group;
    for (int64_t qi = 0; qi < n_q; ++qi) {
        empty_state(state + qi * state_stride, hv);
        if (!seg_states) empty_state(sc.total + qi * state_stride, hv);
    }
    if (lo_pos > hi_pos) return;  // no query of the run sees this segment
    // Folds the states of segment [s0, s0 + sk) into the totals and empties
    // them, for the queries that see a key of it.
    auto fold = [&](uint32_t s0) {
        for (int64_t t = t0; t < t1; ++t) {
            const uint32_t pos = a.positions[t];
            if (pos < s0 || first_visible(pos, a.window) >= s0 + sk) continue;
            for (uint32_t gi = 0; gi < group; ++gi) {
                const uint64_t at = ((t - t0) * group + gi) * state_stride;
                fold_segment<V>(sc.total + at, sc.state + at, hv);
                empty_state(sc.state + at, hv);
            }
        }
    };
    const uint64_t k_bytes = kv.k_row_bytes, v_bytes = kv.v_row_bytes;
    // Rows of one head are consecutive within a KV block: look each block up
    // once, then step through its rows.
    const uint8_t* k_base = nullptr;
    const uint8_t* v_base = nullptr;
    uint32_t cur_block = UINT32_MAX;
    auto locate = [&](uint32_t p) {
        if (p / bs != cur_block) {
            cur_block = p / bs;
            const int32_t block = table[cur_block];
            k_base = a.kv_base + kv.k_offset(a.layer, block, kv_h);
            v_base = a.kv_base + kv.v_offset(a.layer, block, kv_h);
        }
        return p % bs;
    };
    // Asks for the K and V rows of positions [p, p1), in whatever blocks.
    auto prefetch = [&](uint32_t p, uint32_t p1) {
        while (p < p1) {
            const uint32_t r = locate(p);
            const uint32_t n = std::min(p1 - p, bs - r);  // rows left in this block
            for (uint64_t o = 0; o < n * k_bytes; o += 64) V::prefetch_l2(k_base + r * k_bytes + o);
            for (uint64_t o = 0; o < n * v_bytes; o += 64) V::prefetch_l2(v_base + r * v_bytes + o);
            p += n;
        }
    };
    const uint8_t* k_rows[L];
    const uint8_t* v_rows[L];
    const uint32_t first_chunk = lo_pos / ck * ck;
    for (uint32_t c0 = first_chunk; c0 <= hi_pos; c0 += ck) {
        // Keys of the chunk some query needs; the others are not read.
        const uint32_t k0 = std::max(c0, lo_pos), k1 = std::min(c0 + ck, hi_pos + 1);
        // Later chunks' rows sit in other KV blocks, where the hardware
        // prefetcher does not follow: while loading a tile, ask for the same
        // tile of the next chunk (the first chunk first asks for its own).
        // Asking a whole chunk ahead at once, or two tiles ahead, measured
        // slower.
        if (c0 == first_chunk) prefetch(k0, std::min(c0 + ck, hi_pos + 1));
        for (uint32_t p0 = k0 / L * L; p0 < k1; p0 += L) {
            prefetch(std::min(p0 + ck, hi_pos + 1), std::min(p0 + ck + L, hi_pos + 1));
            for (uint32_t p = p0; p < p0 + L; ++p) {
                if (p < k0 || p >= k1) {
                    k_rows[p - p0] = v_rows[p - p0] = nullptr;
                    continue;
                }
                const uint32_t r = locate(p);
                k_rows[p - p0] = k_base + r * k_bytes;
                v_rows[p - p0] = v_base + r * v_bytes;
            }
            AttnScratch<V> tile = sc;
            tile.kt += static_cast<uint64_t>(p0 - c0) * hk;
            tile.v += static_cast<uint64_t>(p0 - c0) * hv;
            load(k_rows, v_rows, hk, hv, tile);
        }
        attend_chunk<V>(a, kv_h, t0, t1, c0, ck, state, sc, row_dot);
        // The last chunk of a segment, or of the run's keys.
        if (!seg_states && ((c0 + ck) % sk == 0 || c0 + ck > hi_pos)) fold(c0 / sk * sk);
    }
    if (seg_states) return;
    for (int64_t t = t0; t < t1; ++t) {
        for (uint32_t gi = 0; gi < group; ++gi) {
            const uint32_t h = kv_h * group + gi;
            finish_query<V>(sc.total + ((t - t0) * group + gi) * state_stride,
                            a.sinks ? a.sinks + h : nullptr, hv, a.out + (t * a.n_head + h) * hv);
        }
    }
}

// A thread's scratch: a chunk's K and V, the states and totals of a window's
// queries, then (from states_offset) segment states of split decode steps.
template <class V>
struct AttnPlan {
    uint32_t ck = 0, sk = 0;
    uint64_t n_state = 0;        // floats of one window's states (or totals)
    uint64_t states_offset = 0;  // bytes

    explicit AttnPlan(const AttentionArgs& a)
        : ck(chunk_keys<V>(a.head_dim_k, a.head_dim_v)),
          sk(segment_keys(ck)),
          n_state(static_cast<uint64_t>(kQueryWindow) * (a.n_head / a.n_head_kv) *
                  (a.head_dim_v + 2)) {
        const uint64_t floats =
            static_cast<uint64_t>(ck) * (a.head_dim_k + a.head_dim_v) + 2 * n_state;
        states_offset = (floats * 4 + 63) / 64 * 64;
    }
    AttnScratch<V> scratch(const Context& ctx, int thread, const AttentionArgs& a) const {
        AttnScratch<V> sc;
        sc.kt = reinterpret_cast<float*>(ctx.thread_scratch(thread));
        sc.ck = ck;
        sc.v = sc.kt + static_cast<uint64_t>(ck) * a.head_dim_k;
        sc.state = sc.v + static_cast<uint64_t>(ck) * a.head_dim_v;
        sc.total = sc.state + n_state;
        return sc;
    }
};

// Hands work items [0, n_items) to the pool's threads as they come free:
// fn(the thread's scratch, item).
template <class V, class Fn>
void run_items(const AttentionArgs& a, const Context& ctx, const AttnPlan<V>& plan, int64_t n_items,
               Fn&& fn) {
    std::atomic<int64_t> next{0};
    ctx.pool->run([&](int thread) {
        const AttnScratch<V> sc = plan.scratch(ctx, thread, a);
        for (;;) {
            const int64_t item = next.fetch_add(1, std::memory_order_relaxed);
            if (item >= n_items) break;
            fn(sc, item);
        }
    });
}

// fn(t0, t1, block table) for each run [t0, t1) of one sequence's tokens in
// [w0, w1).
template <class Fn>
void for_each_run(const AttentionArgs& a, int64_t w0, int64_t w1, Fn&& fn) {
    const uint32_t g = a.kv->group_of_layer[a.layer];
    for (int64_t t0 = w0; t0 < w1;) {
        int64_t t1 = t0 + 1;
        while (t1 < w1 && a.seq_of_token[t1] == a.seq_of_token[t0]) ++t1;
        fn(t0, t1, a.step->table(g, a.seq_of_token[t0]));
        t0 = t1;
    }
}

// A decode step (one window of tokens) with few KV heads for the threads,
// split over keys: work item (segment s, KV head h) runs every sequence's
// queries on h against the keys of s into a slot of segment states, in the
// scratch of thread slot / slots_per_thread; then each query's slots are
// folded in segment order and finished. False, doing nothing, where there is
// one thread, the step is not one window, the keys do not span two segments,
// the KV heads already give each thread two items, or the slots do not fit
// the scratch.
template <class V>
bool attention_split(const AttentionArgs& a, const Context& ctx, const AttnPlan<V>& plan) {
    const int n_threads = ctx.pool->n_threads();
    if (n_threads == 1 || a.n_tokens > kQueryWindow ||
        a.n_head_kv >= 2 * static_cast<uint32_t>(n_threads))
        return false;
    uint32_t lo = UINT32_MAX, hi = 0;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
        lo = std::min(lo, first_visible(a.positions[t], a.window));
        hi = std::max(hi, a.positions[t]);
    }
    const uint32_t s_lo = lo / plan.sk, s_hi = hi / plan.sk;
    const uint32_t group = a.n_head / a.n_head_kv;
    const uint64_t stride = a.head_dim_v + 2;
    const uint64_t slot_floats = static_cast<uint64_t>(a.n_tokens) * group * stride;
    if (s_hi == s_lo || ctx.scratch_per_thread_bytes <= plan.states_offset) return false;
    const uint64_t slots_per_thread =
        (ctx.scratch_per_thread_bytes - plan.states_offset) / (slot_floats * 4);
    const int64_t n_items = static_cast<int64_t>(s_hi - s_lo + 1) * a.n_head_kv;
    if (n_items > static_cast<int64_t>(slots_per_thread) * n_threads) return false;
    auto slot = [&](int64_t item) {
        const auto thread = static_cast<int>(item / static_cast<int64_t>(slots_per_thread));
        return reinterpret_cast<float*>(ctx.thread_scratch(thread) + plan.states_offset) +
               static_cast<uint64_t>(item) % slots_per_thread * slot_floats;
    };
    run_items(a, ctx, plan, n_items, [&](const AttnScratch<V>& sc, int64_t item) {
        const uint32_t s = s_lo + static_cast<uint32_t>(item / a.n_head_kv);
        const auto kv_h = static_cast<uint32_t>(item % a.n_head_kv);
        float* states = slot(item);
        for_each_run(a, 0, a.n_tokens, [&](int64_t t0, int64_t t1, const int32_t* table) {
            attend_run<V>(a, table, kv_h, t0, t1, sc, s * plan.sk, (s + 1) * plan.sk,
                          states + static_cast<uint64_t>(t0) * group * stride);
        });
    });
    const int64_t n_q = a.n_tokens * a.n_head;
    ctx.pool->run([&](int thread) {
        float* total = plan.scratch(ctx, thread, a).total;
        for (int64_t q = n_q * thread / n_threads; q < n_q * (thread + 1) / n_threads; ++q) {
            const int64_t t = q / a.n_head;
            const auto h = static_cast<uint32_t>(q % a.n_head);
            const uint32_t pos = a.positions[t];
            empty_state(total, a.head_dim_v);
            for (uint32_t s = first_visible(pos, a.window) / plan.sk; s <= pos / plan.sk; ++s) {
                const int64_t item = static_cast<int64_t>(s - s_lo) * a.n_head_kv + h / group;
                fold_segment<V>(total, slot(item) + (t * group + h % group) * stride, a.head_dim_v);
            }
            finish_query<V>(total, a.sinks ? a.sinks + h : nullptr, a.head_dim_v,
                            a.out + (t * a.n_head + h) * a.head_dim_v);
        }
    });
    return true;
}

template <class V>
void attention(const AttentionArgs& a, const Context& ctx) {
    const AttnPlan<V> plan(a);
    if (attention_split<V>(a, ctx, plan)) return;
    const int64_t n_windows = (a.n_tokens + kQueryWindow - 1) / kQueryWindow;
    const int64_t n_items = n_windows * a.n_head_kv;
    run_items(a, ctx, plan, n_items, [&](const AttnScratch<V>& sc, int64_t item) {
        // Later windows see more keys: hand them out first.
        const int64_t w = n_windows - 1 - item / a.n_head_kv;
        const auto kv_h = static_cast<uint32_t>(item % a.n_head_kv);
        const int64_t w0 = w * kQueryWindow;
        const int64_t w1 = std::min<int64_t>(a.n_tokens, w0 + kQueryWindow);
        for_each_run(a, w0, w1, [&](int64_t t0, int64_t t1, const int32_t* table) {
            attend_run<V>(a, table, kv_h, t0, t1, sc);
        });
    });
}

}  // namespace headroom::kernels::x86
