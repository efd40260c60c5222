//===- Executor.h - Runs the copies of a checked update batch ----*- C++ -*-===//
//
// The binding checks a batch (names, kinds, dtypes, shapes, boxes) and fills
// one source pointer per named entry or box; an executor then checks what
// only it can (where the sources live) and copies. Nothing may be written
// before checkSources returns.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_EXECUTOR_H
#define LOADPLAN_RUNTIME_EXECUTOR_H

#include "Copies.h"

#include <cstdint>
#include <string>

namespace loadplan {

/// A checked update batch.
struct Batch {
  SourceForm form;
  /// The entries named in the batch, each once.
  const uint32_t *entries;
  size_t numEntries;
  /// Source per entry (Tensor form) or per global box (Box form); only the
  /// slots of the named entries are meaningful.
  const uint8_t *const *entrySource;
  const uint8_t *const *boxSource;
  /// Says which input (e.g. "tensor 3 ('x')") a source slot came from.
  std::string (*describe)(const void *context, uint32_t entry, uint32_t box);
  const void *describeContext;
  /// Sources may be memory of another device that the executor's can
  /// reach by peer access (a colocated transfer's CUDA IPC mappings,
  /// opened with peer access enabled); otherwise such memory is refused.
  bool peerSources = false;
};

/// What an executor has put on a device's streams so far.
struct DeviceWork {
  uint64_t kernelLaunches = 0;
  /// cudaMemcpyAsync and cudaMemcpy2DAsync calls.
  uint64_t memcpyCalls = 0;
};

class Executor {
public:
  virtual ~Executor() = default;
  virtual uint32_t numThreads() const = 0;
  /// Zero for executors that run on the host.
  virtual DeviceWork deviceWork() const { return {}; }
  /// Throws INVALID_UPDATE for a source the executor cannot read.
  virtual void checkSources(const Batch &batch) = 0;
  /// Copies every write of the batch's entries.
  virtual void run(const Batch &batch, void *stream) = 0;
};

} // namespace loadplan

#endif // LOADPLAN_RUNTIME_EXECUTOR_H
