//===- RecordBuilder.h - A recorded loader into a module --------*- C++ -*-===//
//
// The one place records become the dialect's ops, for both front ends: the
// in-process compile of a capture (python/native/Compile.cpp), the
// capture's IR text (what MLIR's printer prints of the module built here:
// the ops' assembly formats are the only spelling of the IR), and the
// torch.export importer's module (lib/Import/TorchExport.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RECORDS_RECORDBUILDER_H
#define LOADPLAN_RECORDS_RECORDBUILDER_H

#include "loadplan/Records/RecordedModule.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include "llvm/ADT/StringRef.h"

namespace mlir::loadplan {

/// How buildRecordedModule builds.
struct RecordBuildOptions {
  /// Each built op at its checkpoint's NameLoc; without, at an unknown
  /// location (for a compile that reports nothing of them).
  bool nameLocations = false;
  /// A name whose records are views and at most one copy, the same as an
  /// earlier name's but for the copy's offset in the same target, is a
  /// member of that name's checkpoint, moved by the bytes between the
  /// offsets (a layer's experts, say: the passes then reduce one block for
  /// all of them).
  bool groupNames = false;
  /// A slice of a whole dim (a TP narrow on one rank, say) is its input, as
  /// fold-views would find: no op to make, fold and destroy.
  bool foldWholeSlices = false;
};

/// The module of `records`: its storages and targets, then each checkpoint
/// in arrival order, its records as the ops they stand for; named
/// `sourceName` in diagnostics. Nothing is verified. Null, with error
/// diagnostics, for records that do not fit (an unknown code, a value,
/// type, string or target out of range, a wrong field count).
OwningOpRef<ModuleOp> buildRecordedModule(MLIRContext *context,
                                          const RecordedModule &records,
                                          llvm::StringRef sourceName,
                                          const RecordBuildOptions &options);

} // namespace mlir::loadplan

#endif // LOADPLAN_RECORDS_RECORDBUILDER_H
