//===- MergeWrites.cpp - Merge writes that continue one another -*- C++ -*-===//
//
// A loader's per-expert or per-row loop writes one box after another into
// one target; when each continues the last along one box dim, with the same
// destination stride, the loop is one write.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/MathExtras.h"

namespace mlir {
namespace loadplan {
#define GEN_PASS_DEF_MERGEWRITES
#include "loadplan/Transforms/Passes.h.inc"
} // namespace loadplan
} // namespace mlir

using namespace mlir;
using namespace mlir::loadplan;

namespace {

/// A write as plain integers.
struct PlainWrite {
  FlatSymbolRefAttr target;
  TypeAttr dtype; // null: a copy of the checkpoint tensor's bytes
  SmallVector<int64_t> starts, stops;
  int64_t offset;
  SmallVector<int64_t> shape, stride;
  Location loc;
};

struct MergeWritesPass
    : public loadplan::impl::MergeWritesBase<MergeWritesPass> {
  using MergeWritesBase::MergeWritesBase;
  void runOnOperation() override;
  void runOnCheckpoint(CheckpointOp checkpoint);
};

} // namespace

/// `a` and `b` as one write if `b` continues `a` along exactly one box dim,
/// into the same target, with an equal destination stride there, writing
/// the same dtype (regions count elements of it).
static std::optional<PlainWrite> mergePair(const PlainWrite &a,
                                           const PlainWrite &b) {
  size_t rank = a.starts.size();
  if (a.target != b.target || a.dtype != b.dtype || a.shape.size() != rank ||
      b.shape.size() != rank || b.starts.size() != rank)
    return std::nullopt; // another target, or a split dim
  int64_t k = -1;
  for (size_t j = 0; j < rank; ++j) {
    if (a.starts[j] == b.starts[j] && a.stops[j] == b.stops[j])
      continue;
    if (k >= 0)
      return std::nullopt;
    k = j;
  }
  if (k < 0 || a.stops[k] != b.starts[k])
    return std::nullopt;
  for (size_t j = 0; j < rank; ++j)
    if (static_cast<int64_t>(j) != k &&
        (a.shape[j] != b.shape[j] ||
         (a.shape[j] > 1 && a.stride[j] != b.stride[j])))
      return std::nullopt;
  int64_t na = a.shape[k], nb = b.shape[k];
  int64_t delta = b.offset - a.offset;
  int64_t strideA = na > 1 ? a.stride[k] : delta;
  int64_t strideB = nb > 1 ? b.stride[k] : strideA;
  // Offsets are within a storage, so delta fits; strideA * na need not.
  int64_t aEnd;
  if (strideA != strideB || strideA <= 0 ||
      llvm::MulOverflow(strideA, na, aEnd) || delta != aEnd)
    return std::nullopt;
  PlainWrite out = a;
  out.stops[k] = b.stops[k];
  out.shape[k] = na + nb;
  out.stride[k] = strideA;
  return out;
}

void MergeWritesPass::runOnOperation() {
  forEachCheckpoint(getOperation(),
                    [&](CheckpointOp c) { runOnCheckpoint(c); });
}

void MergeWritesPass::runOnCheckpoint(CheckpointOp checkpoint) {
  // A transforming write's region holds atoms, not the box's elements:
  // it is never merged with another.
  SmallVector<WriteOp> writes = llvm::to_vector(llvm::make_filter_range(
      checkpoint.getBlock().getOps<WriteOp>(),
      [](WriteOp w) { return !w.getTransform(); }));
  if (writes.size() < 2)
    return;
  std::vector<PlainWrite> out;
  for (WriteOp w : writes) {
    PlainWrite p{w.getTargetAttr(),
                 w.getDtypeAttr(),
                 llvm::to_vector(w.getBox().getStarts()),
                 llvm::to_vector(w.getBox().getStops()),
                 w.getRegion().getOffset(),
                 llvm::to_vector(w.getRegion().getShape()),
                 llvm::to_vector(w.getRegion().getStride()),
                 w.getLoc()};
    size_t i = 0;
    while (i < out.size()) {
      std::optional<PlainWrite> merged = mergePair(out[i], p);
      if (!merged)
        merged = mergePair(p, out[i]);
      if (!merged) {
        ++i;
        continue;
      }
      out.erase(out.begin() + i);
      p = std::move(*merged);
      i = 0; // the result may continue another write
    }
    out.push_back(std::move(p));
  }
  if (out.size() == writes.size())
    return;
  numMerged += writes.size() - out.size();
  std::stable_sort(out.begin(), out.end(),
                   [](const PlainWrite &a, const PlainWrite &b) {
                     if (a.target != b.target)
                       return a.target.getValue() < b.target.getValue();
                     return a.offset < b.offset;
                   });
  OpBuilder builder(writes.front());
  MLIRContext *ctx = &getContext();
  for (const PlainWrite &p : out)
    WriteOp::create(builder, p.loc, p.target,
                    BoxAttr::get(ctx, p.starts, p.stops),
                    RegionAttr::get(ctx, p.offset, p.shape, p.stride),
                    p.dtype, StringAttr());
  for (WriteOp w : writes)
    w.erase();
}
