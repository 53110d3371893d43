#include "core/ledger.h"

#include <unistd.h>

#include <fstream>

namespace headroom {

std::string_view name(Term term) {
    switch (term) {
        case Term::Weights:
            return "weights";
        case Term::KvCache:
            return "kv_cache";
        case Term::Activations:
            return "activations";
        case Term::Runtime:
            return "runtime";
    }
    return "?";
}

uint64_t LedgerSnapshot::total_reserved_bytes() const {
    uint64_t n = 0;
    for (const auto& t : terms) n += t.reserved_bytes;
    return n;
}

uint64_t LedgerSnapshot::total_allocated_bytes() const {
    uint64_t n = 0;
    for (const auto& t : terms) n += t.allocated_bytes;
    return n;
}

void Ledger::raise_peak(Counters& c, uint64_t now) {
    uint64_t peak = c.peak.load(std::memory_order_relaxed);
    while (now > peak && !c.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
}

void Ledger::reserve(Term term, uint64_t bytes) {
    counters_[static_cast<size_t>(term)].reserved.fetch_add(bytes, std::memory_order_relaxed);
}

void Ledger::unreserve(Term term, uint64_t bytes) {
    counters_[static_cast<size_t>(term)].reserved.fetch_sub(bytes, std::memory_order_relaxed);
}

void Ledger::allocate(Term term, uint64_t bytes) {
    auto& c = counters_[static_cast<size_t>(term)];
    raise_peak(c, c.allocated.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

void Ledger::release(Term term, uint64_t bytes) {
    counters_[static_cast<size_t>(term)].allocated.fetch_sub(bytes, std::memory_order_relaxed);
}

void Ledger::set_allocated(Term term, uint64_t bytes) {
    auto& c = counters_[static_cast<size_t>(term)];
    c.allocated.store(bytes, std::memory_order_relaxed);
    raise_peak(c, bytes);
}

LedgerSnapshot Ledger::snapshot() const {
    LedgerSnapshot s;
    s.device = device_;
    for (size_t i = 0; i < 4; ++i) {
        s.terms[i].allocated_bytes = counters_[i].allocated.load(std::memory_order_relaxed);
        s.terms[i].peak_bytes = counters_[i].peak.load(std::memory_order_relaxed);
        s.terms[i].reserved_bytes = counters_[i].reserved.load(std::memory_order_relaxed);
    }
    return s;
}

uint64_t current_rss_bytes() {
    std::ifstream f("/proc/self/statm");
    uint64_t size_pages = 0, resident_pages = 0;
    f >> size_pages >> resident_pages;
    return resident_pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace headroom
