//===- Passes.h - loadplan passes -------------------------------*- C++ -*-===//

#ifndef LOADPLAN_TRANSFORMS_PASSES_H
#define LOADPLAN_TRANSFORMS_PASSES_H

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>
#include <string>

namespace mlir {
namespace loadplan {

#define GEN_PASS_DECL
#include "loadplan/Transforms/Passes.h.inc"

/// Options of the whole pipeline.
struct PipelineOptions {
  std::string planFile;
  std::string jsonFile;
  bool report = false;
};

/// Adds every stage, in order, to `pm`.
void buildLoadPlanPipeline(OpPassManager &pm, const PipelineOptions &options);

/// Registers `--loadplan-pipeline`.
void registerLoadPlanPipeline();

#define GEN_PASS_REGISTRATION
#include "loadplan/Transforms/Passes.h.inc"

} // namespace loadplan
} // namespace mlir

#endif // LOADPLAN_TRANSFORMS_PASSES_H
