#include "core/region.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

namespace headroom {
namespace {

// Pages of [p, p + n) that are resident, by mincore (the kernel's view, not ours).
size_t resident_pages(const uint8_t* p, size_t n) {
    const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t n_pages = (n + page - 1) / page;
    std::vector<unsigned char> in(n_pages);
    EXPECT_EQ(::mincore(const_cast<uint8_t*>(p), n, in.data()), 0);
    size_t resident = 0;
    for (unsigned char c : in) resident += c & 1;
    return resident;
}

bool all_zero(const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (p[i] != 0) return false;
    return true;
}

TEST(Region, SmallRegionIsCommittedZeroedAndPageAligned) {
    const size_t n = 4096 * 3 + 100;
    Region r(n, "test");
    ASSERT_NE(r.data(), nullptr);
    EXPECT_EQ(r.size_bytes(), n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data()) % 4096, 0u);
    EXPECT_EQ(resident_pages(r.data(), n), 4u);
    EXPECT_TRUE(all_zero(r.data(), n));
    r.data()[n - 1] = 7;
    EXPECT_EQ(r.data()[n - 1], 7);
}

TEST(Region, LargeRegionStartsOnA2MiBBoundaryAndIsCommitted) {
    // Not a multiple of 2 MiB or of a page: the mapping's ends are trimmed by hand.
    const size_t n = (size_t{5} << 20) + 12345;
    Region r(n, "test");
    ASSERT_NE(r.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data()) % (size_t{2} << 20), 0u);
    EXPECT_EQ(resident_pages(r.data(), n), (n + 4095) / 4096);
    EXPECT_TRUE(all_zero(r.data(), n));
    r.data()[0] = 1;
    r.data()[n - 1] = 2;
    EXPECT_EQ(r.data()[0] + r.data()[n - 1], 3);
}

TEST(Region, MoveHandsOverTheMapping) {
    Region a(size_t{3} << 20, "test");
    uint8_t* p = a.data();
    p[10] = 42;
    Region b(std::move(a));
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(a.size_bytes(), 0u);
    EXPECT_EQ(b.data(), p);
    EXPECT_EQ(b.data()[10], 42);
    Region c;
    c = std::move(b);
    EXPECT_EQ(c.data(), p);
    EXPECT_EQ(c.size_bytes(), size_t{3} << 20);
}

TEST(Region, EmptyRegionHoldsNothing) {
    Region r(0, "test");
    EXPECT_EQ(r.data(), nullptr);
    EXPECT_EQ(r.size_bytes(), 0u);
}

}  // namespace
}  // namespace headroom
