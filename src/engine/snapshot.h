// What the engine shows of itself to other threads: every KV block's state
// and owner, and every request's progress, for the live page of `serve`
// (GET /v1/memory/blocks). The engine thread builds a snapshot between steps
// and publishes it as an immutable object; a reader takes the board's lock
// only to copy one pointer, never the scheduler's state.
//
// Cost. A snapshot is O(blocks + block-table entries) and is built only while
// someone reads them: a read marks the board wanted for kWantedFor, and the
// engine builds at most one per kSnapshotInterval then (and one more when it
// goes idle, so the last state of a burst is shown), except that a read
// finding the latest older than the engine's state asks for one at the next
// step (at most one a step). Nobody reading: nothing is built.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace headroom {

// A block as the page colours it.
enum class BlockState : uint8_t {
    Free,    // no holder, no hash: the free stack
    Cached,  // no holder, hashed: a prefix the cache can still hand out, evictable
    Owned,   // one holder
    Shared,  // several holders (forks, a prefix several requests attached)
};
char code(BlockState s);  // 'f', 'c', 'o', 's'

struct EngineSnapshot {
    struct Pool {
        std::string name;  // the layer group: "full attention" or "window W"
        uint64_t block_bytes = 0;
        uint32_t n_used = 0;  // the pool's own count of blocks with holders
        std::vector<BlockState> state;
        // Per block: the id of the oldest request holding it (0: none).
        std::vector<uint64_t> owner;
    };
    struct Seq {
        uint32_t index = 0;  // the sample or beam
        uint32_t n_tokens = 0;
        uint32_t n_computed = 0;                   // tokens whose K/V are computed
        std::vector<std::vector<int32_t>> tables;  // per pool: block ids, -1 out of the window
    };
    struct Request {
        uint64_t id = 0;
        bool running = false;  // else waiting (queued or preempted)
        uint32_t n_prompt = 0;
        uint32_t n_output = 0;  // tokens generated so far (the longest candidate)
        uint32_t n_cached = 0;  // prompt tokens found in the prefix cache
        uint32_t n_blocks = 0;  // distinct blocks its sequences hold
        uint32_t n_preemptions = 0;
        double age_s = 0;         // since arrival
        double ttft_s = -1;       // -1: no token yet
        double tokens_per_s = 0;  // output tokens over the time since the first
        std::vector<Seq> seqs;
    };
    uint64_t version = 0;  // increases with every snapshot
    uint64_t changes = 0;  // the engine's change count it shows (SnapshotBoard::changes)
    std::chrono::steady_clock::time_point taken;
    uint32_t block_size = 0;
    uint64_t n_preemptions = 0;
    std::vector<Pool> pools;
    std::vector<Request> requests;  // oldest first
    // The request a reader asked about (SnapshotBoard::want): its tokens.
    uint64_t detail_id = 0;
    std::vector<int32_t> detail_tokens;
};

inline constexpr std::chrono::milliseconds kSnapshotInterval{100};
inline constexpr std::chrono::milliseconds kWantedFor{3000};

class SnapshotBoard {
  public:
    // Readers.
    std::shared_ptr<const EngineSnapshot> latest() const;
    // Asks for snapshots for the next kWantedFor, with the tokens of request
    // `detail_id` (0: none); wakes the engine if it idles without one.
    void want(uint64_t detail_id);

    // The engine's change count: a snapshot showing at least the count read
    // before a request shows every state change made before it (a reply
    // already sent, blocks already freed), never an older state.
    uint64_t changes() const { return changes_.load(std::memory_order_acquire); }

    // The engine.
    // Its state changed (a step ran): snapshots built from now on show it.
    void changed() { changes_.fetch_add(1, std::memory_order_acq_rel); }
    bool wanted(std::chrono::steady_clock::time_point now) const;
    uint64_t detail_id() const { return detail_id_.load(std::memory_order_relaxed); }
    // True once after want() found no fresh snapshot: the engine should build one now.
    bool nudged() const { return nudge_.load(std::memory_order_acquire); }
    bool take_nudge() { return nudge_.exchange(false, std::memory_order_acq_rel); }
    void publish(std::shared_ptr<const EngineSnapshot> snapshot);
    // Set by the engine: called (without locks held) to wake its loop.
    void set_waker(std::function<void()> waker) { waker_ = std::move(waker); }

  private:
    mutable std::mutex mu_;  // guards latest_ (a pointer copy)
    std::shared_ptr<const EngineSnapshot> latest_;
    std::atomic<int64_t> wanted_until_ns_{0};
    std::atomic<uint64_t> detail_id_{0};
    std::atomic<uint64_t> changes_{0};
    std::atomic<bool> nudge_{false};
    std::function<void()> waker_;
};

}  // namespace headroom
