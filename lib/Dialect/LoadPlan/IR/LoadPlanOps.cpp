//===- LoadPlanOps.cpp - loadplan operations ------------------------------===//
//
// Verifiers: torch's shape rules for view ops, and the bounds of every
// layout, box and region against the targets and storages they name.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanOps.h"
#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"
#include "loadplan/plan_format.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/Support/MathExtras.h"

#include <limits>

using namespace mlir;
using namespace mlir::loadplan;

#define GET_OP_CLASSES
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// Looks up the target `ref` names, with an error when there is none.
static TargetOp lookupTarget(Operation *op, FlatSymbolRefAttr ref,
                             SymbolTableCollection &symbols) {
  auto target = symbols.lookupNearestSymbolFrom<TargetOp>(op, ref);
  if (!target)
    op->emitOpError() << ref << " does not name a loadplan.target";
  return target;
}

/// Checks that elements [offset, offset + extent) of `itemSize` bytes each,
/// relative to `target`'s first byte, lie inside its storage.
static LogicalResult checkInStorage(Operation *op, TargetOp target,
                                    int64_t offset, int64_t extent,
                                    int64_t itemSize,
                                    SymbolTableCollection &symbols,
                                    StringRef what) {
  if (extent == 0)
    return success();
  auto storage =
      symbols.lookupNearestSymbolFrom<StorageOp>(target, target.getStorageAttr());
  if (!storage)
    return success(); // the target's own verifier reports it
  int64_t size = storage.getSizeAttr().getInt();
  int64_t first, length, end;
  if (llvm::MulOverflow(offset, itemSize, first) ||
      llvm::AddOverflow(first, target.getByteOffsetAttr().getInt(), first) ||
      llvm::MulOverflow(extent, itemSize, length) ||
      llvm::AddOverflow(first, length, end))
    return op->emitOpError()
           << what << " reaches past byte "
           << std::numeric_limits<int64_t>::max() << " of storage @"
           << storage.getSymName() << ", which has " << size << " bytes";
  if (end > size)
    return op->emitOpError() << what << " covers bytes [" << first << ", "
                             << end << ") of storage @" << storage.getSymName()
                             << ", which has " << size << " bytes";
  return success();
}

/// checkInStorage for a copy or write of a checkpoint, at each of its names:
/// the checkpoint's members move the elements by their shifts, which must
/// be whole elements and keep them inside the storage.
static LogicalResult checkMovedInStorage(Operation *op, TargetOp target,
                                         int64_t offset, int64_t extent,
                                         int64_t itemSize,
                                         SymbolTableCollection &symbols,
                                         StringRef what) {
  auto checkpoint = op->getParentOfType<CheckpointOp>();
  if (!checkpoint || !checkpoint.hasMembers() || extent == 0 || itemSize <= 0)
    return checkInStorage(op, target, offset, extent, itemSize, symbols, what);
  for (size_t i = 1; i < checkpoint.getNumNames(); ++i)
    if (checkpoint.getShiftAt(i) % itemSize)
      return op->emitOpError()
             << "member '" << checkpoint.getNameAt(i) << "' moves the " << what
             << " by " << checkpoint.getShiftAt(i)
             << " bytes, not a whole number of its " << itemSize
             << "-byte elements";
  // The names' bytes lie between those of the least and greatest shift.
  auto [least, most] = checkpoint.getShiftRange();
  for (int64_t shift : {least, most}) {
    int64_t moved;
    if (llvm::AddOverflow(offset, shift / itemSize, moved) || moved < 0)
      return op->emitOpError()
             << "a member's shift of " << shift << " bytes moves the " << what
             << " out of its target's storage";
    if (failed(checkInStorage(op, target, moved, extent, itemSize, symbols,
                              what)))
      return failure();
  }
  return success();
}

/// Checks that `type` has a byte size.
static LogicalResult checkDtype(Operation *op, Type type) {
  if (getItemSize(type) == 0)
    return op->emitOpError() << "dtype " << type << " has no byte size";
  return success();
}

/// Checks a view op's result against the shape `expected` torch gives.
static LogicalResult checkViewResult(Operation *op, Value input, Value result,
                                     ArrayRef<int64_t> expected) {
  RankedTensorType in = tensorType(input), out = tensorType(result);
  if (in.getElementType() != out.getElementType())
    return op->emitOpError() << "result dtype " << out.getElementType()
                             << " differs from input dtype "
                             << in.getElementType();
  if (out.getShape() != expected) {
    InFlightDiagnostic diag = op->emitOpError() << "result shape [";
    llvm::interleaveComma(out.getShape(), diag);
    diag << "] differs from the shape torch gives, [";
    llvm::interleaveComma(expected, diag);
    return diag << "]";
  }
  return success();
}

/// Applies a torch view rule to the contiguous layout of `input`'s shape and
/// checks the op's result against it.
static LogicalResult
verifyView(Operation *op, Value input, Value result,
           function_ref<LogicalResult(Strided &, std::string &)> rule) {
  Strided s = Strided::contiguous(tensorType(input).getShape());
  std::string why;
  if (failed(rule(s, why)))
    return op->emitOpError() << why;
  return checkViewResult(op, input, result, s.shape);
}

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

LogicalResult StorageOp::verify() {
  // I64Attr getters return uint64_t: read the signed value to check it.
  int64_t size = getSizeAttr().getInt();
  if (size < 0)
    return emitOpError() << "size must be non-negative, got " << size;
  return success();
}

int64_t TargetOp::getItemSize() {
  return loadplan::getItemSize(getTensorType().getElementType());
}

/// The byte extent of a target, or std::nullopt when it overflows int64_t.
static std::optional<int64_t> checkedByteExtent(TargetOp target) {
  std::optional<int64_t> extent =
      checkedExtent(target.getTensorType().getShape(), target.getStride());
  int64_t bytes;
  if (!extent || llvm::MulOverflow(*extent, target.getItemSize(), bytes))
    return std::nullopt;
  return bytes;
}

int64_t TargetOp::getByteExtent() {
  return checkedByteExtent(*this).value_or(std::numeric_limits<int64_t>::max());
}

LogicalResult TargetOp::verify() {
  RankedTensorType type = getTensorType();
  if (failed(checkDtype(*this, type.getElementType())))
    return failure();
  if (getStride().size() != static_cast<size_t>(type.getRank()))
    return emitOpError() << "has " << getStride().size()
                         << " strides for a tensor of " << type.getRank()
                         << " dims";
  for (auto [k, s] : llvm::enumerate(getStride()))
    if (s < 0)
      return emitOpError() << "stride of dim " << k
                           << " must be non-negative, got " << s;
  int64_t byteOffset = getByteOffsetAttr().getInt();
  if (byteOffset < 0)
    return emitOpError() << "byte_offset must be non-negative, got "
                         << byteOffset;
  if (byteOffset % getItemSize())
    return emitOpError() << "byte_offset " << byteOffset
                         << " is not a multiple of its element size "
                         << getItemSize();
  if (!checkedByteExtent(*this))
    return emitOpError() << "spans more than "
                         << std::numeric_limits<int64_t>::max() << " bytes";
  return success();
}

LogicalResult TargetOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto storage = symbols.lookupNearestSymbolFrom<StorageOp>(*this,
                                                            getStorageAttr());
  if (!storage)
    return emitOpError() << getStorageAttr()
                         << " does not name a loadplan.storage";
  int64_t size = storage.getSizeAttr().getInt();
  int64_t end;
  if (llvm::AddOverflow(getByteOffsetAttr().getInt(), getByteExtent(), end))
    return emitOpError() << "ends past byte "
                         << std::numeric_limits<int64_t>::max()
                         << " of storage @" << storage.getSymName()
                         << ", which has " << size << " bytes";
  if (getByteExtent() > 0 && end > size)
    return emitOpError() << "ends at byte " << end << " of storage @"
                         << storage.getSymName() << ", which has " << size
                         << " bytes";
  return success();
}

void CheckpointOp::build(OpBuilder &builder, OperationState &state,
                         StringRef name, RankedTensorType type) {
  // As properties: attributes would go through a DictionaryAttr first.
  Properties &props = state.getOrAddProperties<Properties>();
  props.name = name.str();
  props.type = TypeAttr::get(type);
  Region *body = state.addRegion();
  Block *block = new Block();
  block->addArgument(type, state.location);
  body->push_back(block);
}

ParseResult CheckpointOp::parse(OpAsmParser &parser, OperationState &result) {
  std::string name;
  Type type;
  OpAsmParser::Argument arg;
  if (parser.parseString(&name) || parser.parseColonType(type) || parser.parseLParen() ||
      parser.parseArgument(arg) || parser.parseRParen())
    return failure();
  Properties &props = result.getOrAddProperties<Properties>();
  if (succeeded(parser.parseOptionalKeyword("members"))) {
    auto member = [&]() -> ParseResult {
      std::string memberName;
      int64_t position, shift;
      if (parser.parseString(&memberName) || parser.parseKeyword("at") ||
          parser.parseInteger(position) || parser.parseKeyword("moved") ||
          parser.parseInteger(shift))
        return failure();
      props.member_names.push_back(std::move(memberName));
      props.member_positions.push_back(position);
      props.member_shifts.push_back(shift);
      return success();
    };
    if (parser.parseCommaSeparatedList(OpAsmParser::Delimiter::Square, member))
      return failure();
  }
  if (parser.parseOptionalAttrDictWithKeyword(result.attributes))
    return failure();
  props.name = std::move(name);
  props.type = TypeAttr::get(type);
  arg.type = type;
  Region *body = result.addRegion();
  if (parser.parseRegion(*body, {arg}))
    return failure();
  if (body->empty())
    body->push_back(new Block());
  return success();
}

void CheckpointOp::print(OpAsmPrinter &p) {
  p << ' ';
  p.printString(getName());
  p << " : " << getType() << " (";
  p.printRegionArgument(getIncoming(), {}, /*omitType=*/true);
  p << ')';
  if (hasMembers()) {
    p << " members [";
    for (size_t i = 1; i < getNumNames(); ++i) {
      if (i > 1)
        p << ", ";
      p.printString(getNameAt(i));
      p << " at " << getMemberPositions()[i - 1] << " moved " << getShiftAt(i);
    }
    p << ']';
  }
  p.printOptionalAttrDictWithKeyword((*this)->getAttrs(),
                                     {getTypeAttrName()});
  p << ' ';
  // The entry block always exists (the parser creates it with the incoming
  // tensor), so an empty one prints as `{}` and parses back the same.
  p.printRegion(getBody(), /*printEntryBlockArgs=*/false,
                /*printBlockTerminators=*/false, /*printEmptyBlock=*/false);
}

void CheckpointOp::getAsmBlockArgumentNames(Region &region,
                                            OpAsmSetValueNameFn setNameFn) {
  if (!region.empty() && region.front().getNumArguments() == 1)
    setNameFn(region.front().getArgument(0), "w");
}

LogicalResult CheckpointOp::verify() {
  // The name is a property, which a generic op may leave out (or give in
  // its attribute dictionary, which is not where properties are): it is
  // then empty, and no checkpoint has an empty name.
  if (getName().empty())
    return emitOpError() << "has an empty name (the generic form gives it "
                            "as a property: <{name = \"...\", ...}>)";
  if (failed(checkDtype(*this, getTensorType().getElementType())))
    return failure();
  Block &block = getBody().front();
  if (block.getNumArguments() != 1 ||
      block.getArgument(0).getType() != getType())
    return emitOpError() << "body must take one argument of the checkpoint "
                            "type "
                         << getType();
  if (!hasMembers() && getMemberPositions().empty() &&
      getMemberShifts().empty())
    return success();
  size_t members = getMemberNames().size();
  if (getMemberPositions().size() != members ||
      getMemberShifts().size() != members)
    return emitOpError() << "has " << members << " member names, "
                         << getMemberPositions().size() << " positions and "
                         << getMemberShifts().size() << " shifts";
  for (auto [memberName, position] :
       llvm::zip_equal(getMemberNames(), getMemberPositions())) {
    if (memberName.empty())
      return emitOpError() << "has a member with an empty name";
    if (position < 0)
      return emitOpError() << "member '" << memberName << "' is at position "
                           << position << ", before the first";
  }
  // What a member does must not depend on when it arrives or on the other
  // names: the events that do are in checkpoints of their own.
  for (Operation &op : block)
    if (isa<ValueReadOp, ApplyOp, MetaFailureOp, InplaceWriteOp, ReadTargetOp,
            WriteOtherOp, ConstantWriteOp>(op))
      return op.emitOpError()
             << "is in a checkpoint with members, which holds only views, "
                "copies, writes and fallbacks";
  return success();
}

std::pair<int64_t, int64_t> CheckpointOp::getShiftRange() {
  std::pair<int64_t, int64_t> range{0, 0};
  for (int64_t shift : getMemberShifts()) {
    range.first = std::min(range.first, shift);
    range.second = std::max(range.second, shift);
  }
  return range;
}

//===----------------------------------------------------------------------===//
// View ops
//===----------------------------------------------------------------------===//

LogicalResult SliceOp::verify() {
  return verifyView(*this, getInput(), getResult(),
                    [&](Strided &s, std::string &why) {
                      return applySlice(s, getDim(), getStart(), getEnd(),
                                        getStep(), why);
                    });
}

LogicalResult SelectOp::verify() {
  return verifyView(*this, getInput(), getResult(),
                    [&](Strided &s, std::string &why) {
                      return applySelect(s, getDim(), getIndex(), why);
                    });
}

/// view and reshape: any shape with the same number of elements (whether
/// strides allow a view depends on the input's layout: fold-views decides).
static LogicalResult verifyReshape(Operation *op, Value input, Value result) {
  RankedTensorType in = tensorType(input), out = tensorType(result);
  if (in.getNumElements() != out.getNumElements())
    return op->emitOpError()
           << "cannot view " << in.getNumElements() << " elements as "
           << out.getNumElements();
  return checkViewResult(op, input, result, out.getShape());
}

LogicalResult ViewShapeOp::verify() {
  return verifyReshape(*this, getInput(), getResult());
}

LogicalResult ReshapeOp::verify() {
  return verifyReshape(*this, getInput(), getResult());
}

LogicalResult TransposeOp::verify() {
  return verifyView(*this, getInput(), getResult(),
                    [&](Strided &s, std::string &why) {
                      return applyTranspose(s, getDim0(), getDim1(), why);
                    });
}

LogicalResult PermuteOp::verify() {
  return verifyView(*this, getInput(), getResult(),
                    [&](Strided &s, std::string &why) {
                      return applyPermute(s, getDims(), why);
                    });
}

LogicalResult ExpandOp::verify() {
  ArrayRef<int64_t> shape = tensorType(getResult()).getShape();
  return verifyView(*this, getInput(), getResult(),
                    [&](Strided &s, std::string &why) {
                      return applyExpand(s, shape, why);
                    });
}

LogicalResult UnsqueezeOp::verify() {
  return verifyView(*this, getInput(), getResult(),
                    [&](Strided &s, std::string &why) {
                      return applyUnsqueeze(s, getDim(), why);
                    });
}

LogicalResult SqueezeOp::verify() {
  return verifyView(*this, getInput(), getResult(),
                    [&](Strided &s, std::string &why) {
                      return applySqueeze(s, getDims(), why);
                    });
}

LogicalResult FlattenOp::verify() {
  std::string why;
  FailureOr<SmallVector<int64_t>> shape = flattenShape(
      tensorType(getInput()).getShape(), getStartDim(), getEndDim(), why);
  if (failed(shape))
    return emitOpError() << why;
  return checkViewResult(*this, getInput(), getResult(), *shape);
}

LogicalResult UnflattenOp::verify() {
  std::string why;
  if (failed(checkUnflatten(tensorType(getInput()).getShape(),
                            tensorType(getResult()).getShape(), getDim(),
                            why)))
    return emitOpError() << why;
  return checkViewResult(*this, getInput(), getResult(),
                         tensorType(getResult()).getShape());
}

LogicalResult AsStridedOp::verify() {
  LayoutAttr layout = getLayout();
  if (failed(checkViewResult(*this, getInput(), getResult(),
                             layout.getShape())))
    return failure();
  // On the incoming tensor the storage is known: the checkpoint tensor.
  if (isa<BlockArgument>(getInput())) {
    int64_t numel = tensorType(getInput()).getNumElements();
    if (layout.getNumElements() > 0 &&
        layout.getOffset() + layout.getExtent() > numel)
      return emitOpError() << "layout reaches element "
                           << layout.getOffset() + layout.getExtent() - 1
                           << " of a checkpoint tensor of " << numel
                           << " elements";
  }
  return success();
}

LogicalResult AliasOp::verify() {
  return checkViewResult(*this, getInput(), getResult(),
                         tensorType(getInput()).getShape());
}

LogicalResult CloneOp::verify() {
  return checkViewResult(*this, getInput(), getResult(),
                         tensorType(getInput()).getShape());
}

//===----------------------------------------------------------------------===//
// Transforms (copies and writes through one)
//===----------------------------------------------------------------------===//

uint32_t loadplan::getTransformCode(std::optional<StringRef> name) {
  if (!name)
    return LOADPLAN_TRANSFORM_NONE;
#define LOADPLAN_TRANSFORM_CODE_(e, code, text, dtype, rows, cols, words)      \
  if (*name == text)                                                           \
    return code;
  LOADPLAN_TRANSFORMS(LOADPLAN_TRANSFORM_CODE_)
#undef LOADPLAN_TRANSFORM_CODE_
  return LOADPLAN_TRANSFORM_NONE;
}

namespace {
/// A transform's atom (LOADPLAN_TRANSFORMS): `rows` x `cols` elements of
/// `dtype` that become `words` elements.
struct TransformAtom {
  StringRef name;
  uint32_t dtype;
  int64_t rows, cols, words;

  /// Whether `type` is the element type the transform reads and writes.
  bool isElement(Type type) const {
    std::string text;
    llvm::raw_string_ostream(text) << type;
    return text == loadplan_dtype_mlir_type(dtype);
  }
};
} // namespace

/// The atom of transform `name`, or an error at `op` that lists the known
/// transforms.
static FailureOr<TransformAtom> lookupTransform(Operation *op, StringRef name) {
  TransformAtom atom{name, 0, 0, 0, 0};
  if (loadplan_transform_atom(loadplan::getTransformCode(name), &atom.dtype,
                              &atom.rows, &atom.cols, &atom.words))
    return atom;
  std::string known;
#define LOADPLAN_TRANSFORM_KNOWN_(e, c, text, d, r, k, w)                      \
  known += std::string(known.empty() ? "" : ", ") + "\"" text "\"";
  LOADPLAN_TRANSFORMS(LOADPLAN_TRANSFORM_KNOWN_)
#undef LOADPLAN_TRANSFORM_KNOWN_
  return op->emitOpError() << "unknown transform \"" << name
                           << "\" (known: " << known << ")";
}

/// Checks that `tensor` (the op's `what`) is what `atom`'s transform
/// reads: a 2-d tensor of its element type.
static LogicalResult checkTransformInput(Operation *op,
                                         const TransformAtom &atom,
                                         RankedTensorType tensor,
                                         StringRef what) {
  if (tensor.getRank() != 2 || !atom.isElement(tensor.getElementType()))
    return op->emitOpError()
           << "transform \"" << atom.name << "\" reads a 2-d "
           << loadplan_dtype_mlir_type(atom.dtype) << " " << what << ", not "
           << tensor;
  return success();
}

/// Checks that `rows` x `cols` elements (the op's `what`) are whole atoms.
static LogicalResult checkWholeAtoms(Operation *op, const TransformAtom &atom,
                                     int64_t rows, int64_t cols,
                                     StringRef what) {
  if (rows % atom.rows || cols % atom.cols)
    return op->emitOpError()
           << what << " of " << rows << " x " << cols
           << " is not whole atoms of transform \"" << atom.name << "\" ("
           << atom.rows << " rows by " << atom.cols << " columns)";
  return success();
}

//===----------------------------------------------------------------------===//
// Copies and events
//===----------------------------------------------------------------------===//

/// Whether torch broadcasts `from` to `to`.
static bool broadcastsTo(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  if (from.size() > to.size())
    return false;
  for (size_t k = 0; k < from.size(); ++k) {
    int64_t a = from[from.size() - 1 - k], b = to[to.size() - 1 - k];
    if (a != b && a != 1)
      return false;
  }
  return true;
}

LogicalResult CatOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "needs at least one input";
  RankedTensorType result = tensorType(getResult());
  int64_t rank = result.getRank(), dim = getDim();
  if (dim < 0 || dim >= rank)
    return emitOpError() << "dim " << dim << " is not a dim of a rank-"
                         << rank << " result";
  int64_t total = 0;
  for (auto [k, input] : llvm::enumerate(getInputs())) {
    RankedTensorType type = tensorType(input);
    if (type.getElementType() != result.getElementType() ||
        type.getRank() != rank)
      return emitOpError() << "input " << k
                           << " differs from the result in dtype or rank";
    for (int64_t d = 0; d < rank; ++d)
      if (d != dim && type.getDimSize(d) != result.getDimSize(d))
        return emitOpError() << "input " << k << " has size "
                             << type.getDimSize(d) << " in dim " << d
                             << " but the result has "
                             << result.getDimSize(d);
    // Each size is below 2^63 and so is the result's: stop at the first
    // sum past it.
    if (llvm::AddOverflow(total, type.getDimSize(dim), total) ||
        total > result.getDimSize(dim))
      break;
  }
  if (total != result.getDimSize(dim))
    return emitOpError() << "inputs do not add up to size "
                         << result.getDimSize(dim) << " in dim " << dim;
  return success();
}

LogicalResult CopyOp::verify() {
  if (failed(checkDtype(*this, getDtype())))
    return failure();
  ArrayRef<int64_t> src = tensorType(getSrc()).getShape();
  ArrayRef<int64_t> dest = getDest().getShape();
  if (std::optional<StringRef> transform = getTransform()) {
    // The destination splits the transform's output of the source, which
    // has as many elements.
    FailureOr<TransformAtom> atom = lookupTransform(*this, *transform);
    if (failed(atom))
      return failure();
    if (!atom->isElement(getDtype()))
      return emitOpError() << "transform \"" << *transform << "\" writes "
                           << loadplan_dtype_mlir_type(atom->dtype)
                           << ", not " << getDtype()
                           << " (a transforming copy does not convert)";
    if (failed(checkTransformInput(*this, *atom, tensorType(getSrc()),
                                   "source")) ||
        failed(checkWholeAtoms(*this, *atom, src[0], src[1], "source")))
      return failure();
    if (numElements(dest) != numElements(src))
      return emitOpError() << "destination has " << numElements(dest)
                           << " elements but transform \"" << *transform
                           << "\" writes " << numElements(src)
                           << " of its source";
    return success();
  }
  if (!broadcastsTo(src, dest) &&
      numElements(src) != numElements(dest)) {
    InFlightDiagnostic diag = emitOpError() << "cannot copy a tensor of shape [";
    llvm::interleaveComma(src, diag);
    diag << "] into a destination of shape [";
    llvm::interleaveComma(dest, diag);
    return diag << "]";
  }
  return success();
}

uint32_t CopyOp::getTransformCode() {
  return loadplan::getTransformCode(getTransform());
}

LogicalResult CopyOp::verifySymbolUses(SymbolTableCollection &symbols) {
  TargetOp target = lookupTarget(*this, getTargetAttr(), symbols);
  if (!target)
    return failure();
  LayoutAttr dest = getDest();
  return checkMovedInStorage(*this, target, dest.getOffset(), dest.getExtent(),
                             getItemSize(getDtype()), symbols, "destination");
}

LogicalResult ConvertOp::verify() {
  if (tensorType(getInput()).getShape() != tensorType(getResult()).getShape())
    return emitOpError() << "must keep the shape";
  return success();
}

LogicalResult
InplaceWriteOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (!getTargetAttr())
    return success();
  return success(lookupTarget(*this, getTargetAttr(), symbols) != nullptr);
}

LogicalResult ReadTargetOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return success(lookupTarget(*this, getTargetAttr(), symbols) != nullptr);
}

LogicalResult
ConstantWriteOp::verifySymbolUses(SymbolTableCollection &symbols) {
  TargetOp target = lookupTarget(*this, getTargetAttr(), symbols);
  if (!target)
    return failure();
  int64_t size = getItemSize(getDtype());
  if (size == 0)
    return emitOpError() << "dtype " << getDtype() << " has no byte size";
  LayoutAttr dest = getDest();
  return checkInStorage(*this, target, dest.getOffset(), dest.getExtent(), size,
                        symbols, "destination");
}

Type WriteOp::getWrittenType() {
  if (std::optional<Type> dtype = getDtype())
    return *dtype;
  return (*this)->getParentOfType<CheckpointOp>().getTensorType().getElementType();
}

/// Checks a transforming write's checkpoint tensor and box against its
/// transform's atom.
static LogicalResult verifyTransform(WriteOp op, RankedTensorType tensor) {
  FailureOr<TransformAtom> atom = lookupTransform(op, *op.getTransform());
  if (failed(atom))
    return failure();
  if (op.getDtype())
    return op.emitOpError() << "transforms and converts (a transforming "
                               "write does not convert)";
  if (failed(checkTransformInput(op, *atom, tensor, "checkpoint tensor")))
    return failure();
  BoxAttr box = op.getBox();
  return checkWholeAtoms(op, *atom, box.getStops()[0] - box.getStarts()[0],
                         box.getStops()[1] - box.getStarts()[1], "box");
}

uint32_t WriteOp::getTransformCode() {
  return loadplan::getTransformCode(getTransform());
}

LogicalResult WriteOp::verify() {
  auto checkpoint = (*this)->getParentOfType<CheckpointOp>();
  ArrayRef<int64_t> shape = checkpoint.getTensorType().getShape();
  if (getTransform()) {
    if (failed(verifyTransform(*this, checkpoint.getTensorType())))
      return failure();
  } else if (std::optional<Type> dtype = getDtype()) {
    Type from = checkpoint.getTensorType().getElementType();
    if (!isConvertible(from, *dtype))
      return emitOpError() << "cannot convert " << from << " to " << *dtype
                           << " (a write converts bf16, f16, f32, f8E4M3FN "
                              "and f8E5M2 into another of them, but f16 "
                              "into f32)";
  }
  BoxAttr box = getBox();
  if (box.getRank() != shape.size())
    return emitOpError() << "box has " << box.getRank()
                         << " dims but the checkpoint tensor has "
                         << shape.size();
  for (auto [k, start, stop] :
       llvm::enumerate(box.getStarts(), box.getStops()))
    if (stop > shape[k])
      return emitOpError() << "box range [" << start << ", " << stop
                           << ") of dim " << k << " exceeds its size "
                           << shape[k];
  if (getRegion().getNumElements() != box.getNumElements())
    return emitOpError() << "region has " << getRegion().getNumElements()
                         << " elements but the box has "
                         << box.getNumElements();
  return success();
}

LogicalResult WriteOp::verifySymbolUses(SymbolTableCollection &symbols) {
  TargetOp target = lookupTarget(*this, getTargetAttr(), symbols);
  if (!target)
    return failure();
  int64_t size = getItemSize(getWrittenType());
  RegionAttr region = getRegion();
  return checkMovedInStorage(*this, target, region.getOffset(),
                             region.getExtent(), size, symbols, "region");
}
