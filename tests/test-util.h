// Helpers shared by the tests: test data paths and a little-endian byte
// builder for hand-made (often malformed) files.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace headroom::test {

inline std::string data_path(std::string_view rel) {
    return std::string(HEADROOM_TEST_DATA_DIR) + "/" + std::string(rel);
}

inline std::string headroom_bin() {
    return HEADROOM_BIN_PATH;
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

template <class T>
std::vector<T> read_array(const std::string& path) {
    const auto bytes = read_bytes(path);
    std::vector<T> out(bytes.size() / sizeof(T));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    return out;
}

class Bytes {
  public:
    template <class T>
    Bytes& put(T v) {
        const size_t at = b_.size();
        b_.resize(at + sizeof(T));
        std::memcpy(b_.data() + at, &v, sizeof(T));
        return *this;
    }
    Bytes& u32(uint32_t v) { return put(v); }
    Bytes& u64(uint64_t v) { return put(v); }
    Bytes& str(std::string_view s) {
        u64(s.size());
        b_.insert(b_.end(), s.begin(), s.end());
        return *this;
    }
    Bytes& raw(std::string_view s) {
        b_.insert(b_.end(), s.begin(), s.end());
        return *this;
    }
    Bytes& zeros(size_t n) {
        b_.resize(b_.size() + n, 0);
        return *this;
    }
    Bytes& align(size_t a) {
        b_.resize((b_.size() + a - 1) / a * a, 0);
        return *this;
    }
    size_t size() const { return b_.size(); }
    const std::vector<uint8_t>& bytes() const { return b_; }
    std::vector<uint8_t>& bytes() { return b_; }

  private:
    std::vector<uint8_t> b_;
};

}  // namespace headroom::test
