//===- OpTable.cpp - The importer's table of torch ops ----------*- C++ -*-===//
//
// Each table is a constant array sorted by packet (checked when it is
// compiled) and searched by binary search: no table is built at run time.
// Views and element copies of a checkpoint tensor are the aten view
// table's (loadplan/Records/AtenViews.h, which capture follows too): here
// is only how a node gives that table its arguments.
//
//===----------------------------------------------------------------------===//

#include "OpTable.h"

#include "ImportError.h"
#include "Nodes.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <ranges>

using namespace mlir::loadplan;
using namespace mlir::loadplan::torch_export;

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

namespace {
/// A node's named arguments, as the aten view table reads them.
class NodeArgs final : public ViewArgs {
public:
  explicit NodeArgs(const schema::Node &node) : node(node) {}

  std::optional<int64_t> getInt(const AtenArg &arg) const override {
    return intInput(node, std::string(arg.name), arg.position);
  }

  std::optional<std::vector<int64_t>>
  getInts(const AtenArg &arg) const override {
    std::string name(arg.name);
    const schema::Argument *value = input(node, name, arg.position);
    if (!value || value->tag() == schema::Argument::Tag::AS_NONE)
      return std::nullopt;
    return intsInput(node, name, arg.position);
  }

private:
  const schema::Node &node;
};
} // namespace

/// A tensor's metadata as the table's rules read it.
static ViewTensor viewTensor(const Meta &meta) {
  return {meta.layout.sizes, meta.layout.strides, meta.layout.offset,
          meta.element().empty() ? 0u : static_cast<uint32_t>(meta.dtype)};
}

bool torch_export::isView(std::string_view packet) {
  const AtenView *view = findAtenView(packet);
  return view && view->rule != AtenRule::Copy;
}

std::vector<ViewRecord>
torch_export::traceViewRecords(std::string_view packet,
                               const schema::Node &node, const Meta &src,
                               const std::vector<Meta> &outs) {
  const AtenView *view = findAtenView(packet);
  if (!view)
    return {};
  std::vector<ViewTensor> outTensors;
  for (const Meta &out : outs)
    outTensors.push_back(viewTensor(out));
  std::vector<ViewRecord> records;
  std::string error;
  if (!lowerAtenView(*view, viewTensor(src), outTensors, NodeArgs(node),
                     records, error))
    fail(error);
  return records;
}
