//===- PlanFile.h - A plan file's contents and its encoder ------*- C++ -*-===//
//
// What a plan file (plan_format.h) holds, as plain data, and the one encoder
// of it: the compiler reads a plan off a compiled module into these structs
// and writes it; the runtime's tests and benchmarks write theirs, malformed
// ones included, through the same code; the runtime reads a plan file back
// into them (and its report and JSON print from them). Nothing here checks
// a plan: the runtime's reader does, when it opens one. The encoder and the
// reader follow one description of the payload, PlanFields.h.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_FORMAT_PLANFILE_H
#define LOADPLAN_FORMAT_PLANFILE_H

#include "loadplan/format/Box.h"
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
  /// LOADPLAN_TRANSFORM_NONE (0), or the transform the write applies to
  /// the box's atoms; its region then splits the transform's output shape
  /// (transformedShape).
  uint32_t transform = LOADPLAN_TRANSFORM_NONE;
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
  std::vector<Box> boxes;
  std::vector<PlanWrite> writes;

  uint32_t rank() const { return static_cast<uint32_t>(shape.size()); }
  /// Elements of the tensor (a checked plan's fit in int64_t).
  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

/// A name whose entry is another's but for its name and where its writes
/// go (the compiler's checkpoints with members: a layer's experts, say):
/// entries[entry]'s kind, dtype, shape, reason and boxes, and its writes
/// with each offset moved by `shift` bytes (whole elements of the dtype
/// written). It is the plan's name at `position`.
struct PlanMember {
  std::string name;
  uint32_t entry = 0;
  uint32_t position = 0;
  int64_t shift = 0;
};

struct Plan {
  std::vector<uint64_t> storageSizes;
  std::vector<PlanTarget> targets;
  std::vector<PlanEntry> entries;
  /// Names that share an entry; the file holds each as an entry of its own.
  /// Positions count every name: members take theirs, the entries the
  /// others in order. They are distinct and below the number of names
  /// (the compiler's are); one that is not comes after all the others.
  std::vector<PlanMember> members;

  /// The entries and the members of an entry (one of no entry is left
  /// out: there is nothing to write for it).
  size_t numNames() const {
    size_t n = entries.size();
    for (const PlanMember &m : members)
      n += m.entry < entries.size();
    return n;
  }
};

/// Calls `fn(entry, name, shift)` for every name of `plan` in order (of
/// numNames()): an entry with its own name and a shift of 0, or a member
/// with the entry it shares (see PlanMember).
template <typename Fn> void forEachName(const Plan &plan, Fn &&fn) {
  if (plan.members.empty()) {
    for (const PlanEntry &e : plan.entries)
      fn(e, std::string_view(e.name), int64_t(0));
    return;
  }
  auto member = [&](const PlanMember &m) {
    fn(plan.entries[m.entry], std::string_view(m.name), m.shift);
  };
  constexpr uint32_t kFree = UINT32_MAX;
  std::vector<uint32_t> atPosition(plan.numNames(), kFree);
  std::vector<uint32_t> misplaced;
  for (uint32_t i = 0; i < plan.members.size(); ++i) {
    if (plan.members[i].entry >= plan.entries.size())
      continue; // no entry to write it with
    uint32_t p = plan.members[i].position;
    if (p < atPosition.size() && atPosition[p] == kFree)
      atPosition[p] = i;
    else
      misplaced.push_back(i);
  }
  size_t next = 0;
  for (uint32_t slot : atPosition) {
    if (slot != kFree) {
      member(plan.members[slot]);
    } else if (next < plan.entries.size()) {
      const PlanEntry &e = plan.entries[next++];
      fn(e, std::string_view(e.name), int64_t(0));
    }
  }
  for (uint32_t i : misplaced)
    member(plan.members[i]);
}

/// A write's offset moved by `shift` bytes, in elements of the dtype it
/// writes for an entry of `entryDtype`.
inline int64_t movedOffset(uint32_t entryDtype, const PlanWrite &w,
                           int64_t shift) {
  if (shift == 0)
    return w.offset;
  int64_t size = static_cast<int64_t>(
      loadplan_dtype_size(writtenDtype(entryDtype, w)));
  return size ? w.offset + shift / size : w.offset;
}

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
