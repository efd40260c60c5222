//===- ir_fuzzer.cpp - Fuzz the compiler from IR text ---------------------===//
//
// libFuzzer target (a): arbitrary bytes as loadplan IR text, through the
// parser, the verifier, the whole pipeline and every plan encoder. Bad input
// must end in a diagnostic; a crash, a leak or a sanitizer report is a bug.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanDialect.h"
#include "loadplan/Transforms/Passes.h"
#include "loadplan/Transforms/Plan.h"
#include "loadplan/format/PlanJson.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cstddef>
#include <cstdint>
#include <string>

using namespace mlir;
using namespace mlir::loadplan;

/// LLVM's allocators poison and unpoison memory by hand only where they are
/// compiled with ASan, and the MLIR libraries we link are not: memory our
/// code poisons, theirs hands out still poisoned. Hand poisoning off; ASan
/// still checks every heap, stack and global access.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A fresh context per input: nothing uniqued by one input outlives it, so
  // the leak checker and -rss_limit_mb see each input on its own.
  DialectRegistry registry;
  registry.insert<LoadPlanDialect>();
  MLIRContext context(registry, MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();
  // Diagnostics are the expected outcome of bad input: swallow them all.
  ScopedDiagnosticHandler swallow(&context,
                                  [](Diagnostic &) { return success(); });

  // The lexer relies on the NUL after the text, which files and Python
  // strings have and libFuzzer's buffer does not.
  std::string text(reinterpret_cast<const char *>(data), size);
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBuffer(text, "fuzz",
                                       /*RequiresNullTerminator=*/true),
      llvm::SMLoc());
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(&context));
  if (!module)
    return 0;

  // The pass manager verifies the module before and after every pass.
  PassManager pm(&context);
  buildLoadPlanPipeline(pm, PipelineOptions{});
  if (failed(pm.run(*module)))
    return 0;

  FailureOr<Plan> plan = buildPlan(*module);
  if (failed(plan))
    return 0;
  std::string bytes = serializePlan(*plan);
  std::string text2;
  llvm::raw_string_ostream os(text2);
  os << loadplan_format::planJson(*plan);
  printPlanReport(*plan, os, /*seconds=*/0);
  return 0;
}
