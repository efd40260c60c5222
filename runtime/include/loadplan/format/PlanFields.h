//===- PlanFields.h - The plan file's payload, field by field ---*- C++ -*-===//
//
// The one description of the payload plan_format.h lays out: visitPlan
// hands each field, in file order, to a visitor that writes it (the
// encoder's byte counter and writer, PlanFile.cpp) or reads it (the
// runtime's checking reader, runtime/src/Plan.cpp). Where a reader must
// weigh what it has read before it reads on (a rank before the dims it
// counts, a count before it allocates), the description calls the
// visitor's checks; PlanChecks's do nothing, for the writers.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_FORMAT_PLANFIELDS_H
#define LOADPLAN_FORMAT_PLANFIELDS_H

#include "loadplan/format/ByteIO.h"
#include "loadplan/format/PlanFile.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace loadplan_format {

/// The fewest bytes of each item, with every string, rank and count in it
/// zero: a reader weighs a count against the bytes left with these before
/// it allocates for it. (PlanFormatTest checks them against the encoder.)
constexpr size_t kStorageBytes = 8;
constexpr size_t kTargetBytes = 28;
constexpr size_t kEntryBytes = 22;
constexpr size_t kWriteBytes = 28;
/// A box takes this per dim of its tensor.
constexpr size_t kBoxDimBytes = 16;

/// The points between fields where a reader checks what it has read; each
/// comes once the fields before it are read (items by index: `entry` is
/// the entry's, `write` the write's within it). A writer does nothing
/// there.
struct PlanChecks {
  void checkStorageSize(uint32_t /*storage*/) {}
  void checkTargetRank(uint32_t /*target*/, uint32_t /*rank*/) {}
  void checkTarget(uint32_t /*target*/) {}
  void checkName(uint32_t /*entry*/) {}
  void checkKind(uint32_t /*entry*/) {}
  void checkDtype(uint32_t /*entry*/) {}
  void checkRank(uint32_t /*entry*/, uint32_t /*rank*/) {}
  void checkShape(uint32_t /*entry*/) {}
  void checkHasReason(uint32_t /*entry*/, uint8_t /*hasReason*/) {}
  void checkNumBoxes(uint32_t /*entry*/, uint32_t /*rank*/,
                     uint32_t /*numBoxes*/) {}
  void checkBoxes(uint32_t /*entry*/) {}
  void checkRegionRank(uint32_t /*entry*/, uint32_t /*write*/,
                       uint32_t /*rank*/) {}
  void checkEntry(uint32_t /*entry*/) {}
};

/// A write's region offset as the file holds it: for a writer, moved by
/// `shift` bytes (a member's, see PlanMember); for a reader the field
/// itself (the file holds every name's own writes).
inline int64_t regionOffset(const PlanWrite &w, uint32_t entryDtype,
                            int64_t shift) {
  return movedOffset(entryDtype, w, shift);
}
inline int64_t &regionOffset(PlanWrite &w, uint32_t, int64_t) {
  return w.offset;
}

/// The text an optional string holds: a writer's, or a reader's to fill.
inline const std::string &held(const std::optional<std::string> &text) {
  return *text;
}
inline std::string &held(std::optional<std::string> &text) {
  if (!text)
    text.emplace();
  return *text;
}

/// Entry `index` of the file, called `name`, with `e`'s fields (a writer's
/// member of `e` has its own name and its writes moved by `shift` bytes).
template <typename Visitor, typename EntryT, typename NameT>
void visitEntry(Visitor &v, EntryT &e, NameT &name, int64_t shift,
                uint32_t index) {
  Field what("entry", index);
  v.str(name, what("name"));
  v.checkName(index);
  v.u8(e.kind, what("kind"));
  v.checkKind(index);
  v.u32(e.dtype, what("dtype"));
  v.checkDtype(index);
  uint32_t rank = v.size(e.shape, what("rank"));
  v.checkRank(index, rank);
  v.i64s(e.shape, rank, what("shape"));
  v.checkShape(index);
  uint8_t hasReason = v.flag(e.reason, what("has_reason"));
  v.checkHasReason(index, hasReason);
  if (hasReason)
    v.str(held(e.reason), what("reason"));

  Field boxes = what("boxes");
  uint32_t numBoxes = v.count(e.boxes, boxes, kBoxDimBytes * rank);
  v.checkNumBoxes(index, rank, numBoxes);
  v.resize(e.boxes, numBoxes);
  for (auto &box : e.boxes) {
    v.resize(box.lo, rank);
    v.resize(box.hi, rank);
    for (uint32_t k = 0; k < box.rank(); ++k) {
      v.i64(box.lo[k], boxes);
      v.i64(box.hi[k], boxes);
    }
  }
  v.checkBoxes(index);

  uint32_t numWrites = v.count(e.writes, what("writes"), kWriteBytes);
  v.resize(e.writes, numWrites);
  for (uint32_t wi = 0; wi < numWrites; ++wi) {
    auto &w = e.writes[wi];
    Field wwhat = what("write", wi);
    v.u32(w.target, wwhat("target"));
    v.u32(w.box, wwhat("box"));
    v.u32(w.convertTo, wwhat("convert_to"));
    v.u32(w.transform, wwhat("transform"));
    v.i64(regionOffset(w, e.dtype, shift), wwhat("region offset"));
    uint32_t regionRank = v.size(w.shape, wwhat("region rank"));
    v.checkRegionRank(index, wi, regionRank);
    v.i64s(w.shape, regionRank, wwhat("region shape"));
    v.i64s(w.stride, regionRank, wwhat("region stride"));
  }
  v.checkEntry(index);
}

/// The payload of `plan`, field by field as plan_format.h lays it out.
///
/// `plan` is a Plan (const for a writer) or one that extends it. A visitor
/// has PlanChecks's checks and these:
///   u8, u32, u64, i64, str (value, what)   one field: a writer's value, or
///                                          where a reader puts it
///   count(items, what, leastBytes) -> n    the u32 count of `items`, whose
///                                          each takes at least leastBytes
///   size(values, what) -> n                the u32 rank `values` have
///   flag(text, what) -> 0 or 1             the u8: whether `text` is held
///   i64s(values, n, what)                  `values`, n i64s
///   resize(items, n)                       a reader makes room for n
///   names(plan, fn)                        the entry count, then
///                                          fn(entry, name, shift, index)
///                                          for each entry of the file
/// `what` names the field for a reader's messages ("entry 3 write 0 box").
template <typename Visitor, typename PlanT>
void visitPlan(Visitor &v, PlanT &plan) {
  uint32_t numStorages = v.count(plan.storageSizes, "storages", kStorageBytes);
  v.resize(plan.storageSizes, numStorages);
  for (uint32_t i = 0; i < numStorages; ++i) {
    v.u64(plan.storageSizes[i], Field("size of storage", i));
    v.checkStorageSize(i);
  }

  uint32_t numTargets = v.count(plan.targets, "targets", kTargetBytes);
  v.resize(plan.targets, numTargets);
  for (uint32_t i = 0; i < numTargets; ++i) {
    auto &t = plan.targets[i];
    Field what("target", i);
    v.str(t.module, what("module"));
    v.str(t.tensor, what("tensor"));
    v.u32(t.storage, what("storage"));
    v.u64(t.byteOffset, what("byte offset"));
    v.u32(t.dtype, what("dtype"));
    uint32_t rank = v.size(t.shape, what("rank"));
    v.checkTargetRank(i, rank);
    v.i64s(t.shape, rank, what("shape"));
    v.i64s(t.stride, rank, what("stride"));
    v.checkTarget(i);
  }

  v.names(plan, [&](auto &e, auto &name, int64_t shift, uint32_t index) {
    visitEntry(v, e, name, shift, index);
  });
}

/// What every reader of the description does: each field read with `r`
/// into the plan, counts and ranks taken as read, room made for what they
/// count. `Derived` adds its checks, and its own count() where it weighs
/// counts against the bytes left (as any reader of untrusted bytes must);
/// `Reader` is a ByteReader, or one that throws on a short read.
template <typename Derived, typename Reader> struct PlanReading : PlanChecks {
  Reader r;

  PlanReading(const uint8_t *data, size_t size, size_t base = 0)
      : r(data, size, base) {}

  void u8(uint8_t &v, const Field &what) { v = r.u8(what); }
  void u32(uint32_t &v, const Field &what) { v = r.u32(what); }
  void u64(uint64_t &v, const Field &what) { v = r.u64(what); }
  void i64(int64_t &v, const Field &what) { v = r.i64(what); }
  void str(std::string &v, const Field &what) { v = r.str(what); }
  template <typename Items>
  uint32_t count(const Items &, const Field &what, size_t /*leastBytes*/) {
    return r.u32(what);
  }
  template <typename Values> uint32_t size(const Values &, const Field &what) {
    return r.u32(what);
  }
  uint8_t flag(const std::optional<std::string> &, const Field &what) {
    return r.u8(what);
  }
  void i64s(std::vector<int64_t> &values, uint32_t n, const Field &what) {
    values = r.i64s(n, what);
  }
  template <typename Items> void resize(Items &items, size_t n) {
    items.resize(n);
  }
  /// Every entry of the file, each under its own name.
  template <typename PlanT, typename Fn> void names(PlanT &plan, Fn &&fn) {
    auto &self = static_cast<Derived &>(*this);
    uint32_t n = self.count(plan.entries, "entries", kEntryBytes);
    self.resize(plan.entries, n);
    for (uint32_t i = 0; i < n; ++i)
      fn(plan.entries[i], plan.entries[i].name, int64_t(0), i);
  }
};

} // namespace loadplan_format

#endif // LOADPLAN_FORMAT_PLANFIELDS_H
