#include "core/units.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace headroom {
namespace {

TEST(Units, ParsesBinaryAndDecimalSuffixes) {
    EXPECT_EQ(parse_bytes("512MiB"), 512ull << 20);
    EXPECT_EQ(parse_bytes("2GiB"), 2ull << 30);
    EXPECT_EQ(parse_bytes("2 GiB"), 2ull << 30);
    EXPECT_EQ(parse_bytes("1.5G"), 3ull << 29);
    EXPECT_EQ(parse_bytes("24GB"), 24000000000ull);
    EXPECT_EQ(parse_bytes("100"), 100u);
    EXPECT_EQ(parse_bytes("4k"), 4096u);
    EXPECT_EQ(parse_bytes("1tib"), 1ull << 40);
    EXPECT_FALSE(parse_bytes("").has_value());
    EXPECT_FALSE(parse_bytes("GiB").has_value());
    EXPECT_FALSE(parse_bytes("-1GiB").has_value());
    EXPECT_FALSE(parse_bytes("12 apples").has_value());
    EXPECT_FALSE(parse_bytes("1e999").has_value());
    EXPECT_THROW(parse_bytes_or_throw("lots", "--kv-cache-memory"), Error);
}

TEST(Units, FormatsWithThreeSignificantDigits) {
    EXPECT_EQ(format_bytes(uint64_t{0}), "0 B");
    EXPECT_EQ(format_bytes(uint64_t{812}), "812 B");
    EXPECT_EQ(format_bytes(uint64_t{1536}), "1.50 KiB");
    EXPECT_EQ(format_bytes(uint64_t{3} << 29), "1.50 GiB");
    EXPECT_EQ(format_bytes(uint64_t{98362432}), "93.8 MiB");
    EXPECT_EQ(format_bytes(uint64_t{300} << 20), "300 MiB");
    EXPECT_EQ(format_gb(28000000000ull), "28.0 GB");
    EXPECT_EQ(format_count(1234567), "1,234,567");
    EXPECT_EQ(format_count(100), "100");
    EXPECT_EQ(format_count(30081024), "30,081,024");
}

}  // namespace
}  // namespace headroom
