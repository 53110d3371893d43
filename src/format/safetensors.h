// safetensors files (https://huggingface.co/docs/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON
//   {"__metadata__": {...}, "name": {"dtype": "BF16", "shape": [rows, cols],
//                                    "data_offsets": [begin, end]}, ...}
// then the data, each tensor's bytes at [begin, end) from the data's start,
// row-major with the last dimension fastest. The header is untrusted: its
// length, every dtype, shape and offset pair are checked against the file
// before anything points into it; a malformed file raises one
// headroom::Error naming the file, the tensor and what was expected.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace headroom::safetensors {

enum class Dtype : uint8_t { F32, F16, BF16, F64, I64, I32, I16, I8, U8, Bool, F8_E4M3, F8_E5M2 };

// "BF16" for Dtype::BF16; element size in bytes.
const char* name(Dtype d);
uint32_t size_bytes(Dtype d);

// The largest header accepted (the format's own limit is 100 MB).
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct Tensor {
    std::string name;
    Dtype dtype = Dtype::F32;
    std::vector<int64_t> shape;  // as stored: slowest dimension first
    uint64_t begin = 0;          // from the start of the file
    uint64_t size_bytes = 0;

    uint64_t n_elements() const;
};

struct Header {
    std::vector<Tensor> tensors;  // in file order of their data
    uint64_t data_offset = 0;     // 8 + N
};

// Parses and validates the header of a file of `bytes` (the whole file):
// names unique and non-empty, dtypes known, shapes of at most 4 positive
// dimensions whose element count times the dtype size equals the tensor's
// byte range, ranges inside the file and not overlapping. `label` names the
// file in messages.
Header parse_header(std::span<const uint8_t> bytes, const std::string& label);

}  // namespace headroom::safetensors
