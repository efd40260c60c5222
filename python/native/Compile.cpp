//===- Compile.cpp - Run the load-plan pipeline in process ------*- C++ -*-===//

#include "Compile.h"

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanDialect.h"
#include "loadplan/Transforms/Passes.h"
#include "loadplan/Transforms/Plan.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/Support/raw_ostream.h"

using namespace mlir;

/// "file:line:col: severity: message", then its notes, as mlir-opt prints.
static std::string formatDiagnostic(Diagnostic &diag) {
  std::string out;
  llvm::raw_string_ostream os(out);
  auto one = [&](Diagnostic &d) {
    Location loc = d.getLocation();
    if (auto file = dyn_cast<FileLineColLoc>(loc))
      os << file.getFilename().getValue() << ":" << file.getLine() << ":"
         << file.getColumn() << ": ";
    else if (!isa<UnknownLoc>(loc))
      os << loc << ": ";
    switch (d.getSeverity()) {
    case DiagnosticSeverity::Error:
      os << "error: ";
      break;
    case DiagnosticSeverity::Warning:
      os << "warning: ";
      break;
    case DiagnosticSeverity::Note:
      os << "note: ";
      break;
    case DiagnosticSeverity::Remark:
      os << "remark: ";
      break;
    }
    os << d;
  };
  one(diag);
  for (Diagnostic &note : diag.getNotes()) {
    os << "\n";
    one(note);
  }
  return out;
}

loadplan_python::CompileResult
loadplan_python::compile(const std::string &ir, const std::string &sourceName,
                         bool printIR, bool printJson) {
  CompileResult result;
  DialectRegistry registry;
  registry.insert<loadplan::LoadPlanDialect>();
  // One compilation per call: no thread pool to start or to leak.
  MLIRContext context(registry, MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();
  // The messages name the op by its location; its generic form is noise.
  context.printOpOnDiagnostic(false);

  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    std::string text = formatDiagnostic(diag);
    if (diag.getSeverity() == DiagnosticSeverity::Error)
      result.errors.push_back(std::move(text));
    else
      result.remarks.push_back(std::move(text));
    return success();
  });

  ParserConfig config(&context);
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(ir, config, sourceName);
  if (!module) {
    if (result.errors.empty())
      result.errors.push_back("cannot parse the captured IR");
    return result;
  }

  PassManager pm(&context, ModuleOp::getOperationName());
  // The parser verified the captured IR; verifying the whole module again
  // after every stage costs more than the stages on large models (the lit
  // tests run each pass with verification, and the runtime checks every plan
  // it opens).
  pm.enableVerifier(false);
  loadplan::PipelineOptions options;
  loadplan::buildLoadPlanPipeline(pm, options);
  if (failed(pm.run(*module))) {
    if (result.errors.empty())
      result.errors.push_back("the load-plan pipeline failed");
    return result;
  }

  FailureOr<loadplan::Plan> plan = loadplan::buildPlan(*module);
  if (failed(plan)) {
    if (result.errors.empty())
      result.errors.push_back("cannot read the plan off the compiled IR");
    return result;
  }
  if (printJson)
    result.json = planJson(*plan);
  result.plan = loadplan::serializePlan(*plan);
  {
    llvm::raw_string_ostream os(result.report);
    loadplan::printPlanReport(*plan, os,
                              loadplan::secondsSinceCompileStart());
  }
  if (printIR) {
    llvm::raw_string_ostream os(result.compiledIR);
    module->print(os);
  }
  result.ok = result.errors.empty();
  return result;
}

const char *loadplan_python::compilerMissing() { return nullptr; }

std::string loadplan_python::planJson(const loadplan_format::Plan &plan) {
  std::string out;
  llvm::raw_string_ostream os(out);
  loadplan::printPlanJson(plan, os);
  return out;
}
