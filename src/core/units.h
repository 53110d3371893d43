// Byte quantities as people write them ("512MiB", "2 GiB", "24GB", "1.5G")
// and as headroom prints them ("1.50 GiB"). Binary suffixes (KiB, MiB, GiB,
// TiB, and the bare K/M/G/T) are powers of 1024; decimal ones (KB, MB, GB, TB)
// are powers of 1000, as on GPU spec sheets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace headroom {

inline constexpr uint64_t KiB = 1024;
inline constexpr uint64_t MiB = 1024 * KiB;
inline constexpr uint64_t GiB = 1024 * MiB;

// Returns nullopt if `text` is not a non-negative byte quantity.
std::optional<uint64_t> parse_bytes(std::string_view text);

// Like parse_bytes, but throws headroom::Error naming `what` on bad input.
uint64_t parse_bytes_or_throw(std::string_view text, std::string_view what);

// "0 B", "812 B", "1.5 KiB", "93.8 MiB", "1.50 GiB": three significant digits.
std::string format_bytes(uint64_t n_bytes);
std::string format_bytes(double n_bytes);

// Decimal gigabytes for comparisons with spec sheets: "28.0 GB".
std::string format_gb(uint64_t n_bytes);

// Integer with thousands separators: 1234567 -> "1,234,567".
std::string format_count(uint64_t n);

}  // namespace headroom
