//===- BoxAndRegionTest.cpp - computeBoxAndRegion against elements --------===//
//
// Property tests: random view chains on random small checkpoint tensors,
// built with the torch view rules of Geometry.h and, independently, by
// moving elements one by one (ViewChain.h); then a copy of the view into a
// random contiguous or permuted destination, reduced by computeBoxAndRegion.
// A write it returns must send every copied checkpoint element, in row-major
// box order, to the destination element the copy sends it to; a copy it
// refuses must really not be a copy of a box (repeats, steps, holes), unless
// a reshape merged dims (the seeds' rule refuses some of those).
//
//===----------------------------------------------------------------------===//

#include "ViewChain.h"

#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"
#include "loadplan/Transforms/BoxAndRegion.h"

#include "gtest/gtest.h"

#include <random>
#include <set>
#include <tuple>

using namespace mlir;
using namespace mlir::loadplan;
using namespace loadplan_test;

namespace {

//===----------------------------------------------------------------------===//
// The property
//===----------------------------------------------------------------------===//

struct Counts {
  int direct = 0, directMerged = 0, refused = 0, refusedBox = 0;
};

/// Copies the view `chain` holds into a random contiguous or permuted
/// destination and checks computeBoxAndRegion against the elements.
void checkCopy(std::mt19937_64 &rng, const Chain &chain, Counts &counts) {
  const Elements &ref = chain.ref;
  ASSERT_EQ(elementsOf(chain.layout), ref.at) << chain.log.str();
  if (ref.at.empty())
    return;
  Ints dstStride = randomDestination(rng, ref.shape);
  SmallVector<ElementDim> dims;
  for (auto [n, src, dst] :
       llvm::zip(ref.shape, chain.layout.stride, dstStride))
    dims.push_back({n, src, dst});
  std::string why;
  FailureOr<BoxAndRegion> br = computeBoxAndRegion(
      chain.ckptShape, chain.layout.offset, dims, why);
  std::string context = chain.log.str() + " -> dst stride " + str(dstStride);

  if (failed(br)) {
    ++counts.refused;
    static const std::set<std::string> reasons = {
        "repeats source elements (expand or broadcast)",
        "writes one destination element twice", "source slice is not a box",
        "source slice has a step or is not a box"};
    EXPECT_TRUE(reasons.count(why)) << context << ": " << why;
    if (!hasRepeats(ref.at) && isBox(ref.at, chain.ckptShape)) {
      ++counts.refusedBox;
      // Without a reshape that merges dims, every copy of a box is a write.
      EXPECT_TRUE(chain.merged)
          << context << ": refused a copy of a box: " << why;
    }
    return;
  }
  ++counts.direct;
  if (chain.merged)
    ++counts.directMerged;
  std::vector<int64_t> dst = elementsOf(0, ref.shape, dstStride);
  EXPECT_TRUE(checkWrite(chain.ckptShape, ref.at, dst, br->starts, br->stops,
                         /*offset=*/0, br->dstShape, br->dstStride))
      << context;
}

TEST(BoxAndRegion, RandomViewChains) {
  std::mt19937_64 rng(propertySeed(20261129));
  Counts counts;
  for (int iter = 0, n = propertyIterations(20000); iter < n; ++iter) {
    Ints ckptShape;
    int64_t rank = std::uniform_int_distribution<int64_t>(0, 4)(rng);
    for (int64_t d = 0; d < rank; ++d)
      ckptShape.push_back(std::uniform_int_distribution<int64_t>(1, 5)(rng));
    Chain chain(rng, ckptShape);
    int steps = std::uniform_int_distribution<int>(0, 6)(rng);
    for (int s = 0; s < steps; ++s) {
      chain.step();
      ASSERT_EQ(elementsOf(chain.layout), chain.ref.at) << chain.log.str();
    }
    checkCopy(rng, chain, counts);
    if (HasFatalFailure() || HasNonfatalFailure())
      return;
  }
  // The generator reaches every outcome.
  RecordProperty("direct", counts.direct);
  RecordProperty("direct_merged", counts.directMerged);
  RecordProperty("refused", counts.refused);
  RecordProperty("refused_box", counts.refusedBox);
  EXPECT_GT(counts.direct, 2000);
  EXPECT_GT(counts.directMerged, 200);
  EXPECT_GT(counts.refused, 1000);
  EXPECT_GT(counts.refusedBox, 0);
}

//===----------------------------------------------------------------------===//
// The seeds' examples and each reason
//===----------------------------------------------------------------------===//

FailureOr<BoxAndRegion> reduce(ArrayRef<int64_t> ckptShape, int64_t offset,
                               ArrayRef<ElementDim> dims, std::string &why) {
  return computeBoxAndRegion(ckptShape, offset, dims, why);
}

TEST(BoxAndRegion, SeedTransposeExample) {
  // P.copy_(W.t()) with W [4, 6] and P [6, 4] contiguous.
  std::string why;
  FailureOr<BoxAndRegion> br =
      reduce({4, 6}, 0, {{6, 1, 4}, {4, 6, 1}}, why);
  ASSERT_TRUE(succeeded(br)) << why;
  EXPECT_EQ(br->starts, (Ints{0, 0}));
  EXPECT_EQ(br->stops, (Ints{4, 6}));
  EXPECT_EQ(br->dstShape, (Ints{4, 6}));
  EXPECT_EQ(br->dstStride, (Ints{1, 4}));
}

TEST(BoxAndRegion, SeedSplitDimExample) {
  // A box dim the loader splits and sends to unrelated places stays split:
  // 6 becomes (2, 3) with two destination strides.
  std::string why;
  FailureOr<BoxAndRegion> br = reduce({6}, 0, {{2, 3, 10}, {3, 1, 1}}, why);
  ASSERT_TRUE(succeeded(br)) << why;
  EXPECT_EQ(br->starts, Ints{0});
  EXPECT_EQ(br->stops, Ints{6});
  EXPECT_EQ(br->dstShape, (Ints{2, 3}));
  EXPECT_EQ(br->dstStride, (Ints{10, 1}));
  // Sent to places that continue one another, the parts merge back.
  br = reduce({6}, 0, {{2, 3, 3}, {3, 1, 1}}, why);
  ASSERT_TRUE(succeeded(br)) << why;
  EXPECT_EQ(br->dstShape, Ints{6});
  EXPECT_EQ(br->dstStride, Ints{1});
}

TEST(BoxAndRegion, FlattenSpanningDims) {
  std::string why;
  // flatten of [4, 6] rows 1..3: one box of whole rows.
  FailureOr<BoxAndRegion> br = reduce({4, 6}, 6, {{12, 1, 1}}, why);
  ASSERT_TRUE(succeeded(br)) << why;
  EXPECT_EQ(br->starts, (Ints{1, 0}));
  EXPECT_EQ(br->stops, (Ints{3, 6}));
  EXPECT_EQ(br->dstShape, (Ints{2, 6}));
  EXPECT_EQ(br->dstStride, (Ints{6, 1}));
  // Starting mid-row: not a box.
  EXPECT_TRUE(failed(reduce({4, 6}, 3, {{6, 1, 1}}, why)));
  EXPECT_EQ(why, "source slice is not a box");
}

TEST(BoxAndRegion, Reasons) {
  std::string why;
  EXPECT_TRUE(failed(reduce({8}, 0, {{4, 2, 1}}, why)));
  EXPECT_EQ(why, "source slice has a step or is not a box");
  EXPECT_TRUE(failed(reduce({1, 8}, 0, {{4, 0, 8}, {8, 1, 1}}, why)));
  EXPECT_EQ(why, "repeats source elements (expand or broadcast)");
  EXPECT_TRUE(failed(reduce({4, 8}, 0, {{4, 8, 0}, {8, 1, 1}}, why)));
  EXPECT_EQ(why, "writes one destination element twice");
  // A diagonal: stride 5 of a [4, 4] tensor steps through no single dim.
  EXPECT_TRUE(failed(reduce({4, 4}, 0, {{4, 5, 1}}, why)));
  EXPECT_EQ(why, "source slice is not a box");
  // Two dims that step through the same elements.
  EXPECT_TRUE(failed(reduce({8}, 0, {{2, 1, 1}, {2, 1, 2}}, why)));
  EXPECT_EQ(why, "source slice has a step or is not a box");
  // Size-1 dims are ignored, whatever their strides.
  FailureOr<BoxAndRegion> br = reduce({4}, 2, {{1, 0, 0}, {2, 1, 1}}, why);
  ASSERT_TRUE(succeeded(br)) << why;
  EXPECT_EQ(br->starts, Ints{2});
  EXPECT_EQ(br->stops, Ints{4});
}

/// The boxes of several pieces, as (starts, stops, destination offset).
using PieceBox = std::tuple<Ints, Ints, int64_t>;
std::vector<PieceBox> pieceBoxes(const std::vector<BoxPiece> &pieces) {
  std::vector<PieceBox> out;
  for (const BoxPiece &p : pieces)
    out.emplace_back(Ints(p.boxAndRegion.starts), Ints(p.boxAndRegion.stops),
                     p.dstOffset);
  return out;
}

TEST(BoxesAndRegions, OneBoxPerStep) {
  // Bloom's fused qkv, H = 2 heads of d = 2 rows of K = 8, laid out as
  // (H, 3, d, K) and read as (3, H, d, K): the q rows of both heads are
  // rows 0..2 and 6..8 of the checkpoint tensor [12, 8], a step of 6 rows.
  std::string why;
  FailureOr<std::vector<BoxPiece>> pieces = computeBoxesAndRegions(
      {12, 8}, 0, {{2, 48, 16}, {2, 8, 8}, {8, 1, 1}}, why);
  ASSERT_TRUE(succeeded(pieces)) << why;
  EXPECT_EQ(pieceBoxes(*pieces),
            (std::vector<PieceBox>{{{0, 0}, {2, 8}, 0}, {{6, 0}, {8, 8}, 16}}));
  // A step through the inner dim: one box per column, not per element.
  pieces = computeBoxesAndRegions({3, 8}, 0, {{3, 8, 4}, {4, 2, 1}}, why);
  ASSERT_TRUE(succeeded(pieces)) << why;
  ASSERT_EQ(pieces->size(), 4u);
  EXPECT_EQ(pieceBoxes(*pieces)[1], (PieceBox{{0, 2}, {3, 3}, 1}));
  EXPECT_EQ((*pieces)[1].boxAndRegion.dstStride, (Ints{4, 1}));
}

TEST(BoxesAndRegions, OneBoxPerRepeat) {
  // w [4] expanded to [3, 4]: w once per destination row.
  std::string why;
  FailureOr<std::vector<BoxPiece>> pieces =
      computeBoxesAndRegions({4}, 0, {{3, 0, 4}, {4, 1, 1}}, why);
  ASSERT_TRUE(succeeded(pieces)) << why;
  EXPECT_EQ(pieceBoxes(*pieces),
            (std::vector<PieceBox>{{{0}, {4}, 0}, {{0}, {4}, 4}, {{0}, {4}, 8}}));
}

TEST(BoxesAndRegions, StillRefused) {
  std::string why;
  // A repeat into one destination element.
  EXPECT_TRUE(failed(computeBoxesAndRegions({4}, 0, {{3, 0, 0}, {4, 1, 1}}, why)));
  EXPECT_EQ(why, "repeats source elements (expand or broadcast)");
  // A destination whose dims step over the same elements (a strided dest no
  // stride 0 shows): pieces would write one element twice.
  EXPECT_TRUE(failed(computeBoxesAndRegions({8}, 0, {{2, 4, 1}, {2, 1, 1}}, why)));
  // More pieces than allowed: every other element of 4096.
  EXPECT_TRUE(failed(computeBoxesAndRegions({4096}, 0, {{2048, 2, 1}}, why)));
  EXPECT_EQ(why, "source slice has a step or is not a box");
  FailureOr<std::vector<BoxPiece>> pieces =
      computeBoxesAndRegions({4096}, 0, {{2048, 2, 1}}, why, /*maxPieces=*/4096);
  ASSERT_TRUE(succeeded(pieces)) << why;
  EXPECT_EQ(pieces->size(), 2048u);
}

TEST(BoxAndRegion, ZeroDim) {
  // A 0-d checkpoint copied into a (1,) slot: a box of no dims.
  std::string why;
  FailureOr<BoxAndRegion> br = reduce({}, 0, {{1, 1, 1}}, why);
  ASSERT_TRUE(succeeded(br)) << why;
  EXPECT_TRUE(br->starts.empty());
  EXPECT_TRUE(br->dstShape.empty());
}

} // namespace
