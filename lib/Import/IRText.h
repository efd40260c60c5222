//===- IRText.h - Spelling loadplan IR text ---------------------*- C++ -*-===//
//
// The importer writes loadplan IR as text, which the MLIR side parses and
// verifies like any input. These spell its pieces: string literals, integer
// lists, layout attributes and tensor types.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_LIB_IMPORT_IRTEXT_H
#define LOADPLAN_LIB_IMPORT_IRTEXT_H

#include "TensorMeta.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::loadplan::torch_export {

/// `text` as an MLIR string literal: quoted, with quotes, backslashes and
/// non-printable bytes escaped.
std::string irString(const std::string &text);

/// `[1, 2, 3]`.
std::string irInts(const std::vector<int64_t> &values);

/// `<offset = 0, shape = [4, 6], stride = [6, 1]>`.
std::string irLayout(const Layout &layout);

/// `tensor<4x6xbf16>` of `sizes` and the MLIR element type `element`.
std::string irTensorType(const std::vector<int64_t> &sizes,
                         const std::string &element);

} // namespace mlir::loadplan::torch_export

#endif // LOADPLAN_LIB_IMPORT_IRTEXT_H
