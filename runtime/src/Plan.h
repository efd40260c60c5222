//===- Plan.h - A parsed, checked plan --------------------------*- C++ -*-===//
//
// A plan file (plan_format.h) as the format library has it, each name an
// entry of its own, and what the runtime looks up in it: entries by name
// and by kind, global box indices, totals. parsePlan reads the payload as
// loadplan/format/PlanFields.h describes it and accepts only a plan every
// later step can trust: all indices in range, every region inside its
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

using Box = loadplan_format::Box;
using Entry = loadplan_format::PlanEntry;
using Target = loadplan_format::PlanTarget;
using Write = loadplan_format::PlanWrite;

/// The dtype write `w` of `e` writes: `e`'s, or the one it converts to.
inline uint32_t writtenDtype(const Entry &e, const Write &w) {
  return loadplan_format::writtenDtype(e.dtype, w);
}

/// What the file holds (no members: the file spells each name out) and
/// what the runtime derives of it.
struct Plan : loadplan_format::Plan {
  Plan() = default;
  Plan(const Plan &) = delete;
  Plan &operator=(const Plan &) = delete;

  uint64_t fingerprint = 0;
  /// Per entry: the index of its box 0 among all boxes of the plan.
  std::vector<uint32_t> firstBox;
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
