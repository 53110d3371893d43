#include "format/gguf-writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/check.h"
#include "core/error.h"
#include "format/gguf-reader.h"

namespace headroom::gguf {

namespace {

template <class T>
void put(std::vector<uint8_t>& out, T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
}

void encode_value(std::vector<uint8_t>& out, const Value& v);

void encode_array(std::vector<uint8_t>& out, const Array& a) {
    put<uint32_t>(out, static_cast<uint32_t>(a.elem_type));
    put<uint64_t>(out, a.n);
    if (a.elem_type == ValueType::STRING) {
        for (auto s : a.strings) put_string(out, s);
    } else if (a.elem_type == ValueType::ARRAY) {
        for (const auto& inner : a.arrays) encode_array(out, std::get<Array>(inner.data));
    } else {
        const uint64_t n = a.n * fixed_size_bytes(a.elem_type);
        out.insert(out.end(), a.raw, a.raw + n);
    }
}

void encode_value(std::vector<uint8_t>& out, const Value& v) {
    switch (v.type) {
        case ValueType::UINT8:
            put<uint8_t>(out, static_cast<uint8_t>(*v.as_uint()));
            break;
        case ValueType::INT8:
            put<int8_t>(out, static_cast<int8_t>(*v.as_int()));
            break;
        case ValueType::UINT16:
            put<uint16_t>(out, static_cast<uint16_t>(*v.as_uint()));
            break;
        case ValueType::INT16:
            put<int16_t>(out, static_cast<int16_t>(*v.as_int()));
            break;
        case ValueType::UINT32:
            put<uint32_t>(out, static_cast<uint32_t>(*v.as_uint()));
            break;
        case ValueType::INT32:
            put<int32_t>(out, static_cast<int32_t>(*v.as_int()));
            break;
        case ValueType::UINT64:
            put<uint64_t>(out, std::get<uint64_t>(v.data));
            break;
        case ValueType::INT64:
            put<int64_t>(out, std::get<int64_t>(v.data));
            break;
        case ValueType::FLOAT32:
            put<float>(out, static_cast<float>(std::get<double>(v.data)));
            break;
        case ValueType::FLOAT64:
            put<double>(out, std::get<double>(v.data));
            break;
        case ValueType::BOOL:
            put<uint8_t>(out, std::get<bool>(v.data) ? 1 : 0);
            break;
        case ValueType::STRING:
            put_string(out, std::get<std::string_view>(v.data));
            break;
        case ValueType::ARRAY:
            encode_array(out, std::get<Array>(v.data));
            break;
    }
}

template <class T>
std::vector<uint8_t> scalar(T v) {
    std::vector<uint8_t> out;
    put<T>(out, v);
    return out;
}

template <class T>
std::vector<uint8_t> scalar_array(ValueType elem, const std::vector<T>& v) {
    std::vector<uint8_t> out;
    put<uint32_t>(out, static_cast<uint32_t>(elem));
    put<uint64_t>(out, v.size());
    for (const T& x : v) put<T>(out, x);
    return out;
}

uint64_t align_up(uint64_t n, uint64_t alignment) {
    return (n + alignment - 1) / alignment * alignment;
}

}  // namespace

void GgufWriter::set_raw(std::string key, ValueType type, std::vector<uint8_t> encoded) {
    std::vector<uint8_t> entry;
    put<uint32_t>(entry, static_cast<uint32_t>(type));
    entry.insert(entry.end(), encoded.begin(), encoded.end());
    for (auto& [k, v] : kv_) {
        if (k == key) {
            v = std::move(entry);
            return;
        }
    }
    kv_.emplace_back(std::move(key), std::move(entry));
}

void GgufWriter::set_u8(std::string key, uint8_t v) {
    set_raw(std::move(key), ValueType::UINT8, scalar(v));
}
void GgufWriter::set_u32(std::string key, uint32_t v) {
    set_raw(std::move(key), ValueType::UINT32, scalar(v));
}
void GgufWriter::set_i32(std::string key, int32_t v) {
    set_raw(std::move(key), ValueType::INT32, scalar(v));
}
void GgufWriter::set_u64(std::string key, uint64_t v) {
    set_raw(std::move(key), ValueType::UINT64, scalar(v));
}
void GgufWriter::set_f32(std::string key, float v) {
    set_raw(std::move(key), ValueType::FLOAT32, scalar(v));
}
void GgufWriter::set_bool(std::string key, bool v) {
    set_raw(std::move(key), ValueType::BOOL, scalar<uint8_t>(v ? 1 : 0));
}
void GgufWriter::set_string(std::string key, std::string v) {
    std::vector<uint8_t> out;
    put_string(out, v);
    set_raw(std::move(key), ValueType::STRING, std::move(out));
}
void GgufWriter::set_strings(std::string key, const std::vector<std::string>& v) {
    std::vector<uint8_t> out;
    put<uint32_t>(out, static_cast<uint32_t>(ValueType::STRING));
    put<uint64_t>(out, v.size());
    for (const auto& s : v) put_string(out, s);
    set_raw(std::move(key), ValueType::ARRAY, std::move(out));
}
void GgufWriter::set_f32s(std::string key, const std::vector<float>& v) {
    set_raw(std::move(key), ValueType::ARRAY, scalar_array(ValueType::FLOAT32, v));
}
void GgufWriter::set_i32s(std::string key, const std::vector<int32_t>& v) {
    set_raw(std::move(key), ValueType::ARRAY, scalar_array(ValueType::INT32, v));
}
void GgufWriter::set_u32s(std::string key, const std::vector<uint32_t>& v) {
    set_raw(std::move(key), ValueType::ARRAY, scalar_array(ValueType::UINT32, v));
}

void GgufWriter::copy_metadata(const GgufFile& from, const std::vector<std::string>& skip) {
    for (const auto& [key, value] : from.metadata()) {
        bool skipped = false;
        for (const auto& s : skip) skipped = skipped || s == key;
        if (skipped) continue;
        std::vector<uint8_t> encoded;
        encode_value(encoded, value);
        set_raw(std::string(key), value.type, std::move(encoded));
    }
}

uint64_t GgufWriter::tensor_bytes(TensorType type, const std::vector<int64_t>& shape) {
    HR_CHECK(!shape.empty() && shape.size() <= kMaxDims);
    uint64_t n_rows = 1;
    for (size_t i = 1; i < shape.size(); ++i) n_rows *= static_cast<uint64_t>(shape[i]);
    const auto& t = traits(type);
    if (static_cast<uint64_t>(shape[0]) % t.block_size != 0)
        fail("tensor row length {} is not a multiple of {}'s block size {}", shape[0], t.name,
             t.block_size);
    return row_bytes(type, static_cast<uint64_t>(shape[0])) * n_rows;
}

void GgufWriter::add_tensor(std::string name, TensorType type, std::vector<int64_t> shape,
                            std::vector<uint8_t> data) {
    const uint64_t n = tensor_bytes(type, shape);
    if (data.size() != n)
        fail("tensor '{}': {} bytes given, {} expected for {} {}", name, data.size(), n,
             traits(type).name, shape[0]);
    tensors_.push_back({std::move(name), type, std::move(shape), n, std::move(data), {}});
}

void GgufWriter::add_tensor(std::string name, TensorType type, std::vector<int64_t> shape,
                            Producer produce) {
    const uint64_t n = tensor_bytes(type, shape);
    tensors_.push_back({std::move(name), type, std::move(shape), n, {}, std::move(produce)});
}

std::vector<uint8_t> GgufWriter::header_bytes() const {
    std::vector<uint8_t> out;
    put<uint32_t>(out, kMagic);
    put<uint32_t>(out, 3);
    put<uint64_t>(out, tensors_.size());
    put<uint64_t>(out, kv_.size());
    for (const auto& [key, entry] : kv_) {
        put_string(out, key);
        out.insert(out.end(), entry.begin(), entry.end());
    }
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
        put_string(out, t.name);
        put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
        for (int64_t d : t.shape) put<uint64_t>(out, static_cast<uint64_t>(d));
        put<uint32_t>(out, static_cast<uint32_t>(t.type));
        put<uint64_t>(out, offset);
        offset = align_up(offset + t.size_bytes, alignment_);
    }
    out.resize(align_up(out.size(), alignment_), 0);
    return out;
}

void GgufWriter::write(const std::string& path, const Progress& progress) const {
    const std::string tmp = path + ".partial";
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
    if (!f) fail("{}: cannot create: {}", tmp, std::strerror(errno));
    auto write_all = [&](const uint8_t* p, size_t n) {
        if (n && std::fwrite(p, 1, n, f.get()) != n)
            fail("{}: write failed: {}", tmp, std::strerror(errno));
    };
    const auto header = header_bytes();
    write_all(header.data(), header.size());
    uint64_t total_bytes = 0;
    for (const auto& t : tensors_) total_bytes += t.size_bytes;
    uint64_t done_bytes = 0;
    std::vector<uint8_t> buffer;
    static const uint8_t kZeros[64] = {};
    for (size_t i = 0; i < tensors_.size(); ++i) {
        const Tensor& t = tensors_[i];
        if (t.produce) {
            buffer.assign(t.size_bytes, 0);
            t.produce(buffer.data());
            write_all(buffer.data(), buffer.size());
        } else {
            write_all(t.data.data(), t.data.size());
        }
        const uint64_t pad = align_up(t.size_bytes, alignment_) - t.size_bytes;
        if (i + 1 < tensors_.size()) {
            for (uint64_t left = pad; left > 0;) {
                const size_t n = std::min<uint64_t>(left, sizeof(kZeros));
                write_all(kZeros, n);
                left -= n;
            }
        }
        done_bytes += t.size_bytes;
        if (progress) progress(i + 1, tensors_.size(), done_bytes, total_bytes);
    }
    if (std::fflush(f.get()) != 0) fail("{}: write failed: {}", tmp, std::strerror(errno));
    f.reset();
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
        fail("{}: cannot rename to {}: {}", tmp, path, std::strerror(errno));
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
    std::vector<uint8_t> out = header_bytes();
    for (size_t i = 0; i < tensors_.size(); ++i) {
        const Tensor& t = tensors_[i];
        const size_t at = out.size();
        out.resize(at + t.size_bytes);
        if (t.produce)
            t.produce(out.data() + at);
        else
            std::memcpy(out.data() + at, t.data.data(), t.size_bytes);
        if (i + 1 < tensors_.size()) out.resize(align_up(out.size(), alignment_), 0);
    }
    return out;
}

}  // namespace headroom::gguf
