//===- ToBoxes.cpp - Reduce copies to boxes and regions ---------*- C++ -*-===//
//
// A copy from a strided layout of the checkpoint tensor into a target is a
// box of the checkpoint tensor and a strided region of the target. Anything
// else (a cast, a broadcast, a step slice, a source without a layout) is not
// a copy of checkpoint bytes: it gets a fallback reason.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"
#include "loadplan/Transforms/BoxAndRegion.h"
#include "loadplan/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir {
namespace loadplan {
#define GEN_PASS_DEF_TOBOXES
#include "loadplan/Transforms/Passes.h.inc"
} // namespace loadplan
} // namespace mlir

using namespace mlir;
using namespace mlir::loadplan;

namespace {
struct ToBoxesPass : public loadplan::impl::ToBoxesBase<ToBoxesPass> {
  using ToBoxesBase::ToBoxesBase;
  void runOnOperation() override;
};
} // namespace

/// Why a value is not a strided layout of the checkpoint tensor: the reason
/// of the op that lost its layout, found by walking up its inputs.
static std::string lostReason(Value value) {
  while (Operation *def = value.getDefiningOp()) {
    if (auto apply = dyn_cast<ApplyOp>(def)) {
      if (apply.getReason())
        return apply.getReason()->str();
      return "applies " + apply.getOp().str() + " to it";
    }
    if (auto convert = dyn_cast<ConvertOp>(def)) {
      std::string to = getDtypeName(
          cast<RankedTensorType>(convert.getType()).getElementType());
      return "casts " +
             getDtypeName(cast<RankedTensorType>(convert.getInput().getType())
                              .getElementType()) +
             " to " + to + " (send it as " + to + " to make it direct)";
    }
    if (def->getNumOperands() == 0)
      break;
    value = def->getOperand(0);
  }
  return "not a view of the checkpoint tensor";
}

/// The copy as a write, or failure with the reason in `why`. Sets `empty`
/// when the copy writes no element.
static FailureOr<std::pair<BoxAttr, RegionAttr>>
reduceCopy(CopyOp copy, CheckpointOp checkpoint, TargetOp target,
           std::string &why, bool &empty) {
  empty = false;
  auto src = copy.getSrc().getDefiningOp<AsStridedOp>();
  if (!src || src.getInput() != checkpoint.getIncoming()) {
    why = copy.getSrc() == checkpoint.getIncoming()
              ? std::string()
              : lostReason(copy.getSrc());
    if (!why.empty())
      return failure();
  }
  RankedTensorType ckpt = checkpoint.getTensorType();
  Type srcType = ckpt.getElementType();
  if (srcType != copy.getDtype()) {
    std::string to = getDtypeName(copy.getDtype());
    why = "casts " + getDtypeName(srcType) + " to " + to +
          " at copy_ (send it as " + to + " to make it direct)";
    return failure();
  }
  if (target.getByteOffset() % getItemSize(srcType)) {
    why = "copies into a destination viewed with another element size";
    return failure();
  }
  LayoutAttr dest = copy.getDest();
  if (dest.getNumElements() == 0) {
    empty = true;
    return failure();
  }
  Strided layout = src ? Strided{src.getLayout().getOffset(),
                                 llvm::to_vector(src.getLayout().getShape()),
                                 llvm::to_vector(src.getLayout().getStride())}
                       : Strided::contiguous(ckpt.getShape());
  if (ArrayRef<int64_t>(layout.shape) != dest.getShape()) {
    if (layout.numElements() != dest.getNumElements()) {
      why = "broadcasting copy_";
      return failure();
    }
    std::string viewWhy;
    if (failed(applyView(layout, dest.getShape(), viewWhy))) {
      why = "copy_ with a reshape that is not a view";
      return failure();
    }
  }
  SmallVector<CopyDim> dims;
  for (auto [n, s, d] :
       llvm::zip(dest.getShape(), layout.stride, dest.getStride()))
    dims.push_back({n, s, d});
  FailureOr<BoxAndRegion> br =
      computeBoxAndRegion(ckpt.getShape(), layout.offset, dims, why);
  if (failed(br))
    return failure();
  MLIRContext *ctx = copy.getContext();
  return std::make_pair(
      BoxAttr::get(ctx, br->starts, br->stops),
      RegionAttr::get(ctx, dest.getOffset(), br->dstShape, br->dstStride));
}

/// Erases `copy` and the view that fed it when nothing else uses it: a write
/// carries all the copy said.
static void eraseWithDeadSource(CopyOp copy) {
  Operation *src = copy.getSrc().getDefiningOp();
  copy.erase();
  if (src && isa<AsStridedOp>(src) && src->use_empty())
    src->erase();
}

void ToBoxesPass::runOnOperation() {
  ModuleOp module = getOperation();
  SymbolTable symbols(module);
  for (auto checkpoint : module.getOps<CheckpointOp>()) {
    for (auto copy : llvm::make_early_inc_range(
             checkpoint.getBlock().getOps<CopyOp>())) {
      auto target = symbols.lookup<TargetOp>(copy.getTarget());
      if (!target) {
        copy.emitOpError() << "names no target";
        return signalPassFailure();
      }
      std::string why;
      bool empty;
      auto reduced = reduceCopy(copy, checkpoint, target, why, empty);
      OpBuilder builder(copy);
      if (succeeded(reduced)) {
        WriteOp::create(builder, copy.getLoc(), copy.getTargetAttr(),
                        reduced->first, reduced->second);
        eraseWithDeadSource(copy);
        ++numWrites;
      } else if (empty) {
        eraseWithDeadSource(copy);
      } else {
        FallbackOp::create(builder, copy.getLoc(), StringRef(why),
                           /*stop=*/false);
        ++numRefused;
      }
    }
  }
}
