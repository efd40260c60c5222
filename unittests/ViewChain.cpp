//===- ViewChain.cpp - Random torch view chains, element by element -------===//

#include "ViewChain.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <set>

using namespace mlir;
using namespace mlir::loadplan;
using namespace loadplan_test;

//===----------------------------------------------------------------------===//
// Elements
//===----------------------------------------------------------------------===//

Ints loadplan_test::unravel(int64_t flat, ArrayRef<int64_t> shape) {
  Ints index(shape.size(), 0);
  for (int64_t k = static_cast<int64_t>(shape.size()) - 1; k >= 0; --k) {
    index[k] = flat % shape[k];
    flat /= shape[k];
  }
  return index;
}

int64_t loadplan_test::ravel(ArrayRef<int64_t> index,
                             ArrayRef<int64_t> shape) {
  int64_t flat = 0;
  for (auto [i, n] : llvm::zip(index, shape))
    flat = flat * n + i;
  return flat;
}

Elements
loadplan_test::gather(const Elements &in, ArrayRef<int64_t> shape,
                      const std::function<Ints(ArrayRef<int64_t>)> &source) {
  Elements out;
  out.shape.assign(shape.begin(), shape.end());
  for (int64_t flat = 0, n = numElements(shape); flat < n; ++flat)
    out.at.push_back(in.at[ravel(source(unravel(flat, shape)), in.shape)]);
  return out;
}

Elements loadplan_test::reshapeElements(const Elements &in,
                                        ArrayRef<int64_t> shape) {
  Elements out;
  out.shape.assign(shape.begin(), shape.end());
  out.at = in.at;
  return out;
}

std::vector<int64_t> loadplan_test::elementsOf(int64_t offset,
                                               ArrayRef<int64_t> shape,
                                               ArrayRef<int64_t> stride) {
  std::vector<int64_t> out;
  for (int64_t flat = 0, n = numElements(shape); flat < n; ++flat) {
    int64_t at = offset;
    for (auto [i, st] : llvm::zip(unravel(flat, shape), stride))
      at += i * st;
    out.push_back(at);
  }
  return out;
}

std::vector<int64_t> loadplan_test::elementsOf(const Strided &s) {
  return elementsOf(s.offset, s.shape, s.stride);
}

std::string loadplan_test::str(ArrayRef<int64_t> v) {
  std::string s = "[";
  for (auto [k, x] : llvm::enumerate(v))
    s += (k ? ", " : "") + std::to_string(x);
  return s + "]";
}

std::string loadplan_test::tensorType(ArrayRef<int64_t> shape) {
  std::string s = "tensor<";
  for (int64_t n : shape)
    s += std::to_string(n) + "x";
  return s + "bf16>";
}

/// torch's slice bounds, as Python's `range(size)[start:end:step]`.
static std::pair<int64_t, int64_t> clampSlice(int64_t size, int64_t start,
                                              int64_t end) {
  auto clamp = [&](int64_t v) {
    if (v < 0)
      v += size;
    return std::min(std::max<int64_t>(v, 0), size);
  };
  start = clamp(start);
  end = std::max(clamp(end), start);
  return {start, end};
}

//===----------------------------------------------------------------------===//
// Chain
//===----------------------------------------------------------------------===//

Chain::Chain(std::mt19937_64 &rng, Ints ckptShape)
    : ckptShape(ckptShape), rng(rng) {
  layout = Strided::contiguous(ckptShape);
  ref.shape = ckptShape;
  ref.at.resize(numElements(ckptShape));
  std::iota(ref.at.begin(), ref.at.end(), 0);
  log << "ckpt" << str(ckptShape);
}

void Chain::emit(const std::string &op, ArrayRef<int64_t> shape) {
  std::string result = "%v" + std::to_string(next++);
  bool sameType = StringRef(op).starts_with("loadplan.clone") ||
                  StringRef(op).starts_with("loadplan.alias");
  ir += "    " + result + " = " + op + " : " + tensorType(ref.shape);
  if (!sameType)
    ir += " -> " + tensorType(shape);
  ir += "\n";
  value = result;
}

Ints Chain::randomShape(int64_t numel) {
  Ints shape;
  int64_t rest = numel;
  for (int64_t k = 0, dims = pick(1, 4); k + 1 < dims; ++k) {
    Ints divisors;
    for (int64_t d = 1; d <= rest; ++d)
      if (rest % d == 0)
        divisors.push_back(d);
    int64_t d = divisors[pick(0, divisors.size() - 1)];
    shape.push_back(d);
    rest /= d;
  }
  shape.push_back(rest);
  return shape;
}

bool Chain::reshape(ArrayRef<int64_t> shape, const std::string &op,
                    bool merges, bool allowCopies) {
  std::string why;
  bool notViewable = false;
  Strided next = layout;
  Elements moved = reshapeElements(ref, shape);
  if (failed(applyView(next, shape, why, &notViewable))) {
    EXPECT_TRUE(notViewable) << log.str() << " " << op << str(shape) << ": "
                             << why;
    // torch would copy: no strides may give the elements in the new shape.
    if (!moved.at.empty()) {
      Strided probe;
      probe.shape.assign(shape.begin(), shape.end());
      probe.offset = moved.at[0];
      for (size_t k = 0; k < shape.size(); ++k) {
        Ints unit(shape.size(), 0);
        if (shape[k] > 1)
          unit[k] = 1;
        probe.stride.push_back(moved.at[ravel(unit, shape)] - probe.offset);
      }
      bool nonNegative =
          llvm::all_of(probe.stride, [](int64_t st) { return st >= 0; });
      EXPECT_FALSE(nonNegative && elementsOf(probe) == moved.at)
          << log.str() << " " << op << str(shape)
          << ": refused a view that strides express";
    }
    if (!allowCopies)
      return false;
    lost = true;
  } else {
    layout = std::move(next);
  }
  emit(op, shape);
  ref = std::move(moved);
  merged |= merges;
  log << " " << op << str(shape);
  return true;
}

bool Chain::step(bool allowCopies) {
  std::string why;
  int64_t rank = ref.shape.size();
  Ints shape = ref.shape;
  Elements before = ref;
  switch (pick(0, 12)) {
  case 0:
  case 1: { // slice, sometimes with a step, sometimes out-of-range ends
    if (rank == 0)
      return false;
    int64_t dim = pick(0, rank - 1), size = shape[dim];
    int64_t start = pick(-size - 1, size);
    int64_t end = chance(0.2) ? std::numeric_limits<int64_t>::max()
                              : pick(-size - 1, size + 1);
    int64_t stepBy = chance(0.7) ? 1 : pick(2, 3);
    auto [lo, hi] = clampSlice(size, start, end);
    if (hi <= lo)
      return false; // keep copies non-empty
    int64_t argDim = dim - (chance(0.5) ? rank : 0);
    EXPECT_TRUE(
        succeeded(applySlice(layout, argDim, start, end, stepBy, why)))
        << why;
    shape[dim] = (hi - lo + stepBy - 1) / stepBy;
    std::ostringstream op;
    op << "loadplan.slice " << value << " dim " << argDim << " start "
       << start << " end " << end << " step " << stepBy;
    emit(op.str(), shape);
    ref = gather(before, shape, [&](ArrayRef<int64_t> j) {
      Ints i(j.begin(), j.end());
      i[dim] = lo + i[dim] * stepBy;
      return i;
    });
    log << " slice(" << argDim << "," << start << "," << end << "," << stepBy
        << ")";
    return true;
  }
  case 2: { // select
    if (rank == 0)
      return false;
    int64_t dim = pick(0, rank - 1), size = shape[dim];
    int64_t index = pick(-size, size - 1);
    EXPECT_TRUE(succeeded(applySelect(layout, dim, index, why))) << why;
    int64_t at = index < 0 ? index + size : index;
    shape.erase(shape.begin() + dim);
    emit("loadplan.select " + value + " dim " + std::to_string(dim) +
             " index " + std::to_string(index),
         shape);
    ref = gather(before, shape, [&](ArrayRef<int64_t> j) {
      Ints i(j.begin(), j.end());
      i.insert(i.begin() + dim, at);
      return i;
    });
    log << " select(" << dim << "," << index << ")";
    return true;
  }
  case 3: { // transpose
    if (rank == 0)
      return false;
    int64_t a = pick(0, rank - 1), b = pick(0, rank - 1);
    EXPECT_TRUE(succeeded(applyTranspose(layout, a, b - rank, why))) << why;
    std::swap(shape[a], shape[b]);
    emit("loadplan.transpose " + value + " dim0 " + std::to_string(a) +
             " dim1 " + std::to_string(b - rank),
         shape);
    ref = gather(before, shape, [&](ArrayRef<int64_t> j) {
      Ints i(j.begin(), j.end());
      std::swap(i[a], i[b]);
      return i;
    });
    log << " transpose(" << a << "," << b << ")";
    return true;
  }
  case 4: { // permute
    Ints dims(rank);
    std::iota(dims.begin(), dims.end(), 0);
    std::shuffle(dims.begin(), dims.end(), rng);
    EXPECT_TRUE(succeeded(applyPermute(layout, dims, why))) << why;
    for (int64_t k = 0; k < rank; ++k)
      shape[k] = before.shape[dims[k]];
    emit("loadplan.permute " + value + " dims " + str(dims), shape);
    ref = gather(before, shape, [&](ArrayRef<int64_t> j) {
      Ints i(rank, 0);
      for (int64_t k = 0; k < rank; ++k)
        i[dims[k]] = j[k];
      return i;
    });
    log << " permute" << str(dims);
    return true;
  }
  case 5: { // unsqueeze
    if (rank >= 5)
      return false;
    int64_t dim = pick(0, rank);
    int64_t argDim = chance(0.5) ? dim - rank - 1 : dim;
    EXPECT_TRUE(succeeded(applyUnsqueeze(layout, argDim, why))) << why;
    shape.insert(shape.begin() + dim, 1);
    emit("loadplan.unsqueeze " + value + " dim " + std::to_string(argDim),
         shape);
    ref = gather(before, shape, [&](ArrayRef<int64_t> j) {
      Ints i(j.begin(), j.end());
      i.erase(i.begin() + dim);
      return i;
    });
    log << " unsqueeze(" << argDim << ")";
    return true;
  }
  case 6: { // squeeze some listed dims, or all size-1 dims
    Ints dims;
    for (int64_t k = 0; k < rank; ++k)
      if (chance(0.5))
        dims.push_back(k);
    EXPECT_TRUE(succeeded(applySqueeze(layout, dims, why))) << why;
    SmallVector<bool> drop(rank, dims.empty());
    for (int64_t k : dims)
      drop[k] = true;
    shape.clear();
    for (int64_t k = 0; k < rank; ++k)
      if (!(drop[k] && before.shape[k] == 1))
        shape.push_back(before.shape[k]);
    emit("loadplan.squeeze " + value + " dims " + str(dims), shape);
    ref = gather(before, shape, [&](ArrayRef<int64_t> j) {
      Ints i;
      size_t next = 0;
      for (int64_t k = 0; k < rank; ++k)
        i.push_back(drop[k] && before.shape[k] == 1 ? 0 : j[next++]);
      return i;
    });
    log << " squeeze" << str(dims);
    return true;
  }
  case 7: { // flatten a range of dims
    if (rank == 0)
      return false;
    int64_t a = pick(0, rank - 1), b = pick(a, rank - 1);
    FailureOr<Ints> flat = flattenShape(shape, a, b, why);
    EXPECT_TRUE(succeeded(flat)) << why;
    return reshape(*flat,
                   "loadplan.flatten " + value + " start_dim " +
                       std::to_string(a) + " end_dim " + std::to_string(b),
                   /*merges=*/b > a, allowCopies);
  }
  case 8: { // unflatten one dim: only splits
    if (rank == 0 || rank >= 5)
      return false;
    int64_t dim = pick(0, rank - 1);
    Ints parts = randomShape(shape[dim]);
    Ints to(shape.begin(), shape.begin() + dim);
    to.append(parts.begin(), parts.end());
    to.append(shape.begin() + dim + 1, shape.end());
    EXPECT_TRUE(succeeded(checkUnflatten(shape, to, dim, why))) << why;
    return reshape(to,
                   "loadplan.unflatten " + value + " dim " +
                       std::to_string(dim),
                   /*merges=*/false, allowCopies);
  }
  case 9: // view or reshape as any shape
    return reshape(randomShape(ref.at.size()),
                   (chance(0.5) ? "loadplan.view " : "loadplan.reshape ") +
                       value,
                   /*merges=*/true, allowCopies);
  case 10: { // expand size-1 dims, maybe with a new leading dim
    if (!chance(0.3))
      return false; // rarer: it always makes the copy repeat elements
    Ints to;
    if (rank < 4 && chance(0.5))
      to.push_back(pick(1, 3));
    int64_t lead = to.size();
    for (int64_t n : shape)
      to.push_back(n == 1 && chance(0.7) ? pick(1, 3) : n);
    EXPECT_TRUE(succeeded(applyExpand(layout, to, why))) << why;
    emit("loadplan.expand " + value, to);
    ref = gather(before, to, [&](ArrayRef<int64_t> j) {
      Ints i;
      for (int64_t k = 0; k < rank; ++k)
        i.push_back(before.shape[k] == 1 ? 0 : j[k + lead]);
      return i;
    });
    log << " expand" << str(to);
    return true;
  }
  case 11: // clone / contiguous: the same elements in new memory
    emit("loadplan.clone " + value, shape);
    log << " clone";
    return true;
  default: // alias / detach
    emit("loadplan.alias " + value, shape);
    log << " alias";
    return true;
  }
}

//===----------------------------------------------------------------------===//
// Checks
//===----------------------------------------------------------------------===//

bool loadplan_test::hasRepeats(ArrayRef<int64_t> src) {
  return std::set<int64_t>(src.begin(), src.end()).size() != src.size();
}

bool loadplan_test::isBox(ArrayRef<int64_t> src, ArrayRef<int64_t> ckptShape) {
  std::set<int64_t> distinct(src.begin(), src.end());
  if (distinct.empty())
    return true;
  size_t rank = ckptShape.size();
  Ints lo(rank, std::numeric_limits<int64_t>::max()), hi(rank, -1);
  for (int64_t at : distinct) {
    Ints i = unravel(at, ckptShape);
    for (size_t d = 0; d < rank; ++d) {
      lo[d] = std::min(lo[d], i[d]);
      hi[d] = std::max(hi[d], i[d] + 1);
    }
  }
  int64_t volume = 1;
  for (size_t d = 0; d < rank; ++d)
    volume *= hi[d] - lo[d];
  return volume == static_cast<int64_t>(distinct.size());
}

::testing::AssertionResult
loadplan_test::checkWrite(ArrayRef<int64_t> ckptShape, ArrayRef<int64_t> src,
                          ArrayRef<int64_t> dst, ArrayRef<int64_t> starts,
                          ArrayRef<int64_t> stops, int64_t offset,
                          ArrayRef<int64_t> shape, ArrayRef<int64_t> stride) {
  size_t rank = ckptShape.size();
  if (starts.size() != rank || stops.size() != rank)
    return ::testing::AssertionFailure()
           << "box " << str(starts) << " " << str(stops) << " has the wrong "
           << "rank";
  if (shape.size() != stride.size())
    return ::testing::AssertionFailure() << "region shape and strides differ";
  Ints boxShape;
  for (size_t d = 0; d < rank; ++d) {
    if (starts[d] < 0 || starts[d] > stops[d] || stops[d] > ckptShape[d])
      return ::testing::AssertionFailure()
             << "box dim " << d << " [" << starts[d] << ", " << stops[d]
             << ") is not in the checkpoint's " << ckptShape[d];
    boxShape.push_back(stops[d] - starts[d]);
  }
  int64_t volume = numElements(boxShape);
  if (volume != static_cast<int64_t>(src.size()))
    return ::testing::AssertionFailure()
           << "box of " << volume << " elements for a copy of " << src.size();
  // The region's shape is the box's with dims split: the same row-major
  // order.
  if (numElements(shape) != volume)
    return ::testing::AssertionFailure()
           << "region of " << numElements(shape) << " elements for a box of "
           << volume;
  std::vector<bool> hit(volume, false);
  for (size_t k = 0; k < src.size(); ++k) {
    Ints i = unravel(src[k], ckptShape);
    Ints inBox;
    for (size_t d = 0; d < rank; ++d) {
      if (i[d] < starts[d] || i[d] >= stops[d])
        return ::testing::AssertionFailure()
               << "checkpoint element " << src[k] << " is outside the box";
      inBox.push_back(i[d] - starts[d]);
    }
    int64_t boxFlat = ravel(inBox, boxShape);
    if (hit[boxFlat])
      return ::testing::AssertionFailure()
             << "checkpoint element " << src[k] << " is copied twice";
    hit[boxFlat] = true;
    int64_t at = offset;
    for (auto [u, s] : llvm::zip(unravel(boxFlat, shape), stride))
      at += u * s;
    if (at != dst[k])
      return ::testing::AssertionFailure()
             << "checkpoint element " << src[k] << " goes to " << at
             << " instead of " << dst[k];
  }
  return ::testing::AssertionSuccess();
}

Ints loadplan_test::randomDestination(std::mt19937_64 &rng,
                                      ArrayRef<int64_t> shape) {
  int64_t rank = shape.size();
  Ints order(rank);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  Ints stride(rank, 0);
  int64_t next = 1;
  for (int64_t k = rank - 1; k >= 0; --k) {
    int64_t dim = order[k];
    stride[dim] = next;
    int64_t pad = std::bernoulli_distribution(0.25)(rng) ? 1 + rng() % 2 : 0;
    next *= shape[dim] + pad;
  }
  return stride;
}

uint64_t loadplan_test::propertySeed(uint64_t seed) {
  if (const char *env = std::getenv("LOADPLAN_PROPERTY_SEED"))
    return seed + std::strtoull(env, nullptr, 10);
  return seed;
}

int loadplan_test::propertyIterations(int base) {
  if (const char *env = std::getenv("LOADPLAN_PROPERTY_SCALE"))
    return base * std::max(1, std::atoi(env));
  return base;
}
