#include "format/gguf-value.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>

#include "core/check.h"

namespace headroom::gguf {

namespace {

template <class T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

}  // namespace

std::string_view name(ValueType type) {
    switch (type) {
        case ValueType::UINT8:
            return "u8";
        case ValueType::INT8:
            return "i8";
        case ValueType::UINT16:
            return "u16";
        case ValueType::INT16:
            return "i16";
        case ValueType::UINT32:
            return "u32";
        case ValueType::INT32:
            return "i32";
        case ValueType::FLOAT32:
            return "f32";
        case ValueType::BOOL:
            return "bool";
        case ValueType::STRING:
            return "string";
        case ValueType::ARRAY:
            return "array";
        case ValueType::UINT64:
            return "u64";
        case ValueType::INT64:
            return "i64";
        case ValueType::FLOAT64:
            return "f64";
    }
    return "?";
}

uint32_t fixed_size_bytes(ValueType type) {
    switch (type) {
        case ValueType::UINT8:
        case ValueType::INT8:
        case ValueType::BOOL:
            return 1;
        case ValueType::UINT16:
        case ValueType::INT16:
            return 2;
        case ValueType::UINT32:
        case ValueType::INT32:
        case ValueType::FLOAT32:
            return 4;
        case ValueType::UINT64:
        case ValueType::INT64:
        case ValueType::FLOAT64:
            return 8;
        case ValueType::STRING:
        case ValueType::ARRAY:
            return 0;
    }
    return 0;
}

bool is_integer(ValueType type) {
    switch (type) {
        case ValueType::UINT8:
        case ValueType::INT8:
        case ValueType::UINT16:
        case ValueType::INT16:
        case ValueType::UINT32:
        case ValueType::INT32:
        case ValueType::UINT64:
        case ValueType::INT64:
            return true;
        default:
            return false;
    }
}

int64_t Array::int_at(uint64_t i) const {
    HR_DCHECK(i < n && raw != nullptr);
    const uint8_t* p = raw + i * fixed_size_bytes(elem_type);
    switch (elem_type) {
        case ValueType::UINT8:
            return load<uint8_t>(p);
        case ValueType::INT8:
            return load<int8_t>(p);
        case ValueType::UINT16:
            return load<uint16_t>(p);
        case ValueType::INT16:
            return load<int16_t>(p);
        case ValueType::UINT32:
            return load<uint32_t>(p);
        case ValueType::INT32:
            return load<int32_t>(p);
        case ValueType::UINT64:
            return static_cast<int64_t>(load<uint64_t>(p));
        case ValueType::INT64:
            return load<int64_t>(p);
        case ValueType::BOOL:
            return load<uint8_t>(p) != 0;
        case ValueType::FLOAT32:
            return static_cast<int64_t>(load<float>(p));
        case ValueType::FLOAT64:
            return static_cast<int64_t>(load<double>(p));
        default:
            HR_CHECK_MSG(false, "int_at on a non-numeric array");
    }
    return 0;
}

uint64_t Array::uint_at(uint64_t i) const {
    if (elem_type == ValueType::UINT64) return load<uint64_t>(raw + i * 8);
    return static_cast<uint64_t>(int_at(i));
}

double Array::float_at(uint64_t i) const {
    if (elem_type == ValueType::FLOAT32) return load<float>(raw + i * 4);
    if (elem_type == ValueType::FLOAT64) return load<double>(raw + i * 8);
    if (elem_type == ValueType::UINT64) return static_cast<double>(load<uint64_t>(raw + i * 8));
    return static_cast<double>(int_at(i));
}

std::optional<uint64_t> Value::as_uint() const {
    if (const auto* u = std::get_if<uint64_t>(&data)) return *u;
    if (const auto* s = std::get_if<int64_t>(&data)) {
        if (*s < 0) return std::nullopt;
        return static_cast<uint64_t>(*s);
    }
    return std::nullopt;
}

std::optional<int64_t> Value::as_int() const {
    if (const auto* s = std::get_if<int64_t>(&data)) return *s;
    if (const auto* u = std::get_if<uint64_t>(&data)) {
        if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
        return static_cast<int64_t>(*u);
    }
    return std::nullopt;
}

std::optional<double> Value::as_float() const {
    if (const auto* f = std::get_if<double>(&data)) return *f;
    if (const auto* u = std::get_if<uint64_t>(&data)) return static_cast<double>(*u);
    if (const auto* s = std::get_if<int64_t>(&data)) return static_cast<double>(*s);
    return std::nullopt;
}

std::string Value::to_display(size_t max_chars) const {
    std::string out;
    if (const auto* u = std::get_if<uint64_t>(&data))
        out = std::to_string(*u);
    else if (const auto* s = std::get_if<int64_t>(&data))
        out = std::to_string(*s);
    else if (const auto* f = std::get_if<double>(&data))
        out = fmt::format("{:g}", *f);
    else if (const auto* b = std::get_if<bool>(&data))
        out = *b ? "true" : "false";
    else if (const auto* str = std::get_if<std::string_view>(&data)) {
        out.reserve(str->size() + 2);
        out.push_back('"');
        for (char c : *str) {
            if (c == '\n')
                out += "\\n";
            else if (static_cast<unsigned char>(c) < 0x20)
                out += ' ';
            else
                out.push_back(c);
        }
        out.push_back('"');
    } else if (const auto* a = std::get_if<Array>(&data)) {
        out = fmt::format("[{} × {}]", a->n, name(a->elem_type));
    }
    if (out.size() > max_chars) {
        // Cut on a UTF-8 boundary.
        size_t cut = max_chars;
        while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
        out.resize(cut);
        out += "…";
    }
    return out;
}

}  // namespace headroom::gguf
