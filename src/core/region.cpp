#include "core/region.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/units.h"

namespace headroom {

Region::Region(size_t size_bytes, const char* what) : size_bytes_(size_bytes) {
    if (size_bytes == 0) return;
    void* p = ::mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED)
        fail("cannot reserve {} for the {}: {}", format_bytes(static_cast<uint64_t>(size_bytes)),
             what, std::strerror(errno));
    data_ = static_cast<uint8_t*>(p);
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
