// GGUF metadata values. Strings and scalar arrays point into the mapped file
// (no copies); nested arrays hold their elements. See
// https://github.com/ggml-org/ggml/blob/master/docs/gguf.md for the format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace headroom::gguf {

enum class ValueType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};

inline constexpr uint32_t kValueTypeCount = 13;

std::string_view name(ValueType type);
// Bytes of one element of a fixed-size type; 0 for STRING and ARRAY.
uint32_t fixed_size_bytes(ValueType type);
bool is_integer(ValueType type);

struct Value;

// An array's elements. Fixed-size scalars stay in the file (`raw`, `n`
// elements of `elem_type`, little-endian, possibly unaligned); strings and
// nested arrays are decoded.
struct Array {
    ValueType elem_type = ValueType::UINT8;
    uint64_t n = 0;
    const uint8_t* raw = nullptr;
    std::vector<std::string_view> strings;
    std::vector<Value> arrays;

    // Element i of a numeric array, widened. Precondition: i < n and the
    // element type is numeric (BOOL reads as 0/1).
    int64_t int_at(uint64_t i) const;
    uint64_t uint_at(uint64_t i) const;
    double float_at(uint64_t i) const;
};

struct Value {
    ValueType type = ValueType::UINT8;
    // Scalars are widened: unsigned -> uint64_t, signed -> int64_t,
    // floats -> double, BOOL -> bool.
    std::variant<uint64_t, int64_t, double, bool, std::string_view, Array> data;

    // Integer of any width and signedness; nullopt if not an integer or out of range.
    std::optional<uint64_t> as_uint() const;
    std::optional<int64_t> as_int() const;
    // FLOAT32/FLOAT64 or any integer.
    std::optional<double> as_float() const;
    // A short human rendering ("[49152 strings]" for big arrays).
    std::string to_display(size_t max_chars = 60) const;
};

}  // namespace headroom::gguf
