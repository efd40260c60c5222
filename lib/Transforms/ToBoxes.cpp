//===- ToBoxes.cpp - Reduce copies to boxes and regions ---------*- C++ -*-===//
//
// A copy from a strided layout of the checkpoint tensor into a target is a
// box of the checkpoint tensor and a strided region of the target; a copy
// of such a layout converted (copy_ across dtypes, .to(dtype) then copy_)
// is a write that converts, where the executors do that conversion; a
// copy through a transform (Marlin's repack) of a box in row-major order
// is a transforming write.
// Anything else (arithmetic, a broadcast, a step slice, a source without a
// layout) is not a copy of checkpoint elements: it gets a fallback reason.
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

static Type elementType(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

/// Why a value is not a strided layout of the checkpoint tensor: the reason
/// of the first op that is neither a view nor a conversion the executors
/// do, found by walking up its inputs.
static std::string lostReason(Value value) {
  ConvertOp converted;
  while (Operation *def = value.getDefiningOp()) {
    if (auto apply = dyn_cast<ApplyOp>(def)) {
      if (apply.getReason())
        return apply.getReason()->str();
      return "applies " + apply.getOp().str() + " to it";
    }
    if (auto convert = dyn_cast<ConvertOp>(def)) {
      Type from = elementType(convert.getInput()), to = elementType(convert);
      if (!isConvertible(from, to))
        return castReason(from, to, "");
      converted = convert;
    }
    if (def->getNumOperands() == 0)
      break;
    value = def->getOperand(0);
  }
  if (converted) {
    Type to = elementType(converted);
    return "views it after casting " +
           getDtypeName(elementType(converted.getInput())) + " to " +
           getDtypeName(to) + " (cast after the views, or send it as " +
           getDtypeName(to) + ", to make it direct)";
  }
  return "not a view of the checkpoint tensor";
}

static RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// One write of a copy: a box and a region.
using BoxRegion = std::pair<BoxAttr, RegionAttr>;

static LogicalResult reduceInto(Value srcValue, Strided dst,
                                CheckpointOp checkpoint, std::string &why,
                                SmallVector<BoxRegion> &out);

/// The layout of an `as_strided` of the checkpoint tensor.
static Strided stridedOf(AsStridedOp op) {
  LayoutAttr layout = op.getLayout();
  return Strided{layout.getOffset(), llvm::to_vector(layout.getShape()),
                 llvm::to_vector(layout.getStride())};
}

/// Checks that `copy`'s destination is whole elements of the `written`
/// dtype from its target's first byte (else the reason is in `why`) and
/// has an element (else `empty` is set).
static LogicalResult checkDestination(CopyOp copy, TargetOp target,
                                      Type written, std::string &why,
                                      bool &empty) {
  if (target.getByteOffset() % getItemSize(written)) {
    why = "copies into a destination viewed with another element size";
    return failure();
  }
  if (copy.getDest().getNumElements() == 0) {
    empty = true;
    return failure();
  }
  return success();
}

/// The dtype a copy writes when its elements are those of a strided layout
/// converted (by ConvertOps on the way, then by copy_ itself): the
/// checkpoint's own (a plain copy) or one a write converts into; or failure
/// with the reason in `why`. `value` is set to the copied value past the
/// conversions.
static FailureOr<Type> writtenType(CopyOp copy, Type ckpt, Value &value,
                                   std::string &why) {
  SmallVector<ConvertOp> converts;
  value = copy.getSrc();
  while (auto convert = value.getDefiningOp<ConvertOp>()) {
    converts.push_back(convert);
    value = convert.getInput();
  }
  SmallVector<Type> chain{elementType(value)};
  for (ConvertOp convert : llvm::reverse(converts))
    chain.push_back(elementType(convert));
  bool atCopy = copy.getDtype() != chain.back();
  if (atCopy)
    chain.push_back(copy.getDtype());
  if (chain.front() != ckpt) // not a trace of the checkpoint tensor
    return why = lostReason(value), failure();
  for (size_t i = 0; i + 1 < chain.size(); ++i)
    if (!isConvertible(chain[i], chain[i + 1])) {
      why = castReason(chain[i], chain[i + 1],
                       atCopy && i + 2 == chain.size() ? " at copy_" : "");
      return failure();
    }
  if (!convertsAsOne(chain)) {
    std::string steps;
    for (Type t : chain)
      steps += (steps.empty() ? "" : " to ") + getDtypeName(t);
    std::string to = getDtypeName(chain.back());
    why = "casts " + steps + ", which gives other bytes than one cast for "
          "some values (send it as " + to + " to make it direct)";
    return failure();
  }
  return chain.back();
}

/// The copy as writes (one per box; several when its elements are a union of
/// boxes), or failure with the reason in `why`. Sets `empty` when the copy
/// writes no element, and `written` to the dtype it writes.
static FailureOr<SmallVector<BoxRegion>>
reduceCopy(CopyOp copy, CheckpointOp checkpoint, TargetOp target,
           std::string &why, bool &empty, Type &written) {
  empty = false;
  Value incoming = checkpoint.getIncoming();
  RankedTensorType ckpt = checkpoint.getTensorType();
  Type srcType = ckpt.getElementType();
  Value copied;
  FailureOr<Type> dtype = writtenType(copy, srcType, copied, why);
  if (failed(dtype))
    return failure();
  written = *dtype;
  // A source without a layout gives its reason before any other.
  Value src = copied;
  while (auto cat = src.getDefiningOp<CatOp>())
    src = cat.getInputs().front();
  auto reshape = src.getDefiningOp<ReshapeOp>();
  auto strided = reshape ? reshape.getInput().getDefiningOp<AsStridedOp>()
                         : src.getDefiningOp<AsStridedOp>();
  if ((!strided || strided.getInput() != incoming) && src != incoming) {
    why = lostReason(src);
    return failure();
  }
  if (failed(checkDestination(copy, target, written, why, empty)))
    return failure();
  LayoutAttr dest = copy.getDest();
  Strided dst{dest.getOffset(), llvm::to_vector(dest.getShape()),
              llvm::to_vector(dest.getStride())};
  SmallVector<BoxRegion> out;
  if (failed(reduceInto(copied, std::move(dst), checkpoint, why, out)))
    return failure();
  return out;
}

/// Appends the writes of a copy of `srcValue` into `dst` to `out`, or fails
/// with the reason in `why`.
static LogicalResult reduceInto(Value srcValue, Strided dst,
                                CheckpointOp checkpoint, std::string &why,
                                SmallVector<BoxRegion> &out) {
  Value incoming = checkpoint.getIncoming();
  RankedTensorType ckpt = checkpoint.getTensorType();
  if (auto cat = srcValue.getDefiningOp<CatOp>()) {
    // Each input into its part of the destination, viewed in the
    // concatenation's shape.
    ArrayRef<int64_t> shape = tensorType(cat.getResult()).getShape();
    std::string viewWhy;
    if (numElements(shape) != dst.numElements()) {
      why = "broadcasting copy_";
      return failure();
    }
    if (dst.shape != shape && failed(applyView(dst, shape, viewWhy))) {
      why = "copy_ with a reshape that is not a view";
      return failure();
    }
    int64_t c = cat.getDim();
    for (Value input : cat.getInputs()) {
      int64_t n = tensorType(input).getDimSize(c);
      if (n == 0)
        continue;
      Strided part = dst;
      part.shape[c] = n;
      if (failed(reduceInto(input, part, checkpoint, why, out)))
        return failure();
      dst.offset += n * dst.stride[c];
    }
    return success();
  }
  // The source: a strided layout of the checkpoint tensor, or a reshape of
  // one that no strides give (its elements in another shape).
  auto reshape = srcValue.getDefiningOp<ReshapeOp>();
  auto src = reshape ? reshape.getInput().getDefiningOp<AsStridedOp>()
                     : srcValue.getDefiningOp<AsStridedOp>();
  if (!src || src.getInput() != incoming) {
    why = srcValue == incoming ? std::string() : lostReason(srcValue);
    if (!why.empty())
      return failure();
    src = nullptr;
    reshape = nullptr;
  }
  Strided layout =
      src ? stridedOf(src) : Strided::contiguous(ckpt.getShape());
  if (layout.numElements() != dst.numElements()) {
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
  MLIRContext *ctx = checkpoint.getContext();
  for (const BoxPiece &p : *pieces) {
    const BoxAndRegion &br = p.boxAndRegion;
    out.push_back({BoxAttr::get(ctx, br.starts, br.stops),
                   RegionAttr::get(ctx, dst.offset + p.dstOffset, br.dstShape,
                                   br.dstStride)});
  }
  return success();
}

/// The reason a transforming copy of anything but a box of the checkpoint
/// tensor in row-major order falls back with.
static std::string transformReason(StringRef transform) {
  return ("copies through transform " + transform +
          " a view that is not a row-major box of a 2-d checkpoint tensor")
      .str();
}

/// A copy through a transform as its write, or failure with the reason in
/// `why` (`empty` set when it writes no element). Its source must be a box
/// of the 2-d checkpoint tensor whose rows are the source's dim 0 and
/// columns its dim 1, as the transform cuts them into atoms: no
/// transpose, broadcast, step or reshape. Its destination already splits
/// the transform's output and is the region as it is.
static FailureOr<BoxRegion> reduceTransformingCopy(CopyOp copy,
                                                   CheckpointOp checkpoint,
                                                   TargetOp target,
                                                   std::string &why,
                                                   bool &empty) {
  empty = false;
  Value incoming = checkpoint.getIncoming();
  RankedTensorType ckpt = checkpoint.getTensorType();
  Value copied;
  FailureOr<Type> written =
      writtenType(copy, ckpt.getElementType(), copied, why);
  if (failed(written))
    return failure();
  auto strided = copied.getDefiningOp<AsStridedOp>();
  if (copied != incoming && (!strided || strided.getInput() != incoming)) {
    // A kept reshape or a cat holds checkpoint elements, but in no box's
    // order; anything else has its own reason.
    why = isa_and_nonnull<ReshapeOp, CatOp>(copied.getDefiningOp())
              ? transformReason(*copy.getTransform())
              : lostReason(copied);
    return failure();
  }
  if (failed(checkDestination(copy, target, *written, why, empty)))
    return failure();
  LayoutAttr dest = copy.getDest();
  // The verifier keeps the source 2-d, of the checkpoint's element type:
  // [rows, cols] from (row, col), rows `cols` elements apart.
  Strided src =
      strided ? stridedOf(strided) : Strided::contiguous(ckpt.getShape());
  int64_t cols = ckpt.getRank() == 2 ? ckpt.getDimSize(1) : 0;
  int64_t row = cols ? src.offset / cols : 0;
  int64_t col = cols ? src.offset % cols : 0;
  if (!cols || (src.shape[0] > 1 && src.stride[0] != cols) ||
      (src.shape[1] > 1 && src.stride[1] != 1) ||
      row + src.shape[0] > ckpt.getDimSize(0) || col + src.shape[1] > cols) {
    why = transformReason(*copy.getTransform());
    return failure();
  }
  for (auto [n, stride] : llvm::zip(dest.getShape(), dest.getStride()))
    if (n > 1 && stride == 0) {
      why = "writes one destination element twice";
      return failure();
    }
  MLIRContext *ctx = copy.getContext();
  return BoxRegion{BoxAttr::get(ctx, {row, col},
                                {row + src.shape[0], col + src.shape[1]}),
                   RegionAttr::get(ctx, dest.getOffset(), dest.getShape(),
                                   dest.getStride())};
}

/// Erases `copy` and the views that fed it when nothing else uses them: a
/// write carries all the copy said.
static void eraseWithDeadSource(CopyOp copy) {
  SmallVector<Operation *> dead;
  if (Operation *src = copy.getSrc().getDefiningOp())
    dead.push_back(src);
  copy.erase();
  while (!dead.empty()) {
    Operation *op = dead.pop_back_val();
    if (!isa<AsStridedOp, ReshapeOp, CatOp, ConvertOp>(op) || !op->use_empty())
      continue;
    for (Value input : op->getOperands())
      if (Operation *def = input.getDefiningOp())
        if (!llvm::is_contained(dead, def))
          dead.push_back(def);
    op->erase();
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
      Type written = checkpoint.getTensorType().getElementType();
      FailureOr<SmallVector<BoxRegion>> reduced;
      if (copy.getTransform()) {
        FailureOr<BoxRegion> one =
            reduceTransformingCopy(copy, checkpoint, target, why, empty);
        if (succeeded(one)) {
          reduced = SmallVector<BoxRegion>{*one};
          ++numTransforming;
        }
      } else {
        reduced = reduceCopy(copy, checkpoint, target, why, empty, written);
      }
      OpBuilder builder(copy);
      if (succeeded(reduced)) {
        TypeAttr convertTo;
        if (written != checkpoint.getTensorType().getElementType()) {
          convertTo = TypeAttr::get(written);
          ++numConverting;
        }
        for (const BoxRegion &w : *reduced)
          WriteOp::create(builder, copy.getLoc(), copy.getTargetAttr(),
                          w.first, w.second, convertTo,
                          copy.getTransformAttr());
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
