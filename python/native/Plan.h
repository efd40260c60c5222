//===- Plan.h - A runtime plan in loadplan._native -------------*- C++ -*-===//
//
// The handle that the module's Plan class owns; the binding, the update
// check and the transfers take it from Python, and definePlan gives it its
// methods.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_PYTHON_PLAN_H
#define LOADPLAN_PYTHON_PLAN_H

#include "Handle.h"

#include "loadplan/runtime.h"

#include <cstdint>
#include <vector>

namespace loadplan_python {

// Inline: one array, so one Handle type, in every file that includes this.
inline constexpr char kPlanName[] = "plan";

/// A checked plan (reference-counted by the runtime).
class Plan : public Handle<loadplan_plan_t, loadplan_plan_release, kPlanName> {
public:
  using Handle::Handle;
};

/// `n` ints of a plan's info struct (a shape, a stride), as a vector.
inline std::vector<int64_t> ints(const int64_t *values, uint32_t n) {
  return std::vector<int64_t>(values, values + n);
}

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_PLAN_H
