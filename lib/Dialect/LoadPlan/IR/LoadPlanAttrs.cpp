//===- LoadPlanAttrs.cpp - loadplan attributes ----------------------------===//
//
// Parsing, printing and verification of layouts, boxes and regions.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanAttrs.h"
#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

#include <limits>

using namespace mlir;
using namespace mlir::loadplan;

#define GET_ATTRDEF_CLASSES
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanAttrs.cpp.inc"

void LoadPlanDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Shared parsing and printing
//===----------------------------------------------------------------------===//

/// Parses `[a, b, ...]` (possibly empty).
static ParseResult parseIntList(AsmParser &parser,
                                SmallVectorImpl<int64_t> &out) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() {
    int64_t v;
    if (parser.parseInteger(v))
      return failure();
    out.push_back(v);
    return success();
  });
}

static void printIntList(AsmPrinter &printer, ArrayRef<int64_t> values) {
  printer << '[';
  llvm::interleaveComma(values, printer);
  printer << ']';
}

/// Parses `<offset = N, shape = [...], stride = [...]>`.
static ParseResult parseStrided(AsmParser &parser, int64_t &offset,
                                SmallVectorImpl<int64_t> &shape,
                                SmallVectorImpl<int64_t> &stride) {
  if (parser.parseLess() || parser.parseKeyword("offset") ||
      parser.parseEqual() || parser.parseInteger(offset) ||
      parser.parseComma() || parser.parseKeyword("shape") ||
      parser.parseEqual() || parseIntList(parser, shape) ||
      parser.parseComma() || parser.parseKeyword("stride") ||
      parser.parseEqual() || parseIntList(parser, stride) ||
      parser.parseGreater())
    return failure();
  return success();
}

static void printStrided(AsmPrinter &printer, int64_t offset,
                         ArrayRef<int64_t> shape, ArrayRef<int64_t> stride) {
  printer << "<offset = " << offset << ", shape = ";
  printIntList(printer, shape);
  printer << ", stride = ";
  printIntList(printer, stride);
  printer << '>';
}

/// Checks what layouts and regions share: matching ranks, no negative
/// offset, size or stride.
static LogicalResult
verifyStrided(function_ref<InFlightDiagnostic()> emitError, StringRef what,
              int64_t offset, ArrayRef<int64_t> shape,
              ArrayRef<int64_t> stride) {
  if (shape.size() != stride.size())
    return emitError() << what << " has " << shape.size() << " sizes but "
                       << stride.size() << " strides";
  if (offset < 0)
    return emitError() << what << " offset must be non-negative, got "
                       << offset;
  for (auto [k, n] : llvm::enumerate(shape))
    if (n < 0)
      return emitError() << what << " size of dim " << k
                         << " must be non-negative, got " << n;
  for (auto [k, s] : llvm::enumerate(stride))
    if (s < 0)
      return emitError() << what << " stride of dim " << k
                         << " must be non-negative, got " << s;
  // Past this check, element counts, extents and offset + extent fit in
  // int64_t.
  std::optional<int64_t> extent = checkedExtent(shape, stride);
  int64_t end;
  if (!fitsInt64(shape) || !extent || llvm::AddOverflow(offset, *extent, end))
    return emitError() << what << " reaches past element "
                       << std::numeric_limits<int64_t>::max();
  return success();
}

/// The extent of a verified layout or region.
static int64_t stridedExtent(ArrayRef<int64_t> shape,
                             ArrayRef<int64_t> stride) {
  return checkedExtent(shape, stride)
      .value_or(std::numeric_limits<int64_t>::max());
}

//===----------------------------------------------------------------------===//
// LayoutAttr
//===----------------------------------------------------------------------===//

Attribute LayoutAttr::parse(AsmParser &parser, Type) {
  int64_t offset;
  SmallVector<int64_t> shape, stride;
  if (parseStrided(parser, offset, shape, stride))
    return {};
  return parser.getChecked<LayoutAttr>(parser.getContext(), offset, shape,
                                       stride);
}

void LayoutAttr::print(AsmPrinter &printer) const {
  printStrided(printer, getOffset(), getShape(), getStride());
}

LogicalResult LayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 int64_t offset, ArrayRef<int64_t> shape,
                                 ArrayRef<int64_t> stride) {
  return verifyStrided(emitError, "layout", offset, shape, stride);
}

int64_t LayoutAttr::getNumElements() const {
  return loadplan::numElements(getShape());
}

int64_t LayoutAttr::getExtent() const {
  return stridedExtent(getShape(), getStride());
}

//===----------------------------------------------------------------------===//
// RegionAttr
//===----------------------------------------------------------------------===//

Attribute RegionAttr::parse(AsmParser &parser, Type) {
  int64_t offset;
  SmallVector<int64_t> shape, stride;
  if (parseStrided(parser, offset, shape, stride))
    return {};
  return parser.getChecked<RegionAttr>(parser.getContext(), offset, shape,
                                       stride);
}

void RegionAttr::print(AsmPrinter &printer) const {
  printStrided(printer, getOffset(), getShape(), getStride());
}

LogicalResult RegionAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 int64_t offset, ArrayRef<int64_t> shape,
                                 ArrayRef<int64_t> stride) {
  if (failed(verifyStrided(emitError, "region", offset, shape, stride)))
    return failure();
  for (auto [k, n, s] : llvm::enumerate(shape, stride))
    if (n > 1 && s == 0)
      return emitError() << "region dim " << k << " has stride 0 and size "
                         << n << ": it would write one element twice";
  return success();
}

int64_t RegionAttr::getNumElements() const {
  return loadplan::numElements(getShape());
}

int64_t RegionAttr::getExtent() const {
  return stridedExtent(getShape(), getStride());
}

//===----------------------------------------------------------------------===//
// BoxAttr
//===----------------------------------------------------------------------===//

Attribute BoxAttr::parse(AsmParser &parser, Type) {
  SmallVector<int64_t> starts, stops;
  auto parseRange = [&]() -> ParseResult {
    SmallVector<int64_t> range;
    SMLoc loc = parser.getCurrentLocation();
    if (parseIntList(parser, range))
      return failure();
    if (range.size() != 2)
      return parser.emitError(loc, "a box range is [start, stop], got ")
             << range.size() << " numbers";
    starts.push_back(range[0]);
    stops.push_back(range[1]);
    return success();
  };
  // `<` is parsed by hand: Delimiter::LessGreater reports a missing `<` but
  // still succeeds, which would turn `#loadplan.box` into an empty box.
  if (parser.parseLess())
    return {};
  if (failed(parser.parseOptionalGreater()) &&
      (parser.parseCommaSeparatedList(parseRange) || parser.parseGreater()))
    return {};
  return parser.getChecked<BoxAttr>(parser.getContext(), starts, stops);
}

void BoxAttr::print(AsmPrinter &printer) const {
  printer << '<';
  llvm::interleaveComma(llvm::zip(getStarts(), getStops()), printer,
                        [&](auto range) {
                          printer << '[' << std::get<0>(range) << ", "
                                  << std::get<1>(range) << ']';
                        });
  printer << '>';
}

LogicalResult BoxAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                              ArrayRef<int64_t> starts,
                              ArrayRef<int64_t> stops) {
  if (starts.size() != stops.size())
    return emitError() << "box has " << starts.size() << " starts but "
                       << stops.size() << " stops";
  for (auto [k, start, stop] : llvm::enumerate(starts, stops))
    if (start < 0 || stop < start)
      return emitError() << "box range of dim " << k << " must satisfy 0 <= "
                         << "start <= stop, got [" << start << ", " << stop
                         << "]";
  SmallVector<int64_t> shape;
  for (auto [start, stop] : llvm::zip(starts, stops))
    shape.push_back(stop - start);
  if (!fitsInt64(shape))
    return emitError() << "box has more than "
                       << std::numeric_limits<int64_t>::max() << " elements";
  return success();
}

int64_t BoxAttr::getNumElements() const {
  int64_t n = 1;
  for (auto [start, stop] : llvm::zip(getStarts(), getStops()))
    n *= stop - start;
  return n;
}
