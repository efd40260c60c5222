//===- ByteRuns.h - Bytes a strided write covers ----------------*- C++ -*-===//

#ifndef LOADPLAN_TRANSFORMS_BYTERUNS_H
#define LOADPLAN_TRANSFORMS_BYTERUNS_H

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanOps.h"
#include "loadplan/Transforms/Groups.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <utility>

namespace mlir {
namespace loadplan {

/// A half-open byte range [first, second).
using ByteRun = std::pair<int64_t, int64_t>;

/// Appends the bytes a strided write covers as [start, stop) runs, in no
/// particular order; one covering span when there would be more than
/// `maxRuns`.
void appendByteRuns(int64_t byteOffset, ArrayRef<int64_t> shape,
                    ArrayRef<int64_t> stride, int64_t itemSize,
                    int64_t maxRuns, SmallVectorImpl<ByteRun> &out);

/// One write's bytes in a storage, attributed to a name.
struct StorageWrite {
  unsigned storage; // index of the loadplan.storage in module order
  ByteRun run;
  unsigned name;    // index of the name in arrival order
};

/// Collects the bytes each name writes, by storage: its writes, the copies
/// that stayed (refused ones) and, with `withConstants`, constant writes;
/// a member's moved by its shift. Names whose loader stopped write nothing.
/// Fills `storages` in module order and `out` name by name in arrival
/// order, indexing both.
void collectStorageWrites(ModuleOp module, const CheckpointNames &names,
                          int64_t maxRuns, bool withConstants,
                          SmallVectorImpl<StorageOp> &storages,
                          SmallVectorImpl<StorageWrite> &out);

} // namespace loadplan
} // namespace mlir

#endif // LOADPLAN_TRANSFORMS_BYTERUNS_H
