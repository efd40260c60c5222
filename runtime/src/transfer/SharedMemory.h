//===- SharedMemory.h - Colocated transfers: other ranks' memory -*- C++ -*-===//
//
// A colocated update reads a sender's tensors where they are, in the
// sender's shared memory, instead of sending them. The sender finds, for
// each tensor it holds, the shared file mapping its bytes lie in (its own
// /proc/self/maps) and an open descriptor of that file; it tells each
// receiver a table of them. A receiver opens each file through
// /proc/<pid>/fd/<fd>, checks it is the same file (device and inode),
// maps it read-only and copies from it. Mappings are kept across updates
// and released when a table no longer names them, or with the receiver.
//
// CPU memory only: a CUDA tensor's memory is shared through CUDA IPC
// (CudaIpc.cpp), behind the same interfaces (Colocation.h).
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_TRANSFER_SHAREDMEMORY_H
#define LOADPLAN_RUNTIME_TRANSFER_SHAREDMEMORY_H

#include "Colocation.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace loadplan::transfer {

/// What identifies this process's machine and PID namespace: ranks whose
/// identities differ cannot open each other's descriptors.
struct HostIdentity {
  char bootId[40] = {};
  uint64_t pidNamespace = 0;
  uint32_t pid = 0;
  /// 0: not colocated; 1: CPU shared memory; 2: CUDA memory (IPC).
  uint32_t colocated = 0;
};
HostIdentity hostIdentity(uint32_t colocated);

/// A sender's table: where each of its holdings lies (serialized as bytes
/// for its receivers; see SharedMemory.cpp for the layout).
struct SharedTable {
  struct Region {
    int32_t fd = -1;
    uint64_t dev = 0, ino = 0, size = 0;
  };
  using Place = table::Place;
  uint32_t pid = 0;
  std::vector<Region> regions;
  std::vector<Place> places;

  std::vector<uint8_t> bytes() const;
  /// Throws INVALID_ARGUMENT (naming `who`) when `data` is not a table
  /// of `numPlaces` places.
  static SharedTable parse(const uint8_t *data, size_t size, size_t numPlaces,
                           const std::string &who);
};

/// Per region (`bytes[i]` bytes at `data[i]`), whether it lies wholly in
/// shared file mappings of this process (one file's, in order), as a
/// colocated sender's holdings must; an empty region is.
std::vector<bool> inSharedMemory(const std::vector<const uint8_t *> &data,
                                 const std::vector<uint64_t> &bytes);

/// The sender's side: finds the shared mappings of its tensors.
class SharedExporter final : public Exporter {
public:
  ~SharedExporter() override;

  /// The table for `data[i]` (of `bytes[i]` bytes) each; throws
  /// INVALID_UPDATE naming `what(i)` for memory that is not in a shared
  /// file mapping. Returns whether the table differs from the last one.
  bool resolve(const std::vector<const uint8_t *> &data,
               const std::vector<uint64_t> &bytes,
               const std::function<std::string(size_t)> &what) override;

  const SharedTable &table() const { return current; }
  const std::vector<uint8_t> &tableBytes() const override { return currentBytes; }

private:
  SharedTable current;
  std::vector<uint8_t> currentBytes;
  /// The addresses `current` was made for.
  std::vector<const uint8_t *> lastData;
  /// A descriptor of each file the table names, by (dev, ino): the
  /// process's own, or one this exporter opened (owned).
  struct Descriptor {
    int fd = -1;
    bool owned = false;
  };
  std::map<std::pair<uint64_t, uint64_t>, Descriptor> fds;
};

/// The receiver's side: one sender's mappings.
class SharedMapper final : public Mapper {
public:
  SharedMapper() = default;
  SharedMapper(const SharedMapper &) = delete;
  SharedMapper &operator=(const SharedMapper &) = delete;
  SharedMapper(SharedMapper &&other) noexcept;
  ~SharedMapper() override;

  /// Maps what `table` names (keeping mappings it named before), unmaps
  /// the rest, and returns per place its address here; throws naming
  /// `who` when a file cannot be opened or is not the one named, or a
  /// place of `bytes[i]` bytes lies past its file's end.
  void map(const SharedTable &table, const std::vector<uint64_t> &bytes,
           const std::string &who, std::vector<const uint8_t *> &out);
  /// The same, from the table's bytes (SharedTable::parse).
  void map(const uint8_t *table, size_t size, const std::vector<uint64_t> &bytes,
           const std::string &who, std::vector<const uint8_t *> &out) override;
  /// Unmaps everything.
  void release() override;
  size_t count() const override { return maps.size(); }

private:
  /// By (pid, fd, dev, ino, size).
  using Key = std::tuple<uint32_t, int32_t, uint64_t, uint64_t, uint64_t>;
  std::map<Key, table::Mapped> maps;
};

} // namespace loadplan::transfer

#endif // LOADPLAN_RUNTIME_TRANSFER_SHAREDMEMORY_H
