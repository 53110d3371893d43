#include "core/mapped-file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace headroom {

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open: {}", path_, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        fail("{}: cannot stat: {}", path_, std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("{}: not a regular file", path_);
    }
    size_bytes_ = static_cast<size_t>(st.st_size);
    if (size_bytes_ > 0) {
        void* p = ::mmap(nullptr, size_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            fail("{}: cannot map {} bytes: {}", path_, size_bytes_, std::strerror(err));
        }
        data_ = static_cast<const uint8_t*>(p);
        // Pages mapped one by one, never a 2 MiB page cache folio at once:
        // a whole-folio mapping brings in neighbours the model drops or
        // never reads (the repacked matrices around a small tensor), and
        // they would count in this process's RSS.
        ::madvise(p, size_bytes_, MADV_NOHUGEPAGE);
    }
    ::close(fd);
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_bytes_);
}

void MappedFile::prefetch(size_t offset, size_t n_bytes) const {
    if (!data_ || offset >= size_bytes_) return;
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t begin = offset / page * page;
    const size_t end = std::min(size_bytes_, offset + n_bytes);
    ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_WILLNEED);
}

}  // namespace headroom
