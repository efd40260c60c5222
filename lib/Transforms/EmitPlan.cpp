//===- EmitPlan.cpp - Write the plan and its report -------------*- C++ -*-===//

#include "loadplan/Transforms/Passes.h"
#include "loadplan/Transforms/Plan.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"

namespace mlir {
namespace loadplan {
#define GEN_PASS_DEF_EMITPLAN
#define GEN_PASS_DEF_EMITPLANJSON
#define GEN_PASS_DEF_REPORT
#include "loadplan/Transforms/Passes.h.inc"
} // namespace loadplan
} // namespace mlir

using namespace mlir;
using namespace mlir::loadplan;

namespace {

/// Writes `content` to `path` ('-': stdout), or emits an error.
static LogicalResult writeFile(Operation *op, StringRef path,
                               function_ref<void(raw_ostream &)> content) {
  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> out = openOutputFile(path, &error);
  if (!out)
    return op->emitError() << "cannot write the plan to '" << path
                           << "': " << error;
  content(out->os());
  out->keep();
  return success();
}

struct EmitPlanPass : public loadplan::impl::EmitPlanBase<EmitPlanPass> {
  using EmitPlanBase::EmitPlanBase;
  void runOnOperation() override {
    if (file.empty()) {
      getOperation().emitError()
          << "--loadplan-emit-plan needs a file (--loadplan-emit-plan=FILE)";
      return signalPassFailure();
    }
    FailureOr<Plan> plan = buildPlan(getOperation());
    if (failed(plan) ||
        failed(writeFile(getOperation(), file, [&](raw_ostream &os) {
          os << serializePlan(*plan);
        })))
      return signalPassFailure();
    markAllAnalysesPreserved();
  }
};

struct EmitPlanJsonPass
    : public loadplan::impl::EmitPlanJsonBase<EmitPlanJsonPass> {
  using EmitPlanJsonBase::EmitPlanJsonBase;
  void runOnOperation() override {
    FailureOr<Plan> plan = buildPlan(getOperation());
    if (failed(plan) ||
        failed(writeFile(getOperation(), file, [&](raw_ostream &os) {
          printPlanJson(*plan, os);
        })))
      return signalPassFailure();
    markAllAnalysesPreserved();
  }
};

struct ReportPass : public loadplan::impl::ReportBase<ReportPass> {
  using ReportBase::ReportBase;
  void runOnOperation() override {
    FailureOr<Plan> plan = buildPlan(getOperation());
    if (failed(plan))
      return signalPassFailure();
    printPlanReport(*plan, llvm::errs(), secondsSinceCompileStart());
    markAllAnalysesPreserved();
  }
};

} // namespace
