//===- Importer.h - Import an exported loader's program ---------*- C++ -*-===//
//
// The program importer: from the graph of a loader exported by
// `loadplan.export_loader` to the loadplan IR that capture would have
// recorded for it, in the form capture records it (records and lines of
// text, loadplan/Records/RecordedModule.h).
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_LIB_IMPORT_IMPORTER_H
#define LOADPLAN_LIB_IMPORT_IMPORTER_H

#include "loadplan/Records/RecordedModule.h"

#include <torch/csrc/utils/generated_serialization_types.h>

#include <string>

namespace mlir::loadplan::torch_export {

namespace schema = torch::_export;

class Archive;

/// Records the loader `program`. Its targets' storages are the weights
/// `weights` (the archive's weights config, or null) says they were saved
/// as, of the sizes of their records in `archive`. Fails (ImportError) for
/// a program it cannot import.
RecordedModule importProgram(const schema::ExportedProgram &program,
                          const schema::PayloadConfig *weights,
                          Archive &archive);

} // namespace mlir::loadplan::torch_export

#endif // LOADPLAN_LIB_IMPORT_IMPORTER_H
