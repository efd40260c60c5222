//===- Plan.h - The load plan of a compiled module --------------*- C++ -*-===//
//
// The plan as plain data, read off a module the pipeline has compiled, and
// its two encodings: the binary plan file (plan_format.h) and JSON.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_TRANSFORMS_PLAN_H
#define LOADPLAN_TRANSFORMS_PLAN_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include "loadplan/plan_format.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir {
namespace loadplan {

struct PlanTarget {
  std::string module, tensor;
  uint32_t storage;
  int64_t byteOffset;
  uint32_t dtype;
  SmallVector<int64_t> shape, stride;
};

struct PlanBox {
  SmallVector<int64_t> starts, stops;
  bool operator==(const PlanBox &o) const {
    return starts == o.starts && stops == o.stops;
  }
};

struct PlanWrite {
  uint32_t target;
  uint32_t box; // index into the entry's boxes
  int64_t offset;
  SmallVector<int64_t> shape, stride;
};

struct PlanEntry {
  std::string name;
  loadplan_entry_kind_t kind;
  uint32_t dtype;
  SmallVector<int64_t> shape;
  std::optional<std::string> reason;
  /// Parts this rank needs: the distinct boxes of the writes for a direct
  /// name, the whole tensor for a fallback, none when unneeded.
  std::vector<PlanBox> boxes;
  std::vector<PlanWrite> writes;
  /// Bytes the engine moves for this name on this rank (INT64_MAX if more).
  int64_t neededBytes() const;
};

struct Plan {
  std::vector<int64_t> storageSizes;
  std::vector<PlanTarget> targets;
  std::vector<PlanEntry> entries;
  uint64_t fingerprint = 0;
};

/// The plan's dtype codes of MLIR element types, from plan_format.h's table
/// (LOADPLAN_DTYPES), for one context.
class DtypeCodes {
public:
  explicit DtypeCodes(MLIRContext *context);
  /// The code of `type`, or LOADPLAN_DTYPE_INVALID.
  uint32_t lookup(Type type) const;

private:
  llvm::DenseMap<Type, uint32_t> codes;
};
/// The name of a kind: direct, fallback or unneeded.
StringRef getKindName(loadplan_entry_kind_t kind);

/// Reads the plan off a module the pipeline compiled; emits an error and
/// fails on what no plan can hold (an unknown dtype, a stray copy).
FailureOr<Plan> buildPlan(ModuleOp module);
/// The plan file's bytes.
std::string serializePlan(const Plan &plan);
/// The plan as JSON (see --loadplan-emit-plan-json).
void printPlanJson(const Plan &plan, raw_ostream &os);
/// The report: counts and MiB per kind, fallbacks grouped by reason.
void printPlanReport(const Plan &plan, raw_ostream &os, double seconds);

/// Marks the start of a compilation; the report's time counts from here.
void markCompileStart();
/// Seconds since the last markCompileStart (or since the process started).
double secondsSinceCompileStart();

} // namespace loadplan
} // namespace mlir

#endif // LOADPLAN_TRANSFORMS_PLAN_H
