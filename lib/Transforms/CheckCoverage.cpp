//===- CheckCoverage.cpp - Target bytes nothing writes ----------*- C++ -*-===//
//
// A target byte that no direct write, fallback copy or constant write covers
// keeps whatever it held: a sign that the metadata misses a name. Each such
// target gets a remark with its first gap.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Transforms/ByteRuns.h"
#include "loadplan/Transforms/Passes.h"

#include "llvm/ADT/DenseMap.h"

#include <algorithm>

namespace mlir {
namespace loadplan {
#define GEN_PASS_DEF_CHECKCOVERAGE
#include "loadplan/Transforms/Passes.h.inc"
} // namespace loadplan
} // namespace mlir

using namespace mlir;
using namespace mlir::loadplan;

namespace {
struct CheckCoveragePass
    : public loadplan::impl::CheckCoverageBase<CheckCoveragePass> {
  using CheckCoverageBase::CheckCoverageBase;
  void runOnOperation() override;
};
} // namespace

/// Sorts `runs` and merges those that touch or overlap.
static void normalize(SmallVectorImpl<ByteRun> &runs) {
  std::sort(runs.begin(), runs.end());
  SmallVector<ByteRun> out;
  for (ByteRun r : runs) {
    if (!out.empty() && r.first <= out.back().second)
      out.back().second = std::max(out.back().second, r.second);
    else
      out.push_back(r);
  }
  runs.assign(out.begin(), out.end());
}

void CheckCoveragePass::runOnOperation() {
  ModuleOp module = getOperation();
  FailureOr<CheckpointNames> names = collectCheckpointNames(module);
  if (failed(names))
    return signalPassFailure();
  SmallVector<StorageOp> storages;
  SmallVector<StorageWrite> writes;
  collectStorageWrites(module, *names, maxRuns, /*withConstants=*/true,
                       storages, writes);
  std::vector<SmallVector<ByteRun>> covered(storages.size());
  for (const StorageWrite &w : writes)
    covered[w.storage].push_back(w.run);
  for (SmallVector<ByteRun> &runs : covered)
    normalize(runs);
  llvm::DenseMap<StringAttr, unsigned> storageIndex;
  for (auto [index, storage] : llvm::enumerate(storages))
    storageIndex[storage.getSymNameAttr()] = index;

  SmallVector<ByteRun> own;
  for (auto target : module.getOps<TargetOp>()) {
    own.clear();
    // A target's own bytes; a layout too irregular to list counts whole.
    appendByteRuns(target.getByteOffset(), target.getTensorType().getShape(),
                   target.getStride(), target.getItemSize(),
                   std::max<int64_t>(maxRuns, 1) * 16, own);
    normalize(own);
    auto storage = storageIndex.find(target.getStorageAttr().getAttr());
    if (storage == storageIndex.end())
      continue; // the verifier reports targets without a storage
    ArrayRef<ByteRun> cover = covered[storage->second];
    int64_t missing = 0;
    std::optional<ByteRun> firstGap;
    size_t c = 0;
    for (ByteRun r : own) {
      int64_t at = r.first;
      while (c < cover.size() && cover[c].second <= at)
        ++c;
      for (size_t k = c; at < r.second; ++k) {
        int64_t next = k < cover.size() ? std::min(cover[k].first, r.second)
                                        : r.second;
        if (next > at) {
          missing += next - at;
          if (!firstGap)
            firstGap = ByteRun{at, next};
        }
        if (k >= cover.size())
          break;
        at = std::max(at, cover[k].second);
      }
    }
    if (missing == 0)
      continue;
    numUncoveredBytes += missing;
    ++numUncoveredTargets;
    target.emitRemark() << "target '" << target.getModule() << "."
                        << target.getTensor() << "' has " << missing
                        << " bytes no name writes (first gap: bytes ["
                        << firstGap->first << ", " << firstGap->second
                        << ") of storage " << target.getStorageAttr() << ")";
  }
}
