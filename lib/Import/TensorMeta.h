//===- TensorMeta.h - Tensor metadata of an exported program ----*- C++ -*-===//
//
// What the importer knows of a tensor of the graph: its dtype and its
// strided layout in elements, read from the program's tensor metadata with
// every size checked, since the program comes from the archive. Dtypes are
// the plan's (loadplan/plan_format.h, the one dtype table), whose rows give
// their sizes and MLIR element types.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_LIB_IMPORT_TENSORMETA_H
#define LOADPLAN_LIB_IMPORT_TENSORMETA_H

#include "loadplan/plan_format.h"

#include <torch/csrc/utils/generated_serialization_types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::loadplan::torch_export {

namespace schema = torch::_export;

/// `a * b + c`, or an error: the program's sizes come from the archive.
int64_t mulAdd(int64_t a, int64_t b, int64_t c);

/// The plan's dtype of the schema's `dtype`: the one mapping between the
/// two; LOADPLAN_DTYPE_INVALID for a dtype no plan holds.
loadplan_dtype_t planDtype(schema::ScalarType dtype);

/// A strided layout, in elements.
struct Layout {
  int64_t offset = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;

  bool operator==(const Layout &other) const {
    return offset == other.offset && sizes == other.sizes &&
           strides == other.strides;
  }
  int64_t rank() const { return static_cast<int64_t>(sizes.size()); }
  /// The number of elements; fails if it is out of range.
  int64_t numel() const;
};

/// A tensor value's metadata, from the graph's tensor_values.
struct Meta {
  loadplan_dtype_t dtype = LOADPLAN_DTYPE_INVALID;
  Layout layout; // offset: the storage offset

  /// The MLIR element type; empty when the IR has none (as for capture,
  /// which keeps such tensors out of the IR).
  std::string element() const { return loadplan_dtype_mlir_type(dtype); }
  /// Bytes per element; 0 when the IR has no element type for it.
  int64_t itemSize() const {
    return static_cast<int64_t>(loadplan_dtype_size(dtype));
  }
};

/// The metadata of a tensor of the graph; fails for symbolic or negative
/// sizes, strides or offsets, and for elements whose byte offsets are out
/// of range.
Meta toMeta(const schema::TensorMeta &meta);

} // namespace mlir::loadplan::torch_export

#endif // LOADPLAN_LIB_IMPORT_TENSORMETA_H
