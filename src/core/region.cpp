#include "core/region.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/units.h"

namespace headroom {

namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kPageBytes = 4096;

}  // namespace

Region::Region(size_t size_bytes, const char* what) : size_bytes_(size_bytes) {
    if (size_bytes == 0) return;
    // A region of 2 MiB or more starts on a 2 MiB boundary and asks for
    // transparent huge pages. A decode step streams every weight once; with
    // 4 KiB pages the address translations (two levels of them in a virtual
    // machine) cost about a quarter of one core's read bandwidth.
    const bool huge = size_bytes >= kHugePageBytes;
    const size_t span = huge ? size_bytes + kHugePageBytes : size_bytes;
    void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        fail("cannot reserve {} for the {}: {}", format_bytes(static_cast<uint64_t>(size_bytes)),
             what, std::strerror(errno));
    auto* base = static_cast<uint8_t*>(p);
    data_ = base;
    if (huge) {
        const auto at = reinterpret_cast<uintptr_t>(base);
        data_ = reinterpret_cast<uint8_t*>((at + kHugePageBytes - 1) & ~(kHugePageBytes - 1));
        uint8_t* end = data_ + ((size_bytes + kPageBytes - 1) & ~(kPageBytes - 1));
        if (data_ > base) ::munmap(base, static_cast<size_t>(data_ - base));
        if (base + span > end) ::munmap(end, static_cast<size_t>(base + span - end));
        ::madvise(data_, size_bytes, MADV_HUGEPAGE);  // a hint: 4 KiB pages work too
    }
    // Commit every page now, so the memory is really there.
    if (::madvise(data_, size_bytes, MADV_POPULATE_WRITE) != 0) {
        const int err = errno;
        if (err != EINVAL) {
            ::munmap(data_, size_bytes);
            data_ = nullptr;
            fail("cannot commit {} for the {}: {}", format_bytes(static_cast<uint64_t>(size_bytes)),
                 what, std::strerror(err));
        }
        // Kernels before 5.14 lack MADV_POPULATE_WRITE: touch each page.
        for (size_t off = 0; off < size_bytes; off += kPageBytes)
            reinterpret_cast<volatile uint8_t*>(data_)[off] = 0;
    }
}

Region::~Region() {
    if (data_) ::munmap(data_, size_bytes_);
}

Region::Region(Region&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {}

Region& Region::operator=(Region&& other) noexcept {
    if (this != &other) {
        if (data_) ::munmap(data_, size_bytes_);
        data_ = std::exchange(other.data_, nullptr);
        size_bytes_ = std::exchange(other.size_bytes_, 0);
    }
    return *this;
}

}  // namespace headroom
