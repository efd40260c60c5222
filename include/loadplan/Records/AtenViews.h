//===- AtenViews.h - Which records each aten view op becomes ----*- C++ -*-===//
//
// The one description of how an aten op a loader applies to one checkpoint
// tensor, a view of it or a copy of its elements, becomes record ops
// (RecordOps.h). Both front ends follow it: the capture looks an op up by
// its packet and lowers each call through loadplan._native.lower_view
// (python/native/AtenViewBinding.cpp), and the torch.export importer
// through lib/Import/OpTable.cpp, each reading the call's arguments its own
// way (ViewArgs: a Python call's args and kwargs, an exported node's named
// arguments). The table says per op which rule lowers it and where its
// arguments are (name, position, default); the rules, with their special
// cases, are in AtenViews.cpp.
//
// Plain C++17 without LLVM, MLIR or torch: the importer's LibTorch side and
// the Python module link it alike.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RECORDS_ATENVIEWS_H
#define LOADPLAN_RECORDS_ATENVIEWS_H

#include "loadplan/Records/RecordOps.h"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlir::loadplan {

/// How an aten op's call becomes records. The rules and their special cases
/// are AtenViews.cpp's; each lists the arguments it reads, in the order the
/// table gives them.
enum class AtenRule {
  Slice,     ///< dim, start, end, step: a slice
  Narrow,    ///< dim, start, length: a slice; a negative start counts back
  Select,    ///< dim, index: a select
  Transpose, ///< dim0, dim1: a transpose; an alias below rank 2
  T,         ///< a transpose of dims 0 and 1 at rank 2, else an alias
  Permute,   ///< dims: a permute
  Expand,    ///< an expand; an alias to the same shape
  Unsqueeze, ///< dim: an unsqueeze
  Squeeze,   ///< dim (int or list): a squeeze of the listed dims of size 1;
             ///< an alias where none is
  Flatten,   ///< start_dim, end_dim: a flatten; a view of a 0-d tensor; an
             ///< alias where no dims merge
  Unflatten, ///< dim: an unflatten
  View,      ///< a view
  Reshape,   ///< a reshape
  Alias,     ///< an alias
  AsStrided, ///< an as_strided per output, of the layout torch computed
  Split,     ///< dim: one slice of it per output
  Unbind,    ///< dim: one select of it per output
  Copy,      ///< a clone in the same dtype, a convert into another
};

/// The default of an argument a call must give.
inline constexpr int64_t kRequired = std::numeric_limits<int64_t>::min();
/// The default of squeeze's dims: every dim.
inline constexpr int64_t kEveryDim = kRequired + 1;

/// An argument of an aten op, as its schema has it.
struct AtenArg {
  /// Its name, as keyword arguments and the export schema give it; empty
  /// past the op's last argument.
  std::string_view name;
  /// Its position in the schema, `self` being 0.
  int position = 0;
  /// Its value when the call leaves it out or passes None, or kRequired,
  /// or kEveryDim.
  int64_t fallback = kRequired;
};

/// An aten op of one checkpoint tensor that the records hold.
struct AtenView {
  /// The op's packet (`aten.slice`), as both front ends key ops.
  std::string_view packet;
  AtenRule rule;
  /// The arguments the rule reads, in its order.
  AtenArg args[4] = {};
};

inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

/// Every aten op the records hold, sorted by packet (AtenViews.cpp checks
/// it when compiled). A capture's view that is not here, of its input's
/// dtype, is lowered as `aten.as_strided` is: it has the layout torch
/// computed.
inline constexpr AtenView kAtenViews[] = {
    {"aten._reshape_alias", AtenRule::View},
    {"aten._to_copy", AtenRule::Copy},
    {"aten._to_dim_order_copy", AtenRule::Copy},
    {"aten._unsafe_view", AtenRule::View},
    {"aten.alias", AtenRule::Alias},
    {"aten.as_strided", AtenRule::AsStrided},
    {"aten.chunk", AtenRule::Split, {{"dim", 2, 0}}},
    {"aten.clone", AtenRule::Copy},
    {"aten.contiguous", AtenRule::Copy},
    {"aten.detach", AtenRule::Alias},
    {"aten.diagonal", AtenRule::AsStrided},
    {"aten.expand", AtenRule::Expand},
    {"aten.expand_as", AtenRule::Expand},
    {"aten.flatten",
     AtenRule::Flatten,
     {{"start_dim", 1, 0}, {"end_dim", 2, -1}}},
    {"aten.lift_fresh", AtenRule::Alias},
    {"aten.lift_fresh_copy", AtenRule::Copy},
    {"aten.movedim", AtenRule::AsStrided},
    {"aten.narrow",
     AtenRule::Narrow,
     {{"dim", 1}, {"start", 2}, {"length", 3}}},
    {"aten.permute", AtenRule::Permute, {{"dims", 1}}},
    {"aten.reshape", AtenRule::Reshape},
    {"aten.select", AtenRule::Select, {{"dim", 1}, {"index", 2}}},
    {"aten.slice",
     AtenRule::Slice,
     {{"dim", 1, 0}, {"start", 2, 0}, {"end", 3, kInt64Max}, {"step", 4, 1}}},
    {"aten.split", AtenRule::Split, {{"dim", 2, 0}}},
    {"aten.split_with_sizes", AtenRule::Split, {{"dim", 2, 0}}},
    {"aten.squeeze", AtenRule::Squeeze, {{"dim", 1, kEveryDim}}},
    {"aten.swapaxes", AtenRule::Transpose, {{"axis0", 1}, {"axis1", 2}}},
    {"aten.swapdims", AtenRule::Transpose, {{"dim0", 1}, {"dim1", 2}}},
    {"aten.t", AtenRule::T},
    {"aten.to", AtenRule::Copy},
    {"aten.transpose", AtenRule::Transpose, {{"dim0", 1}, {"dim1", 2}}},
    {"aten.unbind", AtenRule::Unbind, {{"dim", 1, 0}}},
    {"aten.unflatten", AtenRule::Unflatten, {{"dim", 1}}},
    {"aten.unfold", AtenRule::AsStrided},
    {"aten.unsafe_split", AtenRule::Split, {{"dim", 2, 0}}},
    {"aten.unsafe_split_with_sizes", AtenRule::Split, {{"dim", 2, 0}}},
    {"aten.unsqueeze", AtenRule::Unsqueeze, {{"dim", 1}}},
    {"aten.view", AtenRule::View},
    {"aten.view_as", AtenRule::View},
};

/// The entry of `packet`, or null.
const AtenView *findAtenView(std::string_view packet);

/// Whether `rule` reads its outputs' strides and offsets; a caller may
/// leave them out otherwise.
bool readsLayouts(AtenRule rule);

/// A tensor of a call: its input or an output.
struct ViewTensor {
  std::vector<int64_t> sizes;
  /// Only read where readsLayouts() says so: in elements, from the storage
  /// the input views.
  std::vector<int64_t> strides;
  int64_t offset = 0;
  /// The plan's dtype code (loadplan_dtype_t); LOADPLAN_DTYPE_INVALID for a
  /// dtype the plan cannot hold.
  uint32_t dtype = 0;
};

/// The arguments of one call, as a front end reads them. A reader throws
/// (or fails the front end's own way) for an argument of the wrong kind.
class ViewArgs {
public:
  /// The int argument `arg`; none when the call leaves it out or passes
  /// None.
  virtual std::optional<int64_t> getInt(const AtenArg &arg) const = 0;
  /// The int list argument `arg` (an int is a list of one); none when the
  /// call leaves it out or passes None.
  virtual std::optional<std::vector<int64_t>>
  getInts(const AtenArg &arg) const = 0;

protected:
  ~ViewArgs() = default;
};

/// One record op of a lowered call: the op and its ints after the types.
struct ViewRecord {
  RecordOp op;
  std::vector<int64_t> ints;
};

/// Lowers a call of `view` on `src` that gave `outs` into `records`, one
/// per output. Leaves `records` empty for a call the records do not hold as
/// such, which a front end records as any other op: a view into another
/// dtype (`view(dtype)`, a bitcast), a copy into a dtype the plan lacks, an
/// op of one output that gave several. Fails with `error` for a call that
/// cannot be made (a missing argument, a dim out of range, a split output
/// of another rank).
bool lowerAtenView(const AtenView &view, const ViewTensor &src,
                   const std::vector<ViewTensor> &outs, const ViewArgs &args,
                   std::vector<ViewRecord> &records, std::string &error);

} // namespace mlir::loadplan

#endif // LOADPLAN_RECORDS_ATENVIEWS_H
