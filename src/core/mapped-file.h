// A read-only memory map of a whole file. Pages are loaded lazily by the
// kernel, so mapping a 70 GB model and reading only its header touches only
// the header's pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace headroom {

class MappedFile {
  public:
    // Throws headroom::Error naming the path and the OS error.
    explicit MappedFile(std::string path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::string& path() const { return path_; }
    std::span<const uint8_t> bytes() const { return {data_, size_bytes_}; }
    size_t size_bytes() const { return size_bytes_; }

    // Asks the kernel to read [offset, offset + n) ahead of use.
    void prefetch(size_t offset, size_t n_bytes) const;

  private:
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_bytes_ = 0;
};

}  // namespace headroom
