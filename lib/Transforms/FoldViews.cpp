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
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

#include <functional>

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
///
/// A reshape that no strides give keeps its input's layout X and its own
/// shape: its elements are X's in row-major order (`reshaped`). Views that
/// keep that order (reshapes, aligned slices and selects) fold into it; a
/// copy from it views the destination as X's shape instead.
struct Known {
  Strided layout;
  bool isClone = false;
  std::optional<int64_t> cloneBase;
  /// The shape of a reshape of `layout`'s elements, and why no strides of
  /// the checkpoint tensor give it (the reason a view of it that the fold
  /// cannot express falls back with).
  std::optional<SmallVector<int64_t>> reshaped;
  std::string reshapeWhy;
};

struct FoldViewsPass : public loadplan::impl::FoldViewsBase<FoldViewsPass> {
  using FoldViewsBase::FoldViewsBase;
  void runOnOperation() override;
  void runOnCheckpoint(CheckpointOp checkpoint);
};

} // namespace

static RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// Narrows X (`x`) so that its row-major elements are those of rows
/// [lo, hi) of dim `dim` of its reshape to `shape`, and shrinks `shape`
/// accordingly; fails when they are not a box of X (a slice not aligned to
/// the dims the reshape merged). Size-1 dims do not change the row-major
/// order, so the dims of both shapes larger than 1 are grouped where their
/// running products meet; dim `dim` must open its group, and the rows are
/// then one contiguous range of the group's X dims.
static LogicalResult sliceReshaped(Strided &x, SmallVector<int64_t> &shape,
                                   int64_t dim, int64_t lo, int64_t hi) {
  if (hi - lo == shape[dim]) {
    return success();
  }
  if (hi <= lo || x.numElements() == 0)
    return failure();
  SmallVector<size_t> xs, ss;
  for (size_t k = 0; k < x.shape.size(); ++k)
    if (x.shape[k] > 1)
      xs.push_back(k);
  for (size_t k = 0; k < shape.size(); ++k)
    if (shape[k] > 1)
      ss.push_back(k);
  size_t i = 0, j = 0;
  while (j < ss.size()) {
    size_t xBegin = i, sBegin = j;
    int64_t px = 1, ps = 1;
    do {
      if (px <= ps) {
        if (i == xs.size())
          return failure();
        px *= x.shape[xs[i++]];
      } else {
        if (j == ss.size())
          return failure();
        ps *= shape[ss[j++]];
      }
    } while (px != ps);
    if (llvm::find(ArrayRef<size_t>(ss).slice(sBegin, j - sBegin),
                   static_cast<size_t>(dim)) == ss.begin() + j)
      continue; // not this group
    if (ss[sBegin] != static_cast<size_t>(dim))
      return failure(); // an inner dim of a merge: rows with gaps
    int64_t inner = 1;
    for (size_t k = sBegin + 1; k < j; ++k)
      inner *= shape[ss[k]];
    // The group's flat range [a, b) as a box of its X dims: the innermost
    // dim t whose blocks both ends are aligned to, within one index of the
    // dims outside it.
    int64_t a = lo * inner, b = hi * inner, block = 1;
    for (size_t t = i; t-- > xBegin;) {
      int64_t n = x.shape[xs[t]];
      if (a % block == 0 && b % block == 0 &&
          a / (block * n) == (b - 1) / (block * n)) {
        // Dims outside t keep one index, t a range, inner dims everything.
        int64_t outer = a / block;
        int64_t first = outer % n;
        x.offset += first * x.stride[xs[t]];
        x.shape[xs[t]] = (b - a) / block;
        outer /= n;
        for (size_t u = t; u-- > xBegin;) {
          int64_t m = x.shape[xs[u]];
          x.offset += (outer % m) * x.stride[xs[u]];
          x.shape[xs[u]] = 1;
          outer /= m;
        }
        shape[dim] = hi - lo;
        return success();
      }
      if (a % (block * n) || b % (block * n))
        return failure(); // an outer dim's block cuts through both ends
      block *= n;
    }
    return failure();
  }
  return failure();
}

/// The layout `op` gives its result when its input is a reshape of strided
/// elements (`in.reshaped`), or failure with the reshape's reason when the
/// fold cannot express it.
static FailureOr<Known> foldReshaped(Operation *op, const Known &in,
                                     std::string &why) {
  Known out = in;
  SmallVector<int64_t> &shape = *out.reshaped;
  ArrayRef<int64_t> resultShape =
      tensorType(op->getResult(0)).getShape();
  // Rows [lo, hi) of `dim` of the reshape, found as a slice of a layout whose
  // only stride is 1 at `dim` finds them, with torch's clamping.
  auto rows = [&](int64_t argDim, auto apply, int64_t &dim, int64_t &lo,
                  int64_t &hi) -> LogicalResult {
    std::string ignored;
    FailureOr<int64_t> d = wrapDim(argDim, shape.size(), ignored);
    if (failed(d) || shape.empty())
      return failure();
    Strided probe{0, shape, SmallVector<int64_t>(shape.size(), 0)};
    probe.stride[*d] = 1;
    if (failed(apply(probe)))
      return failure();
    dim = *d;
    lo = probe.offset;
    hi = lo + (probe.shape.size() == shape.size() ? probe.shape[*d] : 1);
    return success();
  };
  bool ok =
      llvm::TypeSwitch<Operation *, bool>(op)
          .Case([&](SliceOp v) {
            int64_t dim, lo, hi;
            std::string ignored;
            if (failed(rows(
                    v.getDim(),
                    [&](Strided &p) {
                      return applySlice(p, v.getDim(), v.getStart(),
                                        v.getEnd(), v.getStep(), ignored);
                    },
                    dim, lo, hi)))
              return false;
            // A step leaves gaps, unless it keeps at most one row.
            if (v.getStep() != 1 && resultShape[dim] > 1)
              return false;
            hi = lo + resultShape[dim];
            return succeeded(sliceReshaped(out.layout, shape, dim, lo, hi));
          })
          .Case([&](SelectOp v) {
            int64_t dim, lo, hi;
            std::string ignored;
            if (failed(rows(
                    v.getDim(),
                    [&](Strided &p) {
                      return applySelect(p, v.getDim(), v.getIndex(),
                                         ignored);
                    },
                    dim, lo, hi)))
              return false;
            if (failed(sliceReshaped(out.layout, shape, dim, lo, hi)))
              return false;
            shape.erase(shape.begin() + dim);
            return true;
          })
          .Case<ViewShapeOp, ReshapeOp, FlattenOp, UnflattenOp, UnsqueezeOp,
                SqueezeOp>([&](Operation *) {
            // Reshapes of a reshape: the same row-major elements.
            shape.assign(resultShape.begin(), resultShape.end());
            return true;
          })
          .Case<AliasOp>([&](Operation *) { return true; })
          .Case([&](CloneOp) {
            out.isClone = true;
            out.cloneBase.reset();
            return true;
          })
          .Default([&](Operation *) { return false; });
  if (!ok) {
    why = in.reshapeWhy;
    return failure();
  }
  // Where the narrowed elements are a strided view after all, they fold as
  // one.
  Strided plain = out.layout;
  std::string ignored;
  if (succeeded(applyView(plain, shape, ignored))) {
    out.layout = std::move(plain);
    out.reshaped.reset();
    out.reshapeWhy.clear();
  }
  return out;
}

/// The layout `op` gives its result when its input has `in`, or failure with
/// the reason when no strided layout of the checkpoint tensor is.
static FailureOr<Known> foldOne(Operation *op, const Known &in,
                                std::string &why) {
  if (in.reshaped)
    return foldReshaped(op, in, why);
  Known out;
  out.layout = in.layout;
  Strided &s = out.layout;
  ArrayRef<int64_t> resultShape = tensorType(op->getResult(0)).getShape();
  auto reshape = [&]() -> LogicalResult {
    bool notViewable = false;
    if (succeeded(applyView(s, resultShape, why, &notViewable)))
      return success();
    if (!notViewable)
      return failure();
    // No strides give it: keep the elements of `in` in the new shape.
    s = in.layout;
    out.reshaped.emplace(resultShape.begin(), resultShape.end());
    out.reshapeWhy =
        in.isClone ? "reshapes a copy of a non-contiguous view into a "
                     "layout no strides of the checkpoint tensor give"
                   : "reshapes a non-contiguous view (a copy that is not "
                     "a strided view of the checkpoint tensor)";
    return success();
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

//===----------------------------------------------------------------------===//
// Views of a concatenation
//===----------------------------------------------------------------------===//

/// Where a view of a value puts the result's elements, as a probe of its
/// shape with stride 1 in `dim`: the view's first index in that dim.
static FailureOr<int64_t> firstIndex(ArrayRef<int64_t> shape, int64_t dim,
                                     function_ref<LogicalResult(Strided &)> view) {
  Strided probe{0, SmallVector<int64_t>(shape),
                SmallVector<int64_t>(shape.size(), 0)};
  probe.stride[dim] = 1;
  if (failed(view(probe)))
    return failure();
  return probe.offset;
}

/// `a / b` rounded up, for a >= 0 and b > 0, without overflow.
static int64_t ceilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/// `op`, a view of `cat`, as a concatenation of views of `cat`'s inputs
/// (or one view of one input) built before `op`: the new view ops go to
/// `created`, in order. Fails when the view mixes the inputs (an expand, an
/// as_strided, a reshape across the concatenated dim).
static FailureOr<Value> distribute(OpBuilder &b, Operation *op, CatOp cat,
                                   SmallVector<Operation *> &created) {
  Location loc = op->getLoc();
  auto resultType = tensorType(op->getResult(0));
  ArrayRef<int64_t> inShape = tensorType(cat.getResult()).getShape();
  ArrayRef<int64_t> outShape = resultType.getShape();
  int64_t rank = inShape.size(), c = cat.getDim();
  std::string ignored;
  SmallVector<Value> parts;
  int64_t newDim = c;
  // Each input with its range [lo, hi) of the concatenated dim.
  SmallVector<std::tuple<Value, int64_t, int64_t>> inputs;
  int64_t lo = 0;
  for (Value x : cat.getInputs()) {
    int64_t n = tensorType(x).getDimSize(c);
    inputs.push_back({x, lo, lo + n});
    lo += n;
  }
  // The type of a view of `x` that changes only `x`'s size in one dim.
  auto withSize = [](Value x, ArrayRef<int64_t> shape, int64_t dim,
                     int64_t n) {
    SmallVector<int64_t> s(shape);
    s[dim] = n;
    return tensorType(x).clone(s);
  };
  auto add = [&](Operation *view) {
    created.push_back(view);
    parts.push_back(view->getResult(0));
  };
  bool ok =
      llvm::TypeSwitch<Operation *, bool>(op)
          .Case([&](SliceOp v) {
            FailureOr<int64_t> k = wrapDim(v.getDim(), rank, ignored);
            if (failed(k))
              return false;
            if (*k != c) {
              for (auto [x, xlo, xhi] : inputs)
                add(SliceOp::create(
                    b, loc,
                    withSize(x, tensorType(x).getShape(), *k, outShape[*k]),
                    x, *k, v.getStart(), v.getEnd(), v.getStep()));
              return true;
            }
            FailureOr<int64_t> first =
                firstIndex(inShape, c, [&](Strided &p) {
                  return applySlice(p, v.getDim(), v.getStart(), v.getEnd(),
                                    v.getStep(), ignored);
                });
            if (failed(first))
              return false;
            int64_t count = outShape[c], step = v.getStep();
            for (auto [x, xlo, xhi] : inputs) {
              // The result's indices j whose element first + j * step lies
              // in [xlo, xhi).
              int64_t jlo = xlo <= *first ? 0 : ceilDiv(xlo - *first, step);
              int64_t jhi =
                  xhi <= *first ? 0 : std::min(count, ceilDiv(xhi - *first, step));
              if (jlo >= jhi)
                continue;
              int64_t start = *first + jlo * step - xlo;
              int64_t end = *first + (jhi - 1) * step - xlo + 1;
              add(SliceOp::create(
                  b, loc, withSize(x, tensorType(x).getShape(), c, jhi - jlo),
                  x, c, start, end, step));
            }
            if (parts.empty()) {
              Value x = std::get<0>(inputs.front());
              add(SliceOp::create(b, loc,
                                  withSize(x, tensorType(x).getShape(), c, 0),
                                  x, c, 0, 0, 1));
            }
            return true;
          })
          .Case([&](SelectOp v) {
            FailureOr<int64_t> k = wrapDim(v.getDim(), rank, ignored);
            if (failed(k))
              return false;
            if (*k != c) {
              for (auto [x, xlo, xhi] : inputs) {
                SmallVector<int64_t> s(tensorType(x).getShape());
                s.erase(s.begin() + *k);
                add(SelectOp::create(b, loc, tensorType(x).clone(s), x, *k,
                                     v.getIndex()));
              }
              newDim = c - (*k < c);
              return true;
            }
            FailureOr<int64_t> index = firstIndex(inShape, c, [&](Strided &p) {
              return applySelect(p, v.getDim(), v.getIndex(), ignored);
            });
            if (failed(index))
              return false;
            for (auto [x, xlo, xhi] : inputs)
              if (xlo <= *index && *index < xhi) {
                add(SelectOp::create(b, loc, resultType, x, c, *index - xlo));
                return true;
              }
            return false;
          })
          .Case([&](TransposeOp v) {
            FailureOr<int64_t> d0 = wrapDim(v.getDim0(), rank, ignored);
            FailureOr<int64_t> d1 = wrapDim(v.getDim1(), rank, ignored);
            if (failed(d0) || failed(d1))
              return false;
            newDim = c == *d0 ? *d1 : c == *d1 ? *d0 : c;
            for (auto [x, xlo, xhi] : inputs) {
              SmallVector<int64_t> s(tensorType(x).getShape());
              std::swap(s[*d0], s[*d1]);
              add(TransposeOp::create(b, loc, tensorType(x).clone(s), x, *d0,
                                      *d1));
            }
            return true;
          })
          .Case([&](PermuteOp v) {
            SmallVector<int64_t> dims;
            for (int64_t d : v.getDims()) {
              FailureOr<int64_t> w = wrapDim(d, rank, ignored);
              if (failed(w))
                return false;
              dims.push_back(*w);
            }
            auto at = llvm::find(dims, c);
            if (at == dims.end())
              return false;
            newDim = at - dims.begin();
            for (auto [x, xlo, xhi] : inputs) {
              ArrayRef<int64_t> xs = tensorType(x).getShape();
              SmallVector<int64_t> s;
              for (int64_t d : dims)
                s.push_back(xs[d]);
              add(PermuteOp::create(b, loc, tensorType(x).clone(s), x,
                                    v.getDims()));
            }
            return true;
          })
          .Case([&](UnsqueezeOp v) {
            FailureOr<int64_t> d = wrapDim(v.getDim(), rank + 1, ignored);
            if (failed(d))
              return false;
            newDim = c + (*d <= c);
            for (auto [x, xlo, xhi] : inputs) {
              SmallVector<int64_t> s(tensorType(x).getShape());
              s.insert(s.begin() + *d, 1);
              add(UnsqueezeOp::create(b, loc, tensorType(x).clone(s), x, *d));
            }
            return true;
          })
          .Case([&](SqueezeOp v) {
            // The dims that go (size 1 in the concatenation), named
            // explicitly: an input may have size 1 in others.
            SmallVector<int64_t> removed;
            auto consider = [&](int64_t d) {
              if (inShape[d] == 1 && !llvm::is_contained(removed, d))
                removed.push_back(d);
            };
            if (v.getDims().empty()) {
              for (int64_t d = 0; d < rank; ++d)
                consider(d);
            } else {
              for (int64_t d : v.getDims()) {
                FailureOr<int64_t> w = wrapDim(d, rank, ignored);
                if (failed(w))
                  return false;
                consider(*w);
              }
            }
            llvm::sort(removed);
            if (llvm::is_contained(removed, c))
              return false; // a concatenation of one element along c
            newDim = c - llvm::count_if(removed, [&](int64_t d) { return d < c; });
            for (auto [x, xlo, xhi] : inputs) {
              SmallVector<int64_t> s;
              for (auto [d, n] : llvm::enumerate(tensorType(x).getShape()))
                if (!llvm::is_contained(removed, static_cast<int64_t>(d)))
                  s.push_back(n);
              add(SqueezeOp::create(b, loc, tensorType(x).clone(s), x,
                                    removed));
            }
            return true;
          })
          .Case<ViewShapeOp, ReshapeOp, FlattenOp, UnflattenOp>(
              [&](Operation *) {
                // Row-major order keeps each input's elements together
                // under every index of the dims before c: a reshape that
                // keeps those dims' product as a prefix, and cuts no input's
                // block of rows, is a concatenation of the inputs' reshapes.
                int64_t prefix = 1, inner = 1;
                for (int64_t d = 0; d < c; ++d)
                  prefix *= inShape[d];
                for (int64_t d = c + 1; d < rank; ++d)
                  inner *= inShape[d];
                int64_t k = -1, p = 1;
                for (int64_t d = 0; d < static_cast<int64_t>(outShape.size());
                     ++d) {
                  if (p == prefix)
                    k = d;
                  if (p > prefix)
                    break;
                  p *= outShape[d];
                }
                if (k < 0 || prefix == 0 || inner == 0)
                  return false;
                int64_t suffix = 1;
                for (size_t d = k + 1; d < outShape.size(); ++d)
                  suffix *= outShape[d];
                for (auto [x, xlo, xhi] : inputs)
                  if (((xhi - xlo) * inner) % suffix)
                    return false;
                newDim = k;
                for (auto [x, xlo, xhi] : inputs) {
                  SmallVector<int64_t> s(outShape);
                  s[k] = (xhi - xlo) * inner / suffix;
                  add(ReshapeOp::create(b, loc, tensorType(x).clone(s), x));
                }
                return true;
              })
          .Case<AliasOp, CloneOp>([&](Operation *) {
            // The same elements: the concatenation itself.
            parts.push_back(cat.getResult());
            newDim = -1;
            return true;
          })
          .Default([&](Operation *) { return false; });
  if (!ok) {
    for (Operation *view : llvm::reverse(created))
      view->erase();
    created.clear();
    return failure();
  }
  if (newDim < 0)
    return parts.front();
  // Even of one part: folding the new views replaces the cat's operands.
  auto joined = CatOp::create(b, loc, resultType, parts, newDim);
  return joined.getResult();
}

void FoldViewsPass::runOnOperation() {
  forEachCheckpoint(getOperation(),
                    [&](CheckpointOp c) { runOnCheckpoint(c); });
}

void FoldViewsPass::runOnCheckpoint(CheckpointOp checkpoint) {
  // Most names copy their incoming tensor as it is: nothing to set up.
  if (llvm::none_of(checkpoint.getBlock(),
                    [](Operation &op) { return isViewOp(&op); }))
    return;
  Value incoming = checkpoint.getIncoming();
  llvm::DenseMap<Value, Known> known;
  known[incoming] = Known{
      Strided::contiguous(checkpoint.getTensorType().getShape()), false, {}};

  SmallVector<Operation *> views;
  // Concatenations whose views moved onto their inputs; erased when dead.
  SmallVector<Operation *> cats;
  // Replaces `op` by an apply whose result has no layout: a copy from it
  // falls back with `why`.
  auto unfoldable = [&](Operation &op, StringRef why) {
    OpBuilder builder(&op);
    auto apply = ApplyOp::create(
        builder, op.getLoc(), op.getResultTypes(),
        builder.getStringAttr(torchOpName(&op)), op.getOperands(),
        /*names=*/nullptr, builder.getStringAttr(why));
    op.replaceAllUsesWith(apply.getResults());
    op.erase();
    ++numUnfoldable;
  };
  std::function<void(Operation &)> foldView = [&](Operation &op) {
    if (auto cat = op.getOperand(0).getDefiningOp<CatOp>()) {
      // A view of a concatenation: a concatenation of views of its inputs,
      // each folded in turn.
      OpBuilder builder(&op);
      SmallVector<Operation *> created;
      FailureOr<Value> joined = distribute(builder, &op, cat, created);
      if (succeeded(joined)) {
        for (Operation *view : created)
          foldView(*view);
        Value result = *joined;
        auto newCat = result.getDefiningOp<CatOp>();
        if (newCat && newCat != cat && newCat.getInputs().size() == 1) {
          result = newCat.getInputs().front();
          newCat.erase();
        } else if (newCat && newCat != cat) {
          cats.push_back(newCat);
        }
        cats.push_back(cat);
        op.getResult(0).replaceAllUsesWith(result);
        op.erase();
        return;
      }
      // The view mixes the inputs: the name falls back as it did before
      // concatenations were seen.
      unfoldable(op, "applies aten.cat to it");
      return;
    }
    auto it = known.find(op.getOperand(0));
    if (it == known.end())
      return; // a view of a value without a layout stays as it is
    OpBuilder builder(&op);
    std::string why;
    FailureOr<Known> folded = foldOne(&op, it->second, why);
    if (failed(folded)) {
      // Not a strided layout: the result is a value without one, and a copy
      // from it falls back with this reason.
      unfoldable(op, why);
      return;
    }
    Strided &l = folded->layout;
    auto layout = LayoutAttr::get(&getContext(), l.offset, l.shape, l.stride);
    auto resultType = cast<RankedTensorType>(op.getResult(0).getType());
    Value result;
    if (folded->reshaped) {
      // A reshape of a strided layout that no strides give.
      auto strided = AsStridedOp::create(
          builder, op.getLoc(), resultType.clone(l.shape), incoming, layout);
      auto reshaped = ReshapeOp::create(builder, op.getLoc(), resultType,
                                        strided.getResult());
      views.push_back(strided);
      views.push_back(reshaped);
      result = reshaped.getResult();
    } else {
      auto strided = AsStridedOp::create(builder, op.getLoc(), resultType,
                                         incoming, layout);
      views.push_back(strided);
      result = strided.getResult();
    }
    known[result] = std::move(*folded);
    op.getResult(0).replaceAllUsesWith(result);
    op.erase();
    ++numFolded;
  };
  for (Operation &op : llvm::make_early_inc_range(checkpoint.getBlock()))
    if (isViewOp(&op))
      foldView(op);
  // Concatenations their views replaced, then intermediate layouts of a
  // chain, are dead now.
  llvm::SetVector<Operation *> deadCats(cats.begin(), cats.end());
  for (bool erased = true; erased;) {
    erased = false;
    SmallVector<Operation *> pending = deadCats.takeVector();
    for (Operation *op : llvm::reverse(pending))
      if (op->use_empty()) {
        op->erase();
        erased = true;
      } else {
        deadCats.insert(op);
      }
  }
  for (Operation *op : llvm::reverse(views))
    if (op->use_empty())
      op->erase();
}
