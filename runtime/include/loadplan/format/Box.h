//===- Box.h - A box of a checkpoint tensor ---------------------*- C++ -*-===//
//
// The one box type: [lo[k], hi[k]) per dim of a checkpoint tensor, the
// (start, stop) pairs of plan_format.h. The compiler's plans, the runtime's
// entries and the transfers' pieces all hold their boxes in it. Its bounds
// are kept inline up to rank 3 (a transformer's weights, stacked experts
// included), so that the boxes of a plan of 50,000 names are not 100,000
// small allocations, and a box takes 64 bytes.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_FORMAT_BOX_H
#define LOADPLAN_FORMAT_BOX_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

namespace loadplan_format {

/// A box's bounds, one per dim: a vector of int64_t that holds up to
/// kInline values without allocating.
class Dims {
public:
  static constexpr uint32_t kInline = 3;

  Dims() {}
  Dims(std::initializer_list<int64_t> values) {
    assign(values.begin(), values.end());
  }
  /// Implicit: shapes and extents are vectors.
  Dims(const std::vector<int64_t> &values) {
    assign(values.data(), values.data() + values.size());
  }
  Dims(size_t n, int64_t value) { resize(n, value); }
  Dims(const int64_t *first, const int64_t *last) { assign(first, last); }
  Dims(const Dims &other) { assign(other.begin(), other.end()); }
  Dims(Dims &&other) noexcept { take(other); }
  Dims &operator=(const Dims &other) {
    if (this != &other)
      assign(other.begin(), other.end());
    return *this;
  }
  Dims &operator=(Dims &&other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  ~Dims() { release(); }

  size_t size() const { return count; }
  bool empty() const { return count == 0; }
  int64_t *data() { return onHeap() ? heap : local; }
  const int64_t *data() const { return onHeap() ? heap : local; }
  int64_t *begin() { return data(); }
  int64_t *end() { return data() + count; }
  const int64_t *begin() const { return data(); }
  const int64_t *end() const { return data() + count; }
  int64_t &operator[](size_t k) { return data()[k]; }
  int64_t operator[](size_t k) const { return data()[k]; }

  void clear() { count = 0; }
  void reserve(size_t n) {
    if (n <= capacity)
      return;
    size_t grown = std::max<size_t>(n, 2 * size_t(capacity));
    int64_t *values = new int64_t[grown];
    std::copy(begin(), end(), values);
    release();
    heap = values;
    capacity = static_cast<uint32_t>(grown);
  }
  void push_back(int64_t value) {
    reserve(count + 1);
    data()[count++] = value;
  }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    std::fill(data() + std::min<size_t>(count, n), data() + n, value);
    count = static_cast<uint32_t>(n);
  }
  /// The values [first, last), which must not be this one's.
  void assign(const int64_t *first, const int64_t *last) {
    count = 0;
    reserve(size_t(last - first));
    std::copy(first, last, data());
    count = static_cast<uint32_t>(last - first);
  }

  friend bool operator==(const Dims &a, const Dims &b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator!=(const Dims &a, const Dims &b) { return !(a == b); }

private:
  bool onHeap() const { return capacity > kInline; }
  void release() {
    if (onHeap())
      delete[] heap;
    capacity = kInline;
  }
  /// Moves `other`'s values here (this one holds none) and empties it.
  void take(Dims &other) {
    count = other.count;
    capacity = other.capacity;
    if (other.onHeap())
      heap = other.heap;
    else
      std::copy(other.local, other.local + count, local);
    other.capacity = kInline;
    other.count = 0;
  }

  union {
    int64_t local[kInline] = {};
    int64_t *heap;
  };
  uint32_t count = 0, capacity = kInline;
};

/// [lo[k], hi[k]) per dim of a checkpoint tensor.
struct Box {
  Dims lo, hi;

  uint32_t rank() const { return static_cast<uint32_t>(lo.size()); }
  int64_t extent(uint32_t k) const { return hi[k] - lo[k]; }
  std::vector<int64_t> extents() const {
    std::vector<int64_t> out(lo.size());
    for (uint32_t k = 0; k < rank(); ++k)
      out[k] = extent(k);
    return out;
  }
  /// Elements; 0 when some dim is empty.
  int64_t volume() const {
    int64_t n = 1;
    for (uint32_t k = 0; k < rank(); ++k)
      n *= std::max<int64_t>(extent(k), 0);
    return n;
  }
  bool operator==(const Box &other) const {
    return lo == other.lo && hi == other.hi;
  }
  bool operator!=(const Box &other) const { return !(*this == other); }
};

} // namespace loadplan_format

#endif // LOADPLAN_FORMAT_BOX_H
