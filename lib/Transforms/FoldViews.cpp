//===- FoldViews.cpp - Fold view chains into layouts ------------*- C++ -*-===//
//
// Every view of an incoming tensor is a strided layout of the contiguous
// checkpoint tensor, unless a reshape would copy. This pass computes that
// layout for each view and rewrites the view as one loadplan.as_strided of the
// incoming tensor, so later passes never walk view chains.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"
#include "loadplan/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

namespace mlir {
namespace loadplan {
#define GEN_PASS_DEF_FOLDVIEWS
#include "loadplan/Transforms/Passes.h.inc"
} // namespace loadplan
} // namespace mlir

using namespace mlir;
using namespace mlir::loadplan;

namespace {

/// What fold-views knows of a value: its layout in the checkpoint tensor's
/// storage, and for a clone, where its own storage starts in the checkpoint
/// tensor when that storage is a contiguous run of it (so as_strided of the
/// clone is still a layout of the checkpoint tensor).
struct Known {
  Strided layout;
  bool isClone = false;
  std::optional<int64_t> cloneBase;
};

struct FoldViewsPass : public loadplan::impl::FoldViewsBase<FoldViewsPass> {
  using FoldViewsBase::FoldViewsBase;
  void runOnOperation() override;
};

} // namespace

static RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// The layout `op` gives its result when its input has `in`, or failure with
/// the reason when no strided layout of the checkpoint tensor is.
static FailureOr<Known> foldOne(Operation *op, const Known &in,
                                std::string &why) {
  Known out;
  out.layout = in.layout;
  Strided &s = out.layout;
  ArrayRef<int64_t> resultShape = tensorType(op->getResult(0)).getShape();
  auto reshape = [&]() -> LogicalResult {
    bool notViewable = false;
    if (succeeded(applyView(s, resultShape, why, &notViewable)))
      return success();
    if (notViewable)
      why = in.isClone ? "reshapes a copy of a non-contiguous view into a "
                         "layout no strides of the checkpoint tensor give"
                       : "reshapes a non-contiguous view (a copy that is not "
                         "a strided view of the checkpoint tensor)";
    return failure();
  };
  LogicalResult result =
      llvm::TypeSwitch<Operation *, LogicalResult>(op)
          .Case([&](SliceOp v) {
            return applySlice(s, v.getDim(), v.getStart(), v.getEnd(),
                              v.getStep(), why);
          })
          .Case([&](SelectOp v) {
            return applySelect(s, v.getDim(), v.getIndex(), why);
          })
          .Case([&](TransposeOp v) {
            return applyTranspose(s, v.getDim0(), v.getDim1(), why);
          })
          .Case([&](PermuteOp v) { return applyPermute(s, v.getDims(), why); })
          .Case([&](ExpandOp) { return applyExpand(s, resultShape, why); })
          .Case([&](UnsqueezeOp v) {
            return applyUnsqueeze(s, v.getDim(), why);
          })
          .Case([&](SqueezeOp v) { return applySqueeze(s, v.getDims(), why); })
          .Case<ViewShapeOp, ReshapeOp, FlattenOp, UnflattenOp>(
              [&](Operation *) { return reshape(); })
          .Case([&](AsStridedOp v) -> LogicalResult {
            LayoutAttr l = v.getLayout();
            int64_t base = 0;
            if (in.isClone) {
              if (!in.cloneBase) {
                why = "applies as_strided to a copy of a non-contiguous view";
                return failure();
              }
              base = *in.cloneBase;
            }
            // torch refuses an as_strided past its input's storage (the
            // checkpoint tensor); so does the fold, before offsets overflow.
            int64_t numel = v->getParentOfType<CheckpointOp>()
                                .getTensorType()
                                .getNumElements();
            int64_t offset, end;
            if (llvm::AddOverflow(base, l.getOffset(), offset) ||
                (l.getNumElements() > 0 &&
                 (llvm::AddOverflow(offset, l.getExtent(), end) ||
                  end > numel))) {
              why = "applies as_strided past the end of the checkpoint tensor";
              return failure();
            }
            s.offset = offset;
            s.shape.assign(l.getShape().begin(), l.getShape().end());
            s.stride.assign(l.getStride().begin(), l.getStride().end());
            return success();
          })
          .Case<AliasOp>([&](Operation *) { return success(); })
          .Case([&](CloneOp) {
            // The clone holds the same elements; its own storage is
            // contiguous, a run of the checkpoint tensor only if `in` is.
            out.isClone = true;
            out.cloneBase.reset();
            if (in.layout.isContiguous())
              out.cloneBase = in.layout.offset;
            return success();
          })
          .Default([&](Operation *) {
            why = "not a view";
            return failure();
          });
  if (failed(result))
    return failure();
  // Views keep the clone's storage; only clone itself starts a new one.
  if (!isa<CloneOp>(op)) {
    out.isClone = in.isClone;
    out.cloneBase = in.cloneBase;
  }
  return out;
}

static bool isViewOp(Operation *op) {
  return isa<SliceOp, SelectOp, ViewShapeOp, ReshapeOp, TransposeOp, PermuteOp,
             ExpandOp, UnsqueezeOp, SqueezeOp, FlattenOp, UnflattenOp,
             AsStridedOp, AliasOp, CloneOp>(op);
}

static StringRef torchOpName(Operation *op) {
  return llvm::TypeSwitch<Operation *, StringRef>(op)
      .Case<ViewShapeOp>([](auto) { return "aten.view"; })
      .Case<ReshapeOp>([](auto) { return "aten.reshape"; })
      .Case<FlattenOp>([](auto) { return "aten.flatten"; })
      .Case<UnflattenOp>([](auto) { return "aten.unflatten"; })
      .Case<AsStridedOp>([](auto) { return "aten.as_strided"; })
      .Default([](Operation *op) { return op->getName().getStringRef(); });
}

void FoldViewsPass::runOnOperation() {
  CheckpointOp checkpoint = getOperation();
  Value incoming = checkpoint.getIncoming();
  llvm::DenseMap<Value, Known> known;
  known[incoming] = Known{
      Strided::contiguous(checkpoint.getTensorType().getShape()), false, {}};

  SmallVector<Operation *> views;
  for (Operation &op : llvm::make_early_inc_range(checkpoint.getBlock())) {
    if (!isViewOp(&op))
      continue;
    auto it = known.find(op.getOperand(0));
    if (it == known.end())
      continue; // a view of a value without a layout stays as it is
    OpBuilder builder(&op);
    std::string why;
    FailureOr<Known> folded = foldOne(&op, it->second, why);
    if (failed(folded)) {
      // Not a strided layout: the result is a value without one, and a copy
      // from it falls back with this reason.
      auto apply = ApplyOp::create(
          builder, op.getLoc(), op.getResultTypes(),
          builder.getStringAttr(torchOpName(&op)), op.getOperands(),
          /*names=*/nullptr, builder.getStringAttr(why));
      op.replaceAllUsesWith(apply.getResults());
      op.erase();
      ++numUnfoldable;
      continue;
    }
    Strided &l = folded->layout;
    auto layout = LayoutAttr::get(&getContext(), l.offset, l.shape, l.stride);
    auto strided = AsStridedOp::create(builder, op.getLoc(),
                                       op.getResult(0).getType(), incoming,
                                       layout);
    known[strided.getResult()] = *folded;
    op.getResult(0).replaceAllUsesWith(strided.getResult());
    op.erase();
    views.push_back(strided);
    ++numFolded;
  }
  // Intermediate layouts of a chain are dead now.
  for (Operation *op : llvm::reverse(views))
    if (op->use_empty())
      op->erase();
}
