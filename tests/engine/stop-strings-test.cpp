// Stop strings on streamed text, worked by hand: what may be sent, what is
// held back, where the output ends.
#include "engine/stop-strings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace headroom {
namespace {

StopScan scan(std::string_view pending, const std::vector<std::string>& stops) {
    return scan_stop_strings(pending, stops);
}

TEST(StopStrings, NoStopStringsSendsEverything) {
    const StopScan s = scan("Hello, world", {});
    EXPECT_EQ(s.send, 12u);
    EXPECT_FALSE(s.stopped);
}

TEST(StopStrings, AStopStringEndsTheTextWhereItStarts) {
    // "The answer is 42" is 16 bytes; "\n\nUser:" starts right after it.
    const StopScan s = scan("The answer is 42\n\nUser: next", {"\n\nUser:"});
    EXPECT_TRUE(s.stopped);
    EXPECT_EQ(s.send, 16u);
}

TEST(StopStrings, TheEarliestOfSeveralWins) {
    // "END" at 6, "STOP" at 1.
    const StopScan s = scan("aSTOPbEND", {"END", "STOP"});
    EXPECT_TRUE(s.stopped);
    EXPECT_EQ(s.send, 1u);
}

TEST(StopStrings, HoldsTheLongestTailThatCouldStartOne) {
    // "\n\nUs" (4 bytes) may be the start of "\n\nUser:"; "s" alone could
    // start "stop" but the longer tail is held.
    const StopScan s = scan("The answer is 42\n\nUs", {"\n\nUser:", "stop"});
    EXPECT_FALSE(s.stopped);
    EXPECT_EQ(s.send, 16u);
    // A tail that starts no stop string is sent whole.
    EXPECT_EQ(scan("abcx", {"xyz", "bd"}).send, 3u);  // "x" starts "xyz"
    EXPECT_EQ(scan("abcq", {"xyz", "bd"}).send, 4u);
}

TEST(StopStrings, AWholeStopStringIsNotHeldButStops) {
    // The tail "xyz" equals the stop string: found, not held.
    const StopScan s = scan("abxyz", {"xyz"});
    EXPECT_TRUE(s.stopped);
    EXPECT_EQ(s.send, 2u);
}

TEST(StopStrings, HoldsAtMostOneByteLessThanTheLongestStop) {
    // "aaaa" is a proper prefix of "aaaaa" (5 bytes): all 4 pending bytes held.
    EXPECT_EQ(scan("aaaa", {"aaaaa"}).send, 0u);
    // "baaaa": the 4-byte tail "aaaa" is held, "b" goes.
    EXPECT_EQ(scan("baaaa", {"aaaaa"}).send, 1u);
    // "baaaaaa" holds the stop string itself: the output ends after "b".
    const StopScan s = scan("baaaaaa", {"aaaaa"});
    EXPECT_TRUE(s.stopped);
    EXPECT_EQ(s.send, 1u);
}

}  // namespace
}  // namespace headroom
