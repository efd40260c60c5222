//===- RecordBuilder.cpp - A recorded loader into a module ------*- C++ -*-===//
//
// Each record becomes the op it stands for (RecordOps.h has the fields),
// without text; each line of text is parsed in its place, among the values
// the records before it made.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Records/RecordBuilder.h"
#include "loadplan/Records/RecordOps.h"

#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanAttrs.h"
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanDialect.h"
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanOps.h"
#include "loadplan/Transforms/Plan.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Parser/Parser.h"

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
                const RecordBuildOptions &options)
      : module(module), records(records), options(options),
        b(module.getContext()), dtypes(module.getContext()) {}

  LogicalResult run();

private:
  LogicalResult makeTypes();
  Type element(int64_t dtype);
  FailureOr<CheckpointOp> buildCheckpoint(const RecordedModule::Checkpoint &ck);
  bool groupKey(const RecordedModule::Checkpoint &ck, int64_t &offset,
                int64_t &itemSize);
  LogicalResult buildOp(ArrayRef<int64_t> entry, Location loc);
  LogicalResult parseLines(ArrayRef<int64_t> lineIndices, StringRef name,
                           Location loc);
  FailureOr<Value> value(int64_t index, Location loc);
  FailureOr<RankedTensorType> type(int64_t index, Location loc);

  ModuleOp module;
  const RecordedModule &records;
  RecordBuildOptions options;
  OpBuilder b;
  loadplan::DtypeCodes dtypes;
  SmallVector<RankedTensorType> types;
  /// The values of the block being built; [0] is the incoming tensor.
  SmallVector<Value> values;
  SmallVector<FlatSymbolRefAttr> targets;
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

FailureOr<Value> RecordBuilder::value(int64_t index, Location loc) {
  // -1 is the incoming tensor, values[0].
  if (index < -1 || index + 1 >= static_cast<int64_t>(values.size()))
    return emitError(loc) << "records: value " << index
                          << " is not defined before its use";
  return values[index + 1];
}

LogicalResult RecordBuilder::buildOp(ArrayRef<int64_t> entry, Location loc) {
  auto code = static_cast<size_t>(entry.front());
  if (entry.front() < 0 || code >= static_cast<size_t>(RecordOp::count))
    return emitError(loc) << "records: unknown op code "
                          << entry.front();
  auto op = static_cast<RecordOp>(code);
  ArrayRef<int64_t> fields = entry.drop_front();
  auto tooShort = [&](size_t need) -> LogicalResult {
    return emitError(loc) << "records: " << kRecordOpNames[code]
                          << " has " << fields.size() << " fields, not "
                          << need;
  };
  auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };

  if (op == RecordOp::copy) {
    // source, source type, target, dtype, offset, shape..., stride...
    if (fields.size() < 5 || (fields.size() - 5) % 2)
      return tooShort(5);
    FailureOr<Value> src = value(fields[0], loc);
    FailureOr<RankedTensorType> srcType = type(fields[1], loc);
    if (failed(src) || failed(srcType))
      return failure();
    if (src->getType() != *srcType)
      return emitError(loc) << "records: copy source is "
                            << src->getType() << ", recorded as " << *srcType;
    int64_t target = fields[2];
    if (target < 0 || static_cast<size_t>(target) >= targets.size())
      return emitError(loc)
             << "records: target " << target << " is not declared";
    Type dtype = element(fields[3]);
    if (!dtype)
      return emitError(loc) << "records: no element type for dtype "
                               "code "
                            << fields[3];
    size_t rank = (fields.size() - 5) / 2;
    ArrayRef<int64_t> shape = fields.slice(5, rank);
    ArrayRef<int64_t> stride = fields.slice(5 + rank, rank);
    auto layout =
        LayoutAttr::getChecked([&] { return emitError(loc); }, b.getContext(),
                               fields[4], shape, stride);
    if (!layout)
      return failure();
    CopyOp::create(b, loc, *src, targets[target], layout, TypeAttr::get(dtype));
    return success();
  }

  // A view op: result, input, input type, result type, then its ints.
  if (fields.size() < 4)
    return tooShort(4);
  if (fields[0] + 1 != static_cast<int64_t>(values.size()))
    return emitError(loc) << "records: value " << fields[0]
                          << " defined out of order";
  FailureOr<Value> input = value(fields[1], loc);
  FailureOr<RankedTensorType> inType = type(fields[2], loc);
  FailureOr<RankedTensorType> outType = type(fields[3], loc);
  if (failed(input) || failed(inType) || failed(outType))
    return failure();
  if (input->getType() != *inType)
    return emitError(loc) << "records: " << kRecordOpNames[code]
                          << " input is " << input->getType()
                          << ", recorded as " << *inType;
  ArrayRef<int64_t> a = fields.drop_front(4);
  auto need = [&](size_t n) -> LogicalResult {
    if (a.size() == n)
      return success();
    return tooShort(4 + n);
  };
  Value in = *input;
  RankedTensorType out = *outType;
  int ints = kRecordOpInts[code];
  if (ints == kRankPlusOne)
    ints = 1 + static_cast<int>(out.getRank());
  if (ints != kAnyInts && failed(need(ints)))
    return failure();
  Value result;
  switch (op) {
  case RecordOp::slice:
    if (options.foldWholeSlices && out == *inType && a[0] >= 0 && a[0] < out.getRank() && a[1] == 0 &&
        a[3] == 1 && a[2] >= out.getDimSize(a[0]))
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
  case RecordOp::view:
  case RecordOp::reshape:
  case RecordOp::expand:
  case RecordOp::convert:
  case RecordOp::alias:
  case RecordOp::clone: {
    // No attributes: made from the op's name, which the table spells.
    std::optional<OperationName> &name = opNames[code];
    if (!name)
      name.emplace((Twine("loadplan.") + kRecordOpNames[code]).str(),
                   b.getContext());
    OperationState state(loc, *name, ValueRange{in}, TypeRange{out});
    result = b.create(state)->getResult(0);
    break;
  }
  case RecordOp::copy:
  case RecordOp::count:
    llvm_unreachable("handled above");
  }
  values.push_back(result);
  return success();
}

/// Parses the lines of text `lineIndices` (indices into records.lines) of
/// checkpoint `name` and puts their ops at the builder's insertion point:
/// in a block whose arguments stand for the values built so far, under the
/// names the lines use (%w, %0, ...), which the parsed ops then use in their
/// stead. Their results are the block's next values.
LogicalResult RecordBuilder::parseLines(ArrayRef<int64_t> lineIndices,
                                        StringRef name, Location loc) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "\"builtin.module\"() ({\n^bb0(";
  for (auto [i, v] : llvm::enumerate(values)) {
    if (i)
      os << ", %" << i - 1;
    else
      os << "%w";
    os << ": " << v.getType();
  }
  os << "):\n";
  for (int64_t index : lineIndices) {
    if (index < 0 || static_cast<size_t>(index) >= records.lines.size())
      return emitError(loc) << "records: line " << index
                            << " is not in the table of "
                            << records.lines.size();
    os << records.lines[index] << "\n";
  }
  os << "}) : () -> ()\n";
  Block scratch;
  ParserConfig config(b.getContext(), /*verifyAfterParse=*/false);
  if (failed(parseSourceString(text, &scratch, config, name)))
    return failure();
  Block &body = scratch.front().getRegion(0).front();
  for (auto [arg, v] : llvm::zip_equal(body.getArguments(), values))
    arg.replaceAllUsesWith(v);
  for (Operation &op : llvm::make_early_inc_range(body)) {
    op.moveBefore(b.getInsertionBlock(), b.getInsertionPoint());
    op.walk([&](Operation *nested) { nested->setLoc(loc); });
    llvm::append_range(values, op.getResults());
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
  // Lines of text next to one another are parsed together.
  SmallVector<int64_t> lines;
  auto flushLines = [&]() -> LogicalResult {
    if (lines.empty())
      return success();
    LogicalResult parsed = parseLines(lines, name, loc);
    lines.clear();
    return parsed;
  };
  while (!ops.empty()) {
    int64_t n = ops.front();
    if (n == 0 && ops.size() >= 2) {
      lines.push_back(ops[1]);
      ops = ops.drop_front(2);
      continue;
    }
    if (n < 1 || static_cast<size_t>(n) >= ops.size())
      return emitError(loc) << "records: an op of " << n
                            << " fields overruns its checkpoint";
    if (failed(flushLines()) || failed(buildOp(ops.slice(1, n), loc)))
      return failure();
    ops = ops.drop_front(1 + n);
  }
  if (failed(flushLines()))
    return failure();
  return op;
}

/// Whether `ck` can share a checkpoint with others: its records are views
/// and at most one copy, which is well formed, and it has no line of text. The key is then its type
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
      return false; // a line of text, or a record that does not fit
    ArrayRef<int64_t> entry = ops.slice(1, n);
    int64_t code = entry.front();
    if (code < 0 || code >= static_cast<int64_t>(RecordOp::count))
      return false;
    size_t at = key.size();
    key.append(ops.begin(), ops.begin() + 1 + n);
    if (static_cast<RecordOp>(code) == RecordOp::copy) {
      // code, source, source type, target, dtype, offset, shape, stride
      if (copied || entry.size() < 6 || (entry.size() - 6) % 2)
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
  if (failed(makeTypes()))
    return failure();
  for (TargetOp target : module.getOps<TargetOp>())
    targets.push_back(FlatSymbolRefAttr::get(target.getSymNameAttr()));
  b.setInsertionPointToEnd(module.getBody());
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

OwningOpRef<ModuleOp>
mlir::loadplan::buildRecordedModule(MLIRContext *context,
                                    const RecordedModule &records,
                                    StringRef sourceName,
                                    const RecordBuildOptions &options) {
  context->getOrLoadDialect<LoadPlanDialect>();
  // The declarations are verified with the rest once the module is whole:
  // the checkpoints name their targets, and are not there yet.
  ParserConfig config(context, /*verifyAfterParse=*/false);
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(records.text, config, sourceName);
  if (!module)
    return nullptr;
  if (failed(RecordBuilder(*module, records, options).run()))
    return nullptr;
  return module;
}
