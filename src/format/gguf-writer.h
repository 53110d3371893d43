// GGUF writer (version 3). Builds small models for tests and writes the
// outputs of `headroom quantize` and `headroom synth`. Tensor data can be
// given up front or produced by a callback while writing, so a 7B model is
// written without holding it in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "format/gguf-value.h"
#include "format/tensor-type.h"

namespace headroom::gguf {

class GgufWriter {
  public:
    // Fills `dst` (exactly the tensor's byte size) with the tensor's data.
    using Producer = std::function<void(uint8_t* dst)>;
    // Called after each tensor is written: (tensors done, total, bytes done, total bytes).
    using Progress = std::function<void(size_t, size_t, uint64_t, uint64_t)>;

    explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}

    void set_u8(std::string key, uint8_t v);
    void set_u32(std::string key, uint32_t v);
    void set_i32(std::string key, int32_t v);
    void set_u64(std::string key, uint64_t v);
    void set_f32(std::string key, float v);
    void set_bool(std::string key, bool v);
    void set_string(std::string key, std::string v);
    void set_strings(std::string key, const std::vector<std::string>& v);
    void set_f32s(std::string key, const std::vector<float>& v);
    void set_i32s(std::string key, const std::vector<int32_t>& v);
    void set_u32s(std::string key, const std::vector<uint32_t>& v);
    // Copies every metadata entry of an existing file (used by quantize),
    // except the keys in `skip`.
    void copy_metadata(const class GgufFile& from, const std::vector<std::string>& skip = {});

    // `shape` lists ne[0] (row length) first. data.size() must equal the
    // tensor's byte size.
    void add_tensor(std::string name, TensorType type, std::vector<int64_t> shape,
                    std::vector<uint8_t> data);
    void add_tensor(std::string name, TensorType type, std::vector<int64_t> shape,
                    Producer produce);

    // Writes the file; throws headroom::Error on I/O failure.
    void write(const std::string& path, const Progress& progress = {}) const;
    // The whole file in memory (tests).
    std::vector<uint8_t> to_bytes() const;

    static uint64_t tensor_bytes(TensorType type, const std::vector<int64_t>& shape);

  private:
    struct Tensor {
        std::string name;
        TensorType type;
        std::vector<int64_t> shape;
        uint64_t size_bytes;
        std::vector<uint8_t> data;
        Producer produce;
    };
    void set_raw(std::string key, ValueType type, std::vector<uint8_t> encoded);
    std::vector<uint8_t> header_bytes() const;

    uint64_t alignment_;
    std::vector<std::pair<std::string, std::vector<uint8_t>>> kv_;  // key, type + value encoded
    std::vector<Tensor> tensors_;
};

}  // namespace headroom::gguf
