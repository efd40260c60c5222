//===- ByteRunsTest.cpp - Bytes a strided write covers --------------------===//
//
// appendByteRuns against the bytes of each element, on examples and on
// random layouts.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"
#include "loadplan/Transforms/ByteRuns.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <random>
#include <set>

using namespace mlir;
using namespace mlir::loadplan;

namespace {

using Ints = SmallVector<int64_t>;

SmallVector<ByteRun> runsOf(int64_t byteOffset, ArrayRef<int64_t> shape,
                            ArrayRef<int64_t> stride, int64_t itemSize,
                            int64_t maxRuns = 4096) {
  SmallVector<ByteRun> runs;
  appendByteRuns(byteOffset, shape, stride, itemSize, maxRuns, runs);
  std::sort(runs.begin(), runs.end());
  return runs;
}

TEST(ByteRuns, Contiguous) {
  EXPECT_EQ(runsOf(16, {4, 6}, {6, 1}, 2), (SmallVector<ByteRun>{{16, 64}}));
  // A transposed but dense layout is one run too.
  EXPECT_EQ(runsOf(0, {4, 6}, {1, 4}, 2), (SmallVector<ByteRun>{{0, 48}}));
  // A 0-d tensor is one element.
  EXPECT_EQ(runsOf(8, {}, {}, 4), (SmallVector<ByteRun>{{8, 12}}));
  // Size-1 dims do not matter, whatever their strides.
  EXPECT_EQ(runsOf(0, {1, 3, 1}, {100, 1, 7}, 1),
            (SmallVector<ByteRun>{{0, 3}}));
}

TEST(ByteRuns, Strided) {
  // Two rows of a wider tensor.
  EXPECT_EQ(runsOf(0, {2, 4}, {8, 1}, 2),
            (SmallVector<ByteRun>{{0, 8}, {16, 24}}));
  // A column: one element per run.
  EXPECT_EQ(runsOf(4, {3, 1}, {4, 1}, 4),
            (SmallVector<ByteRun>{{4, 8}, {20, 24}, {36, 40}}));
}

TEST(ByteRuns, Empty) {
  EXPECT_TRUE(runsOf(0, {4, 0}, {1, 1}, 2).empty());
}

TEST(ByteRuns, CoveringSpanPastMaxRuns) {
  // 4 rows of 2 elements with stride 8: 4 runs, or one span when at most 3
  // are allowed.
  EXPECT_EQ(runsOf(0, {4, 2}, {8, 1}, 2, /*maxRuns=*/4).size(), 4u);
  EXPECT_EQ(runsOf(10, {4, 2}, {8, 1}, 2, /*maxRuns=*/3),
            (SmallVector<ByteRun>{{10, 10 + (3 * 8 + 2) * 2}}));
}

TEST(ByteRuns, RandomLayouts) {
  std::mt19937_64 rng(7);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int iter = 0; iter < 5000; ++iter) {
    Ints shape, stride;
    for (int64_t k = 0, rank = pick(0, 4); k < rank; ++k) {
      shape.push_back(pick(1, 4));
      stride.push_back(pick(0, 12));
    }
    int64_t itemSize = int64_t(1) << pick(0, 3);
    int64_t offset = pick(0, 16);
    int64_t maxRuns = pick(1, 40);
    // The bytes element by element.
    std::multiset<int64_t> bytes;
    int64_t n = numElements(shape);
    for (int64_t flat = 0; flat < n; ++flat) {
      int64_t at = 0, rest = flat;
      for (int64_t k = shape.size() - 1; k >= 0; --k) {
        at += (rest % shape[k]) * stride[k];
        rest /= shape[k];
      }
      for (int64_t b = 0; b < itemSize; ++b)
        bytes.insert(offset + at * itemSize + b);
    }
    std::set<int64_t> distinct(bytes.begin(), bytes.end());
    bool overlapping = distinct.size() != bytes.size();

    SmallVector<ByteRun> runs =
        runsOf(offset, shape, stride, itemSize, maxRuns);
    ASSERT_FALSE(runs.empty());
    for (ByteRun r : runs)
      ASSERT_LT(r.first, r.second);
    if (runs.size() == 1 && static_cast<int64_t>(runs[0].second -
                                                 runs[0].first) >
                                static_cast<int64_t>(distinct.size())) {
      // The covering span: from the first byte to one past the last.
      EXPECT_EQ(runs[0].first, *distinct.begin());
      EXPECT_EQ(runs[0].second, *distinct.rbegin() + 1);
      continue;
    }
    EXPECT_LE(static_cast<int64_t>(runs.size()), std::max<int64_t>(maxRuns, 1));
    std::multiset<int64_t> covered;
    for (ByteRun r : runs)
      for (int64_t b = r.first; b < r.second; ++b)
        covered.insert(b);
    if (overlapping) {
      EXPECT_EQ(std::set<int64_t>(covered.begin(), covered.end()), distinct);
    } else {
      // Runs of a layout that writes each byte once are disjoint.
      EXPECT_EQ(covered, bytes);
    }
  }
}

} // namespace
