//===- BoxAndRegion.h - Reduce a strided copy to a box ----------*- C++ -*-===//
//
// The integer core of --loadplan-to-boxes, kept free of IR so that property
// tests can check it against an element-by-element evaluation.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_TRANSFORMS_BOXANDREGION_H
#define LOADPLAN_TRANSFORMS_BOXANDREGION_H

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir {
namespace loadplan {

/// One dim of a copied tensor, all in elements: its size, its stride in the
/// checkpoint tensor and its stride in the destination. (The runtime's
/// ByteDim is the same dim with its strides in bytes.)
struct ElementDim {
  int64_t size;
  int64_t srcStride;
  int64_t dstStride;
};

/// A box of the checkpoint tensor and the shape and strides of its elements,
/// in row-major box order, in the destination.
struct BoxAndRegion {
  SmallVector<int64_t> starts, stops;
  SmallVector<int64_t> dstShape, dstStride;
};

/// Reduces a copy of the elements at `srcOffset` + `dims` of the contiguous
/// checkpoint tensor of shape `ckptShape` to a box and destination strides.
/// Each copied dim is assigned to the checkpoint dim its source stride steps
/// through, split where it spans several (a flatten); the parts assigned to
/// one checkpoint dim must tile a contiguous range of it. Fails with the
/// fallback reason in `why` when the copy is not a copy of a box.
///
/// `P.copy_(W.t())` with W [4, 6] and P [6, 4] contiguous has dims
/// [(6, 1, 4), (4, 6, 1)]: the box is ((0, 4), (0, 6)) and the destination
/// shape (4, 6), stride (1, 4).
///
/// Where the copy fails because of one copied dim (a step, two dims stepping
/// through the same elements, or a source stride of 0), `culprit` (when
/// given) is set to that dim's index in `dims`: one element of it at a time
/// may be a box.
FailureOr<BoxAndRegion>
computeBoxAndRegion(ArrayRef<int64_t> ckptShape, int64_t srcOffset,
                    ArrayRef<ElementDim> dims, std::string &why,
                    std::optional<size_t> *culprit = nullptr);

/// One write of a copy that is several boxes: its destination offset
/// relative to the copy's, and its box and region.
struct BoxPiece {
  int64_t dstOffset;
  BoxAndRegion boxAndRegion;
};

/// Like computeBoxAndRegion, but a copy whose elements are a union of boxes
/// becomes several pieces, each a box, recursively:
/// - a step, or a repeat (an expand: source stride 0), splits the copied dim
///   that makes it into its elements (`w[::2]` of w [4, 6]: rows 0 and 2;
///   `w.expand(3, 4)` of w [4]: w three times);
/// - a copied dim whose run crosses a checkpoint dim off its boundaries
///   (`p.copy_(w.reshape(-1)[2:8])` with w [4, 4]: the end of row 0 and all
///   of row 1) is cut there;
/// - otherwise the outermost copied dim is split into its elements, down to
///   single elements.
/// Fails with computeBoxAndRegion's reason when a destination stride is 0
/// (one destination element written twice), or when there would be more than
/// `maxPieces`.
FailureOr<std::vector<BoxPiece>>
computeBoxesAndRegions(ArrayRef<int64_t> ckptShape, int64_t srcOffset,
                       ArrayRef<ElementDim> dims, std::string &why,
                       size_t maxPieces = 1024);

} // namespace loadplan
} // namespace mlir

#endif // LOADPLAN_TRANSFORMS_BOXANDREGION_H
