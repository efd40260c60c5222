//===- PlanFormatTest.cpp - The format library's plan data ------*- C++ -*-===//
//
// The plan's data as the format library has it: the one box type, whose
// bounds live inline up to rank 4 and on the heap beyond.
//
//===----------------------------------------------------------------------===//

#include "loadplan/format/Box.h"

#include "gtest/gtest.h"

#include <utility>
#include <vector>

using loadplan_format::Box;
using loadplan_format::Dims;

namespace {

std::vector<int64_t> values(const Dims &d) {
  return std::vector<int64_t>(d.begin(), d.end());
}

TEST(PlanFormat, DimsGrowPastTheInlineOnes) {
  Dims d;
  EXPECT_TRUE(d.empty());
  std::vector<int64_t> want;
  for (int64_t v = 0; v < 70; ++v) { // past kInline, then doubling
    d.push_back(v * 3);
    want.push_back(v * 3);
    ASSERT_EQ(values(d), want);
  }
  d.resize(2);
  EXPECT_EQ(values(d), (std::vector<int64_t>{0, 3}));
  d.resize(4, 7);
  EXPECT_EQ(values(d), (std::vector<int64_t>{0, 3, 7, 7}));
  d.clear();
  EXPECT_TRUE(d.empty());
}

TEST(PlanFormat, DimsCopyAndMoveEitherWay) {
  for (size_t n : {size_t(0), size_t(3), size_t(Dims::kInline), size_t(9)}) {
    std::vector<int64_t> want(n);
    for (size_t k = 0; k < n; ++k)
      want[k] = int64_t(k) - 2;
    Dims a(want);
    Dims copied(a);
    EXPECT_EQ(values(copied), want);
    EXPECT_EQ(copied, a);
    Dims moved(std::move(copied));
    EXPECT_EQ(values(moved), want);
    EXPECT_TRUE(copied.empty());
    // Assigned over values of either kind.
    Dims small{1, 2}, large(std::vector<int64_t>(12, 5));
    small = a;
    large = a;
    EXPECT_EQ(small, a);
    EXPECT_EQ(large, a);
    small = std::move(moved);
    EXPECT_EQ(values(small), want);
    large = Dims(want.data(), want.data() + want.size());
    EXPECT_EQ(values(large), want);
    a = a;
    EXPECT_EQ(values(a), want);
  }
  EXPECT_NE(Dims({1, 2}), Dims({1, 2, 3}));
  EXPECT_NE(Dims({1, 2}), Dims({1, 3}));
}

TEST(PlanFormat, BoxExtentsAndVolume) {
  Box b{{0, 4, 2}, {3, 8, 2}};
  EXPECT_EQ(b.rank(), 3u);
  EXPECT_EQ(b.extents(), (std::vector<int64_t>{3, 4, 0}));
  EXPECT_EQ(b.volume(), 0);
  b.hi[2] = 5;
  EXPECT_EQ(b.volume(), 36);
  EXPECT_EQ(b, (Box{{0, 4, 2}, {3, 8, 5}}));
  EXPECT_EQ(Box{}.volume(), 1); // a 0-d tensor's one element
}

} // namespace
