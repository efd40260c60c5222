//===- Colocation.h - Colocated transfers: the memory they read --*- C++ -*-===//
//
// A colocated engine reads each sender's tensors where they lie. How a
// sender names that memory to its receivers, and how a receiver maps it,
// depends on the memory: CPU tensors in shared file mappings
// (SharedMemory.h), CUDA tensors through CUDA IPC (CudaIpc.cpp). The
// engine sees only these interfaces: an exporter makes a sender's table (as
// bytes, sent to its receivers when it changed), a mapper turns a table
// into addresses in the receiver.
//
// A colocated transfer over CUDA memory runs its control (the tables, the
// agreements) on a Gloo communicator and its data on a CUDA device: the
// data's memory (staging, the probe's scratch) is then not the
// transport's, and DataMemory says where it is.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_TRANSFER_COLOCATION_H
#define LOADPLAN_RUNTIME_TRANSFER_COLOCATION_H

#include "loadplan/transfer.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace loadplan::transfer {

class Transport;

/// A sender's side: where its holdings lie.
class Exporter {
public:
  virtual ~Exporter() = default;
  /// The table for `data[i]` (of `bytes[i]` bytes) each; throws
  /// INVALID_UPDATE naming `what(i)` for memory the receivers cannot map.
  /// Returns whether the table differs from the last one.
  virtual bool resolve(const std::vector<const uint8_t *> &data,
                       const std::vector<uint64_t> &bytes,
                       const std::function<std::string(size_t)> &what) = 0;
  virtual const std::vector<uint8_t> &tableBytes() const = 0;
};

/// A receiver's side: one sender's memory.
class Mapper {
public:
  virtual ~Mapper() = default;
  /// Maps what the table (`size` bytes at `table`) names, keeping what it
  /// named before and releasing the rest; returns per holding (of
  /// `bytes[i]` bytes) its address here. Throws naming `who` for a table
  /// that is not one or memory that cannot be mapped.
  virtual void map(const uint8_t *table, size_t size,
                   const std::vector<uint64_t> &bytes, const std::string &who,
                   std::vector<const uint8_t *> &out) = 0;
  /// Releases everything mapped.
  virtual void release() = 0;
  /// How many buffers are mapped now.
  virtual size_t count() const = 0;
};

/// Memory of the device a transfer's data lives on.
class DataMemory {
public:
  virtual ~DataMemory() = default;
  virtual loadplan_device_t device() const = 0;
  virtual void *allocate(size_t bytes) = 0;
  virtual void release(void *p) = 0;
  /// Copies within the device's memory (ordered on `stream`).
  virtual void copy(void *dst, const void *src, size_t bytes, void *stream) = 0;
  /// Fills `bytes` bytes at `dst` (memory of the device) with `value`.
  virtual void fill(void *dst, int value, size_t bytes) = 0;
  /// Waits for `stream`.
  virtual void synchronize(void *stream) = 0;
};

/// What both kinds of table share: native-endian fields, and per holding
/// its place, { u32 region (kNoRegion: an empty tensor), u32 0, u64 offset }.
namespace table {

constexpr uint32_t kNoRegion = 0xffffffffu;
constexpr size_t kHeaderBytes = 16, kPlaceBytes = 16;

template <typename T> void put(std::vector<uint8_t> &out, T v) {
  size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}
template <typename T> T get(const uint8_t *&p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}

struct Place {
  uint32_t region = kNoRegion;
  uint64_t offset = 0;
};

/// A buffer a mapper holds: where it is mapped here, and its bytes.
struct Mapped {
  void *data = nullptr;
  uint64_t size = 0;
};

/// A table's first 16 bytes: u32 magic, u32 pid, u32 regions, u32 places
/// (`out` reserved for `regionBytes` per region after them).
void putHeader(std::vector<uint8_t> &out, uint32_t magic, uint32_t pid,
               size_t regions, size_t regionBytes, size_t places);
struct Header {
  uint32_t pid = 0, regions = 0;
};
/// Reads the header of a table of `size` bytes at `p` (left after it):
/// `bad(why)` (which throws) unless its magic is `magic`, it has
/// `numPlaces` places and `size` is the header's, the regions' (of
/// `regionBytes` each) and the places'.
Header getHeader(const uint8_t *&p, size_t size, uint32_t magic,
                 size_t regionBytes, size_t numPlaces,
                 const std::function<void(const std::string &)> &bad);
void putPlaces(std::vector<uint8_t> &out, const std::vector<Place> &places);
/// Reads `count` places; `bad(why)` (which throws) for one naming a region
/// not below `regions`.
std::vector<Place> getPlaces(const uint8_t *&p, size_t count, uint32_t regions,
                             const std::function<void(const std::string &)> &bad);
/// Per holding (of `bytes[i]` bytes), its address: the region's mapping
/// plus the offset, inside the mapping; throws INVALID_ARGUMENT naming
/// `table` (as "the ... table of WHO") and `unit` ("a file") for one that
/// is not.
void placeHoldings(const std::vector<Place> &places,
                   const std::vector<Mapped> &regions,
                   const std::vector<uint64_t> &bytes, const std::string &table,
                   const char *unit, std::vector<const uint8_t *> &out);

/// A mapper's step from one table to the next: per region k (of `count`),
/// the mapping `held` has under `keyOf(k)` already, or `open(k)`'s; then
/// `close` for each mapping the table no longer names, and `held` is what
/// it names. On an error (from `open`) nothing is closed and what was
/// opened is kept in `held` for the next try. Returns per region its
/// mapping.
template <typename Key, typename Value, typename KeyOf, typename Open,
          typename Close>
std::vector<Value> remap(std::map<Key, Value> &held, size_t count, KeyOf keyOf,
                         Open open, Close close) {
  std::map<Key, Value> next;
  std::vector<Value> out;
  try {
    for (size_t k = 0; k < count; ++k) {
      Key key = keyOf(k);
      auto have = held.find(key);
      if (have != held.end()) {
        next.emplace(key, have->second);
        held.erase(have);
      } else if (!next.count(key)) {
        next.emplace(key, open(k));
      }
      out.push_back(next.at(key));
    }
  } catch (...) {
    for (auto &kv : next)
      held.insert(kv);
    throw;
  }
  for (auto &kv : held)
    close(kv.second);
  held = std::move(next);
  return out;
}

} // namespace table

/// The transport's own device memory.
std::unique_ptr<DataMemory> transportMemory(Transport &transport);

std::unique_ptr<Exporter> makeSharedExporter();
std::unique_ptr<Mapper> makeSharedMapper();

#if LOADPLAN_HAVE_CUDA
/// CUDA IPC on device `device` (CudaIpc.cpp).
std::unique_ptr<Exporter> makeCudaIpcExporter(int device);
std::unique_ptr<Mapper> makeCudaIpcMapper(int device);
std::unique_ptr<DataMemory> makeCudaMemory(int device);
#endif

} // namespace loadplan::transfer

#endif // LOADPLAN_RUNTIME_TRANSFER_COLOCATION_H
