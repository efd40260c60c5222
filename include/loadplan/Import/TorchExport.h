//===- TorchExport.h - Import torch.export loaders --------------*- C++ -*-===//
//
// The second way into the compiler: a loader exported with torch.export
// (`loadplan.export_loader`, a `.pt2` archive) becomes the loadplan IR that
// capture would have recorded, for the same pipeline.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_IMPORT_TORCHEXPORT_H
#define LOADPLAN_IMPORT_TORCHEXPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include "llvm/ADT/StringRef.h"

namespace mlir {
class MLIRContext;
namespace loadplan {

/// Reads the `.pt2` archive in `bytes` with LibTorch and returns its loader
/// as a verified loadplan module; emits an error at `loc` and returns null
/// for an archive or program it cannot read.
OwningOpRef<ModuleOp> importTorchExport(llvm::StringRef bytes, Location loc,
                                        MLIRContext *context);

/// Registers `--import-torch-export` for mlir-translate style drivers.
void registerImportTorchExport();

} // namespace loadplan
} // namespace mlir

#endif // LOADPLAN_IMPORT_TORCHEXPORT_H
