//===- TorchExport.cpp - Import torch.export loaders -------------*- C++ -*-===//
//
// The MLIR side of the torch.export importer: the LibTorch side
// (TorchExportReader.cpp) records the loader as capture does, and its module
// is built here as a capture's is (loadplan/Records/RecordBuilder.h) and
// verified like any other input of the compiler.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Import/TorchExport.h"

#include "TorchExportReader.h"

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanDialect.h"
#include "loadplan/Records/RecordBuilder.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Tools/mlir-translate/Translation.h"

#include "llvm/Support/SourceMgr.h"

using namespace mlir;
using namespace mlir::loadplan;

OwningOpRef<ModuleOp> mlir::loadplan::importTorchExport(llvm::StringRef bytes,
                                                        Location loc,
                                                        MLIRContext *context) {
  context->getOrLoadDialect<LoadPlanDialect>();
  torch_export::ReadResult result = torch_export::readTorchExport(
      std::string_view(bytes.data(), bytes.size()));
  if (!result.ok) {
    emitError(loc) << "cannot import torch.export program: " << result.error;
    return nullptr;
  }
  // The records are ours; an error in them is the importer's, reported as
  // such, at the name it is in.
  std::string parseError;
  OwningOpRef<ModuleOp> module;
  {
    ScopedDiagnosticHandler handler(context, [&](Diagnostic &diag) {
      if (diag.getSeverity() == DiagnosticSeverity::Error && parseError.empty())
        parseError = diag.str();
      return success();
    });
    RecordBuildOptions options;
    options.nameLocations = true;
    module = buildRecordedModule(context, result.records, "imported", options);
    if (module && failed(verify(*module)))
      module = nullptr;
  }
  if (!module) {
    emitError(loc) << "cannot import torch.export program: the imported IR "
                      "is invalid (an importer bug): "
                   << parseError;
    return nullptr;
  }
  return module;
}

void mlir::loadplan::registerImportTorchExport() {
  TranslateToMLIRRegistration registration(
      "import-torch-export",
      "Import a loader exported with torch.export (.pt2) as loadplan IR",
      [](llvm::SourceMgr &sourceMgr,
         MLIRContext *context) -> OwningOpRef<Operation *> {
        const llvm::MemoryBuffer *buffer =
            sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
        Location loc =
            FileLineColLoc::get(context, buffer->getBufferIdentifier(), 0, 0);
        return importTorchExport(buffer->getBuffer(), loc, context);
      },
      [](DialectRegistry &registry) { registry.insert<LoadPlanDialect>(); });
}
