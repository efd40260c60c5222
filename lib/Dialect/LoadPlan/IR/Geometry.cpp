//===- Geometry.cpp - Strided layouts and torch view semantics ------------===//
//
// torch's shape and stride rules for the view ops a loader applies, on plain
// integers, so that verifiers (on contiguous layouts) and the fold-views pass
// (on real layouts) share one implementation.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"
#include "loadplan/convert.h"

#include <map>
#include <mutex>

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::loadplan;

SmallVector<int64_t> loadplan::contiguousStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> stride(shape.size(), 1);
  for (int64_t k = static_cast<int64_t>(shape.size()) - 2; k >= 0; --k)
    stride[k] = stride[k + 1] * std::max<int64_t>(shape[k + 1], 1);
  return stride;
}

int64_t loadplan::numElements(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

bool loadplan::fitsInt64(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (llvm::MulOverflow(n, std::max<int64_t>(d, 1), n))
      return false;
  return true;
}

std::optional<int64_t> loadplan::checkedExtent(ArrayRef<int64_t> shape,
                                               ArrayRef<int64_t> stride) {
  if (llvm::is_contained(shape, 0))
    return 0;
  int64_t last = 0, step;
  for (auto [n, s] : llvm::zip(shape, stride))
    if (llvm::MulOverflow(n - 1, s, step) ||
        llvm::AddOverflow(last, step, last))
      return std::nullopt;
  if (llvm::AddOverflow(last, int64_t(1), last))
    return std::nullopt;
  return last;
}

Strided Strided::contiguous(ArrayRef<int64_t> shape) {
  Strided s;
  s.shape.assign(shape.begin(), shape.end());
  s.stride = contiguousStrides(shape);
  return s;
}

int64_t Strided::numElements() const { return loadplan::numElements(shape); }

bool Strided::isContiguous() const {
  SmallVector<int64_t> c = contiguousStrides(shape);
  for (auto [n, st, ct] : llvm::zip(shape, stride, c))
    if (n > 1 && st != ct)
      return false;
  return true;
}

static std::string str(const llvm::Twine &t) { return t.str(); }

/// Why a view of a layout near 2^63 elements fails: torch's own int64_t
/// arithmetic would wrap around.
static constexpr const char *kOverflow =
    "its offsets or strides overflow int64";

FailureOr<int64_t> loadplan::wrapDim(int64_t dim, int64_t rank,
                                     std::string &why) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r) {
    why = str("dim " + llvm::Twine(dim) + " is out of range for a tensor of " +
              llvm::Twine(rank) + " dims");
    return failure();
  }
  return dim < 0 ? dim + r : dim;
}

LogicalResult loadplan::applySlice(Strided &s, int64_t dim, int64_t start,
                                   int64_t end, int64_t step,
                                   std::string &why) {
  if (s.shape.empty()) {
    why = "cannot slice a 0-d tensor";
    return failure();
  }
  FailureOr<int64_t> d = wrapDim(dim, s.shape.size(), why);
  if (failed(d))
    return failure();
  if (step <= 0) {
    why = str("slice step must be positive, got " + llvm::Twine(step));
    return failure();
  }
  int64_t size = s.shape[*d];
  // torch clamps both ends into [0, size] after wrapping negatives once.
  if (start < 0)
    start += size;
  if (end < 0)
    end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  // Only an empty slice at the end of a huge layout can overflow here.
  int64_t skip;
  if (llvm::MulOverflow(start, s.stride[*d], skip) ||
      llvm::AddOverflow(s.offset, skip, s.offset)) {
    why = kOverflow;
    return failure();
  }
  // ceil((end - start) / step) without overflowing for a huge step; a step
  // past the last element leaves one element, whose stride does not matter.
  s.shape[*d] = end > start ? (end - start - 1) / step + 1 : 0;
  if (s.shape[*d] > 1)
    s.stride[*d] *= step;
  return success();
}

LogicalResult loadplan::applySelect(Strided &s, int64_t dim, int64_t index,
                                    std::string &why) {
  if (s.shape.empty()) {
    why = "cannot select from a 0-d tensor";
    return failure();
  }
  FailureOr<int64_t> d = wrapDim(dim, s.shape.size(), why);
  if (failed(d))
    return failure();
  int64_t size = s.shape[*d];
  if (index < -size || index >= size) {
    why = str("index " + llvm::Twine(index) + " is out of range for dim " +
              llvm::Twine(*d) + " of size " + llvm::Twine(size));
    return failure();
  }
  if (index < 0)
    index += size;
  s.offset += index * s.stride[*d];
  s.shape.erase(s.shape.begin() + *d);
  s.stride.erase(s.stride.begin() + *d);
  return success();
}

LogicalResult loadplan::applyTranspose(Strided &s, int64_t dim0, int64_t dim1,
                                       std::string &why) {
  int64_t rank = s.shape.size();
  FailureOr<int64_t> a = wrapDim(dim0, rank, why);
  if (failed(a))
    return failure();
  FailureOr<int64_t> b = wrapDim(dim1, rank, why);
  if (failed(b))
    return failure();
  if (rank == 0)
    return success();
  std::swap(s.shape[*a], s.shape[*b]);
  std::swap(s.stride[*a], s.stride[*b]);
  return success();
}

LogicalResult loadplan::applyPermute(Strided &s, ArrayRef<int64_t> dims,
                                     std::string &why) {
  int64_t rank = s.shape.size();
  if (static_cast<int64_t>(dims.size()) != rank) {
    why = str("permute needs " + llvm::Twine(rank) + " dims, got " +
              llvm::Twine(dims.size()));
    return failure();
  }
  SmallVector<bool> seen(rank, false);
  Strided out = s;
  for (auto [k, dim] : llvm::enumerate(dims)) {
    FailureOr<int64_t> d = wrapDim(dim, rank, why);
    if (failed(d))
      return failure();
    if (seen[*d]) {
      why = str("permute repeats dim " + llvm::Twine(*d));
      return failure();
    }
    seen[*d] = true;
    out.shape[k] = s.shape[*d];
    out.stride[k] = s.stride[*d];
  }
  s = std::move(out);
  return success();
}

LogicalResult loadplan::applyExpand(Strided &s, ArrayRef<int64_t> shape,
                                    std::string &why) {
  int64_t rank = s.shape.size(), newRank = shape.size();
  if (newRank < rank) {
    why = str("expand to " + llvm::Twine(newRank) +
              " dims cannot drop dims of a tensor of " + llvm::Twine(rank) +
              " dims");
    return failure();
  }
  SmallVector<int64_t> stride(newRank, 0);
  for (int64_t k = newRank - 1; k >= 0; --k) {
    int64_t in = k - (newRank - rank);
    if (in < 0)
      continue; // a new leading dim repeats the whole tensor
    if (s.shape[in] == shape[k]) {
      stride[k] = s.stride[in];
    } else if (s.shape[in] != 1) {
      why = str("expand cannot change dim " + llvm::Twine(in) + " of size " +
                llvm::Twine(s.shape[in]) + " to " + llvm::Twine(shape[k]) +
                " (only dims of size 1 expand)");
      return failure();
    }
  }
  s.shape.assign(shape.begin(), shape.end());
  s.stride = std::move(stride);
  return success();
}

LogicalResult loadplan::applyUnsqueeze(Strided &s, int64_t dim,
                                       std::string &why) {
  int64_t rank = s.shape.size();
  // The new dim may also go after the last one: [-rank - 1, rank].
  if (dim < -rank - 1 || dim > rank) {
    why = str("unsqueeze dim " + llvm::Twine(dim) + " is out of range [" +
              llvm::Twine(-rank - 1) + ", " + llvm::Twine(rank) +
              "] for a tensor of " + llvm::Twine(rank) + " dims");
    return failure();
  }
  int64_t d = dim < 0 ? dim + rank + 1 : dim;
  int64_t stride = 1;
  if (d < rank && llvm::MulOverflow(s.shape[d], s.stride[d], stride)) {
    why = kOverflow;
    return failure();
  }
  s.shape.insert(s.shape.begin() + d, 1);
  s.stride.insert(s.stride.begin() + d, stride);
  return success();
}

LogicalResult loadplan::applySqueeze(Strided &s, ArrayRef<int64_t> dims,
                                     std::string &why) {
  int64_t rank = s.shape.size();
  SmallVector<bool> drop(rank, dims.empty());
  for (int64_t dim : dims) {
    FailureOr<int64_t> d = wrapDim(dim, rank, why);
    if (failed(d))
      return failure();
    if (rank > 0)
      drop[*d] = true;
  }
  Strided out;
  out.offset = s.offset;
  for (int64_t k = 0; k < rank; ++k) {
    if (drop[k] && s.shape[k] == 1)
      continue;
    out.shape.push_back(s.shape[k]);
    out.stride.push_back(s.stride[k]);
  }
  s = std::move(out);
  return success();
}

FailureOr<SmallVector<int64_t>>
loadplan::flattenShape(ArrayRef<int64_t> shape, int64_t startDim,
                       int64_t endDim, std::string &why) {
  int64_t rank = shape.size();
  FailureOr<int64_t> a = wrapDim(startDim, rank, why);
  if (failed(a))
    return failure();
  FailureOr<int64_t> b = wrapDim(endDim, rank, why);
  if (failed(b))
    return failure();
  if (*a > *b) {
    why = str("flatten start_dim " + llvm::Twine(*a) +
              " comes after end_dim " + llvm::Twine(*b));
    return failure();
  }
  if (rank == 0)
    return SmallVector<int64_t>{1};
  SmallVector<int64_t> out(shape.begin(), shape.begin() + *a);
  out.push_back(numElements(shape.slice(*a, *b - *a + 1)));
  out.append(shape.begin() + *b + 1, shape.end());
  return out;
}

LogicalResult loadplan::checkUnflatten(ArrayRef<int64_t> from,
                                       ArrayRef<int64_t> to, int64_t dim,
                                       std::string &why) {
  int64_t rank = from.size();
  if (rank == 0) {
    why = "cannot unflatten a 0-d tensor";
    return failure();
  }
  FailureOr<int64_t> d = wrapDim(dim, rank, why);
  if (failed(d))
    return failure();
  int64_t parts = static_cast<int64_t>(to.size()) - rank + 1;
  if (parts < 1 || from.take_front(*d) != to.take_front(*d) ||
      from.drop_front(*d + 1) != to.take_back(rank - *d - 1) ||
      numElements(to.slice(*d, parts)) != from[*d]) {
    why = str("unflatten of dim " + llvm::Twine(*d) + " (size " +
              llvm::Twine(from[*d]) +
              ") must split it into dims whose product is its size");
    return failure();
  }
  return success();
}

LogicalResult loadplan::applyView(Strided &s, ArrayRef<int64_t> shape,
                                  std::string &why, bool *notViewable) {
  if (notViewable)
    *notViewable = false;
  int64_t numel = s.numElements();
  if (numel != numElements(shape)) {
    why = str("cannot view " + llvm::Twine(numel) + " elements as " +
              llvm::Twine(numElements(shape)));
    return failure();
  }
  SmallVector<int64_t> stride(shape.size(), 1);
  if (s.shape.empty() || numel == 0) {
    // Any shape views a 0-d or empty tensor; torch picks contiguous strides.
    if (numel == 0 && ArrayRef<int64_t>(s.shape) == shape)
      return success();
    s.shape.assign(shape.begin(), shape.end());
    s.stride = contiguousStrides(shape);
    return success();
  }
  // torch's computeStride: match chunks of the old shape whose dims are
  // contiguous with each other against runs of the new shape.
  int64_t viewD = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunkBaseStride = s.stride.back();
  int64_t tensorNumel = 1, viewNumel = 1;
  for (int64_t d = static_cast<int64_t>(s.shape.size()) - 1; d >= 0; --d) {
    tensorNumel *= s.shape[d];
    // A stride tensorNumel * chunkBaseStride would overflow is not stride[d-1].
    int64_t chunkStride;
    if (d == 0 ||
        (s.shape[d - 1] != 1 &&
         (llvm::MulOverflow(tensorNumel, chunkBaseStride, chunkStride) ||
          s.stride[d - 1] != chunkStride))) {
      while (viewD >= 0 && (viewNumel < tensorNumel || shape[viewD] == 1)) {
        if (llvm::MulOverflow(viewNumel, chunkBaseStride, stride[viewD])) {
          why = kOverflow;
          return failure();
        }
        viewNumel *= shape[viewD];
        --viewD;
      }
      if (viewNumel != tensorNumel) {
        why = "the view's shape is not compatible with the input's strides "
              "(it would copy)";
        if (notViewable)
          *notViewable = true;
        return failure();
      }
      if (d > 0) {
        chunkBaseStride = s.stride[d - 1];
        tensorNumel = 1;
        viewNumel = 1;
      }
    }
  }
  if (viewD != -1) {
    why = "the view's shape is not compatible with the input's strides "
          "(it would copy)";
    if (notViewable)
      *notViewable = true;
    return failure();
  }
  s.shape.assign(shape.begin(), shape.end());
  s.stride = std::move(stride);
  return success();
}

int64_t loadplan::getItemSize(Type type) {
  if (auto f = dyn_cast<FloatType>(type))
    return (f.getWidth() + 7) / 8;
  if (auto i = dyn_cast<IntegerType>(type))
    return (i.getWidth() + 7) / 8;
  if (auto c = dyn_cast<ComplexType>(type)) {
    int64_t n = getItemSize(c.getElementType());
    return 2 * n;
  }
  return 0;
}

std::string loadplan::getDtypeName(Type type) {
  if (type.isBF16())
    return "bfloat16";
  if (type.isF16())
    return "float16";
  if (type.isF32())
    return "float32";
  if (type.isF64())
    return "float64";
  if (isa<Float8E4M3FNType>(type))
    return "float8_e4m3fn";
  if (isa<Float8E5M2Type>(type))
    return "float8_e5m2";
  if (isa<Float8E4M3FNUZType>(type))
    return "float8_e4m3fnuz";
  if (isa<Float8E5M2FNUZType>(type))
    return "float8_e5m2fnuz";
  if (isa<Float8E8M0FNUType>(type))
    return "float8_e8m0fnu";
  if (type.isInteger(1))
    return "bool";
  if (auto i = dyn_cast<IntegerType>(type)) {
    std::string prefix = i.isUnsigned() ? "uint" : "int";
    return prefix + std::to_string(i.getWidth());
  }
  std::string out;
  llvm::raw_string_ostream os(out);
  type.print(os);
  return out;
}

/// The plan's code of a type a write may convert from or into; 0 otherwise.
static uint32_t convertCode(Type type) {
  if (type.isBF16())
    return LOADPLAN_DTYPE_BFLOAT16;
  if (type.isF16())
    return LOADPLAN_DTYPE_FLOAT16;
  if (type.isF32())
    return LOADPLAN_DTYPE_FLOAT32;
  if (isa<Float8E4M3FNType>(type))
    return LOADPLAN_DTYPE_FLOAT8_E4M3FN;
  if (isa<Float8E5M2Type>(type))
    return LOADPLAN_DTYPE_FLOAT8_E5M2;
  return 0;
}

bool loadplan::isConvertible(Type from, Type to) {
  return loadplan_convert::isConvertible(convertCode(from), convertCode(to));
}

bool loadplan::convertsAsOne(ArrayRef<Type> chain) {
  if (chain.size() < 2)
    return true;
  SmallVector<uint32_t> codes;
  for (size_t i = 0; i + 1 < chain.size(); ++i)
    if (!isConvertible(chain[i], chain[i + 1]))
      return false;
  for (Type t : chain)
    codes.push_back(convertCode(t));
  if (codes.size() == 2)
    return true;
  size_t bits = 8 * loadplan_dtype_size(codes[0]);
  if (bits > 16)
    return false; // every step from f32 rounds
  // A model converts the same way in many names: check each chain once.
  static std::mutex mutex;
  static std::map<SmallVector<uint32_t>, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, inserted] = known.try_emplace(codes, false);
  if (!inserted)
    return it->second;
  using loadplan_convert::narrow;
  using loadplan_convert::widen;
  uint32_t last = codes.back();
  for (uint32_t x = 0; x < (1u << bits); ++x) {
    uint32_t v = x;
    for (size_t i = 1; i < codes.size(); ++i)
      v = narrow(codes[i], codes[i - 1], widen(codes[i - 1], v));
    uint32_t once =
        last == codes[0] ? x : narrow(last, codes[0], widen(codes[0], x));
    if (v != once)
      return false;
  }
  return it->second = true;
}

std::string loadplan::castReason(Type from, Type to, StringRef where) {
  std::string name = getDtypeName(to);
  return "casts " + getDtypeName(from) + " to " + name + where.str() +
         " (send it as " + name + " to make it direct)";
}
