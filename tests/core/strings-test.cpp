// clipped(): untrusted text made fit for a one-line message.
#include "core/strings.h"

#include <gtest/gtest.h>

#include <string>

namespace headroom {
namespace {

TEST(Clipped, ShortTextPassesWithControlCharactersAsSpaces) {
    EXPECT_EQ(clipped("llama"), "llama");
    EXPECT_EQ(clipped(""), "");
    EXPECT_EQ(clipped(std::string("a\nb\x01"
                                  "c\x7f",
                                  6)),
              "a b c ");
    EXPECT_EQ(clipped(std::string(64, 'x')), std::string(64, 'x'));
}

TEST(Clipped, LongTextIsCutAndMarkedWithItsLength) {
    EXPECT_EQ(clipped(std::string(65, 'x')), std::string(64, 'x') + "… (65 bytes)");
    EXPECT_EQ(clipped(std::string(100000, 'w'), 8), "wwwwwwww… (100000 bytes)");
}

TEST(Clipped, NeverSplitsAUtf8Character) {
    // 63 ASCII bytes, then U+00E9 (C3 A9) across the 64-byte cut: the cut
    // backs off to the character's first byte.
    const std::string s = std::string(63, 'a') + "\xC3\xA9" + "tail";
    EXPECT_EQ(clipped(s), std::string(63, 'a') + "… (69 bytes)");
    // U+2581 (E2 96 81) repeated: each cut lands on a whole character.
    std::string blocks;
    for (int i = 0; i < 30; ++i) blocks += "\xE2\x96\x81";
    EXPECT_EQ(clipped(blocks, 10), blocks.substr(0, 9) + "… (90 bytes)");
    EXPECT_EQ(clipped(blocks, 9), blocks.substr(0, 9) + "… (90 bytes)");
}

}  // namespace
}  // namespace headroom
