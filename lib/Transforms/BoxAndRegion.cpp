//===- BoxAndRegion.cpp - Reduce a strided copy to a box --------*- C++ -*-===//

#include "loadplan/Transforms/BoxAndRegion.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <tuple>

using namespace mlir;
using namespace mlir::loadplan;

namespace {
/// A part of a copied dim assigned to one checkpoint dim.
struct Part {
  int64_t step; // checkpoint elements of that dim per step
  int64_t size;
  int64_t dstStride;
  bool operator>(const Part &o) const {
    return std::tie(step, size, dstStride) > std::tie(o.step, o.size, o.dstStride);
  }
};
} // namespace

FailureOr<BoxAndRegion>
loadplan::computeBoxAndRegion(ArrayRef<int64_t> ckptShape, int64_t srcOffset,
                              ArrayRef<ElementDim> dims, std::string &why) {
  size_t rank = ckptShape.size();
  SmallVector<int64_t> ckptStrides(rank, 1), start(rank, 0);
  for (int64_t j = static_cast<int64_t>(rank) - 2; j >= 0; --j)
    ckptStrides[j] = ckptStrides[j + 1] * ckptShape[j + 1];
  for (size_t j = 0; j < rank; ++j)
    start[j] = ckptShape[j] ? (srcOffset / ckptStrides[j]) % ckptShape[j] : 0;

  SmallVector<SmallVector<Part>> parts(rank);
  for (ElementDim d : dims) {
    int64_t size = d.size, srcStride = d.srcStride, dstStride = d.dstStride;
    if (size == 1)
      continue;
    if (srcStride <= 0) {
      why = "repeats source elements (expand or broadcast)";
      return failure();
    }
    if (dstStride <= 0) {
      why = "writes one destination element twice";
      return failure();
    }
    while (true) {
      // The outermost checkpoint dim whose elements this stride steps over.
      size_t dim = 0;
      while (dim < rank && ckptStrides[dim] > srcStride)
        ++dim;
      if (dim == rank || srcStride % ckptStrides[dim]) {
        why = "source slice is not a box";
        return failure();
      }
      int64_t step = srcStride / ckptStrides[dim];
      if ((size - 1) * step < ckptShape[dim]) {
        parts[dim].push_back({step, size, dstStride});
        break;
      }
      // Spans checkpoint dims dim-1 and dim: split off the part in dim.
      int64_t inner = ckptShape[dim] / step;
      if (dim == 0 || ckptShape[dim] % step || inner == 0 || size % inner ||
          start[dim]) {
        why = "source slice is not a box";
        return failure();
      }
      parts[dim].push_back({step, inner, dstStride});
      size /= inner;
      srcStride *= inner;
      dstStride *= inner;
    }
  }

  BoxAndRegion out;
  for (size_t dim = 0; dim < rank; ++dim) {
    SmallVector<Part> &dimParts = parts[dim];
    std::sort(dimParts.begin(), dimParts.end(), std::greater<Part>());
    int64_t extent = 1;
    for (const Part &p : llvm::reverse(dimParts)) {
      if (p.step != extent) {
        why = "source slice has a step or is not a box";
        return failure();
      }
      extent *= p.size;
    }
    if (start[dim] + extent > ckptShape[dim]) {
      why = "source slice is not a box";
      return failure();
    }
    out.starts.push_back(start[dim]);
    out.stops.push_back(start[dim] + extent);
    if (dimParts.empty())
      dimParts.push_back({1, 1, 1});
    // (size, stride), merged where one part continues the next.
    SmallVector<std::pair<int64_t, int64_t>> merged;
    for (const Part &p : dimParts) {
      if (!merged.empty() && merged.back().second == p.dstStride * p.size)
        merged.back() = {merged.back().first * p.size, p.dstStride};
      else
        merged.push_back({p.size, p.dstStride});
    }
    for (auto [n, s] : merged) {
      out.dstShape.push_back(n);
      out.dstStride.push_back(s);
    }
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Several boxes
//===----------------------------------------------------------------------===//

namespace {
/// The recursive split of one copy into boxes.
struct Splitter {
  ArrayRef<int64_t> ckptShape;
  SmallVector<int64_t> ckptStrides;
  size_t maxPieces;
  std::vector<BoxPiece> pieces;
  /// Attempts so far, bounded so that a copy that is no union of boxes
  /// costs little.
  size_t calls = 0, maxCalls = 0;

  /// Where to cut the run of `d` (from `srcOffset`) so that the first part
  /// ends on a boundary of the checkpoint dims it crosses; 0 if no cut helps.
  /// Only a run that steps one element of a checkpoint dim at a time (a
  /// flatten) has such boundaries: its elements are the consecutive indices
  /// [lo, hi) of the checkpoint dims up to that one.
  int64_t runCut(int64_t srcOffset, ElementDim d) const {
    size_t rank = ckptShape.size(), dim = 0;
    while (dim < rank && ckptStrides[dim] > d.srcStride)
      ++dim;
    if (dim == rank || ckptStrides[dim] != d.srcStride)
      return 0;
    int64_t lo = srcOffset / ckptStrides[dim], hi = lo + d.size;
    // The innermost level whose blocks the run starts or ends inside of; all
    // inner levels are aligned, so a part within one block is a box.
    int64_t block = 1;
    for (size_t level = dim; level >= 1; --level) {
      block *= ckptShape[level];
      if (lo % block) {
        int64_t cut = (lo / block + 1) * block;
        return cut < hi ? cut - lo : 0;
      }
      if (hi % block) {
        int64_t cut = hi / block * block;
        return cut > lo ? cut - lo : 0;
      }
    }
    return 0;
  }

  /// Appends the pieces of the copy of `dims` from `srcOffset` to
  /// `dstOffset`; on failure, `pieces` is as it was.
  LogicalResult split(int64_t srcOffset, int64_t dstOffset,
                      SmallVector<ElementDim> dims) {
    if (++calls > maxCalls)
      return failure();
    std::string why;
    FailureOr<BoxAndRegion> br =
        computeBoxAndRegion(ckptShape, srcOffset, dims, why);
    if (succeeded(br)) {
      if (pieces.size() >= maxPieces)
        return failure();
      pieces.push_back({dstOffset, std::move(*br)});
      return success();
    }
    if (why != "source slice is not a box" &&
        why != "source slice has a step or is not a box")
      return failure();
    SmallVector<size_t> live;
    for (size_t k = 0; k < dims.size(); ++k) {
      if (dims[k].size == 0)
        return failure();
      if (dims[k].size > 1)
        live.push_back(k);
    }
    llvm::sort(live, [&](size_t a, size_t b) {
      return dims[a].srcStride < dims[b].srcStride;
    });
    size_t mark = pieces.size();
    // Cut a run at a checkpoint boundary it crosses, innermost first.
    for (size_t k : live) {
      int64_t cut = runCut(srcOffset, dims[k]);
      if (!cut)
        continue;
      SmallVector<ElementDim> first = dims, second = dims;
      first[k].size = cut;
      second[k].size = dims[k].size - cut;
      if (succeeded(split(srcOffset, dstOffset, first)) &&
          succeeded(split(srcOffset + cut * dims[k].srcStride,
                          dstOffset + cut * dims[k].dstStride, second)))
        return success();
      pieces.resize(mark);
      break;
    }
    // Else split the outermost dim into its elements.
    if (live.size() < 2)
      return failure();
    size_t outer = live.back();
    ElementDim d = dims[outer];
    if (static_cast<size_t>(d.size) > maxPieces - pieces.size())
      return failure();
    dims[outer].size = 1;
    for (int64_t i = 0; i < d.size; ++i)
      if (failed(split(srcOffset + i * d.srcStride,
                       dstOffset + i * d.dstStride, dims))) {
        pieces.resize(mark);
        return failure();
      }
    return success();
  }
};
} // namespace

FailureOr<std::vector<BoxPiece>>
loadplan::computeBoxesAndRegions(ArrayRef<int64_t> ckptShape, int64_t srcOffset,
                                 ArrayRef<ElementDim> dims, std::string &why,
                                 size_t maxPieces) {
  FailureOr<BoxAndRegion> br =
      computeBoxAndRegion(ckptShape, srcOffset, dims, why);
  if (succeeded(br)) {
    std::vector<BoxPiece> one;
    one.push_back({0, std::move(*br)});
    return one;
  }
  // A step is not several boxes (the seeds fall back); a source that is not
  // a box may be.
  if (why != "source slice is not a box")
    return failure();
  Splitter splitter{ckptShape, {}, maxPieces, {}};
  splitter.maxCalls = 4 * maxPieces;
  splitter.ckptStrides.assign(ckptShape.size(), 1);
  for (int64_t j = static_cast<int64_t>(ckptShape.size()) - 2; j >= 0; --j)
    splitter.ckptStrides[j] = splitter.ckptStrides[j + 1] * ckptShape[j + 1];
  if (failed(splitter.split(srcOffset, 0, llvm::to_vector(dims))))
    return failure(); // `why` keeps the reason of the whole copy
  return std::move(splitter.pieces);
}
