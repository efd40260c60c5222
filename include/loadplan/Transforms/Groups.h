//===- Groups.h - Checkpoints that stand for several names ------*- C++ -*-===//
//
// A loadplan.checkpoint with members stands for several names whose
// loaders did the same into other bytes (see the op's description). The
// passes reduce such a block once; what is per name (arrival order, the
// bytes written, the plan's entries) goes through the names listed here.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_TRANSFORMS_GROUPS_H
#define LOADPLAN_TRANSFORMS_GROUPS_H

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"

namespace mlir {
namespace loadplan {

/// The names of a module's checkpoints.
struct CheckpointNames {
  /// One name: name `index` of `checkpoints[checkpoint]` (0 is the op's own
  /// name; see CheckpointOp::getNameAt).
  struct Name {
    unsigned checkpoint;
    unsigned index;
  };
  /// The checkpoint ops in module order.
  SmallVector<CheckpointOp> checkpoints;
  /// Every name in arrival order.
  SmallVector<Name> names;
  /// Whether any checkpoint has members.
  bool hasMembers = false;

  CheckpointOp op(Name n) const { return checkpoints[n.checkpoint]; }
  StringRef name(Name n) const { return op(n).getNameAt(n.index); }
};

/// Lists `module`'s names in arrival order: members at their positions,
/// the checkpoints' own names in the others, in module order. Emits an
/// error and fails when two names claim a position or one lies past the
/// last name.
FailureOr<CheckpointNames> collectCheckpointNames(ModuleOp module);

/// Makes every member of a checkpoint with members a checkpoint of its own
/// (the block, its copies and writes moved by the member's shift), and
/// puts the checkpoints in arrival order; returns the names of the module
/// it leaves. Fails as collectCheckpointNames.
FailureOr<CheckpointNames> expandCheckpointGroups(ModuleOp module);

} // namespace loadplan
} // namespace mlir

#endif // LOADPLAN_TRANSFORMS_GROUPS_H
