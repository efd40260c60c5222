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

/// Runs `fn` on every `loadplan.checkpoint` of `module`, on the context's
/// threads where it has them (a checkpoint is isolated from above: `fn`
/// may rewrite its body, not anything outside it, and emits no
/// diagnostics). The per-checkpoint passes run this way rather than nested
/// under the checkpoint op: a pass manager per op costs more than the
/// passes themselves at tens of thousands of names.
void forEachCheckpoint(ModuleOp module,
                       function_ref<void(CheckpointOp)> fn);

#define GEN_PASS_REGISTRATION
#include "loadplan/Transforms/Passes.h.inc"

} // namespace loadplan
} // namespace mlir

#endif // LOADPLAN_TRANSFORMS_PASSES_H
