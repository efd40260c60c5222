//===- Geometry.h - Strided layouts and torch view semantics ----*- C++ -*-===//
//
// Integer geometry shared by the verifiers and the passes: strided layouts,
// torch's shape and stride rules for each view op, and dtype sizes and names.
// No MLIR state beyond types.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_DIALECT_LOADPLAN_IR_GEOMETRY_H
#define LOADPLAN_DIALECT_LOADPLAN_IR_GEOMETRY_H

#include "mlir/IR/Types.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <string>

namespace mlir {
namespace loadplan {

/// A strided layout: element `i` is at `offset + sum(i[k] * stride[k])`.
struct Strided {
  int64_t offset = 0;
  SmallVector<int64_t> shape;
  SmallVector<int64_t> stride;

  /// The contiguous (row-major) layout of `shape` at offset 0.
  static Strided contiguous(ArrayRef<int64_t> shape);
  int64_t numElements() const;
  /// Whether the layout is the contiguous layout of its shape at its offset.
  bool isContiguous() const;
};

/// Row-major strides of `shape`.
SmallVector<int64_t> contiguousStrides(ArrayRef<int64_t> shape);
/// Product of `shape` (1 for a 0-d shape).
int64_t numElements(ArrayRef<int64_t> shape);

/// Whether index arithmetic on `shape` cannot overflow int64_t: the product
/// of its sizes, with sizes of 0 counted as 1 as contiguous strides count
/// them, fits. Verifiers reject other shapes so that the rest need not check.
bool fitsInt64(ArrayRef<int64_t> shape);
/// One past the largest element index the layout of `shape` and `stride`
/// (non-negative) reaches from its start, 0 when it has no element, or
/// std::nullopt when that overflows int64_t.
std::optional<int64_t> checkedExtent(ArrayRef<int64_t> shape,
                                     ArrayRef<int64_t> stride);

/// torch's dim wrapping: `dim` in [-rank, rank) (a 0-d tensor has rank 1 for
/// this purpose). Fails with a message in `why`.
FailureOr<int64_t> wrapDim(int64_t dim, int64_t rank, std::string &why);

// torch view rules. Each applies a view op to `s` in place, or fails with a
// message in `why` saying what torch would reject.
LogicalResult applySlice(Strided &s, int64_t dim, int64_t start, int64_t end,
                         int64_t step, std::string &why);
LogicalResult applySelect(Strided &s, int64_t dim, int64_t index,
                          std::string &why);
LogicalResult applyTranspose(Strided &s, int64_t dim0, int64_t dim1,
                             std::string &why);
LogicalResult applyPermute(Strided &s, ArrayRef<int64_t> dims,
                           std::string &why);
LogicalResult applyExpand(Strided &s, ArrayRef<int64_t> shape,
                          std::string &why);
LogicalResult applyUnsqueeze(Strided &s, int64_t dim, std::string &why);
LogicalResult applySqueeze(Strided &s, ArrayRef<int64_t> dims,
                           std::string &why);
/// The shape flatten gives, without changing `s`.
FailureOr<SmallVector<int64_t>> flattenShape(ArrayRef<int64_t> shape,
                                             int64_t startDim, int64_t endDim,
                                             std::string &why);
/// Whether `to` is `from` with dim `dim` split into several dims.
LogicalResult checkUnflatten(ArrayRef<int64_t> from, ArrayRef<int64_t> to,
                             int64_t dim, std::string &why);
/// torch's view: the strides that give `s`'s elements in `shape` without a
/// copy. Fails when the element counts differ, or (with `notViewable` set)
/// when no strides do.
LogicalResult applyView(Strided &s, ArrayRef<int64_t> shape, std::string &why,
                        bool *notViewable = nullptr);

/// Bytes per element of `type`, or 0 when it has no byte size.
int64_t getItemSize(Type type);
/// torch's name of a dtype (`bfloat16`, `float8_e4m3fn`, ...), or the MLIR
/// spelling when torch has none.
std::string getDtypeName(Type type);

/// Whether a write may convert `from` elements into `to` ones: both among
/// bf16, f16, f32, f8E4M3FN and f8E5M2, and different
/// (loadplan/convert.h).
bool isConvertible(Type from, Type to);
/// Whether converting `chain[0]` elements into each later type in turn
/// gives, for every element, the bytes one conversion from chain[0] into
/// chain.back() gives (a plain copy when they are the same type). Each step
/// must be convertible. Checked on every bit pattern of an 8- or 16-bit
/// first type; from f32, only a single conversion does.
bool convertsAsOne(ArrayRef<Type> chain);
/// The fallback reason of a cast from `from` to `to` no write does: "casts
/// A to B<where> (send it as B to make it direct)".
std::string castReason(Type from, Type to, StringRef where);

} // namespace loadplan
} // namespace mlir

#endif // LOADPLAN_DIALECT_LOADPLAN_IR_GEOMETRY_H
