//===- EmitPlan.cpp - Write the plan and its report -------------*- C++ -*-===//

#include "loadplan/Transforms/Passes.h"
#include "loadplan/Transforms/Plan.h"
#include "loadplan/format/PlanJson.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FileSystem.h"
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

/// Writes `content` to `path` ('-': stdout), or emits an error. A regular
/// file is written beside `path` and renamed over it once complete: a write
/// that fails (a full disk) leaves the plan that was there, not part of one.
static LogicalResult writeFile(Operation *op, StringRef path,
                               function_ref<void(raw_ostream &)> content) {
  auto cannotWrite = [&](const Twine &why) {
    return op->emitError() << "cannot write the plan to '" << path
                           << "': " << why.str();
  };
  auto written = [&](llvm::raw_fd_ostream &os) -> LogicalResult {
    os.flush();
    std::error_code ec = os.error();
    os.clear_error(); // else the stream reports it fatally when destroyed
    return ec ? cannotWrite(ec.message()) : success();
  };
  namespace fs = llvm::sys::fs;
  // stdout, /dev/null, a pipe: written in place, never renamed over.
  if (path == "-" || (fs::exists(path) && !fs::is_regular_file(path))) {
    std::string error;
    std::unique_ptr<llvm::ToolOutputFile> out = openOutputFile(path, &error);
    if (!out)
      return cannotWrite(error);
    out->keep();
    content(out->os());
    return written(out->os());
  }
  // Through a link, to the file it names: the link stays.
  SmallString<128> dest(path);
  if (fs::exists(path) && fs::real_path(path, dest))
    dest = path;
  llvm::Expected<fs::TempFile> temp =
      fs::TempFile::create(dest + ".tmp-%%%%%%", fs::all_read | fs::all_write);
  if (!temp)
    return cannotWrite(llvm::toString(temp.takeError()));
  llvm::raw_fd_ostream os(temp->FD, /*shouldClose=*/false);
  content(os);
  if (failed(written(os))) {
    llvm::consumeError(temp->discard());
    return failure();
  }
  if (llvm::Error error = temp->keep(dest))
    return cannotWrite(llvm::toString(std::move(error)));
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
          os << ::loadplan_format::planJson(*plan);
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
