// GGUF reader (versions 2 and 3) over a read-only mmap. Everything read from
// the file is validated before it is used: counts against the file size,
// string and array lengths, tensor shapes, types, alignment and byte ranges.
// A malformed file raises one headroom::Error naming the file, the byte
// offset, the field and what was expected; nothing reads outside the file.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped-file.h"
#include "format/gguf-value.h"
#include "format/tensor-type.h"

namespace headroom::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr uint32_t kMaxDims = 4;

struct TensorInfo {
    std::string_view name;
    uint32_t n_dims = 0;
    std::array<int64_t, kMaxDims> ne{1, 1, 1, 1};  // ne[0] is the row length (fastest)
    TensorType type = TensorType::F32;
    uint64_t offset = 0;      // from the start of the data section
    uint64_t size_bytes = 0;  // ne[1..3] rows of row_bytes(type, ne[0])
    uint64_t n_elements = 0;
    uint64_t info_offset = 0;  // file offset of this tensor's info record, for messages
    const uint8_t* data = nullptr;

    int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
    std::vector<int64_t> shape() const { return {ne.begin(), ne.begin() + n_dims}; }
};

class GgufFile {
  public:
    // Maps and parses the file. Throws headroom::Error for an unreadable or
    // malformed file.
    static GgufFile open(const std::string& path);
    // Parses bytes already in memory (fuzzing, tests). `bytes` must outlive the result.
    static GgufFile parse(std::span<const uint8_t> bytes, std::string label);
    // A model assembled from files of another format (format/hf-folder.h):
    // metadata parsed from `header`, a GGUF of no tensors; `tensors`, whose
    // names and data lie in what `keep` holds alive: in `data`, the span the
    // backends see as the model's file (mapped: a read-only mapping of
    // files, whose pages may be dropped), or beside it (copies).
    // A tensor may instead have a producer (and no data): a function that
    // writes its size_bytes, run when the model is written out
    // (tools/quantize.h) before it is loaded.
    using Producer = std::function<void(uint8_t* dst)>;
    static GgufFile assemble(std::string label, std::vector<uint8_t> header,
                             std::vector<TensorInfo> tensors, std::span<const uint8_t> data,
                             std::shared_ptr<const void> keep, bool mapped,
                             std::vector<Producer> producers = {});
    // Tensor i's producer, or null when its bytes are at its data.
    const Producer* producer(size_t i) const {
        return i < producers_.size() && producers_[i] ? &producers_[i] : nullptr;
    }
    // Some tensors are produced: the model must be written out to be loaded.
    bool has_producers() const;

    const std::string& path() const { return label_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }
    // Bytes of metadata and tensor table as held in memory: the file's header
    // (data_offset), or an assembled model's parsed header.
    uint64_t header_bytes() const { return header_ ? header_->size() : data_offset_; }
    uint64_t file_size_bytes() const { return bytes_.size(); }

    // Metadata in file order.
    const std::vector<std::pair<std::string_view, Value>>& metadata() const { return kv_; }
    const Value* find(std::string_view key) const;
    // File offset of a metadata entry (its key), for messages; 0 if absent.
    uint64_t key_offset(std::string_view key) const;
    bool has(std::string_view key) const { return find(key) != nullptr; }

    // Tolerant getters: nullopt when the key is absent; throw when it is
    // present with a type that cannot be read as asked.
    std::optional<uint64_t> get_uint(std::string_view key) const;
    std::optional<int64_t> get_int(std::string_view key) const;
    std::optional<double> get_float(std::string_view key) const;
    std::optional<bool> get_bool(std::string_view key) const;
    std::optional<std::string_view> get_string(std::string_view key) const;
    const Array* get_array(std::string_view key) const;

    // As above but a missing key is an error naming it.
    uint64_t require_uint(std::string_view key) const;
    double require_float(std::string_view key) const;
    std::string_view require_string(std::string_view key) const;
    const Array& require_array(std::string_view key) const;

    std::string_view architecture() const { return require_string("general.architecture"); }

    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find_tensor(std::string_view name) const;
    uint64_t tensor_bytes_total() const;
    // True when the bytes are a read-only mapping of the file (open()), whose
    // pages may be dropped and are read back from the file; false for parse().
    bool is_mapped() const { return mapped_; }
    // Made by assemble() rather than read from one GGUF file.
    bool is_assembled() const { return header_ != nullptr; }
    // The tensor data: from the data section's start to the end of the file.
    std::span<const uint8_t> data_section() const {
        return data_offset_ < bytes_.size() ? bytes_.subspan(data_offset_)
                                            : std::span<const uint8_t>{};
    }

  private:
    GgufFile() = default;
    void parse_all();

    std::shared_ptr<MappedFile> file_;                    // null when parsing caller-owned bytes
    std::shared_ptr<const void> keep_;                    // an assembled model's files and names
    std::shared_ptr<const std::vector<uint8_t>> header_;  // an assembled model's metadata
    bool mapped_ = false;
    std::vector<Producer> producers_;
    std::span<const uint8_t> bytes_;
    std::string label_;
    uint32_t version_ = 0;
    uint64_t alignment_ = kDefaultAlignment;
    uint64_t data_offset_ = 0;
    std::vector<std::pair<std::string_view, Value>> kv_;
    std::vector<uint64_t> kv_offsets_;
    std::map<std::string_view, size_t, std::less<>> kv_index_;
    std::vector<TensorInfo> tensors_;
    std::map<std::string_view, size_t, std::less<>> tensor_index_;
};

}  // namespace headroom::gguf
