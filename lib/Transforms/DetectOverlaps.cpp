//===- DetectOverlaps.cpp - Names whose writes share bytes ------*- C++ -*-===//
//
// Direct writes land in any order (and in parallel), so two names that write
// one byte must go through load_weights in arrival order. A sweep over the
// byte runs of each storage finds them in O(n log n).
//
//===----------------------------------------------------------------------===//

#include "loadplan/Transforms/ByteRuns.h"
#include "loadplan/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

#include <algorithm>
#include <queue>
#include <tuple>

namespace mlir {
namespace loadplan {
#define GEN_PASS_DEF_DETECTOVERLAPS
#include "loadplan/Transforms/Passes.h.inc"
} // namespace loadplan
} // namespace mlir

using namespace mlir;
using namespace mlir::loadplan;

namespace {
struct DetectOverlapsPass
    : public loadplan::impl::DetectOverlapsBase<DetectOverlapsPass> {
  using DetectOverlapsBase::DetectOverlapsBase;
  void runOnOperation() override;
};
} // namespace

void DetectOverlapsPass::runOnOperation() {
  ModuleOp module = getOperation();
  FailureOr<CheckpointNames> names = collectCheckpointNames(module);
  if (failed(names))
    return signalPassFailure();
  SmallVector<StorageOp> storages;
  SmallVector<StorageWrite> writes;
  collectStorageWrites(module, *names, maxRuns, /*withConstants=*/false,
                       storages, writes);
  // By storage, then by first byte, then in arrival order.
  std::sort(writes.begin(), writes.end(),
            [](const StorageWrite &a, const StorageWrite &b) {
              return std::tie(a.storage, a.run, a.name) <
                     std::tie(b.storage, b.run, b.name);
            });

  // overlapWith[i]: the name whose bytes name i meets first.
  SmallVector<int64_t> overlapWith(names->names.size(), -1);
  using Active = std::pair<int64_t, unsigned>; // (stop, name)
  std::priority_queue<Active, std::vector<Active>, std::greater<Active>> active;
  // Active runs of names not yet marked: each name is marked once, so the
  // sweep stays near-linear however many runs pile up on one span.
  SmallVector<Active> unmarked;
  for (size_t i = 0; i < writes.size(); ++i) {
    const StorageWrite &w = writes[i];
    if (i == 0 || writes[i - 1].storage != w.storage) {
      active = {};
      unmarked.clear();
    }
    while (!active.empty() && active.top().first <= w.run.first)
      active.pop();
    if (!active.empty()) {
      unsigned other = active.top().second;
      if (overlapWith[w.name] < 0)
        overlapWith[w.name] = other;
      for (Active a : unmarked)
        if (a.first > w.run.first && overlapWith[a.second] < 0)
          overlapWith[a.second] = w.name;
      unmarked.clear();
    }
    active.push({w.run.second, w.name});
    if (overlapWith[w.name] < 0)
      unmarked.push_back({w.run.second, w.name});
  }

  // A name of a checkpoint with members falls back on its own: each
  // becomes a checkpoint of its own, in the same arrival order.
  if (names->hasMembers &&
      llvm::any_of(llvm::enumerate(overlapWith), [&](auto pair) {
        return pair.value() >= 0 &&
               names->op(names->names[pair.index()]).hasMembers();
      })) {
    names = expandCheckpointGroups(module);
    if (failed(names))
      return signalPassFailure();
  }

  for (auto [index, other] : llvm::enumerate(overlapWith)) {
    if (other < 0)
      continue;
    CheckpointOp checkpoint = names->op(names->names[index]);
    Block &block = checkpoint.getBlock();
    if (!block.getOps<FallbackOp>().empty())
      continue; // an earlier reason stands
    OpBuilder builder = OpBuilder::atBlockBegin(&block);
    std::string reason =
        ("writes overlap with '" + names->name(names->names[other]) + "'")
            .str();
    FallbackOp::create(builder, checkpoint.getLoc(), StringRef(reason),
                       /*stop=*/false);
    ++numOverlapping;
  }
}
