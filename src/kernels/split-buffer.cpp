#include <algorithm>

#include "core/check.h"
#include "kernels/backend.h"

namespace headroom::kernels {

SplitBuffer::SplitBuffer(Backend& backend, Term term, uint64_t n_units, uint64_t unit_bytes,
                         const char* what)
    : size_bytes_(n_units * unit_bytes) {
    const uint64_t limit = backend.max_allocation_bytes();
    units_per_piece_ = std::max<uint64_t>(unit_bytes ? limit / unit_bytes : n_units, 1);
    units_per_piece_ = std::min(units_per_piece_, std::max<uint64_t>(n_units, 1));
    // Pieces of equal size but the last; one (maybe empty) piece at least.
    uint64_t unit = 0;
    do {
        const uint64_t n = std::min(units_per_piece_, n_units - unit);
        take(backend, term, unit * unit_bytes, n * unit_bytes, what);
        unit += n;
    } while (unit < n_units);
}

SplitBuffer::SplitBuffer(Backend& backend, Term term, std::span<const uint64_t> ends,
                         const char* what)
    : size_bytes_(ends.empty() ? 0 : ends.back()) {
    HR_CHECK(std::is_sorted(ends.begin(), ends.end()));
    const uint64_t limit = backend.max_allocation_bytes();
    uint64_t start = 0;
    size_t i = 0;
    do {
        // The longest run of whole units from `start` within the limit, one
        // unit at least (empty units take no room, nor a piece).
        while (i < ends.size() && ends[i] == start) ++i;
        uint64_t end = i < ends.size() ? ends[i++] : start;
        while (i < ends.size() && ends[i] - start <= limit) end = ends[i++];
        take(backend, term, start, end - start, what);
        start = end;
        while (i < ends.size() && ends[i] == start) ++i;
    } while (i < ends.size());
}

void SplitBuffer::take(Backend& backend, Term term, uint64_t offset, uint64_t bytes,
                       const char* what) {
    starts_.push_back(offset);
    buffers_.emplace_back(backend, term, bytes, what);
}

DevPtr SplitBuffer::at(uint64_t offset) const {
    HR_CHECK(!starts_.empty());
    const auto it = std::upper_bound(starts_.begin(), starts_.end(), offset);
    const size_t piece = static_cast<size_t>(it - starts_.begin()) - 1;
    return buffers_[piece].ptr() + (offset - starts_[piece]);
}

std::vector<DevPtr> SplitBuffer::pieces() const {
    std::vector<DevPtr> p;
    for (const auto& b : buffers_) p.push_back(b.ptr());
    return p;
}

}  // namespace headroom::kernels
