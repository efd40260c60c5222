//===- AtenViews.cpp - Which records each aten view op becomes --*- C++ -*-===//
//
// The rules of AtenViews.h. Each special case a front end must agree on is
// written here once: torch's defaults (a slice's start and end), negative
// dims and starts, transposes and squeezes that change nothing (aliases),
// a flatten of a 0-d tensor, splits into slices and unbinds into selects,
// and which copies keep the dtype.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Records/AtenViews.h"

#include <algorithm>
#include <iterator>

using namespace mlir::loadplan;

static constexpr bool sortedByPacket() {
  for (size_t i = 1; i < std::size(kAtenViews); ++i)
    if (!(kAtenViews[i - 1].packet < kAtenViews[i].packet))
      return false;
  return true;
}
static_assert(sortedByPacket(), "kAtenViews must be sorted by packet");

const AtenView *mlir::loadplan::findAtenView(std::string_view packet) {
  const AtenView *it = std::lower_bound(
      std::begin(kAtenViews), std::end(kAtenViews), packet,
      [](const AtenView &v, std::string_view p) { return v.packet < p; });
  return it != std::end(kAtenViews) && it->packet == packet ? it : nullptr;
}

bool mlir::loadplan::readsLayouts(AtenRule rule) {
  return rule == AtenRule::AsStrided;
}

namespace {

/// One call being lowered; the first error it meets is kept.
class Lowering {
public:
  Lowering(const AtenView &view, const ViewTensor &src,
           const std::vector<ViewTensor> &outs, const ViewArgs &args,
           std::vector<ViewRecord> &records, std::string &error)
      : view(view), src(src), outs(outs), args(args), records(records),
        error(error), rank(static_cast<int64_t>(src.sizes.size())) {}

  bool run();

private:
  /// Argument `k` of the rule, its default where the call leaves it out.
  std::optional<int64_t> intArg(size_t k);
  /// Argument `k` as a dim of `dims` dims (a 0-d tensor has one, as in
  /// torch), normalized.
  std::optional<int64_t> dimArg(size_t k, int64_t dims);
  /// dimArg for an op that reads that dim's size, which a 0-d tensor lacks.
  std::optional<int64_t> sizedDimArg(size_t k);
  /// `dim` (argument `name`) as an index into `dims` dims, a 0-d tensor
  /// having one.
  std::optional<int64_t> normalize(int64_t dim, int64_t dims,
                                   std::string_view name);
  bool fail(const std::string &message);

  void emit(RecordOp op, std::vector<int64_t> ints = {}) {
    records.push_back({op, std::move(ints)});
  }
  bool one(RecordOp op, std::vector<int64_t> ints = {}) {
    emit(op, std::move(ints));
    return true;
  }

  bool copy();
  bool slice();
  bool narrow();
  bool select();
  bool transpose();
  bool permute();
  bool squeeze();
  bool flatten();
  bool split();
  bool unbind();

  const AtenView &view;
  const ViewTensor &src;
  const std::vector<ViewTensor> &outs;
  const ViewArgs &args;
  std::vector<ViewRecord> &records;
  std::string &error;
  int64_t rank;
};

} // namespace

bool Lowering::fail(const std::string &message) {
  records.clear();
  error = "'" + std::string(view.packet) + "' " + message;
  return false;
}

std::optional<int64_t> Lowering::intArg(size_t k) {
  const AtenArg &arg = view.args[k];
  if (std::optional<int64_t> value = args.getInt(arg))
    return value;
  if (arg.fallback == kRequired) {
    fail("has no " + std::string(arg.name));
    return std::nullopt;
  }
  return arg.fallback;
}

std::optional<int64_t> Lowering::normalize(int64_t dim, int64_t dims,
                                           std::string_view name) {
  int64_t bound = std::max<int64_t>(dims, 1);
  if (dim < -bound || dim >= bound) {
    fail("has a " + std::string(name) + " " + std::to_string(dim) +
         " out of range for rank " + std::to_string(dims));
    return std::nullopt;
  }
  return dim < 0 ? dim + bound : dim;
}

std::optional<int64_t> Lowering::dimArg(size_t k, int64_t dims) {
  std::optional<int64_t> dim = intArg(k);
  if (!dim)
    return std::nullopt;
  return normalize(*dim, dims, view.args[k].name);
}

std::optional<int64_t> Lowering::sizedDimArg(size_t k) {
  if (rank == 0) {
    fail("takes a dim of a 0-dim tensor");
    return std::nullopt;
  }
  return dimArg(k, rank);
}

/// clone, contiguous, _to_copy, ...: a clone in the input's dtype, else a
/// convert; nothing for a dtype the plan lacks.
bool Lowering::copy() {
  if (outs[0].dtype == src.dtype)
    return one(RecordOp::clone);
  if (outs[0].dtype == 0)
    return true;
  return one(RecordOp::convert);
}

/// A slice: torch's clamping of start and end is the dialect's, and a
/// slice to the end ends at INT64_MAX.
bool Lowering::slice() {
  std::optional<int64_t> dim = sizedDimArg(0), start, end, step;
  if (!dim || !(start = intArg(1)) || !(end = intArg(2)) || !(step = intArg(3)))
    return false;
  return one(RecordOp::slice, {*dim, *start, *end, *step});
}

/// narrow(dim, start, length): a slice, its start counted from the end
/// when negative.
bool Lowering::narrow() {
  std::optional<int64_t> dim = sizedDimArg(0), start, length;
  if (!dim || !(start = intArg(1)) || !(length = intArg(2)))
    return false;
  if (*start < 0)
    *start += src.sizes[*dim];
  return one(RecordOp::slice, {*dim, *start, *start + *length, 1});
}

bool Lowering::select() {
  std::optional<int64_t> dim = sizedDimArg(0), index;
  if (!dim || !(index = intArg(1)))
    return false;
  return one(RecordOp::select, {*dim, *index});
}

/// transpose, swapaxes, swapdims: below rank 2 nothing moves (an alias).
bool Lowering::transpose() {
  if (rank < 2)
    return one(RecordOp::alias);
  std::optional<int64_t> d0 = dimArg(0, rank), d1;
  if (!d0 || !(d1 = dimArg(1, rank)))
    return false;
  return one(RecordOp::transpose, {*d0, *d1});
}

bool Lowering::permute() {
  std::optional<std::vector<int64_t>> dims = args.getInts(view.args[0]);
  if (!dims)
    return fail("has no dims");
  for (int64_t &d : *dims) {
    std::optional<int64_t> normalized = normalize(d, rank, "dim");
    if (!normalized)
      return false;
    d = *normalized;
  }
  return one(RecordOp::permute, std::move(*dims));
}

/// squeeze: the dims listed (every dim without a list) that are of size 1,
/// which are the ones torch removes; an alias where none is.
bool Lowering::squeeze() {
  std::optional<std::vector<int64_t>> requested = args.getInts(view.args[0]);
  std::vector<bool> listed(rank, !requested);
  if (requested && rank) {
    for (int64_t d : *requested) {
      std::optional<int64_t> normalized = normalize(d, rank, "dim");
      if (!normalized)
        return false;
      listed[*normalized] = true;
    }
  }
  std::vector<int64_t> removed;
  for (int64_t d = 0; d < rank; ++d)
    if (listed[d] && src.sizes[d] == 1)
      removed.push_back(d);
  if (removed.empty())
    return one(RecordOp::alias);
  return one(RecordOp::squeeze, std::move(removed));
}

/// flatten: a 0-d tensor becomes [1] (a view), and a flatten that merges
/// no dims is an alias.
bool Lowering::flatten() {
  if (rank == 0)
    return one(RecordOp::view);
  if (outs[0].sizes == src.sizes)
    return one(RecordOp::alias);
  std::optional<int64_t> start = dimArg(0, rank), end;
  if (!start || !(end = dimArg(1, rank)))
    return false;
  return one(RecordOp::flatten, {*start, *end});
}

/// split, chunk, split_with_sizes, ...: each output a slice of the dim,
/// after the one before.
bool Lowering::split() {
  std::optional<int64_t> dim = sizedDimArg(0);
  if (!dim)
    return false;
  int64_t start = 0;
  for (const ViewTensor &out : outs) {
    if (out.sizes.size() != src.sizes.size())
      return fail("has an output of another rank");
    int64_t end = start + out.sizes[*dim];
    emit(RecordOp::slice, {*dim, start, end, 1});
    start = end;
  }
  return true;
}

/// unbind: output k is the select of index k.
bool Lowering::unbind() {
  std::optional<int64_t> dim = sizedDimArg(0);
  if (!dim)
    return false;
  for (size_t k = 0; k < outs.size(); ++k)
    emit(RecordOp::select, {*dim, static_cast<int64_t>(k)});
  return true;
}

bool Lowering::run() {
  records.clear();
  error.clear();
  if (outs.empty())
    return true;
  bool manyOutputs = view.rule == AtenRule::Split ||
                     view.rule == AtenRule::Unbind ||
                     view.rule == AtenRule::AsStrided;
  if (!manyOutputs && outs.size() != 1)
    return true;
  if (view.rule == AtenRule::Copy)
    return copy();
  // Views: of the input's elements in its dtype, or not a layout at all.
  for (const ViewTensor &out : outs)
    if (out.dtype != src.dtype)
      return true;
  switch (view.rule) {
  case AtenRule::Slice:
    return slice();
  case AtenRule::Narrow:
    return narrow();
  case AtenRule::Select:
    return select();
  case AtenRule::Transpose:
    return transpose();
  case AtenRule::T:
    return rank == 2 ? one(RecordOp::transpose, {0, 1}) : one(RecordOp::alias);
  case AtenRule::Permute:
    return permute();
  case AtenRule::Expand:
    return one(outs[0].sizes == src.sizes ? RecordOp::alias
                                          : RecordOp::expand);
  case AtenRule::Unsqueeze: {
    std::optional<int64_t> dim = dimArg(0, rank + 1);
    return dim && one(RecordOp::unsqueeze, {*dim});
  }
  case AtenRule::Squeeze:
    return squeeze();
  case AtenRule::Flatten:
    return flatten();
  case AtenRule::Unflatten: {
    std::optional<int64_t> dim = sizedDimArg(0);
    return dim && one(RecordOp::unflatten, {*dim});
  }
  case AtenRule::View:
    return one(RecordOp::view);
  case AtenRule::Reshape:
    return one(RecordOp::reshape);
  case AtenRule::Alias:
    return one(RecordOp::alias);
  case AtenRule::AsStrided:
    // The layout torch computed, from the input's storage: its offset is
    // spelled out (torch's default is the input's own).
    for (const ViewTensor &out : outs) {
      if (out.strides.size() != out.sizes.size())
        return fail("has an output without a stride per dim");
      std::vector<int64_t> ints = {out.offset};
      ints.insert(ints.end(), out.strides.begin(), out.strides.end());
      emit(RecordOp::as_strided, std::move(ints));
    }
    return true;
  case AtenRule::Split:
    return split();
  case AtenRule::Unbind:
    return unbind();
  case AtenRule::Copy:
    break;
  }
  return copy();
}

bool mlir::loadplan::lowerAtenView(const AtenView &view, const ViewTensor &src,
                                   const std::vector<ViewTensor> &outs,
                                   const ViewArgs &args,
                                   std::vector<ViewRecord> &records,
                                   std::string &error) {
  return Lowering(view, src, outs, args, records, error).run();
}
