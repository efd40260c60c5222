//===- ViewsToBoxesTest.cpp - View chains through the passes --------------===//
//
// Property test of --loadplan-fold-views and --loadplan-to-boxes together:
// random view chains printed as loadplan IR, copied into a random contiguous
// or permuted destination, compiled by the passes; the write they produce is
// checked against an element-by-element evaluation of the chain, and a
// fallback against what the copy really is.
//
//===----------------------------------------------------------------------===//

#include "ViewChain.h"

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanDialect.h"
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanOps.h"
#include "loadplan/Transforms/Passes.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include "gtest/gtest.h"

#include <map>
#include <random>
#include <set>
#include <sstream>

using namespace mlir;
using namespace mlir::loadplan;
using namespace loadplan_test;

namespace {

/// Checks that `writes` together move what a copy moves whose k-th element
/// is checkpoint element `src[k]` going to destination element `dst[k]`:
/// every destination element once, from the right checkpoint element.
::testing::AssertionResult checkWrites(ArrayRef<int64_t> ckptShape,
                                       ArrayRef<int64_t> src,
                                       ArrayRef<int64_t> dst,
                                       ArrayRef<WriteOp> writes) {
  std::map<int64_t, int64_t> want, got;
  for (auto [s, d] : llvm::zip(src, dst))
    want[d] = s;
  Ints ckptStride = contiguousStrides(ckptShape);
  for (WriteOp w : writes) {
    Ints boxShape;
    int64_t base = 0;
    for (auto [start, stop, st] :
         llvm::zip(w.getBox().getStarts(), w.getBox().getStops(), ckptStride)) {
      boxShape.push_back(stop - start);
      base += start * st;
    }
    std::vector<int64_t> from = elementsOf(base, boxShape, ckptStride);
    RegionAttr r = w.getRegion();
    std::vector<int64_t> to =
        elementsOf(r.getOffset(), r.getShape(), r.getStride());
    if (from.size() != to.size())
      return ::testing::AssertionFailure()
             << "a box of " << from.size() << " elements into a region of "
             << to.size();
    for (auto [s, d] : llvm::zip(from, to))
      if (!got.emplace(d, s).second)
        return ::testing::AssertionFailure()
               << "destination element " << d << " written twice";
  }
  if (got != want)
    return ::testing::AssertionFailure() << "the writes move other elements";
  return ::testing::AssertionSuccess();
}

TEST(ViewsToBoxes, RandomChainsThroughPasses) {
  MLIRContext ctx;
  ctx.loadDialect<LoadPlanDialect>();
  std::mt19937_64 rng(propertySeed(3));
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int writes = 0, fallbacks = 0, lost = 0, several = 0, lostDirect = 0;
  for (int iter = 0, n = propertyIterations(10000); iter < n; ++iter) {
    Ints ckptShape;
    for (int64_t d = 0, rank = pick(0, 4); d < rank; ++d)
      ckptShape.push_back(pick(1, 5));
    Chain chain(rng, ckptShape);
    for (int64_t s = 0, steps = pick(0, 6); s < steps && !chain.lost; ++s)
      chain.step(/*allowCopies=*/true);
    if (HasFailure())
      return;

    // The copy: into the view's shape, or (as copy_ allows with as many
    // elements) another shape it is reshaped to.
    Ints copyShape = chain.ref.shape;
    if (pick(0, 4) == 0 && !chain.ref.at.empty()) {
      int64_t numel = chain.ref.at.size();
      copyShape = {numel};
      if (numel % 2 == 0 && pick(0, 1))
        copyShape = {2, numel / 2};
    }
    Ints dstStride = randomDestination(rng, copyShape);
    int64_t offset = pick(0, 5);
    int64_t extent = 1;
    for (auto [n, s] : llvm::zip(copyShape, dstStride))
      extent += (n - 1) * s;

    std::ostringstream ir;
    ir << "module {\n  loadplan.storage @s size " << 2 * (offset + extent)
       << "\n  loadplan.target @t module \"m\" tensor \"t\" storage @s "
          "byte_offset 0 stride [1] : tensor<"
       << offset + extent << "xbf16>\n  loadplan.checkpoint \"w\" : "
       << tensorType(ckptShape) << " (%w) {\n"
       << chain.ir << "    loadplan.copy " << chain.value
       << " to @t <offset = " << offset << ", shape = " << str(copyShape)
       << ", stride = " << str(dstStride) << "> as bf16 : "
       << tensorType(chain.ref.shape) << "\n  }\n}\n";
    std::string context = chain.log.str() + " -> copy " + str(copyShape) +
                          " stride " + str(dstStride) + "\n" + ir.str();

    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(ir.str(), &ctx);
    ASSERT_TRUE(module) << context;
    PassManager pm(&ctx);
    pm.addPass(createFoldViews());
    pm.addPass(createToBoxes());
    ASSERT_TRUE(succeeded(pm.run(*module))) << context;
    auto checkpoint = *module->getOps<CheckpointOp>().begin();
    Block &block = checkpoint.getBlock();

    Elements copied = reshapeElements(chain.ref, copyShape);
    std::vector<int64_t> dst = elementsOf(offset, copyShape, dstStride);
    auto fallbackOps = block.getOps<FallbackOp>();
    auto writeOps = block.getOps<WriteOp>();
    if (fallbackOps.empty()) {
      SmallVector<WriteOp> all = llvm::to_vector(writeOps);
      ASSERT_GE(all.size(), 1u) << context;
      if (all.size() > 1)
        ++several;
      if (chain.lost)
        ++lostDirect;
      EXPECT_TRUE(checkWrites(ckptShape, copied.at, dst, all)) << context;
      ++writes;
    } else {
      ASSERT_TRUE(writeOps.empty()) << context;
      ++fallbacks;
      std::string reason = (*fallbackOps.begin()).getReason().str();
      if (chain.lost)
        ++lost;
      if (StringRef(reason).starts_with("reshapes ")) {
        // Only a reshape no strides give, and a view after it the fold
        // cannot express.
        EXPECT_TRUE(chain.lost) << context << reason;
      } else if (reason == "copy_ with a reshape that is not a view") {
        // A reshape no strides give is copied by viewing the destination
        // in the reshaped layout's shape, which may fail too.
        if (!chain.lost) {
          EXPECT_NE(copyShape, chain.ref.shape) << context;
          Strided view = chain.layout;
          std::string why;
          EXPECT_TRUE(failed(applyView(view, copyShape, why))) << context;
        }
      } else {
        static const std::set<std::string> reasons = {
            "repeats source elements (expand or broadcast)",
            "source slice is not a box",
            "source slice has a step or is not a box"};
        EXPECT_TRUE(reasons.count(reason)) << context << reason;
        // A copy of a strided view is writes, one box per step or repeat
        // or single elements if need be (these copies are far below the
        // limit on pieces), unless it writes one destination element twice.
        EXPECT_FALSE(!chain.lost && copyShape == chain.ref.shape &&
                     !hasRepeats(dst))
            << context << reason;
      }
    }
    if (HasFailure())
      return;
  }
  RecordProperty("writes", writes);
  RecordProperty("fallbacks", fallbacks);
  RecordProperty("lost", lost);
  RecordProperty("several", several);
  RecordProperty("lostDirect", lostDirect);
  EXPECT_GT(writes, 3000);
  // Steps and repeats are writes too; what falls back is mostly reshapes
  // no strides give and destinations that repeat an element.
  EXPECT_GT(fallbacks, 150);
  EXPECT_GT(lost, 30);
  // Copies of several boxes, and reshapes no strides give, become writes.
  EXPECT_GT(several, 30);
  EXPECT_GT(lostDirect, 30);
}

} // namespace
