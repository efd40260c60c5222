//===- Plan.h - The load plan of a compiled module --------------*- C++ -*-===//
//
// The plan read off a module the pipeline has compiled, as the plain data
// of the runtime's format library (loadplan/format/PlanFile.h), and its
// binary plan file and report, which that library writes (as it writes the
// plan's JSON, loadplan/format/PlanJson.h).
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_TRANSFORMS_PLAN_H
#define LOADPLAN_TRANSFORMS_PLAN_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/raw_ostream.h"

#include "loadplan/format/PlanFile.h"
#include "loadplan/plan_format.h"

#include <string>

namespace mlir {
namespace loadplan {

/// The plan as plain data: the format library's, whose encoder writes it.
using Plan = ::loadplan_format::Plan;
using PlanBox = ::loadplan_format::Box;
using PlanEntry = ::loadplan_format::PlanEntry;
using PlanMember = ::loadplan_format::PlanMember;
using PlanTarget = ::loadplan_format::PlanTarget;
using PlanWrite = ::loadplan_format::PlanWrite;

/// The plan's dtype codes of MLIR element types and back, from
/// plan_format.h's table (LOADPLAN_DTYPES), for one context.
class DtypeCodes {
public:
  explicit DtypeCodes(MLIRContext *context);
  /// The code of `type`, or LOADPLAN_DTYPE_INVALID.
  uint32_t lookup(Type type) const;
  /// The element type of `code`, or null for a code the table lacks.
  Type type(uint32_t code) const;

private:
  llvm::DenseMap<Type, uint32_t> codes;
  /// By code (the table's codes are small and dense).
  SmallVector<Type> types;
};

/// Reads the plan off a module the pipeline compiled; emits an error and
/// fails on what no plan can hold (an unknown dtype, a stray copy).
FailureOr<Plan> buildPlan(ModuleOp module);
/// The plan file's bytes (the format library's encodePlan).
std::string serializePlan(const Plan &plan);
/// The report: counts and MiB per kind, fallbacks grouped by reason.
void printPlanReport(const Plan &plan, raw_ostream &os, double seconds);

/// Marks the start of a compilation; the report's time counts from here.
void markCompileStart();
/// Seconds since the last markCompileStart (or since the process started).
double secondsSinceCompileStart();

} // namespace loadplan
} // namespace mlir

#endif // LOADPLAN_TRANSFORMS_PLAN_H
