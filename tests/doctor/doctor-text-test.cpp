// The small scanners under the parsers: quantities with units, searches on
// the lower-case line, conditions that make a line advice.
#include "doctor/text.h"

#include <gtest/gtest.h>

#include <string>

namespace headroom::doctor {
namespace {

struct Owned {
    std::string text, lower;
    Line line() const { return Line{text, lower, 1}; }
};

Owned make(std::string text) {
    std::string lower = text;
    for (char& c : lower)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return {std::move(text), std::move(lower)};
}

TEST(DoctorText, ReadsQuantitiesExactly) {
    // 2.26 GiB = 226 * 2^30 / 100 = 2426656522.24 -> 2426656522
    EXPECT_EQ(quantity_at("2.26 gib", 0)->bytes, 2426656522u);
    EXPECT_EQ(quantity_at("20.00 mib", 0)->bytes, 20971520u);
    EXPECT_EQ(quantity_at("0 bytes is free", 0)->bytes, 0u);
    EXPECT_EQ(quantity_at("576.00 kib free", 0)->bytes, 589824u);
    EXPECT_EQ(quantity_at("=23.58gib", 0)->bytes, 25318832210u);  // 2358 * 2^30 / 100 = ...209.92
    EXPECT_EQ(quantity_at("14095848kb,", 0)->bytes, uint64_t{14095848} * 1024);
    EXPECT_EQ(quantity_at("1,234 bytes", 0)->bytes, 1234u);
    EXPECT_EQ(quantity_at("151851674624", 0, true)->bytes, 151851674624u);
    EXPECT_FALSE(quantity_at("151851674624", 0).has_value());  // a unit is required
    EXPECT_FALSE(quantity_at("12 blocks", 0).has_value());
    EXPECT_FALSE(quantity_at("gib", 0).has_value());
    EXPECT_FALSE(quantity_at("99999999999999999999999999 gib", 0).has_value());
    EXPECT_FALSE(quantity_at("9999999999999999999999999999999999 bytes", 0).has_value());
}

TEST(DoctorText, ReadsQuantityBeforeAnAnchor) {
    const std::string s =
        "(gpu 0; 6.00 gib total capacity; 781.59 mib already allocated; 3.03 gib free;";
    EXPECT_EQ(quantity_before(s, s.find("total capacity"))->bytes, 6442450944u);
    EXPECT_EQ(quantity_before(s, s.find("already allocated"))->bytes,
              819556516u);  // 78159 * 2^20 / 100 = ...515.84
    EXPECT_EQ(quantity_before(s, s.find(" free;"))->bytes,
              3253437727u);  // 303 * 2^30 / 100 = ...726.72
    EXPECT_FALSE(quantity_before("has a total capacity", 6).has_value());
    EXPECT_FALSE(quantity_before("", 0).has_value());
}

TEST(DoctorText, FindsAnchorsAndIntegers) {
    const Owned o = make("The model's max seq len (4096) is larger than ... KV cache (3664).");
    const Line l = o.line();
    EXPECT_TRUE(l.has("max seq len"));
    EXPECT_FALSE(l.has("MAX SEQ LEN"));  // needles are lower case
    EXPECT_EQ(integer_after(l, "max seq len"), 4096u);
    EXPECT_EQ(integer_after(l, "kv cache"), 3664u);
    EXPECT_FALSE(integer_after(l, "absent").has_value());
    EXPECT_EQ(fraction_at("(0.87, 105.87 gib)", 0), 0.87);
    EXPECT_FALSE(fraction_at("(1.5)", 0).has_value());
}

TEST(DoctorText, AdviceIsNotAReport) {
    const Owned advice = make("If you encounter CUDA out of memory, try to set --tile");
    EXPECT_TRUE(is_conditional(advice.line(), advice.lower.find("cuda out of memory")));
    const Owned report = make("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB");
    EXPECT_FALSE(is_conditional(report.line(), report.lower.find("cuda out of memory")));
}

TEST(DoctorText, ClipsAtCharacterBoundaries) {
    EXPECT_EQ(clip("  short  ", 10), "short");
    const std::string blocks = "\u2588\u2588\u2588";  // 3 bytes each
    EXPECT_EQ(clip(blocks, 4), "\u2588...");
}

}  // namespace
}  // namespace headroom::doctor
