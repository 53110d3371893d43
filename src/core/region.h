// A large, page-aligned, zero-filled memory region taken once at start-up
// (the KV pool, the activation arena, the repacked weights). Pages are
// committed up front, so the memory is really there: running out later is
// not possible, and the process's RSS shows it from the start. Regions of
// 2 MiB or more are aligned to 2 MiB and backed by transparent huge pages
// where the kernel has them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace headroom {

class Region {
  public:
    Region() = default;
    // Throws headroom::Error naming `what` and the size if the memory cannot be had.
    Region(size_t size_bytes, const char* what);
    ~Region();
    Region(Region&& other) noexcept;
    Region& operator=(Region&& other) noexcept;
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;

    uint8_t* data() const { return data_; }
    size_t size_bytes() const { return size_bytes_; }

  private:
    uint8_t* data_ = nullptr;
    size_t size_bytes_ = 0;
};

}  // namespace headroom
