//===- HostExecutor.h - The CPU executor -------------------------*- C++ -*-===//
//
// Copies are cut at bind time into pieces of about a megabyte (whole rows
// where rows are short, slices of a row where they are long); an apply lists
// the pieces of the batch's entries into a buffer sized at bind time and
// lets the pool's threads take them one at a time.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_HOST_HOSTEXECUTOR_H
#define LOADPLAN_RUNTIME_HOST_HOSTEXECUTOR_H

#include "../Executor.h"
#include "ThreadPool.h"

#include <memory>

namespace loadplan {

/// Bytes of one piece of work: large enough that taking a piece costs
/// nothing next to copying it, small enough to balance the threads.
constexpr int64_t kPieceBytes = int64_t(1) << 20;

/// Batches of at least this many bytes (more than a last-level cache holds)
/// write their long runs with non-temporal stores: the destination is not
/// read for ownership first, which saves a third of the memory traffic of a
/// plain memcpy (about 1.6x on contiguous copies), and a weight update that
/// large would evict itself from the cache anyway.
constexpr int64_t kStreamBatchBytes = int64_t(64) << 20;

/// Runs shorter than this are copied with memcpy even in a streamed batch:
/// short runs (column blocks of a weight read every other few kilobytes of
/// their source) gain nothing from streaming on the machines measured.
constexpr int64_t kStreamRunBytes = int64_t(64) << 10;

/// Part of a copy: bytes [begin, end) of its rows laid end to end. A piece
/// is either whole rows or part of one row.
struct Piece {
  uint32_t copy;
  int64_t begin, end;
};

/// Cuts each copy into pieces of at most `pieceBytes`; pieces of entry e are
/// [entryBegin[e], entryBegin[e + 1]).
void cutPieces(const Copies &copies, int64_t pieceBytes,
               std::vector<Piece> &pieces, std::vector<uint32_t> &entryBegin);

/// Copies bytes [begin, end) of copy `c` (a piece) from `src`, the first
/// byte of its source tensor or box. Where `c.run` is at least `streamRun`
/// (> 0), with non-temporal stores.
void copyPiece(const Copy &c, const ByteDim *dims, const uint8_t *src,
               int64_t begin, int64_t end, int64_t streamRun = 0);

std::unique_ptr<Executor> makeHostExecutor(const Plan &plan,
                                           const std::vector<uint8_t *> &bases,
                                           unsigned numThreads);

} // namespace loadplan

#endif // LOADPLAN_RUNTIME_HOST_HOSTEXECUTOR_H
