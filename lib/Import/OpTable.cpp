//===- OpTable.cpp - The importer's table of torch ops ----------*- C++ -*-===//
//
// Each table is a constant array sorted by packet (checked when it is
// compiled) and searched by binary search: no table is built at run time.
// A view handler reads its node's arguments and spells the dialect's op for
// each output; the importer emits them. Handlers of the same op family
// share a function.
//
//===----------------------------------------------------------------------===//

#include "OpTable.h"

#include "IRText.h"
#include "ImportError.h"
#include "Nodes.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <limits>
#include <ranges>

using namespace mlir::loadplan;
using namespace mlir::loadplan::torch_export;

static constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

/// Whether the packets of `table` (`proj` of each entry) strictly increase,
/// as the binary searches need.
template <typename Table, typename Proj = std::identity>
static constexpr bool isStrictlySorted(const Table &table, Proj proj = {}) {
  return std::ranges::adjacent_find(table, std::ranges::greater_equal(),
                                    proj) == std::ranges::end(table);
}

/// The entry of `table` for `packet`, or null.
template <typename Entry, size_t N>
static const Entry *find(const Entry (&table)[N], std::string_view packet) {
  const Entry *it = std::ranges::lower_bound(table, packet, {}, &Entry::packet);
  return it != std::end(table) && it->packet == packet ? it : nullptr;
}

/// The dim argument `name` of `node` (`fallback` when left to its default),
/// normalized for `rank` dims.
static int64_t dimInput(const schema::Node &node, const std::string &name,
                        size_t position, int64_t rank, int64_t fallback = 0) {
  return normalizeDim(intInput(node, name, position).value_or(fallback), rank);
}

/// dimInput for an op that reads the size of that dim, which a 0-dim tensor
/// does not have (torch refuses such a call; a hostile program may not).
static int64_t sizedDimInput(const schema::Node &node, const std::string &name,
                             size_t position, int64_t rank) {
  if (rank == 0)
    fail("'" + node.get_target() + "' takes a dim of a 0-dim tensor");
  return dimInput(node, name, position, rank);
}

//===----------------------------------------------------------------------===//
// Ops known by name alone
//===----------------------------------------------------------------------===//

static constexpr std::string_view kIgnored[] = {
    "aten._assert_async",
    "aten._assert_scalar",
    "aten._assert_tensor_metadata",
    "aten.sym_constrain_range",
    "aten.sym_constrain_range_for_size",
    "aten.sym_numel",
    "aten.sym_size",
    "aten.sym_storage_offset",
    "aten.sym_stride",
    "torch._check",
    "torch._check_is_size",
};
static_assert(isStrictlySorted(kIgnored));

static constexpr std::string_view kValueReads[] = {
    "aten._local_scalar_dense", "aten.allclose", "aten.equal",
    "aten.is_nonzero",          "aten.item",
};
static_assert(isStrictlySorted(kValueReads));

bool torch_export::isIgnored(std::string_view packet) {
  return std::ranges::binary_search(kIgnored, packet);
}

bool torch_export::isValueRead(std::string_view packet) {
  return std::ranges::binary_search(kValueReads, packet);
}

bool torch_export::isInPlace(std::string_view packet) {
  // aten.mul_, aten.copy_, ...: torch's in-place naming.
  return !packet.empty() && packet.back() == '_' &&
         packet.rfind("aten.", 0) == 0 && packet != "aten._";
}

//===----------------------------------------------------------------------===//
// Scatters
//===----------------------------------------------------------------------===//

/// slice_scatter: a strided slice of one dim.
static std::optional<Layout> sliceScatter(const schema::Node &node,
                                          const Layout &base) {
  Layout out = base;
  int64_t dim = sizedDimInput(node, "dim", 2, base.rank());
  int64_t size = base.sizes[dim];
  int64_t start = intInput(node, "start", 3).value_or(0);
  int64_t end = intInput(node, "end", 4).value_or(kInt64Max);
  int64_t step = intInput(node, "step", 5).value_or(1);
  if (step <= 0)
    return std::nullopt;
  if (start < 0)
    start = std::max<int64_t>(start + size, 0);
  if (end < 0)
    end = std::max<int64_t>(end + size, 0);
  start = std::min(start, size);
  end = std::min(std::max(end, start), size);
  out.offset = mulAdd(start, base.strides[dim], out.offset);
  out.sizes[dim] = end > start ? (end - start - 1) / step + 1 : 0;
  out.strides[dim] = mulAdd(out.strides[dim], step, 0);
  return out;
}

/// select_scatter: one index of one dim, which goes.
static std::optional<Layout> selectScatter(const schema::Node &node,
                                           const Layout &base) {
  Layout out = base;
  int64_t dim = sizedDimInput(node, "dim", 2, base.rank());
  int64_t i = intInput(node, "index", 3).value_or(0);
  if (i < 0)
    i += base.sizes[dim];
  if (i < 0 || i >= base.sizes[dim])
    return std::nullopt;
  out.offset = mulAdd(i, base.strides[dim], out.offset);
  out.sizes.erase(out.sizes.begin() + dim);
  out.strides.erase(out.strides.begin() + dim);
  return out;
}

/// as_strided_scatter: the layout its arguments give, from the base's
/// storage offset unless they give one.
static std::optional<Layout> asStridedScatter(const schema::Node &node,
                                              const Layout &base) {
  Layout out = base;
  out.sizes = intsInput(node, "size", 2);
  out.strides = intsInput(node, "stride", 3);
  if (out.sizes.size() != out.strides.size())
    return std::nullopt;
  if (std::optional<int64_t> offset = intInput(node, "storage_offset", 4))
    out.offset = mulAdd(1, base.offset, *offset);
  for (size_t i = 0; i < out.sizes.size(); ++i)
    if (out.sizes[i] < 0 || out.strides[i] < 0)
      return std::nullopt;
  if (out.offset < 0)
    return std::nullopt;
  return out;
}

namespace {
/// A scatter and where it puts its source in its base.
struct ScatterOp {
  std::string_view packet;
  std::optional<Layout> (*position)(const schema::Node &node,
                                    const Layout &base);
};
} // namespace

static constexpr ScatterOp kScatters[] = {
    {"aten.as_strided_scatter", asStridedScatter},
    {"aten.select_scatter", selectScatter},
    {"aten.slice_scatter", sliceScatter},
};
static_assert(isStrictlySorted(kScatters, &ScatterOp::packet));

bool torch_export::isScatter(std::string_view packet) {
  return find(kScatters, packet) != nullptr;
}

std::optional<Layout> torch_export::scatterPosition(const schema::Node &node,
                                                    const Layout &base) {
  const ScatterOp *scatter = find(kScatters, opPacket(node.get_target()));
  if (!scatter)
    return std::nullopt;
  return scatter->position(node, base);
}

//===----------------------------------------------------------------------===//
// Views and copies of a checkpoint tensor
//===----------------------------------------------------------------------===//

/// The ops of a node with one output.
static std::vector<ViewOp> one(ViewOp op) { return {std::move(op)}; }

static ViewOp sliceOp(int64_t dim, int64_t start, int64_t end, int64_t step) {
  return {"slice", "dim " + std::to_string(dim) + " start " +
                       std::to_string(start) + " end " + std::to_string(end) +
                       " step " + std::to_string(step)};
}

static ViewOp selectOp(int64_t dim, int64_t index) {
  return {"select",
          "dim " + std::to_string(dim) + " index " + std::to_string(index)};
}

/// clone, contiguous, _to_copy, ...: a clone in the source's dtype, else a
/// convert; none for a dtype the IR lacks (an apply).
static std::vector<ViewOp> copyOf(const ViewOperands &op) {
  if (op.outs[0].dtype == op.src.dtype)
    return one({"clone", ""});
  if (op.outs[0].element().empty())
    return {};
  return one({"convert", ""});
}

/// split, chunk, ...: one slice of the split dim per output.
static std::vector<ViewOp> splitOf(const ViewOperands &op) {
  int64_t rank = op.src.layout.rank();
  int64_t dim = sizedDimInput(op.node, "dim", 2, rank);
  std::vector<ViewOp> views;
  int64_t start = 0;
  for (const Meta &out : op.outs) {
    if (out.layout.rank() != rank)
      fail("'" + op.node.get_target() + "' has an output of another rank");
    int64_t end = start + out.layout.sizes[dim];
    views.push_back(sliceOp(dim, start, end, 1));
    start = end;
  }
  return views;
}

/// unbind: one select of the unbound dim per output.
static std::vector<ViewOp> unbindOf(const ViewOperands &op) {
  int64_t dim = sizedDimInput(op.node, "dim", 1, op.src.layout.rank());
  std::vector<ViewOp> views;
  for (size_t k = 0; k < op.outs.size(); ++k)
    views.push_back(selectOp(dim, static_cast<int64_t>(k)));
  return views;
}

static std::vector<ViewOp> sliceOf(const ViewOperands &op) {
  int64_t dim = sizedDimInput(op.node, "dim", 1, op.src.layout.rank());
  int64_t start = intInput(op.node, "start", 2).value_or(0);
  int64_t end = intInput(op.node, "end", 3).value_or(kInt64Max);
  int64_t step = intInput(op.node, "step", 4).value_or(1);
  return one(sliceOp(dim, start, end, step));
}

static std::vector<ViewOp> narrowOf(const ViewOperands &op) {
  int64_t dim = sizedDimInput(op.node, "dim", 1, op.src.layout.rank());
  int64_t start = intInput(op.node, "start", 2).value_or(0);
  if (start < 0)
    start += op.src.layout.sizes[dim];
  int64_t end = start + intInput(op.node, "length", 3).value_or(0);
  return one(sliceOp(dim, start, end, 1));
}

static std::vector<ViewOp> selectOf(const ViewOperands &op) {
  int64_t dim = sizedDimInput(op.node, "dim", 1, op.src.layout.rank());
  int64_t index = intInput(op.node, "index", 2).value_or(0);
  return one(selectOp(dim, index));
}

/// A transpose of the dims named `dim0` and `dim1`; an alias below rank 2.
static std::vector<ViewOp> transposeDims(const ViewOperands &op,
                                         const std::string &dim0,
                                         const std::string &dim1) {
  int64_t rank = op.src.layout.rank();
  if (rank < 2)
    return one({"alias", ""});
  int64_t d0 = dimInput(op.node, dim0, 1, rank);
  int64_t d1 = dimInput(op.node, dim1, 2, rank);
  return one({"transpose",
              "dim0 " + std::to_string(d0) + " dim1 " + std::to_string(d1)});
}

static std::vector<ViewOp> transposeOf(const ViewOperands &op) {
  return transposeDims(op, "dim0", "dim1");
}

/// swapaxes and swapdims, by the names swapaxes gives its dims.
static std::vector<ViewOp> swapAxesOf(const ViewOperands &op) {
  return transposeDims(op, "axis0", "axis1");
}

static std::vector<ViewOp> tOf(const ViewOperands &op) {
  if (op.src.layout.rank() < 2)
    return one({"alias", ""});
  return one({"transpose", "dim0 0 dim1 1"});
}

static std::vector<ViewOp> permuteOf(const ViewOperands &op) {
  std::vector<int64_t> dims = intsInput(op.node, "dims", 1);
  for (int64_t &d : dims)
    d = normalizeDim(d, op.src.layout.rank());
  return one({"permute", "dims " + irInts(dims)});
}

static std::vector<ViewOp> expandOf(const ViewOperands &op) {
  bool same = op.outs[0].layout.sizes == op.src.layout.sizes;
  return one({same ? "alias" : "expand", ""});
}

static std::vector<ViewOp> unsqueezeOf(const ViewOperands &op) {
  int64_t dim = dimInput(op.node, "dim", 1, op.src.layout.rank() + 1);
  return one({"unsqueeze", "dim " + std::to_string(dim)});
}

/// squeeze: the dims listed (all without a list) that are of size 1; an
/// alias where none is.
static std::vector<ViewOp> squeezeOf(const ViewOperands &op) {
  const std::vector<int64_t> &sizes = op.src.layout.sizes;
  int64_t rank = op.src.layout.rank();
  std::vector<int64_t> requested = intsInput(op.node, "dim", 1);
  if (requested.empty())
    requested = intsInput(op.node, "dims", 1);
  std::vector<bool> listed(rank, requested.empty());
  for (int64_t d : requested)
    if (rank)
      listed[normalizeDim(d, rank)] = true;
  std::vector<int64_t> removed;
  for (int64_t d = 0; d < rank; ++d)
    if (listed[d] && sizes[d] == 1)
      removed.push_back(d);
  if (removed.empty())
    return one({"alias", ""});
  return one({"squeeze", "dims " + irInts(removed)});
}

/// flatten: a view of a scalar (as [1]), an alias where nothing is
/// flattened.
static std::vector<ViewOp> flattenOf(const ViewOperands &op) {
  int64_t rank = op.src.layout.rank();
  if (rank == 0)
    return one({"view", ""});
  if (op.outs[0].layout.sizes == op.src.layout.sizes)
    return one({"alias", ""});
  int64_t start = dimInput(op.node, "start_dim", 1, rank);
  int64_t end = dimInput(op.node, "end_dim", 2, rank, -1);
  return one({"flatten", "start_dim " + std::to_string(start) + " end_dim " +
                             std::to_string(end)});
}

static std::vector<ViewOp> unflattenOf(const ViewOperands &op) {
  int64_t dim = sizedDimInput(op.node, "dim", 1, op.src.layout.rank());
  return one({"unflatten", "dim " + std::to_string(dim)});
}

static std::vector<ViewOp> viewOf(const ViewOperands &op) {
  return one({"view", ""});
}

static std::vector<ViewOp> reshapeOf(const ViewOperands &op) {
  return one({"reshape", ""});
}

static std::vector<ViewOp> aliasOf(const ViewOperands &op) {
  return one({"alias", ""});
}

/// as_strided and any other view: the layout torch computed, as an
/// as_strided of the input's storage (as capture writes other views).
static std::vector<ViewOp> asStridedOf(const ViewOperands &op) {
  return one({"as_strided", irLayout(op.outs[0].layout)});
}

namespace {
/// What an op of one checkpoint tensor gives, which decides what is checked
/// before its handler runs.
enum class ViewKind {
  /// One output: the source's elements, in any dtype.
  Copy,
  /// One output: a layout of the source's elements, in the source's dtype.
  View,
  /// Any number of outputs, each a layout of the source's elements in the
  /// source's dtype.
  Views,
};

/// An op of one checkpoint tensor that the dialect has ops for.
struct TraceOp {
  std::string_view packet;
  ViewKind kind;
  std::vector<ViewOp> (*handler)(const ViewOperands &op);
};
} // namespace

static constexpr TraceOp kTraceOps[] = {
    {"aten._reshape_alias", ViewKind::View, viewOf},
    {"aten._to_copy", ViewKind::Copy, copyOf},
    {"aten._to_dim_order_copy", ViewKind::Copy, copyOf},
    {"aten._unsafe_view", ViewKind::View, viewOf},
    {"aten.alias", ViewKind::View, aliasOf},
    {"aten.as_strided", ViewKind::View, asStridedOf},
    {"aten.chunk", ViewKind::Views, splitOf},
    {"aten.clone", ViewKind::Copy, copyOf},
    {"aten.contiguous", ViewKind::Copy, copyOf},
    {"aten.detach", ViewKind::View, aliasOf},
    {"aten.diagonal", ViewKind::View, asStridedOf},
    {"aten.expand", ViewKind::View, expandOf},
    {"aten.expand_as", ViewKind::View, expandOf},
    {"aten.flatten", ViewKind::View, flattenOf},
    {"aten.lift_fresh", ViewKind::View, aliasOf},
    {"aten.lift_fresh_copy", ViewKind::Copy, copyOf},
    {"aten.movedim", ViewKind::View, asStridedOf},
    {"aten.narrow", ViewKind::View, narrowOf},
    {"aten.permute", ViewKind::View, permuteOf},
    {"aten.reshape", ViewKind::View, reshapeOf},
    {"aten.select", ViewKind::View, selectOf},
    {"aten.slice", ViewKind::View, sliceOf},
    {"aten.split", ViewKind::Views, splitOf},
    {"aten.split_with_sizes", ViewKind::Views, splitOf},
    {"aten.squeeze", ViewKind::View, squeezeOf},
    {"aten.swapaxes", ViewKind::View, swapAxesOf},
    {"aten.swapdims", ViewKind::View, swapAxesOf},
    {"aten.t", ViewKind::View, tOf},
    {"aten.to", ViewKind::Copy, copyOf},
    {"aten.transpose", ViewKind::View, transposeOf},
    {"aten.unbind", ViewKind::Views, unbindOf},
    {"aten.unflatten", ViewKind::View, unflattenOf},
    {"aten.unfold", ViewKind::View, asStridedOf},
    {"aten.unsafe_split", ViewKind::Views, splitOf},
    {"aten.unsafe_split_with_sizes", ViewKind::Views, splitOf},
    {"aten.unsqueeze", ViewKind::View, unsqueezeOf},
    {"aten.view", ViewKind::View, viewOf},
    {"aten.view_as", ViewKind::View, viewOf},
};
static_assert(isStrictlySorted(kTraceOps, &TraceOp::packet));

bool torch_export::isView(std::string_view packet) {
  const TraceOp *entry = find(kTraceOps, packet);
  return entry && entry->kind != ViewKind::Copy;
}

std::vector<ViewOp> torch_export::traceViewOps(std::string_view packet,
                                               const ViewOperands &operands) {
  const TraceOp *entry = find(kTraceOps, packet);
  if (!entry)
    return {};
  if (entry->kind != ViewKind::Copy)
    for (const Meta &out : operands.outs)
      if (out.dtype != operands.src.dtype)
        return {}; // view(dtype): a bitcast, not a layout
  if (entry->kind != ViewKind::Views && operands.outs.size() != 1)
    return {};
  return entry->handler(operands);
}
