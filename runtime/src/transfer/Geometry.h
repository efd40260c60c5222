//===- Geometry.h - Boxes, intersections and sub-regions ---------*- C++ -*-===//
//
// The arithmetic of a transfer: a piece is the intersection of what a
// receiver needs and what a sender holds; it travels packed (row-major over
// its own shape) and lands in the regions the receiver's plan writes. Here:
// intersections, contiguity tests and the restriction of a plan region to a
// sub-box of its box.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_TRANSFER_GEOMETRY_H
#define LOADPLAN_RUNTIME_TRANSFER_GEOMETRY_H

#include "loadplan/format/Box.h"

#include <cstdint>
#include <string>
#include <vector>

namespace loadplan::transfer {

/// [lo[k], hi[k]) per dim of a checkpoint tensor: the plan's box type.
using Box = loadplan_format::Box;

/// The box [0, shape[k]) per dim.
Box wholeBox(const std::vector<int64_t> &shape);

/// The intersection of `a` and `b`; false when it is empty.
bool intersect(const Box &a, const Box &b, Box &out);

bool contains(const Box &outer, const Box &inner);

/// Whether `box` is non-empty in every dim and inside [0, shape[k]).
bool boxInside(const Box &box, const std::vector<int64_t> &shape);

/// The element offset of `inner`'s first element in `outer` packed
/// row-major.
int64_t offsetIn(const Box &inner, const Box &outer);

/// Whether `inner`, in its own row-major order, is one contiguous run of
/// `outer` packed row-major: dims before some dim j have extent 1 and dims
/// after j span all of `outer`.
bool contiguousIn(const Box &inner, const Box &outer);

/// A strided region in elements: where a box lands (plan_format.h).
struct Region {
  int64_t offset = 0;
  std::vector<int64_t> shape, stride;
};

/// Whether `r` visits its elements in row-major order of its shape at
/// consecutive addresses (dims of size 1 do not count).
bool isContiguousRun(const Region &r);

/// A sub-box of a piece and the region it lands in (of target `target`,
/// which restrictRegion leaves for its caller to set).
struct Part {
  Box box;
  Region region;
  uint32_t target = 0;
  /// The write's conversion (plan_format.h's convert_to): a part that
  /// converts is staged and scattered, never received in place.
  uint32_t convertTo = 0;
  /// The write's transform (plan_format.h): the part's region receives its
  /// box's atoms (transform.h), so it too is staged and scattered.
  uint32_t transform = 0;
};

/// Restricts `region` (where box `box` lands, its shape the box's shape
/// with dims split, as a checked plan guarantees) to `sub`, a sub-box of
/// `box`. A sub-range of a split dim is a box of the split dims only when
/// it is aligned, so `sub` may come out as several parts (at most two per
/// split level and dim, times over the dims); appends them to `out`.
void restrictRegion(const Box &box, const Region &region, const Box &sub,
                    std::vector<Part> &out);

/// Cuts `box` into boxes of at most `maxElements` elements (at least 1):
/// slabs along its first dim of extent > 1, recursing inward when one
/// slab is still too large. Each result is contiguous in `box`. With a
/// `granule` (one extent per dim), cuts fall only on its multiples from
/// `box`'s first element, so a result may exceed `maxElements` when one
/// granule does.
void splitBox(const Box &box, int64_t maxElements, std::vector<Box> &out,
              const std::vector<int64_t> &granule = {});

/// "[(0, 4), (8, 16)]".
std::string boxText(const Box &box);

} // namespace loadplan::transfer

#endif // LOADPLAN_RUNTIME_TRANSFER_GEOMETRY_H
