//===- PlanFile.h - A plan file's contents and its encoder ------*- C++ -*-===//
//
// What a plan file (plan_format.h) holds, as plain data, and the one encoder
// of it: the compiler reads a plan off a compiled module into these structs
// and writes it; the runtime's tests and benchmarks write theirs, malformed
// ones included, through the same code. Nothing here checks a plan: the
// runtime's reader does, when it opens one.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_FORMAT_PLANFILE_H
#define LOADPLAN_FORMAT_PLANFILE_H

#include "loadplan/plan_format.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loadplan_format {

/// A live tensor the plan writes into.
struct PlanTarget {
  std::string module, tensor;
  uint32_t storage = 0;
  uint64_t byteOffset = 0;
  uint32_t dtype = LOADPLAN_DTYPE_INVALID;
  std::vector<int64_t> shape, stride;
};

/// One [start, stop) per dim of a checkpoint tensor.
struct PlanBox {
  std::vector<int64_t> starts, stops;

  std::vector<int64_t> extents() const {
    std::vector<int64_t> out(starts.size());
    for (size_t k = 0; k < starts.size(); ++k)
      out[k] = stops[k] - starts[k];
    return out;
  }
  bool operator==(const PlanBox &o) const {
    return starts == o.starts && stops == o.stops;
  }
  bool operator!=(const PlanBox &o) const { return !(*this == o); }
};

/// Where a box goes: a region of a target, in elements of the dtype written
/// (the entry's, or `convertTo`) relative to the target's first byte.
struct PlanWrite {
  uint32_t target = 0;
  uint32_t box = 0; // index into the entry's boxes
  int64_t offset = 0;
  std::vector<int64_t> shape, stride;
  /// LOADPLAN_DTYPE_INVALID (0): a copy of the entry's bytes; else the dtype
  /// the write converts the entry's elements into.
  uint32_t convertTo = LOADPLAN_DTYPE_INVALID;
};

/// The dtype a write of an entry of `entryDtype` writes.
inline uint32_t writtenDtype(uint32_t entryDtype, const PlanWrite &w) {
  return w.convertTo ? w.convertTo : entryDtype;
}

/// A checkpoint name.
struct PlanEntry {
  std::string name;
  /// A loadplan_entry_kind_t, as stored (tests write unknown ones).
  uint8_t kind = LOADPLAN_KIND_DIRECT;
  uint32_t dtype = LOADPLAN_DTYPE_INVALID;
  std::vector<int64_t> shape;
  std::optional<std::string> reason;
  /// Parts this rank needs: the distinct boxes of the writes for a direct
  /// name, the whole tensor for a fallback, none when unneeded.
  std::vector<PlanBox> boxes;
  std::vector<PlanWrite> writes;
};

struct Plan {
  std::vector<uint64_t> storageSizes;
  std::vector<PlanTarget> targets;
  std::vector<PlanEntry> entries;
};

/// The fingerprint of a live layout (plan_format.h): of `targets`, in order.
/// Any container of PlanTargets will do, so that the runtime's targets,
/// which carry more, are hashed by this code too.
template <typename Targets> uint64_t layoutFingerprint(const Targets &targets) {
  uint64_t hash = LOADPLAN_FNV1A64_INIT;
  for (const PlanTarget &t : targets)
    hash = loadplan_fingerprint_target(
        hash, t.module.data(), t.module.size(), t.tensor.data(),
        t.tensor.size(), t.storage, t.byteOffset, t.dtype,
        static_cast<uint32_t>(t.shape.size()), t.shape.data(), t.stride.data());
  return hash;
}

/// The plan file: its header (the fingerprint of its targets, the payload's
/// size and checksum) and its payload.
std::string encodePlan(const Plan &plan);

/// The payload alone: what follows the header.
std::string encodePlanPayload(const Plan &plan);

/// A plan file of any `payload`, with a header that gives `fingerprint`:
/// for tests that write payloads and fingerprints of their own.
std::string framePlan(std::string_view payload, uint64_t fingerprint);

} // namespace loadplan_format

#endif // LOADPLAN_FORMAT_PLANFILE_H
