//===- RecordBuilder.h - Capture records into a module ----------*- C++ -*-===//

#ifndef LOADPLAN_PYTHON_RECORDBUILDER_H
#define LOADPLAN_PYTHON_RECORDBUILDER_H

#include "Compile.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

namespace loadplan_python {

/// Puts every checkpoint of `records` into `module` (the parse of
/// `records.text`) in arrival order: the text ones are already there, the
/// others are built from their records before the next text one. With
/// `nameLocations`, each built op is at its checkpoint's NameLoc; without,
/// at an unknown location (for a compile that reports nothing of them; see
/// compileRecords). With `groupNames`, a name whose records are views and
/// at most one copy, the same as an earlier name's but for the copy's
/// offset in the same target, is a member of that name's checkpoint, moved
/// by the bytes
/// between the offsets (a layer's experts, say: the passes then reduce one
/// block for all of them). A record that does not fit (an unknown code, a
/// value or type out of range, a wrong field count) is an error diagnostic
/// and a failure; the module is then to be dropped.
mlir::LogicalResult buildRecordedCheckpoints(mlir::ModuleOp module,
                                             const CapturedRecords &records,
                                             bool nameLocations,
                                             bool groupNames);

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_RECORDBUILDER_H
