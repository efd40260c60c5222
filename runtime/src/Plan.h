//===- Plan.h - A parsed, checked plan --------------------------*- C++ -*-===//
//
// The plan file (plan_format.h) as plain data: targets and writes as the
// format library has them, entries with what the executors look up (flat
// boxes, element counts, global box indices). parsePlan accepts only a plan
// every later step can trust: all indices in range, every region inside its
// storage and a reshape of its box, no two writes sharing a destination byte.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_PLAN_H
#define LOADPLAN_RUNTIME_PLAN_H

#include "loadplan/format/PlanFile.h"
#include "loadplan/runtime.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace loadplan {

/// Dims beyond this are refused; torch allows no more.
constexpr uint32_t kMaxRank = 64;

/// A target as the file has it, and what the reader derives of it.
struct Target : loadplan_format::PlanTarget {
  /// Bytes from its first element to past its last; 0 when it has none.
  int64_t spanBytes = 0;
};

using Write = loadplan_format::PlanWrite;

struct Entry {
  std::string name;
  uint32_t kind = 0;
  uint32_t dtype = 0;
  std::vector<int64_t> shape;
  int64_t numElements = 0;
  bool hasReason = false;
  std::string reason;
  uint32_t numBoxes = 0;
  /// numBoxes * rank (start, stop) pairs, as in the file.
  std::vector<int64_t> boxes;
  std::vector<Write> writes;
  /// The index of box 0 among all boxes of the plan.
  uint32_t firstBox = 0;

  uint32_t rank() const { return static_cast<uint32_t>(shape.size()); }
  int64_t boxStart(uint32_t box, uint32_t dim) const {
    return boxes[2 * (size_t(box) * rank() + dim)];
  }
  int64_t boxStop(uint32_t box, uint32_t dim) const {
    return boxes[2 * (size_t(box) * rank() + dim) + 1];
  }
  /// Elements of box `box` (checked against overflow at parse time).
  int64_t boxElements(uint32_t box) const;
};

/// The dtype write `w` of `e` writes: `e`'s, or the one it converts to.
inline uint32_t writtenDtype(const Entry &e, const Write &w) {
  return loadplan_format::writtenDtype(e.dtype, w);
}

struct Plan {
  Plan() = default;
  Plan(const Plan &) = delete;
  Plan &operator=(const Plan &) = delete;

  uint64_t fingerprint = 0;
  std::vector<uint64_t> storageSizes;
  std::vector<Target> targets;
  std::vector<Entry> entries;
  /// Entry names (views into `entries`) to indices.
  std::unordered_map<std::string_view, uint32_t> byName;
  /// Entry indices per kind, in plan order.
  std::vector<uint32_t> byKind[LOADPLAN_KIND_COUNT_];
  uint32_t numBoxes = 0;
  uint64_t numWrites = 0;
  uint64_t directBytes = 0;
  uint64_t fallbackBytes = 0;
};

/// Parses and checks plan file bytes; throws a StatusError (INVALID_PLAN)
/// that says what is wrong.
std::unique_ptr<Plan> parsePlan(const uint8_t *data, size_t size);

/// The fingerprint of `plan`'s targets with the caller's view of each one;
/// throws FINGERPRINT_MISMATCH naming the first target and field that differ.
void checkLayout(const Plan &plan, const loadplan_target_layout_t *layouts,
                 size_t numLayouts);

/// Row-major strides (in elements) of `shape`.
std::vector<int64_t> contiguousStrides(const std::vector<int64_t> &shape);

} // namespace loadplan

/// The C handle: a reference-counted plan.
struct loadplan_plan_t {
  std::atomic<int64_t> refs{1};
  std::unique_ptr<loadplan::Plan> plan;
};

#endif // LOADPLAN_RUNTIME_PLAN_H
