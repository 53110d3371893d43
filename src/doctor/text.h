// Small scanners over one log line. Every search is memmem() on the line's
// lower-case copy (linear time, no backtracking), and numbers are read with
// exact integer arithmetic so "2.26 GiB" is the same byte count everywhere.
//
// Units. KiB/MiB/GiB/TiB are powers of 1024. The engines doctor reads print
// KB/MB/GB with 1024 divisors too (PyTorch's MPS allocator: "max allowed:
// 9.07 GB" is 1.7 x 5.33 GiB on an 8 GB Mac; vLLM's "weights took 14.99 GB"
// and SGLang's "avail mem=21.73 GB" divide by 2^30; the kernel's "kB" is
// KiB), so in logs those are binary as well.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace headroom::doctor {

// Which byte pairs occur in a line, hashed into 4096 bits. A needle with a
// pair the line lacks cannot occur in it, so most searches on a line that
// does not mention them end after a few bit tests instead of a scan. No false
// negatives; on long lines nearly every bit is set and searches scan.
class PairFilter {
  public:
    void build(std::string_view lower);
    bool may_contain(std::string_view needle) const;

  private:
    static size_t slot(unsigned char a, unsigned char b) { return (a * 31u + b * 131u) & 4095u; }
    uint64_t bits_[64] = {};
};

// A cleaned log line and its ASCII lower-case copy (same length, same
// offsets), with its 1-based number.
struct Line {
    std::string_view text;
    std::string_view lower;
    uint64_t number = 0;
    const PairFilter* pairs = nullptr;  // optional: built by the scanner

    bool has(std::string_view needle_lower) const { return find(needle_lower) != npos; }
    size_t find(std::string_view needle_lower, size_t from = 0) const;
    static constexpr size_t npos = std::string_view::npos;
};

struct Quantity {
    uint64_t bytes = 0;
    size_t begin = 0;  // offset of the first digit
    size_t end = 0;    // offset just past the unit
};

// "<number> <unit>" starting at `pos` (spaces, '=' and ':' skipped first).
// The unit is required unless `unit_optional`, in which case a bare number
// is bytes. nullopt if there is no such quantity or it overflows.
std::optional<Quantity> quantity_at(std::string_view lower, size_t pos, bool unit_optional = false);

// The quantity that ends right before `pos` ("3.03 GiB free": pos at "free").
std::optional<Quantity> quantity_before(std::string_view lower, size_t pos);

// The quantity right after the first occurrence of `anchor` (searched from
// `from`), e.g. after "tried to allocate".
std::optional<uint64_t> bytes_after(const Line& line, std::string_view anchor, size_t from = 0,
                                    bool unit_optional = false);
// The quantity right before the first occurrence of `anchor`.
std::optional<uint64_t> bytes_before(const Line& line, std::string_view anchor, size_t from = 0);

// A non-negative integer (digits, optional thousands commas) starting at
// `pos` after skipping spaces, '(' , '=' and ':'.
std::optional<uint64_t> integer_at(std::string_view lower, size_t pos, size_t* end = nullptr);
std::optional<uint64_t> integer_after(const Line& line, std::string_view anchor, size_t from = 0);

// A decimal fraction such as "0.9" or "0.87" starting at `pos`.
std::optional<double> fraction_at(std::string_view lower, size_t pos);

// True when the words just before `pos` make it a condition or advice ("if
// you run out of memory", "to avoid out-of-memory errors") rather than a report.
bool is_conditional(const Line& line, size_t pos);

// Bytes with two decimals in the largest binary unit, as the engines print
// them: "812 B", "20.00 MiB", "141.42 GiB".
std::string bytes_text(uint64_t n);

// At most `n` bytes of `s` with surrounding spaces removed, cut at a UTF-8
// boundary.
std::string clip(std::string_view s, size_t n);

}  // namespace headroom::doctor
