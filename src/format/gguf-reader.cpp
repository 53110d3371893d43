#include "format/gguf-reader.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/error.h"

namespace headroom::gguf {

namespace {

// Deepest nesting of arrays accepted; real files use one level.
constexpr int kMaxArrayDepth = 8;
// Longest key or tensor name accepted.
constexpr uint64_t kMaxNameBytes = 65535;

// Reads little-endian values from untrusted bytes. Every read checks that the
// bytes are there; a failure throws an Error naming the file, the offset and
// the field being read.
class Cursor {
  public:
    Cursor(std::span<const uint8_t> bytes, const std::string& label)
        : bytes_(bytes), label_(label) {}

    uint64_t offset() const { return offset_; }
    uint64_t remaining() const { return bytes_.size() - offset_; }
    const uint8_t* at(uint64_t offset) const { return bytes_.data() + offset; }

    [[noreturn]] void error_at(uint64_t offset, std::string_view field,
                               std::string_view message) const {
        fail("{}: byte {}: {}: {}", label_, offset, field, message);
    }

    void need(uint64_t n, std::string_view field) const {
        if (n > remaining())
            error_at(offset_, field,
                     fmt::format("needs {} bytes but the file ends after {} (file is {} bytes)", n,
                                 remaining(), bytes_.size()));
    }

    template <class T>
    T read(std::string_view field) {
        need(sizeof(T), field);
        T v;
        std::memcpy(&v, bytes_.data() + offset_, sizeof(T));
        offset_ += sizeof(T);
        return v;
    }

    std::string_view read_string(std::string_view field, uint64_t max_len) {
        const uint64_t at_len = offset_;
        const auto n = read<uint64_t>(field);
        if (n > max_len)
            error_at(at_len, field,
                     fmt::format("string length {} exceeds the limit of {}", n, max_len));
        need(n, field);
        std::string_view s(reinterpret_cast<const char*>(bytes_.data() + offset_), n);
        offset_ += n;
        return s;
    }

    const uint8_t* skip(uint64_t n, std::string_view field) {
        need(n, field);
        const uint8_t* p = bytes_.data() + offset_;
        offset_ += n;
        return p;
    }

  private:
    std::span<const uint8_t> bytes_;
    const std::string& label_;
    uint64_t offset_ = 0;
};

// Smallest encoding of one value of `type`, used to bound counts read from
// the file before anything is allocated for them.
uint64_t min_encoded_bytes(ValueType type) {
    if (type == ValueType::STRING) return 8;
    if (type == ValueType::ARRAY) return 12;
    return fixed_size_bytes(type);
}

ValueType read_value_type(Cursor& c, std::string_view field) {
    const uint64_t at = c.offset();
    const auto raw = c.read<uint32_t>(field);
    if (raw >= kValueTypeCount)
        c.error_at(at, field, fmt::format("value type {} is unknown, expected 0..12", raw));
    return static_cast<ValueType>(raw);
}

Value read_value(Cursor& c, ValueType type, std::string_view field, int depth);

Array read_array(Cursor& c, std::string_view field, int depth) {
    const uint64_t at = c.offset();
    if (depth >= kMaxArrayDepth)
        c.error_at(at, field, fmt::format("arrays nested deeper than {} levels", kMaxArrayDepth));
    Array a;
    a.elem_type = read_value_type(c, field);
    const uint64_t at_count = c.offset();
    a.n = c.read<uint64_t>(field);
    const uint64_t min_bytes = min_encoded_bytes(a.elem_type);
    if (min_bytes > 0 && a.n > c.remaining() / min_bytes)
        c.error_at(at_count, field,
                   fmt::format("array of {} {} elements cannot fit in the {} bytes left", a.n,
                               name(a.elem_type), c.remaining()));
    if (a.elem_type == ValueType::STRING) {
        a.strings.reserve(a.n);
        for (uint64_t i = 0; i < a.n; ++i)
            a.strings.push_back(c.read_string(field, std::numeric_limits<uint64_t>::max()));
    } else if (a.elem_type == ValueType::ARRAY) {
        a.arrays.reserve(a.n);
        for (uint64_t i = 0; i < a.n; ++i)
            a.arrays.push_back(read_value(c, ValueType::ARRAY, field, depth + 1));
    } else {
        if (a.elem_type == ValueType::BOOL) {
            const uint8_t* p = c.skip(a.n, field);
            for (uint64_t i = 0; i < a.n; ++i)
                if (p[i] > 1)
                    c.error_at(static_cast<uint64_t>(p + i - c.at(0)), field,
                               fmt::format("bool element {} is {}, expected 0 or 1", i, p[i]));
            a.raw = p;
        } else {
            a.raw = c.skip(a.n * fixed_size_bytes(a.elem_type), field);
        }
    }
    return a;
}

Value read_value(Cursor& c, ValueType type, std::string_view field, int depth) {
    Value v;
    v.type = type;
    switch (type) {
        case ValueType::UINT8:
            v.data = uint64_t{c.read<uint8_t>(field)};
            break;
        case ValueType::INT8:
            v.data = int64_t{c.read<int8_t>(field)};
            break;
        case ValueType::UINT16:
            v.data = uint64_t{c.read<uint16_t>(field)};
            break;
        case ValueType::INT16:
            v.data = int64_t{c.read<int16_t>(field)};
            break;
        case ValueType::UINT32:
            v.data = uint64_t{c.read<uint32_t>(field)};
            break;
        case ValueType::INT32:
            v.data = int64_t{c.read<int32_t>(field)};
            break;
        case ValueType::UINT64:
            v.data = c.read<uint64_t>(field);
            break;
        case ValueType::INT64:
            v.data = c.read<int64_t>(field);
            break;
        case ValueType::FLOAT32:
            v.data = double{c.read<float>(field)};
            break;
        case ValueType::FLOAT64:
            v.data = c.read<double>(field);
            break;
        case ValueType::BOOL: {
            const uint64_t at = c.offset();
            const auto b = c.read<uint8_t>(field);
            if (b > 1) c.error_at(at, field, fmt::format("bool is {}, expected 0 or 1", b));
            v.data = b != 0;
            break;
        }
        case ValueType::STRING:
            v.data = c.read_string(field, std::numeric_limits<uint64_t>::max());
            break;
        case ValueType::ARRAY:
            v.data = read_array(c, field, depth);
            break;
    }
    return v;
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
    return __builtin_mul_overflow(a, b, out);
}

// One tensor info: name, dimensions (each > 0, their product within 64
// bits), a known type whose blocks divide the rows, and a data offset on the
// alignment. Throws with the byte offset of what is wrong.
TensorInfo read_tensor_info(Cursor& c, uint64_t alignment) {
    TensorInfo t;
    t.info_offset = c.offset();
    t.name = c.read_string("tensor name", kMaxNameBytes);
    if (t.name.empty()) c.error_at(t.info_offset, "tensor name", "empty, expected a name");
    const std::string field = fmt::format("tensor '{}'", t.name);
    const uint64_t at_dims = c.offset();
    t.n_dims = c.read<uint32_t>(field);
    if (t.n_dims == 0 || t.n_dims > kMaxDims)
        c.error_at(at_dims, field, fmt::format("n_dims is {}, expected 1..{}", t.n_dims, kMaxDims));
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
        const uint64_t at_dim = c.offset();
        const auto ne = c.read<uint64_t>(field);
        if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            c.error_at(
                at_dim, field,
                fmt::format("dimension {} is {}, expected > 0", d, static_cast<int64_t>(ne)));
        if (mul_overflows(n_elements, ne, &n_elements) ||
            n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            c.error_at(at_dim, field, "element count overflows 64 bits");
        t.ne[d] = static_cast<int64_t>(ne);
    }
    t.n_elements = n_elements;
    const uint64_t at_type = c.offset();
    const auto type_id = c.read<uint32_t>(field);
    const auto type = tensor_type_from_id(type_id);
    if (!type)
        c.error_at(at_type, field,
                   fmt::format("tensor type {} is unknown, expected a ggml type id", type_id));
    t.type = *type;
    const auto& tt = traits(t.type);
    if (static_cast<uint64_t>(t.ne[0]) % tt.block_size != 0)
        c.error_at(at_dims, field,
                   fmt::format("row length {} is not a multiple of {}'s block size {}", t.ne[0],
                               tt.name, tt.block_size));
    const uint64_t row = static_cast<uint64_t>(t.ne[0]) / tt.block_size * tt.block_bytes;
    if (mul_overflows(row, n_elements / static_cast<uint64_t>(t.ne[0]), &t.size_bytes))
        c.error_at(at_dims, field, "byte size overflows 64 bits");
    const uint64_t at_offset = c.offset();
    t.offset = c.read<uint64_t>(field);
    if (t.offset % alignment != 0)
        c.error_at(at_offset, field,
                   fmt::format("data offset {} is not a multiple of the alignment {}", t.offset,
                               alignment));
    return t;
}

// Points each tensor at its data, checking that it lies inside the data
// section and that no two overlap.
void place_tensor_data(Cursor& c, std::vector<TensorInfo>& tensors, const uint8_t* data,
                       uint64_t data_size) {
    std::vector<const TensorInfo*> by_offset;
    by_offset.reserve(tensors.size());
    for (auto& t : tensors) {
        if (t.offset > data_size || t.size_bytes > data_size - t.offset)
            c.error_at(t.info_offset, fmt::format("tensor '{}'", t.name),
                       fmt::format("data [{}, +{}) lies outside the {}-byte data section "
                                   "(file truncated?)",
                                   t.offset, t.size_bytes, data_size));
        t.data = data + t.offset;
        by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const TensorInfo& prev = *by_offset[i - 1];
        const TensorInfo& cur = *by_offset[i];
        if (cur.offset < prev.offset + prev.size_bytes)
            c.error_at(cur.info_offset, fmt::format("tensor '{}'", cur.name),
                       fmt::format("data at offset {} overlaps tensor '{}' [{}, +{})", cur.offset,
                                   prev.name, prev.offset, prev.size_bytes));
    }
}

}  // namespace

GgufFile GgufFile::open(const std::string& path) {
    GgufFile f;
    f.file_ = std::make_shared<MappedFile>(path);
    f.bytes_ = f.file_->bytes();
    f.label_ = path;
    f.mapped_ = true;
    f.parse_all();
    return f;
}

GgufFile GgufFile::assemble(std::string label, std::vector<uint8_t> header,
                            std::vector<TensorInfo> tensors, std::span<const uint8_t> data,
                            std::shared_ptr<const void> keep, bool mapped,
                            std::vector<Producer> producers) {
    HR_CHECK(producers.empty() || producers.size() == tensors.size());
    auto owned = std::make_shared<const std::vector<uint8_t>>(std::move(header));
    GgufFile f = parse(*owned, label);
    HR_CHECK(f.tensors_.empty());
    f.header_ = std::move(owned);
    f.keep_ = std::move(keep);
    f.mapped_ = mapped;
    f.bytes_ = data;
    f.data_offset_ = 0;
    f.tensors_ = std::move(tensors);
    f.producers_ = std::move(producers);
    for (size_t i = 0; i < f.tensors_.size(); ++i) {
        const TensorInfo& t = f.tensors_[i];
        if (!f.tensor_index_.emplace(t.name, i).second)
            fail("{}: tensor '{}' appears twice, expected each name once", f.label_, t.name);
    }
    return f;
}

GgufFile GgufFile::parse(std::span<const uint8_t> bytes, std::string label) {
    GgufFile f;
    f.bytes_ = bytes;
    f.label_ = std::move(label);
    f.parse_all();
    return f;
}

void GgufFile::parse_all() {
    Cursor c(bytes_, label_);
    if (bytes_.size() < 4) c.error_at(0, "magic", "file is too short to be GGUF");
    const auto magic = c.read<uint32_t>("magic");
    if (magic != kMagic)
        c.error_at(0, "magic",
                   fmt::format("found 0x{:08x}, expected 0x{:08x} (\"GGUF\"): not a GGUF file",
                               magic, kMagic));
    version_ = c.read<uint32_t>("version");
    if (version_ != 2 && version_ != 3)
        c.error_at(4, "version",
                   fmt::format("{} is not supported, expected 2 or 3{}", version_,
                               version_ == 1 ? " (version 1 files predate 64-bit counts; "
                                               "convert them with a current llama.cpp)"
                                             : ""));
    const uint64_t at_counts = c.offset();
    const auto n_tensors = c.read<uint64_t>("tensor_count");
    const auto n_kv = c.read<uint64_t>("metadata_kv_count");
    // A tensor info takes at least 8 (name length) + 4 (n_dims) + 8 + 4 + 8 bytes,
    // a key/value pair at least 8 + 4 + 1.
    if (n_tensors > c.remaining() / 32)
        c.error_at(
            at_counts, "tensor_count",
            fmt::format("{} tensors cannot fit in a {}-byte file", n_tensors, bytes_.size()));
    if (n_kv > c.remaining() / 13)
        c.error_at(
            at_counts + 8, "metadata_kv_count",
            fmt::format("{} metadata entries cannot fit in a {}-byte file", n_kv, bytes_.size()));

    kv_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
        const uint64_t at_key = c.offset();
        const std::string_view key = c.read_string("metadata key", kMaxNameBytes);
        if (key.empty()) c.error_at(at_key, "metadata key", "empty key, expected a name");
        const std::string field = fmt::format("metadata '{}'", key);
        const ValueType type = read_value_type(c, field);
        Value v = read_value(c, type, field, 0);
        if (!kv_index_.emplace(key, kv_.size()).second)
            c.error_at(at_key, field, "duplicate key, expected each key once");
        kv_.emplace_back(key, std::move(v));
        kv_offsets_.push_back(at_key);
    }

    if (const Value* a = find("general.alignment")) {
        const auto al = a->as_uint();
        if (!al || *al == 0 || (*al & (*al - 1)) != 0 || *al > (1u << 30))
            fail("{}: byte {}: metadata 'general.alignment' is {}, expected a power of two", label_,
                 key_offset("general.alignment"), a->to_display());
        alignment_ = *al;
    }

    tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        const TensorInfo t = read_tensor_info(c, alignment_);
        if (!tensor_index_.emplace(t.name, tensors_.size()).second)
            c.error_at(t.info_offset, fmt::format("tensor '{}'", t.name),
                       "duplicate tensor name, expected each name once");
        tensors_.push_back(t);
    }

    // The data section starts at the next multiple of the alignment.
    const uint64_t end_of_infos = c.offset();
    data_offset_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
    if (n_tensors > 0 && data_offset_ > bytes_.size())
        c.error_at(
            end_of_infos, "data section",
            fmt::format("starts at {} but the file is only {} bytes", data_offset_, bytes_.size()));
    const uint64_t data_size = bytes_.size() > data_offset_ ? bytes_.size() - data_offset_ : 0;

    place_tensor_data(c, tensors_, bytes_.data() + data_offset_, data_size);

    if (!has("general.architecture"))
        fail(
            "{}: metadata 'general.architecture' is missing, expected a string such as "
            "\"llama\"",
            label_);
    if (!std::holds_alternative<std::string_view>(find("general.architecture")->data))
        fail("{}: byte {}: metadata 'general.architecture' is {}, expected a string", label_,
             key_offset("general.architecture"), find("general.architecture")->to_display());
}

bool GgufFile::has_producers() const {
    for (const auto& p : producers_)
        if (p) return true;
    return false;
}

uint64_t GgufFile::key_offset(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? 0 : kv_offsets_[it->second];
}

const Value* GgufFile::find(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    if (auto u = v->as_uint()) return u;
    fail("{}: byte {}: metadata '{}' is {} ({}), expected a non-negative integer", label_,
         key_offset(key), key, v->to_display(), name(v->type));
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    if (auto i = v->as_int()) return i;
    fail("{}: byte {}: metadata '{}' is {} ({}), expected an integer", label_, key_offset(key), key,
         v->to_display(), name(v->type));
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    if (auto f = v->as_float()) return f;
    fail("{}: byte {}: metadata '{}' is {} ({}), expected a number", label_, key_offset(key), key,
         v->to_display(), name(v->type));
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    if (const auto* b = std::get_if<bool>(&v->data)) return *b;
    if (auto u = v->as_uint(); u && *u <= 1) return *u == 1;
    fail("{}: byte {}: metadata '{}' is {} ({}), expected a bool", label_, key_offset(key), key,
         v->to_display(), name(v->type));
}

std::optional<std::string_view> GgufFile::get_string(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    if (const auto* s = std::get_if<std::string_view>(&v->data)) return *s;
    fail("{}: byte {}: metadata '{}' is {} ({}), expected a string", label_, key_offset(key), key,
         v->to_display(), name(v->type));
}

const Array* GgufFile::get_array(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return nullptr;
    if (const auto* a = std::get_if<Array>(&v->data)) return a;
    fail("{}: byte {}: metadata '{}' is {} ({}), expected an array", label_, key_offset(key), key,
         v->to_display(), name(v->type));
}

uint64_t GgufFile::require_uint(std::string_view key) const {
    if (auto v = get_uint(key)) return *v;
    fail("{}: metadata '{}' is missing, expected an integer", label_, key);
}

double GgufFile::require_float(std::string_view key) const {
    if (auto v = get_float(key)) return *v;
    fail("{}: metadata '{}' is missing, expected a number", label_, key);
}

std::string_view GgufFile::require_string(std::string_view key) const {
    if (auto v = get_string(key)) return *v;
    fail("{}: metadata '{}' is missing, expected a string", label_, key);
}

const Array& GgufFile::require_array(std::string_view key) const {
    if (const Array* a = get_array(key)) return *a;
    fail("{}: metadata '{}' is missing, expected an array", label_, key);
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

uint64_t GgufFile::tensor_bytes_total() const {
    uint64_t total = 0;
    for (const auto& t : tensors_) total += t.size_bytes;
    return total;
}

}  // namespace headroom::gguf
