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

/// One write of a copy: a box and a region.
using BoxRegion = std::pair<BoxAttr, RegionAttr>;

/// The copy as writes (one per box; several when its elements are a union of
/// boxes), or failure with the reason in `why`. Sets `empty` when the copy
/// writes no element.
static FailureOr<SmallVector<BoxRegion>>
reduceCopy(CopyOp copy, CheckpointOp checkpoint, TargetOp target,
           std::string &why, bool &empty) {
  empty = false;
  Value incoming = checkpoint.getIncoming();
  // The source: a strided layout of the checkpoint tensor, or a reshape of
  // one that no strides give (its elements in another shape).
  auto reshape = copy.getSrc().getDefiningOp<ReshapeOp>();
  auto src = reshape ? reshape.getInput().getDefiningOp<AsStridedOp>()
                     : copy.getSrc().getDefiningOp<AsStridedOp>();
  if (!src || src.getInput() != incoming) {
    why = copy.getSrc() == incoming ? std::string()
                                    : lostReason(copy.getSrc());
    if (!why.empty())
      return failure();
    reshape = nullptr;
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
  Strided dst{dest.getOffset(), llvm::to_vector(dest.getShape()),
              llvm::to_vector(dest.getStride())};
  if (layout.numElements() != dest.getNumElements()) {
    // torch broadcasts the source to the destination's shape: an expand,
    // whose repeated elements become one write per repeat.
    std::string expandWhy;
    if (reshape || failed(applyExpand(layout, dst.shape, expandWhy))) {
      why = "broadcasting copy_";
      return failure();
    }
  }
  std::string viewWhy;
  if (reshape) {
    // copy_(reshape(X), D) moves X's elements in row-major order to D's:
    // it is copy_(X, D viewed as X's shape) when D's strides allow that.
    if (dst.shape != layout.shape &&
        failed(applyView(dst, layout.shape, viewWhy))) {
      why = "copy_ with a reshape that is not a view";
      return failure();
    }
  } else if (layout.shape != dst.shape &&
             failed(applyView(layout, dst.shape, viewWhy))) {
    why = "copy_ with a reshape that is not a view";
    return failure();
  }
  SmallVector<ElementDim> dims;
  for (auto [n, s, d] : llvm::zip(dst.shape, layout.stride, dst.stride))
    dims.push_back({n, s, d});
  FailureOr<std::vector<BoxPiece>> pieces =
      computeBoxesAndRegions(ckpt.getShape(), layout.offset, dims, why);
  if (failed(pieces))
    return failure();
  MLIRContext *ctx = copy.getContext();
  SmallVector<BoxRegion> out;
  for (const BoxPiece &p : *pieces) {
    const BoxAndRegion &br = p.boxAndRegion;
    out.push_back({BoxAttr::get(ctx, br.starts, br.stops),
                   RegionAttr::get(ctx, dst.offset + p.dstOffset, br.dstShape,
                                   br.dstStride)});
  }
  return out;
}

/// Erases `copy` and the views that fed it when nothing else uses them: a
/// write carries all the copy said.
static void eraseWithDeadSource(CopyOp copy) {
  Operation *src = copy.getSrc().getDefiningOp();
  copy.erase();
  while (src && isa<AsStridedOp, ReshapeOp>(src) && src->use_empty()) {
    Operation *input = src->getOperand(0).getDefiningOp();
    src->erase();
    src = input;
  }
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
        for (const BoxRegion &w : *reduced)
          WriteOp::create(builder, copy.getLoc(), copy.getTargetAttr(),
                          w.first, w.second);
        eraseWithDeadSource(copy);
        ++numWrites;
      } else if (empty) {
        // It writes nothing, but the name did copy: the copy stays for
        // --loadplan-detect-fallbacks to count (as the seeds count it), which
        // then drops it.
      } else {
        FallbackOp::create(builder, copy.getLoc(), StringRef(why),
                           /*stop=*/false);
        ++numRefused;
      }
    }
  }
}
