//===- OpTable.h - The importer's table of torch ops ------------*- C++ -*-===//
//
// The importer classifies a node first by what its tensor arguments are
// (checkpoint tensors, targets, other data), then by its op. These tables,
// keyed by the op's packet (`aten.slice`), say what it knows of an op by
// name: where a scatter puts its source, and which ops read values or only
// guard shapes. How a view or element copy of a checkpoint tensor becomes
// records is the aten view table's (loadplan/Records/AtenViews.h), which
// capture follows too. (Copies and fills, whose meaning depends on what
// they write into, are the importer's.)
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_LIB_IMPORT_OPTABLE_H
#define LOADPLAN_LIB_IMPORT_OPTABLE_H

#include "TensorMeta.h"

#include "loadplan/Records/AtenViews.h"

#include <torch/csrc/utils/generated_serialization_types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlir::loadplan::torch_export {

/// Whether the op `packet` only checks metadata or guards shapes: no event,
/// no value.
bool isIgnored(std::string_view packet);

/// Whether the op `packet` reads a tensor's values (`item`, `equal`, ...).
bool isValueRead(std::string_view packet);

/// Whether the op `packet` is in place, by torch's naming (`aten.mul_`).
bool isInPlace(std::string_view packet);

/// Whether the op `packet` is a view of one tensor (in the aten view table)
/// whose layout the graph records: of a target, an alias of the target's
/// elements.
bool isView(std::string_view packet);

/// Whether the op `packet` is a scatter: a copy of its base with its source
/// written into one place of it.
bool isScatter(std::string_view packet);

/// Where the scatter `node` puts its source in `base`, with torch's
/// clamping; none for a node that is no scatter, or a place that is no
/// strided layout.
std::optional<Layout> scatterPosition(const schema::Node &node,
                                      const Layout &base);

/// The record ops of `node`, an op `packet` of one checkpoint tensor with
/// metadata `src` and outputs `outs` (AtenViews.h): one per output; none
/// when the node is no view or element copy of the tensor the records hold
/// (it is then an `apply`). Fails for a node whose arguments do not fit.
std::vector<ViewRecord> traceViewRecords(std::string_view packet,
                                         const schema::Node &node,
                                         const Meta &src,
                                         const std::vector<Meta> &outs);

} // namespace mlir::loadplan::torch_export

#endif // LOADPLAN_LIB_IMPORT_OPTABLE_H
