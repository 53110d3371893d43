// Progress: nothing for work done within half a second; a line per tenth
// (stderr is not a terminal under ctest) and a closing line for longer work.
#include "core/progress.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

namespace headroom {
namespace {

TEST(Progress, QuickWorkShowsNothing) {
    testing::internal::CaptureStderr();
    Progress p("quick", 10);
    for (int i = 1; i <= 10; ++i) p.update(i, "detail");
    p.finish("all");
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(Progress, LongWorkPrintsEachTenthOnceAndACloseLine) {
    testing::internal::CaptureStderr();
    Progress p("slow", 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    p.update(100, "half");
    p.update(101, "still half");  // the same tenth: no new line
    p.update(200, "all");
    p.finish("200 units");
    const std::string out = testing::internal::GetCapturedStderr();
    EXPECT_NE(out.find("slow:  50% half ("), std::string::npos) << out;
    EXPECT_EQ(out.find("still half"), std::string::npos) << out;
    EXPECT_NE(out.find("slow: 100% all ("), std::string::npos) << out;
    EXPECT_NE(out.find("slow: done 200 units in "), std::string::npos) << out;
}

TEST(Progress, ASummaryIsPrintedEvenForQuickWork) {
    testing::internal::CaptureStderr();
    Progress p("quantize q4_0", 10);
    p.update(10);
    p.finish_with_summary("1 MiB -> 300 KiB");
    const std::string out = testing::internal::GetCapturedStderr();
    EXPECT_EQ(out.rfind("quantize q4_0: done 1 MiB -> 300 KiB in ", 0), 0u) << out;
    EXPECT_EQ(out.find('%'), std::string::npos) << out;
}

TEST(Progress, DisabledPrintsNothingHoweverLong) {
    testing::internal::CaptureStderr();
    Progress p("off", 10, false);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    p.update(5);
    p.finish();
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace headroom
