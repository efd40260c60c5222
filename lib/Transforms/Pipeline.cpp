//===- Pipeline.cpp - The load-plan pipeline --------------------*- C++ -*-===//

#include "loadplan/Transforms/Passes.h"
#include "loadplan/Transforms/Plan.h"

#include "mlir/IR/Threading.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace mlir::loadplan;

void loadplan::forEachCheckpoint(ModuleOp module,
                                 function_ref<void(CheckpointOp)> fn) {
  SmallVector<CheckpointOp> checkpoints =
      llvm::to_vector(module.getOps<CheckpointOp>());
  parallelForEach(module.getContext(), checkpoints, fn);
}

void loadplan::buildLoadPlanPipeline(OpPassManager &pm,
                                     const PipelineOptions &options) {
  markCompileStart();
  pm.addPass(createFoldViews());
  pm.addPass(createToBoxes());
  pm.addPass(createDetectFallbacks());
  pm.addPass(createMergeWrites());
  pm.addPass(createDetectOverlaps());
  pm.addPass(createCheckCoverage());
  // The JSON first: if writing it fails, the compile fails before the plan
  // file, the one an engine reads, is replaced.
  if (!options.jsonFile.empty())
    pm.addPass(createEmitPlanJson(EmitPlanJsonOptions{options.jsonFile}));
  if (!options.planFile.empty())
    pm.addPass(createEmitPlan(EmitPlanOptions{options.planFile}));
  if (options.report)
    pm.addPass(createReport());
}

namespace {
struct PipelineCLOptions : public PassPipelineOptions<PipelineCLOptions> {
  Option<std::string> plan{*this, "plan",
                           llvm::cl::desc("Write the binary plan to this file")};
  Option<std::string> json{
      *this, "json", llvm::cl::desc("Write the JSON plan to this file")};
  Option<bool> report{*this, "report", llvm::cl::desc("Print the report"),
                      llvm::cl::init(false)};
};
} // namespace

void loadplan::registerLoadPlanPipeline() {
  PassPipelineRegistration<PipelineCLOptions>(
      "loadplan-pipeline",
      "Compile a captured loader into a load plan: fold views, reduce copies "
      "to boxes, detect fallbacks, merge writes, detect overlaps, check "
      "coverage, and optionally emit the plan and its report",
      [](OpPassManager &pm, const PipelineCLOptions &cl) {
        PipelineOptions options;
        options.planFile = cl.plan;
        options.jsonFile = cl.json;
        options.report = cl.report;
        buildLoadPlanPipeline(pm, options);
      });
}
