//===- Groups.cpp - Checkpoints that stand for several names ----*- C++ -*-===//

#include "loadplan/Transforms/Groups.h"
#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"
#include "loadplan/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir {
namespace loadplan {
#define GEN_PASS_DEF_EXPANDGROUPS
#include "loadplan/Transforms/Passes.h.inc"
} // namespace loadplan
} // namespace mlir

using namespace mlir;
using namespace mlir::loadplan;

FailureOr<CheckpointNames> loadplan::collectCheckpointNames(ModuleOp module) {
  CheckpointNames out;
  size_t total = 0;
  for (auto checkpoint : module.getOps<CheckpointOp>()) {
    out.checkpoints.push_back(checkpoint);
    total += checkpoint.getNumNames();
    out.hasMembers |= checkpoint.hasMembers();
  }
  constexpr unsigned kFree = ~0u;
  out.names.assign(total, CheckpointNames::Name{kFree, 0});
  if (out.hasMembers) {
    for (auto [c, checkpoint] : llvm::enumerate(out.checkpoints)) {
      for (auto [i, position] :
           llvm::enumerate(checkpoint.getMemberPositions())) {
        StringRef name = checkpoint.getNameAt(i + 1);
        if (position < 0 || static_cast<uint64_t>(position) >= total)
          return checkpoint.emitError()
                 << "member '" << name << "' is at position " << position
                 << ", but the module has " << total << " names",
                 failure();
        CheckpointNames::Name &slot = out.names[position];
        if (slot.checkpoint != kFree)
          return checkpoint.emitError()
                 << "member '" << name << "' is at position " << position
                 << ", which '" << out.name(slot) << "' has too",
                 failure();
        slot = {static_cast<unsigned>(c), static_cast<unsigned>(i + 1)};
      }
    }
  }
  // The checkpoints' own names fill the rest, in module order.
  size_t next = 0;
  for (unsigned c = 0; c < out.checkpoints.size(); ++c) {
    while (out.names[next].checkpoint != kFree)
      ++next;
    out.names[next++] = {c, 0};
  }
  return out;
}

/// Moves `block`'s copies and writes by `shift` bytes (whole elements, as
/// the verifier checks).
static void moveDestinations(Block &block, int64_t shift) {
  for (Operation &op : block) {
    if (auto copy = dyn_cast<CopyOp>(op)) {
      LayoutAttr l = copy.getDest();
      copy.setDestAttr(LayoutAttr::get(
          l.getContext(), l.getOffset() + shift / getItemSize(copy.getDtype()),
          l.getShape(), l.getStride()));
    } else if (auto write = dyn_cast<WriteOp>(op)) {
      RegionAttr r = write.getRegion();
      int64_t itemSize = getItemSize(write.getWrittenType());
      write.setRegionAttr(RegionAttr::get(r.getContext(),
                                          r.getOffset() + shift / itemSize,
                                          r.getShape(), r.getStride()));
    }
  }
}

FailureOr<CheckpointNames> loadplan::expandCheckpointGroups(ModuleOp module) {
  FailureOr<CheckpointNames> names = collectCheckpointNames(module);
  if (failed(names) || !names->hasMembers)
    return names;
  Block *body = module.getBody();
  OpBuilder builder(module.getContext());
  for (CheckpointNames::Name n : names->names) {
    CheckpointOp checkpoint = names->op(n);
    if (n.index == 0) {
      checkpoint->moveBefore(body, body->end());
      continue;
    }
    builder.setInsertionPointToEnd(body);
    auto member = cast<CheckpointOp>(builder.clone(*checkpoint));
    CheckpointOp::Properties &props = member.getProperties();
    props.name = checkpoint.getNameAt(n.index).str();
    props.member_names.clear();
    props.member_positions.clear();
    props.member_shifts.clear();
    moveDestinations(member.getBlock(), checkpoint.getShiftAt(n.index));
  }
  for (CheckpointOp checkpoint : names->checkpoints) {
    CheckpointOp::Properties &props = checkpoint.getProperties();
    props.member_names.clear();
    props.member_positions.clear();
    props.member_shifts.clear();
  }
  return collectCheckpointNames(module);
}

namespace {
struct ExpandGroupsPass
    : public loadplan::impl::ExpandGroupsBase<ExpandGroupsPass> {
  using ExpandGroupsBase::ExpandGroupsBase;
  void runOnOperation() override {
    if (failed(expandCheckpointGroups(getOperation())))
      signalPassFailure();
  }
};
} // namespace
