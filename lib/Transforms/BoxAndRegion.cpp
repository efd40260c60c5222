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
  size_t copied; // the copied dim it is a part of
  bool operator>(const Part &o) const {
    return std::tie(step, size, dstStride) > std::tie(o.step, o.size, o.dstStride);
  }
};
} // namespace

FailureOr<BoxAndRegion>
loadplan::computeBoxAndRegion(ArrayRef<int64_t> ckptShape, int64_t srcOffset,
                              ArrayRef<ElementDim> dims, std::string &why,
                              std::optional<size_t> *culprit) {
  if (culprit)
    culprit->reset();
  size_t rank = ckptShape.size();
  SmallVector<int64_t> ckptStrides(rank, 1), start(rank, 0);
  for (int64_t j = static_cast<int64_t>(rank) - 2; j >= 0; --j)
    ckptStrides[j] = ckptStrides[j + 1] * ckptShape[j + 1];
  for (size_t j = 0; j < rank; ++j)
    start[j] = ckptShape[j] ? (srcOffset / ckptStrides[j]) % ckptShape[j] : 0;

  SmallVector<SmallVector<Part>> parts(rank);
  for (auto [copied, d] : llvm::enumerate(dims)) {
    int64_t size = d.size, srcStride = d.srcStride, dstStride = d.dstStride;
    if (size == 1)
      continue;
    if (srcStride <= 0) {
      why = "repeats source elements (expand or broadcast)";
      // Each element of it is a box, unless it also writes one element.
      if (culprit && dstStride > 0)
        *culprit = copied;
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
        parts[dim].push_back({step, size, dstStride, copied});
        break;
      }
      // Spans checkpoint dims dim-1 and dim: split off the part in dim.
      int64_t inner = ckptShape[dim] / step;
      if (dim == 0 || ckptShape[dim] % step || inner == 0 || size % inner ||
          start[dim]) {
        why = "source slice is not a box";
        return failure();
      }
      parts[dim].push_back({step, inner, dstStride, copied});
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
        if (culprit)
          *culprit = p.copied;
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
      dimParts.push_back({1, 1, 1, 0});
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
/// Whether computeBoxAndRegion's reason `why` is one that pieces of the copy
/// may not have: about the source's shape, not the destination's.
bool isSplittable(const std::string &why) {
  return why == "source slice is not a box" ||
         why == "source slice has a step or is not a box" ||
         why == "repeats source elements (expand or broadcast)";
}

/// Whether the destination of `dims` provably has no element twice: each
/// dim, from the smallest stride up, steps past all the dims inside it. A
/// copy's pieces are each checked to be boxes, but not against each other.
bool writesEachElementOnce(ArrayRef<ElementDim> dims) {
  SmallVector<ElementDim> live;
  for (const ElementDim &d : dims)
    if (d.size > 1)
      live.push_back(d);
  llvm::sort(live, [](const ElementDim &a, const ElementDim &b) {
    return a.dstStride < b.dstStride;
  });
  int64_t span = 1; // elements the inner dims reach, from the first
  for (const ElementDim &d : live) {
    if (d.dstStride < span)
      return false;
    // Fits: the destination layout's extent fits in 64 bits.
    span += (d.size - 1) * d.dstStride;
  }
  return true;
}

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

  /// Appends the pieces of `dims` split along `k` into its elements.
  LogicalResult splitElements(int64_t srcOffset, int64_t dstOffset,
                              SmallVector<ElementDim> dims, size_t k) {
    ElementDim d = dims[k];
    if (static_cast<size_t>(d.size) > maxPieces - pieces.size())
      return failure();
    size_t mark = pieces.size();
    dims[k].size = 1;
    for (int64_t i = 0; i < d.size; ++i)
      if (failed(split(srcOffset + i * d.srcStride,
                       dstOffset + i * d.dstStride, dims))) {
        pieces.resize(mark);
        return failure();
      }
    return success();
  }

  /// Appends the pieces of the copy of `dims` from `srcOffset` to
  /// `dstOffset`; on failure, `pieces` is as it was.
  LogicalResult split(int64_t srcOffset, int64_t dstOffset,
                      SmallVector<ElementDim> dims) {
    if (++calls > maxCalls)
      return failure();
    std::string why;
    std::optional<size_t> culprit;
    FailureOr<BoxAndRegion> br =
        computeBoxAndRegion(ckptShape, srcOffset, dims, why, &culprit);
    if (succeeded(br)) {
      if (pieces.size() >= maxPieces)
        return failure();
      pieces.push_back({dstOffset, std::move(*br)});
      return success();
    }
    if (!isSplittable(why))
      return failure();
    SmallVector<size_t> live;
    for (size_t k = 0; k < dims.size(); ++k) {
      if (dims[k].size == 0)
        return failure();
      if (dims[k].size > 1)
        live.push_back(k);
    }
    // A step or a repeat: the dim that makes it, one element at a time.
    if (culprit)
      return splitElements(srcOffset, dstOffset, dims, *culprit);
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
    if (live.empty())
      return failure();
    return splitElements(srcOffset, dstOffset, dims, live.back());
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
  if (!isSplittable(why) || !writesEachElementOnce(dims))
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
