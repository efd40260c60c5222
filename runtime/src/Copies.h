//===- Copies.h - The copies of a bound plan ---------------------*- C++ -*-===//
//
// At bind time every write of every direct entry becomes one strided copy
// described in bytes: where it reads in its source (a full checkpoint tensor
// or a packed box), where it writes, and its dims with contiguous ones
// merged. Both executors run these; applying an update only picks the
// copies of the names in the batch and fills in source pointers.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_COPIES_H
#define LOADPLAN_RUNTIME_COPIES_H

#include "Plan.h"

#include <cstdint>
#include <vector>

namespace loadplan {

/// What an update sends per name.
enum class SourceForm { Tensor, Box };

/// One dim of a copy: `size` elements, strides in bytes in the source and
/// the destination (the compiler's ElementDim counts them in elements).
struct ByteDim {
  int64_t size;
  int64_t srcStride;
  int64_t dstStride;
};

/// A copy of `rows` runs of `run` contiguous bytes: row i (row-major over
/// the dims) reads at srcOffset + sum(i[k] * srcStride[k]) in its source and
/// writes at dst + sum(i[k] * dstStride[k]). A converting copy (`convertTo`
/// set) counts `run` in destination bytes: a row is run / itemSize elements,
/// read srcItemSize bytes apart and converted (loadplan/convert.h).
struct Copy {
  uint32_t entry;
  uint32_t box;      // global box index (Plan::firstBox[entry] + box)
  int64_t srcOffset; // bytes from the source's first byte
  uint8_t *dst;      // first destination byte
  int64_t run;       // contiguous bytes per row
  int64_t rows;      // product of the dims' sizes
  uint32_t firstDim; // into Copies::dims, outermost first
  uint32_t numDims;
  uint32_t itemSize; // of the destination's elements
  uint32_t srcItemSize;
  /// LOADPLAN_DTYPE_INVALID for a byte copy; else the dtypes converted.
  uint32_t convertFrom = LOADPLAN_DTYPE_INVALID;
  uint32_t convertTo = LOADPLAN_DTYPE_INVALID;
  /// LOADPLAN_TRANSFORM_NONE for a copy of elements; else the transform
  /// applied (loadplan/transform.h). A transforming copy writes one word per
  /// row (`run` is itemSize): row i is word i of the transform's output, and
  /// its dims, in that order, place it (their srcStride is 0). It reads its
  /// box from srcOffset, rows srcRowStride bytes apart and columns
  /// srcColStride, with atomRows atoms down the rows.
  uint32_t transform = LOADPLAN_TRANSFORM_NONE;
  int64_t srcRowStride = 0;
  int64_t srcColStride = 0;
  int64_t atomRows = 0;

  /// Destination bytes.
  int64_t bytes() const { return run * rows; }
  bool converts() const { return convertTo != LOADPLAN_DTYPE_INVALID; }
  bool transforms() const { return transform != LOADPLAN_TRANSFORM_NONE; }
  /// Destination bytes a piece of this copy holds a multiple of: a
  /// transform's atom, a converted element, else one byte.
  int64_t granule() const;
};

struct Copies {
  std::vector<Copy> copies;
  std::vector<ByteDim> dims;
  /// The copies of entry e are [entryBegin[e], entryBegin[e + 1]).
  std::vector<uint32_t> entryBegin;

  const ByteDim *dimsOf(const Copy &c) const {
    return dims.data() + c.firstDim;
  }
};

/// The copies of every direct entry of `plan` for updates of form `form`,
/// writing into storages that start at `storageBases`. Copies of no bytes
/// are left out.
Copies buildCopies(const Plan &plan, SourceForm form,
                   const std::vector<uint8_t *> &storageBases);

/// Merges `dims` (in place) into the fewest dims that copy the same bytes:
/// drops dims of size 1, orders by destination stride (outermost first) and
/// merges a dim into the next where they are contiguous in both source and
/// destination. Returns the contiguous run in destination bytes peeled off
/// the innermost dim (`itemSize` when there is none), or 0 when some dim has
/// size 0. Elements take `itemSize` bytes in the destination and
/// `srcItemSize` (default: the same) in the source.
int64_t mergeDims(std::vector<ByteDim> &dims, int64_t itemSize,
                  int64_t srcItemSize = 0);

} // namespace loadplan

#endif // LOADPLAN_RUNTIME_COPIES_H
