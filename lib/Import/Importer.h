//===- Importer.h - Import an exported loader's program ---------*- C++ -*-===//
//
// The program importer: from the graph of a loader exported by
// `loadplan.export_loader` to the loadplan IR that capture would have
// recorded for it, as text.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_LIB_IMPORT_IMPORTER_H
#define LOADPLAN_LIB_IMPORT_IMPORTER_H

#include <torch/csrc/utils/generated_serialization_types.h>

#include <string>

namespace mlir::loadplan::torch_export {

namespace schema = torch::_export;

class Archive;

/// Writes the loader `program` as loadplan IR text, whose first line names
/// `sourceName`. Its targets' storages are the weights `weights` (the
/// archive's weights config, or null) says they were saved as, of the
/// sizes of their records in `archive`. Fails (ImportError) for a program
/// it cannot import.
std::string importProgram(const schema::ExportedProgram &program,
                          const schema::PayloadConfig *weights,
                          Archive &archive, const std::string &sourceName);

} // namespace mlir::loadplan::torch_export

#endif // LOADPLAN_LIB_IMPORT_IMPORTER_H
