//===- Nodes.h - Reading a node of an exported graph ------------*- C++ -*-===//
//
// What a node of the graph says, as the importer reads it: the names of its
// op, its int arguments (static ones only) and the names of its outputs.
// The values its tensor arguments name are the importer's.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_LIB_IMPORT_NODES_H
#define LOADPLAN_LIB_IMPORT_NODES_H

#include <torch/csrc/utils/generated_serialization_types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir::loadplan::torch_export {

namespace schema = torch::_export;

/// `aten.slice.Tensor` of `torch.ops.aten.slice.Tensor`, as capture names
/// ops (the default overload without its suffix).
std::string opName(const std::string &target);

/// `aten.slice` of `torch.ops.aten.slice.Tensor`: the op's packet, which the
/// op table is keyed by; the target itself when it is not an op overload.
std::string opPacket(const std::string &target);

/// `dim` (negative: from the end) as an index into `rank` dims; fails if it
/// is out of range. A scalar has one dim for this, as in torch.
int64_t normalizeDim(int64_t dim, int64_t rank);

/// The argument `name` of `node`; null when left to its default.
/// (`position`, its place in the op's schema, is not looked at: the
/// serializer names every argument.)
const schema::Argument *input(const schema::Node &node, const std::string &name,
                              size_t position);

/// The int argument `name` of `node`; none when left to its default or
/// None. Fails for a symbolic int or another kind of argument.
std::optional<int64_t> intInput(const schema::Node &node,
                                const std::string &name, size_t position);

/// The int list argument `name` of `node` (one int is a list of one); empty
/// when left to its default or None. Fails for symbolic ints or another kind
/// of argument.
std::vector<int64_t> intsInput(const schema::Node &node,
                               const std::string &name, size_t position);

/// The names of `node`'s tensor outputs, in order.
std::vector<std::string> outputNames(const schema::Node &node);

/// The names of `node`'s symbolic scalar outputs (`.item()`).
std::vector<std::string> symbolicOutputs(const schema::Node &node);

} // namespace mlir::loadplan::torch_export

#endif // LOADPLAN_LIB_IMPORT_NODES_H
