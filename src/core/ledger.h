// The ledger of one device: every byte the engine holds there, by term.
// "reserved" is capacity set aside at start-up (the KV pool, the activation
// arena, mapped weights); "allocated" is what is in use now (KV blocks
// holding tokens, the part of the arena the current step uses); "peak" is
// the most ever allocated. There is one ledger per device ("host", "gpu0"):
// each backend counts what it allocates in its device's ledger, and host
// memory (staging, tokenizer, threads) is counted in the host's.
// Counters are atomics: the engine thread writes, HTTP threads read a
// snapshot without locks.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace headroom {

enum class Term { Weights = 0, KvCache = 1, Activations = 2, Runtime = 3 };
inline constexpr std::array kTerms = {Term::Weights, Term::KvCache, Term::Activations,
                                      Term::Runtime};
std::string_view name(Term term);  // "weights", "kv_cache", "activations", "runtime"

struct TermSnapshot {
    uint64_t allocated_bytes = 0;
    uint64_t peak_bytes = 0;
    uint64_t reserved_bytes = 0;
};

struct LedgerSnapshot {
    std::string device;
    std::array<TermSnapshot, 4> terms{};
    const TermSnapshot& operator[](Term t) const { return terms[static_cast<size_t>(t)]; }
    uint64_t total_reserved_bytes() const;
    uint64_t total_allocated_bytes() const;
};

class Ledger {
  public:
    explicit Ledger(std::string device = "host") : device_(std::move(device)) {}
    Ledger(const Ledger&) = delete;
    Ledger& operator=(const Ledger&) = delete;

    // The device's name in reports and metrics: "host", "gpu0"...
    const std::string& device() const { return device_; }
    void reserve(Term term, uint64_t bytes);
    void unreserve(Term term, uint64_t bytes);
    void allocate(Term term, uint64_t bytes);
    void release(Term term, uint64_t bytes);
    // Sets the allocated bytes of a term outright (e.g. KV blocks in use).
    void set_allocated(Term term, uint64_t bytes);
    LedgerSnapshot snapshot() const;

  private:
    struct Counters {
        std::atomic<uint64_t> allocated{0};
        std::atomic<uint64_t> peak{0};
        std::atomic<uint64_t> reserved{0};
    };
    void raise_peak(Counters& c, uint64_t now);
    std::string device_;
    std::array<Counters, 4> counters_;
};

// Resident set size of this process now (from /proc/self/statm), in bytes.
uint64_t current_rss_bytes();

}  // namespace headroom
