// Splits items [0, n) among a pool's threads so that each thread, as a rule,
// walks one contiguous range from front to back.
//
// Thread t owns the t-th of n_threads equal shares and takes it from the
// front, `grab` items at a time. A thread whose share is used up steals the
// back half of the largest share still left and goes on with that as its own.
// So a thread slowed by the machine's other load hands work to the others,
// while an even run never leaves its first range.
//
// Why it matters: a decode step's matrix-vector products read weights at the
// memory's speed only while the hardware prefetcher runs ahead of each core.
// Every jump to a new address restarts its ramp. Handing out the last quarter
// of every product from a shared counter (a jump per piece) made the products
// of a decode step 3-6% slower when two cores read 60+ GB/s together.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <span>

#include "core/check.h"

namespace headroom {

class ShareQueue {
  public:
    // Threads past kMaxShares start empty and only steal.
    static constexpr int kMaxShares = 128;

    // grab: items a thread takes from the front of its range at a time; the
    // other threads can steal only what it has not taken yet.
    ShareQueue(int64_t n, int n_threads, int64_t grab)
        : n_shares_(std::min(std::max(n_threads, 1), kMaxShares)),
          grab_(std::max<int64_t>(grab, 1)) {
        HR_CHECK(n >= 0 && n < (int64_t{1} << 31));
        for (int s = 0; s < n_shares_; ++s)
            shares_[s].range.store(pack(n * s / n_shares_, n * (s + 1) / n_shares_),
                                   std::memory_order_relaxed);
    }

    // Shares given: thread s owns [bounds[s], bounds[s + 1]) (non-decreasing,
    // from 0), for bounds.size() - 1 <= kMaxShares shares.
    ShareQueue(std::span<const int64_t> bounds, int64_t grab)
        : n_shares_(static_cast<int>(bounds.size()) - 1), grab_(std::max<int64_t>(grab, 1)) {
        HR_CHECK(n_shares_ >= 1 && n_shares_ <= kMaxShares && bounds[0] == 0 &&
                 bounds[n_shares_] < (int64_t{1} << 31));
        for (int s = 0; s < n_shares_; ++s) {
            HR_CHECK(bounds[s] <= bounds[s + 1]);
            shares_[s].range.store(pack(bounds[s], bounds[s + 1]), std::memory_order_relaxed);
        }
    }

    // Calls fn(begin, end) for every range `thread` takes, until no items are left.
    template <class Fn>
    void drain(int thread, Fn&& fn) {
        std::atomic<uint64_t>* own = thread < n_shares_ ? &shares_[thread].range : nullptr;
        for (;;) {
            if (own) {
                int64_t b = 0, e = 0;
                while (take_front(*own, b, e)) fn(b, e);
            }
            // Own range used up: steal the back half of the largest one left.
            int64_t b = 0, e = 0;
            if (!steal(b, e)) return;
            if (own) {
                own->store(pack(b, e), std::memory_order_relaxed);
            } else {
                fn(b, e);
            }
        }
    }

  private:
    // A range is one word, front in the low half and back in the high half,
    // so that the owner (front) and thieves (back) agree by compare-exchange.
    static uint64_t pack(int64_t front, int64_t back) {
        return static_cast<uint64_t>(front) | static_cast<uint64_t>(back) << 32;
    }
    static int64_t front_of(uint64_t r) { return static_cast<int64_t>(r & 0xFFFFFFFFu); }
    static int64_t back_of(uint64_t r) { return static_cast<int64_t>(r >> 32); }

    bool take_front(std::atomic<uint64_t>& range, int64_t& b, int64_t& e) {
        uint64_t r = range.load(std::memory_order_relaxed);
        for (;;) {
            const int64_t front = front_of(r), back = back_of(r);
            if (front >= back) return false;
            const int64_t end = std::min(back, front + grab_);
            if (range.compare_exchange_weak(r, pack(end, back), std::memory_order_relaxed)) {
                b = front;
                e = end;
                return true;
            }
        }
    }

    bool steal(int64_t& b, int64_t& e) {
        for (;;) {
            int victim = -1;
            int64_t most = 0;
            uint64_t seen = 0;
            for (int s = 0; s < n_shares_; ++s) {
                const uint64_t r = shares_[s].range.load(std::memory_order_relaxed);
                if (back_of(r) - front_of(r) > most) {
                    most = back_of(r) - front_of(r);
                    victim = s;
                    seen = r;
                }
            }
            if (victim < 0) return false;
            const int64_t front = front_of(seen), back = back_of(seen);
            const int64_t begin = back - (back - front + 1) / 2;
            if (shares_[victim].range.compare_exchange_strong(seen, pack(front, begin),
                                                              std::memory_order_relaxed)) {
                b = begin;
                e = back;
                return true;
            }
        }
    }

    // A cache line each, so that an owner's takes do not keep pulling the
    // line away from the other owners.
    struct alignas(64) Share {
        std::atomic<uint64_t> range;
    };
    const int n_shares_;
    const int64_t grab_;
    Share shares_[kMaxShares];
};

}  // namespace headroom
