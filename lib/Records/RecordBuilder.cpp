//===- RecordBuilder.cpp - A recorded loader into a module ------*- C++ -*-===//
//
// Each record becomes the op it stands for (RecordOps.h has the fields),
// without text: the declarations first, then each checkpoint's block in
// arrival order. Every index a record holds (a value, a type, a string, a
// target) is checked here; what the ops themselves must satisfy is their
// verifiers'.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Records/RecordBuilder.h"
#include "loadplan/Records/RecordOps.h"

#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanAttrs.h"
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanDialect.h"
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanOps.h"
#include "loadplan/Transforms/Plan.h"
#include "loadplan/plan_format.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

using namespace mlir;
using namespace mlir::loadplan;

namespace {

/// Builds one module's recorded checkpoints.
class RecordBuilder {
public:
  RecordBuilder(ModuleOp module, const RecordedModule &records,
                StringRef sourceName, const RecordBuildOptions &options)
      : module(module), records(records), sourceName(sourceName),
        options(options), b(module.getContext()), dtypes(module.getContext()) {}

  LogicalResult run();

private:
  LogicalResult makeTypes();
  Type element(int64_t dtype);
  LogicalResult buildDeclarations();
  FailureOr<CheckpointOp> buildCheckpoint(const RecordedModule::Checkpoint &ck);
  bool groupKey(const RecordedModule::Checkpoint &ck, int64_t &offset,
                int64_t &itemSize);
  LogicalResult buildOp(ArrayRef<int64_t> entry, Location loc);
  LogicalResult buildView(RecordOp op, ArrayRef<int64_t> fields, Location loc);
  LogicalResult buildEvent(RecordOp op, ArrayRef<int64_t> fields, Location loc);
  LogicalResult buildDeclaration(RecordOp op, ArrayRef<int64_t> fields,
                                 Location loc);
  FailureOr<Value> value(int64_t index, Location loc);
  FailureOr<SmallVector<Value>> valueList(ArrayRef<int64_t> indices,
                                          Location loc);
  LogicalResult define(int64_t index, Location loc);
  FailureOr<RankedTensorType> type(int64_t index, Location loc);
  FailureOr<StringAttr> string(int64_t index, Location loc);
  FailureOr<FlatSymbolRefAttr> target(int64_t index, Location loc);
  FailureOr<StringAttr> transformName(int64_t code, Location loc);
  struct Destination {
    FlatSymbolRefAttr target;
    LayoutAttr layout;
    TypeAttr dtype;
  };
  FailureOr<Destination> destination(ArrayRef<int64_t> fields, Location loc);
  LogicalResult fieldCount(RecordOp op, size_t have, size_t need, Location loc);

  ModuleOp module;
  const RecordedModule &records;
  StringRef sourceName;
  RecordBuildOptions options;
  OpBuilder b;
  loadplan::DtypeCodes dtypes;
  SmallVector<RankedTensorType> types;
  /// The values of the block being built; [0] is the incoming tensor.
  SmallVector<Value> values;
  SmallVector<FlatSymbolRefAttr> storages, targets;
  /// By group key (see groupKey): the first name's checkpoint, which the
  /// later names with that key join as members, and its copy's offset.
  struct Group {
    CheckpointOp op;
    int64_t offset;
  };
  llvm::StringMap<Group> groups;
  /// The key groupKey made last.
  SmallVector<int64_t> key;
  /// The registered names of the ops made without attributes, by code.
  std::optional<OperationName> opNames[static_cast<size_t>(RecordOp::count)];
};

} // namespace

Type RecordBuilder::element(int64_t dtype) {
  if (dtype < 0 || dtype > UINT32_MAX)
    return {};
  return dtypes.type(static_cast<uint32_t>(dtype));
}

LogicalResult RecordBuilder::makeTypes() {
  if (records.typeShapes.size() != records.typeDtypes.size())
    return emitError(module.getLoc())
           << "records: a type table of " << records.typeShapes.size()
           << " shapes and " << records.typeDtypes.size() << " dtypes";
  types.reserve(records.typeShapes.size());
  for (auto [shape, dtype] :
       llvm::zip_equal(records.typeShapes, records.typeDtypes)) {
    Type e = element(dtype);
    if (!e)
      return emitError(module.getLoc())
             << "records: no element type for dtype code " << dtype;
    types.push_back(RankedTensorType::get(shape, e));
  }
  return success();
}

FailureOr<RankedTensorType> RecordBuilder::type(int64_t index, Location loc) {
  if (index < 0 || static_cast<size_t>(index) >= types.size())
    return emitError(loc) << "records: type " << index
                          << " is not in the table of " << types.size();
  return types[index];
}

FailureOr<StringAttr> RecordBuilder::string(int64_t index, Location loc) {
  if (index < 0 || static_cast<size_t>(index) >= records.strings.size())
    return emitError(loc) << "records: string " << index
                          << " is not in the table of "
                          << records.strings.size();
  std::string_view text = records.strings[index];
  return b.getStringAttr(StringRef(text.data(), text.size()));
}

FailureOr<FlatSymbolRefAttr> RecordBuilder::target(int64_t index,
                                                   Location loc) {
  if (index < 0 || static_cast<size_t>(index) >= targets.size())
    return emitError(loc) << "records: target " << index << " is not declared";
  return targets[index];
}

/// The name of transform `code` (LOADPLAN_TRANSFORMS).
FailureOr<StringAttr> RecordBuilder::transformName(int64_t code,
                                                   Location loc) {
  uint32_t dtype;
  int64_t rows, cols, words;
  if (code <= 0 || code > UINT32_MAX ||
      !loadplan_transform_atom(static_cast<uint32_t>(code), &dtype, &rows,
                               &cols, &words))
    return emitError(loc) << "records: no transform of code " << code;
  return b.getStringAttr(
      loadplan_transform_name(static_cast<uint32_t>(code)));
}

FailureOr<Value> RecordBuilder::value(int64_t index, Location loc) {
  // -1 is the incoming tensor, values[0].
  if (index < -1 || index + 1 >= static_cast<int64_t>(values.size()))
    return emitError(loc) << "records: value " << index
                          << " is not defined before its use";
  return values[index + 1];
}

FailureOr<SmallVector<Value>>
RecordBuilder::valueList(ArrayRef<int64_t> indices, Location loc) {
  SmallVector<Value> list;
  list.reserve(indices.size());
  for (int64_t index : indices) {
    FailureOr<Value> v = value(index, loc);
    if (failed(v))
      return failure();
    list.push_back(*v);
  }
  return list;
}

/// Checks that a record's result is the block's next value.
LogicalResult RecordBuilder::define(int64_t index, Location loc) {
  if (index + 1 != static_cast<int64_t>(values.size()))
    return emitError(loc) << "records: value " << index
                          << " defined out of order";
  return success();
}

/// The destination of a copy or constant write: `target, dtype code,
/// offset, shape..., stride...` (a rank's worth of each).
FailureOr<RecordBuilder::Destination>
RecordBuilder::destination(ArrayRef<int64_t> fields, Location loc) {
  FailureOr<FlatSymbolRefAttr> into = target(fields[0], loc);
  if (failed(into))
    return failure();
  Type dtype = element(fields[1]);
  if (!dtype)
    return emitError(loc) << "records: no element type for dtype code "
                          << fields[1];
  size_t rank = (fields.size() - 3) / 2;
  auto layout = LayoutAttr::getChecked(
      [&] { return emitError(loc); }, b.getContext(), fields[2],
      fields.slice(3, rank), fields.slice(3 + rank, rank));
  if (!layout)
    return failure();
  return Destination{*into, layout, TypeAttr::get(dtype)};
}

LogicalResult RecordBuilder::fieldCount(RecordOp op, size_t have, size_t need,
                                        Location loc) {
  return emitError(loc) << "records: " << kRecordOpNames[static_cast<int>(op)]
                        << " has " << have << " fields, not " << need;
}

LogicalResult RecordBuilder::buildOp(ArrayRef<int64_t> entry, Location loc) {
  auto code = static_cast<size_t>(entry.front());
  if (entry.front() < 0 || code >= static_cast<size_t>(RecordOp::count))
    return emitError(loc) << "records: unknown op code " << entry.front();
  auto op = static_cast<RecordOp>(code);
  if (isDeclarationRecord(op))
    return emitError(loc) << "records: a " << kRecordOpNames[code]
                          << " declaration inside a checkpoint";
  if (isViewRecord(op))
    return buildView(op, entry.drop_front(), loc);
  return buildEvent(op, entry.drop_front(), loc);
}

LogicalResult RecordBuilder::buildView(RecordOp op, ArrayRef<int64_t> fields,
                                       Location loc) {
  auto code = static_cast<size_t>(op);
  auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
  // result, input, input type, result type, then its ints.
  if (fields.size() < 4)
    return fieldCount(op, fields.size(), 4, loc);
  if (failed(define(fields[0], loc)))
    return failure();
  FailureOr<Value> input = value(fields[1], loc);
  FailureOr<RankedTensorType> inType = type(fields[2], loc);
  FailureOr<RankedTensorType> outType = type(fields[3], loc);
  if (failed(input) || failed(inType) || failed(outType))
    return failure();
  if (input->getType() != *inType)
    return emitError(loc) << "records: " << kRecordOpNames[code] << " input is "
                          << input->getType() << ", recorded as " << *inType;
  ArrayRef<int64_t> a = fields.drop_front(4);
  Value in = *input;
  RankedTensorType out = *outType;
  int ints = kRecordOpInts[code];
  if (ints == kRankPlusOne)
    ints = 1 + static_cast<int>(out.getRank());
  if (ints != kAnyInts && a.size() != static_cast<size_t>(ints))
    return fieldCount(op, fields.size(), 4 + ints, loc);
  Value result;
  switch (op) {
  case RecordOp::slice:
    if (options.foldWholeSlices && out == *inType && a[0] >= 0 &&
        a[0] < out.getRank() && a[1] == 0 && a[3] == 1 &&
        a[2] >= out.getDimSize(a[0]))
      result = in;
    else
      result = SliceOp::create(b, loc, out, in, i64(a[0]), i64(a[1]), i64(a[2]),
                               i64(a[3]));
    break;
  case RecordOp::select:
    result = SelectOp::create(b, loc, out, in, i64(a[0]), i64(a[1]));
    break;
  case RecordOp::transpose:
    result = TransposeOp::create(b, loc, out, in, i64(a[0]), i64(a[1]));
    break;
  case RecordOp::flatten:
    result = FlattenOp::create(b, loc, out, in, i64(a[0]), i64(a[1]));
    break;
  case RecordOp::unsqueeze:
    result = UnsqueezeOp::create(b, loc, out, in, i64(a[0]));
    break;
  case RecordOp::unflatten:
    result = UnflattenOp::create(b, loc, out, in, i64(a[0]));
    break;
  case RecordOp::permute:
    result = PermuteOp::create(b, loc, out, in, b.getDenseI64ArrayAttr(a));
    break;
  case RecordOp::squeeze:
    result = SqueezeOp::create(b, loc, out, in, b.getDenseI64ArrayAttr(a));
    break;
  case RecordOp::as_strided: {
    auto layout =
        LayoutAttr::getChecked([&] { return emitError(loc); }, b.getContext(),
                               a[0], out.getShape(), a.drop_front());
    if (!layout)
      return failure();
    result = AsStridedOp::create(b, loc, out, in, layout);
    break;
  }
  default: {
    // No attributes (view, reshape, expand, convert, alias, clone): made
    // from the op's name, which the table spells.
    std::optional<OperationName> &name = opNames[code];
    if (!name)
      name.emplace((Twine("loadplan.") + kRecordOpNames[code]).str(),
                   b.getContext());
    OperationState state(loc, *name, ValueRange{in}, TypeRange{out});
    result = b.create(state)->getResult(0);
    break;
  }
  }
  values.push_back(result);
  return success();
}

LogicalResult RecordBuilder::buildEvent(RecordOp op, ArrayRef<int64_t> fields,
                                        Location loc) {
  int fixed = kRecordOpInts[static_cast<int>(op)];
  if (fixed >= 0 && fields.size() != static_cast<size_t>(fixed))
    return fieldCount(op, fields.size(), fixed, loc);
  switch (op) {
  case RecordOp::copy: {
    // source, source type, target, dtype, offset, shape..., stride..., and
    // a transform code where the fields after the offset are odd.
    if (fields.size() < 5)
      return fieldCount(op, fields.size(), 5, loc);
    StringAttr transform;
    if ((fields.size() - 5) % 2) {
      FailureOr<StringAttr> name = transformName(fields.back(), loc);
      if (failed(name))
        return failure();
      transform = *name;
      fields = fields.drop_back();
    }
    FailureOr<Value> src = value(fields[0], loc);
    FailureOr<RankedTensorType> srcType = type(fields[1], loc);
    if (failed(src) || failed(srcType))
      return failure();
    if (src->getType() != *srcType)
      return emitError(loc) << "records: copy source is " << src->getType()
                            << ", recorded as " << *srcType;
    FailureOr<Destination> dest = destination(fields.drop_front(2), loc);
    if (failed(dest))
      return failure();
    CopyOp::create(b, loc, *src, dest->target, dest->layout, dest->dtype,
                   transform);
    return success();
  }
  case RecordOp::cat: {
    // result, result type, dim, inputs...
    if (fields.size() < 4)
      return fieldCount(op, fields.size(), 4, loc);
    FailureOr<RankedTensorType> out = type(fields[1], loc);
    FailureOr<SmallVector<Value>> inputs = valueList(fields.drop_front(3), loc);
    if (failed(define(fields[0], loc)) || failed(out) || failed(inputs))
      return failure();
    values.push_back(
        CatOp::create(b, loc, *out, *inputs, b.getI64IntegerAttr(fields[2])));
    return success();
  }
  case RecordOp::value_read: {
    // input, op
    FailureOr<Value> input = value(fields[0], loc);
    FailureOr<StringAttr> name = string(fields[1], loc);
    if (failed(input) || failed(name))
      return failure();
    ValueReadOp::create(b, loc, *input, *name);
    return success();
  }
  case RecordOp::meta_failure:
  case RecordOp::write_other: {
    // op, inputs...
    if (fields.empty())
      return fieldCount(op, 0, 1, loc);
    FailureOr<StringAttr> name = string(fields[0], loc);
    FailureOr<SmallVector<Value>> inputs = valueList(fields.drop_front(), loc);
    if (failed(name) || failed(inputs))
      return failure();
    if (op == RecordOp::meta_failure)
      MetaFailureOp::create(b, loc, *name, *inputs);
    else
      WriteOtherOp::create(b, loc, *name, *inputs);
    return success();
  }
  case RecordOp::apply: {
    // op, reason, input count, inputs..., name count, names..., then each
    // result's value and type.
    if (fields.size() < 4)
      return fieldCount(op, fields.size(), 4, loc);
    FailureOr<StringAttr> name = string(fields[0], loc);
    if (failed(name))
      return failure();
    StringAttr reason;
    if (fields[1] != -1) {
      FailureOr<StringAttr> r = string(fields[1], loc);
      if (failed(r))
        return failure();
      reason = *r;
    }
    // Each list is its length, then its items; the results follow.
    auto takeList = [](ArrayRef<int64_t> &from, ArrayRef<int64_t> &items) {
      if (from.empty() || from[0] < 0 ||
          static_cast<uint64_t>(from[0]) >= from.size())
        return false;
      items = from.slice(1, from[0]);
      from = from.drop_front(1 + from[0]);
      return true;
    };
    ArrayRef<int64_t> inputIds, nameIds, results = fields.drop_front(2);
    if (!takeList(results, inputIds) || !takeList(results, nameIds))
      return emitError(loc) << "records: apply's lists overrun its fields";
    if (results.size() % 2)
      return emitError(loc) << "records: apply's results are not pairs of "
                               "a value and a type";
    FailureOr<SmallVector<Value>> inputs = valueList(inputIds, loc);
    if (failed(inputs))
      return failure();
    SmallVector<Attribute> names;
    for (int64_t id : nameIds) {
      FailureOr<StringAttr> n = string(id, loc);
      if (failed(n))
        return failure();
      names.push_back(*n);
    }
    SmallVector<Type> resultTypes;
    for (size_t k = 0; k < results.size(); k += 2) {
      FailureOr<RankedTensorType> t = type(results[k + 1], loc);
      if (failed(t))
        return failure();
      if (results[k] != static_cast<int64_t>(values.size() - 1 + k / 2))
        return emitError(loc)
               << "records: value " << results[k] << " defined out of order";
      resultTypes.push_back(*t);
    }
    auto apply = ApplyOp::create(
        b, loc, resultTypes, *name, *inputs,
        names.empty() ? ArrayAttr() : b.getArrayAttr(names), reason);
    llvm::append_range(values, apply.getResults());
    return success();
  }
  case RecordOp::inplace_write: {
    // op, target (-1: none), inputs...
    if (fields.size() < 2)
      return fieldCount(op, fields.size(), 2, loc);
    FailureOr<StringAttr> name = string(fields[0], loc);
    FailureOr<SmallVector<Value>> inputs = valueList(fields.drop_front(2), loc);
    if (failed(name) || failed(inputs))
      return failure();
    FlatSymbolRefAttr into;
    if (fields[1] != -1) {
      FailureOr<FlatSymbolRefAttr> t = target(fields[1], loc);
      if (failed(t))
        return failure();
      into = *t;
    }
    InplaceWriteOp::create(b, loc, *name, *inputs, into);
    return success();
  }
  case RecordOp::read_target: {
    // target, op
    FailureOr<FlatSymbolRefAttr> from = target(fields[0], loc);
    FailureOr<StringAttr> name = string(fields[1], loc);
    if (failed(from) || failed(name))
      return failure();
    ReadTargetOp::create(b, loc, *from, *name);
    return success();
  }
  case RecordOp::constant_write: {
    // op, target, dtype, offset, shape..., stride...
    if (fields.size() < 4 || (fields.size() - 4) % 2)
      return fieldCount(op, fields.size(), 4, loc);
    FailureOr<StringAttr> name = string(fields[0], loc);
    FailureOr<Destination> dest = destination(fields.drop_front(1), loc);
    if (failed(name) || failed(dest))
      return failure();
    ConstantWriteOp::create(b, loc, *name, dest->target, dest->layout,
                            dest->dtype);
    return success();
  }
  default:
    llvm_unreachable("views and declarations are built elsewhere");
  }
}

LogicalResult RecordBuilder::buildDeclaration(RecordOp op,
                                              ArrayRef<int64_t> fields,
                                              Location loc) {
  if (op == RecordOp::storage) {
    // size
    if (fields.size() != 1)
      return fieldCount(op, fields.size(), 1, loc);
    auto symbol = b.getStringAttr("s" + Twine(storages.size()));
    StorageOp::create(b, loc, symbol, b.getI64IntegerAttr(fields[0]));
    storages.push_back(FlatSymbolRefAttr::get(symbol));
    return success();
  }
  // module, tensor, storage, byte offset, type, stride...
  if (fields.size() < 5)
    return fieldCount(op, fields.size(), 5, loc);
  FailureOr<StringAttr> moduleName = string(fields[0], loc);
  FailureOr<StringAttr> tensorName = string(fields[1], loc);
  FailureOr<RankedTensorType> tensorType = type(fields[4], loc);
  if (failed(moduleName) || failed(tensorName) || failed(tensorType))
    return failure();
  if (fields[2] < 0 || static_cast<size_t>(fields[2]) >= storages.size())
    return emitError(loc) << "records: storage " << fields[2]
                          << " is not declared";
  auto symbol = b.getStringAttr("t" + Twine(targets.size()));
  TargetOp::create(b, loc, symbol, *moduleName, *tensorName,
                   storages[fields[2]], b.getI64IntegerAttr(fields[3]),
                   b.getDenseI64ArrayAttr(fields.drop_front(5)),
                   TypeAttr::get(*tensorType));
  targets.push_back(FlatSymbolRefAttr::get(symbol));
  return success();
}

/// The storages and targets, each at the line MLIR prints it on below a
/// title line (as the IR text of a capture or an import has it: the
/// `module {` line is 2), so that what is said of a target cites its line
/// in that text.
LogicalResult RecordBuilder::buildDeclarations() {
  ArrayRef<int64_t> ops = records.declarations;
  unsigned line = 3;
  while (!ops.empty()) {
    Location loc = FileLineColLoc::get(b.getContext(), sourceName, line++, 3);
    int64_t n = ops.front();
    if (n < 1 || static_cast<size_t>(n) >= ops.size())
      return emitError(loc) << "records: a declaration of " << n
                            << " fields overruns the declarations";
    int64_t code = ops[1];
    if (code < 0 || code >= static_cast<int64_t>(RecordOp::count) ||
        !isDeclarationRecord(static_cast<RecordOp>(code)))
      return emitError(loc)
             << "records: op code " << code << " is no declaration";
    if (failed(buildDeclaration(static_cast<RecordOp>(code),
                                ops.slice(2, n - 1), loc)))
      return failure();
    ops = ops.drop_front(1 + n);
  }
  return success();
}

FailureOr<CheckpointOp>
RecordBuilder::buildCheckpoint(const RecordedModule::Checkpoint &ck) {
  StringRef name = ck.name;
  Location loc = options.nameLocations
                     ? Location(NameLoc::get(b.getStringAttr(name)))
                     : Location(b.getUnknownLoc());
  FailureOr<RankedTensorType> tensorType = type(ck.type, loc);
  if (failed(tensorType))
    return failure();
  auto op = CheckpointOp::create(b, loc, name, *tensorType);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(&op.getBlock());
  values.assign(1, op.getIncoming());
  if (ck.begin > ck.end || ck.end > records.ops.size())
    return emitError(loc) << "records: ops out of range";
  ArrayRef<int64_t> ops(records.ops.data() + ck.begin, ck.end - ck.begin);
  while (!ops.empty()) {
    int64_t n = ops.front();
    if (n < 1 || static_cast<size_t>(n) >= ops.size())
      return emitError(loc)
             << "records: an op of " << n << " fields overruns its checkpoint";
    if (failed(buildOp(ops.slice(1, n), loc)))
      return failure();
    ops = ops.drop_front(1 + n);
  }
  return op;
}

/// Whether `ck` can share a checkpoint with others: its records are views
/// and at most one copy, which is well formed. The key is then its type
/// and its records with the copy's offset left out, and `offset` and
/// `itemSize` the copy's offset and element size (0 and 1 without a copy:
/// another rank's expert, say, which its loader only narrows). Anything
/// else is built on its own, and the builder or the verifier says what is
/// wrong with it.
bool RecordBuilder::groupKey(const RecordedModule::Checkpoint &ck,
                             int64_t &offset, int64_t &itemSize) {
  if (ck.begin > ck.end || ck.end > records.ops.size() || ck.type < 0 ||
      static_cast<size_t>(ck.type) >= types.size())
    return false;
  ArrayRef<int64_t> ops(records.ops.data() + ck.begin, ck.end - ck.begin);
  key.assign(1, ck.type);
  offset = 0;
  itemSize = 1;
  bool copied = false;
  while (!ops.empty()) {
    int64_t n = ops.front();
    if (n < 1 || static_cast<size_t>(n) >= ops.size())
      return false; // a record that does not fit
    ArrayRef<int64_t> entry = ops.slice(1, n);
    int64_t code = entry.front();
    if (code < 0 || code > static_cast<int64_t>(RecordOp::copy))
      return false; // an event (or no op): a checkpoint of its own
    size_t at = key.size();
    key.append(ops.begin(), ops.begin() + 1 + n);
    if (static_cast<RecordOp>(code) == RecordOp::copy) {
      // code, source, source type, target, dtype, offset, shape, stride,
      // and a transform code when they are odd after the offset
      if (copied || entry.size() < 6)
        return false;
      Type dtype = element(entry[4]);
      itemSize = dtype ? getItemSize(dtype) : 0;
      offset = entry[5];
      if (itemSize <= 0 || offset < 0)
        return false;
      key[at + 6] = 0;
      copied = true;
    }
    ops = ops.drop_front(1 + n);
  }
  return true;
}

LogicalResult RecordBuilder::run() {
  b.setInsertionPointToEnd(module.getBody());
  if (failed(makeTypes()) || failed(buildDeclarations()))
    return failure();
  // A name's position in arrival order is its index.
  for (auto [position, ck] : llvm::enumerate(records.checkpoints)) {
    int64_t offset = 0, itemSize = 1, shift = 0;
    bool grouped = options.groupNames && groupKey(ck, offset, itemSize);
    StringRef keyBytes(reinterpret_cast<const char *>(key.data()),
                       key.size() * sizeof(int64_t));
    if (grouped) {
      auto it = groups.find(keyBytes);
      if (it != groups.end() &&
          !llvm::MulOverflow(offset - it->second.offset, itemSize, shift)) {
        CheckpointOp::Properties &props = it->second.op.getProperties();
        props.member_names.emplace_back(ck.name);
        props.member_positions.push_back(position);
        props.member_shifts.push_back(shift);
        continue;
      }
    }
    FailureOr<CheckpointOp> op = buildCheckpoint(ck);
    if (failed(op))
      return failure();
    if (grouped)
      groups.try_emplace(keyBytes, Group{*op, offset});
  }
  return success();
}

OwningOpRef<ModuleOp> mlir::loadplan::buildRecordedModule(
    MLIRContext *context, const RecordedModule &records, StringRef sourceName,
    const RecordBuildOptions &options) {
  context->getOrLoadDialect<LoadPlanDialect>();
  // At the line of `module {` below a title line, as its text has it.
  OwningOpRef<ModuleOp> module =
      ModuleOp::create(FileLineColLoc::get(context, sourceName, 2, 1));
  if (failed(RecordBuilder(*module, records, sourceName, options).run()))
    return nullptr;
  return module;
}
