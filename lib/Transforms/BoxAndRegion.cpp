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
                              ArrayRef<CopyDim> dims, std::string &why) {
  size_t rank = ckptShape.size();
  SmallVector<int64_t> ckptStrides(rank, 1), start(rank, 0);
  for (int64_t j = static_cast<int64_t>(rank) - 2; j >= 0; --j)
    ckptStrides[j] = ckptStrides[j + 1] * ckptShape[j + 1];
  for (size_t j = 0; j < rank; ++j)
    start[j] = ckptShape[j] ? (srcOffset / ckptStrides[j]) % ckptShape[j] : 0;

  SmallVector<SmallVector<Part>> parts(rank);
  for (CopyDim d : dims) {
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
