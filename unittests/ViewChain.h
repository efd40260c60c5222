//===- ViewChain.h - Random torch view chains, element by element -*- C++ -*-===//
//
// A model of torch views that moves elements one by one, for the property
// tests: random view chains applied both with the view rules of Geometry.h
// and to the list of checkpoint elements each view holds, printed as
// loadplan IR too; and the check of a write (box, region) against the
// elements a copy moves.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_UNITTESTS_VIEWCHAIN_H
#define LOADPLAN_UNITTESTS_VIEWCHAIN_H

#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"

#include "gtest/gtest.h"

#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace loadplan_test {

using mlir::ArrayRef;
using Ints = mlir::SmallVector<int64_t>;

/// A view as a list of the checkpoint elements it holds, in row-major order.
struct Elements {
  Ints shape;
  std::vector<int64_t> at; // flat index in the contiguous checkpoint tensor
};

/// Row-major multi-index of flat index `flat` in `shape`.
Ints unravel(int64_t flat, ArrayRef<int64_t> shape);
/// Row-major flat index of `index` in `shape`.
int64_t ravel(ArrayRef<int64_t> index, ArrayRef<int64_t> shape);
/// The view of `in` of shape `shape` whose element at index `j` is `in`'s
/// element at `source(j)`.
Elements gather(const Elements &in, ArrayRef<int64_t> shape,
                const std::function<Ints(ArrayRef<int64_t>)> &source);
/// `in`'s elements in row-major order, in shape `shape` (torch's reshape).
Elements reshapeElements(const Elements &in, ArrayRef<int64_t> shape);
/// The elements a strided layout holds, in row-major order.
std::vector<int64_t> elementsOf(const mlir::loadplan::Strided &s);
std::vector<int64_t> elementsOf(int64_t offset, ArrayRef<int64_t> shape,
                                ArrayRef<int64_t> stride);
/// `[a, b, ...]`.
std::string str(ArrayRef<int64_t> v);
/// The MLIR type of a bf16 tensor of `shape`.
std::string tensorType(ArrayRef<int64_t> shape);

/// A random chain of torch views of a checkpoint tensor.
class Chain {
public:
  Chain(std::mt19937_64 &rng, Ints ckptShape);

  /// Applies one random view op; false if it was skipped. With
  /// `allowCopies`, a reshape that torch must copy is applied too: it ends
  /// the chain (`lost`).
  bool step(bool allowCopies = false);

  Ints ckptShape;
  mlir::loadplan::Strided layout; // valid unless `lost`
  Elements ref;
  /// A reshape may have merged dims.
  bool merged = false;
  /// A reshape that torch must copy: no strided layout holds the elements.
  bool lost = false;
  /// The chain so far, in words, for failure messages.
  std::ostringstream log;
  /// The chain as loadplan IR ops on %w, and the value that holds the view.
  std::string ir;
  std::string value = "%w";

private:
  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng); }
  /// A random shape with `numel` elements and 1 to 4 dims.
  Ints randomShape(int64_t numel);
  /// Applies a reshape whose op is `op` (IR) to both models.
  bool reshape(ArrayRef<int64_t> shape, const std::string &op, bool merges,
               bool allowCopies);
  /// Records `op` (IR, without result and types) producing `shape`.
  void emit(const std::string &op, ArrayRef<int64_t> shape);

  std::mt19937_64 &rng;
  int next = 0;
};

/// Whether some checkpoint element appears twice in `src`.
bool hasRepeats(ArrayRef<int64_t> src);
/// Whether the elements of `src` (flat indices) fill a box of `ckptShape`.
bool isBox(ArrayRef<int64_t> src, ArrayRef<int64_t> ckptShape);

/// Checks that the write of box [`starts`, `stops`) to region (`offset`,
/// `shape`, `stride`) moves what a copy moves whose k-th element is
/// checkpoint element `src[k]` going to destination element `dst[k]`.
::testing::AssertionResult checkWrite(ArrayRef<int64_t> ckptShape,
                                      ArrayRef<int64_t> src,
                                      ArrayRef<int64_t> dst,
                                      ArrayRef<int64_t> starts,
                                      ArrayRef<int64_t> stops, int64_t offset,
                                      ArrayRef<int64_t> shape,
                                      ArrayRef<int64_t> stride);

/// The seed of a property test: `seed`, or LOADPLAN_PROPERTY_SEED's value
/// added to it when set (to explore more cases locally).
uint64_t propertySeed(uint64_t seed);
/// The iterations of a property test: `base`, times LOADPLAN_PROPERTY_SCALE
/// when set.
int propertyIterations(int base);

/// Destination strides for `shape` laid out in a random dim order, with some
/// dims padded (a slot of a larger tensor).
Ints randomDestination(std::mt19937_64 &rng, ArrayRef<int64_t> shape);

} // namespace loadplan_test

#endif // LOADPLAN_UNITTESTS_VIEWCHAIN_H
