//===- PlanFile.cpp - Encode a plan file ------------------------*- C++ -*-===//
//
// The encoder: the payload as PlanFields.h describes it, counted, then
// written into a buffer of its size.
//
//===----------------------------------------------------------------------===//

#include "loadplan/format/PlanFile.h"
#include "loadplan/format/ByteIO.h"
#include "loadplan/format/PlanFields.h"

#include <cstring>

using namespace loadplan_format;

namespace {
/// Counts the bytes a plan's payload takes, so that a file is allocated
/// once at its size: a plan runs to tens of MB, and growing a string that
/// large copies and faults in each larger buffer in turn.
struct ByteCounter {
  size_t bytes = 0;
  void u8(uint8_t) { bytes += 1; }
  void u32(uint32_t) { bytes += 4; }
  void u64(uint64_t) { bytes += 8; }
  void str(std::string_view s) { bytes += 4 + s.size(); }
  void i64s(const std::vector<int64_t> &values) { bytes += 8 * values.size(); }
};

/// Writes into a buffer that a ByteCounter sized: a store per field, where
/// a ByteWriter appends to a string (at 8 MB of fields of 4 and 8 bytes,
/// the append calls were half the encoding).
struct BufferWriter {
  uint8_t *at;
  void u8(uint8_t v) { *at++ = v; }
  void u32(uint32_t v) {
    storeU32(at, v);
    at += 4;
  }
  void u64(uint64_t v) {
    storeU64(at, v);
    at += 8;
  }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    std::memcpy(at, s.data(), s.size());
    at += s.size();
  }
  void i64s(const std::vector<int64_t> &values) {
    for (int64_t v : values)
      u64(static_cast<uint64_t>(v));
  }
};

/// The fields of a plan as visitPlan gives them (PlanFields.h), into `out`
/// (a ByteCounter or a BufferWriter): counts and ranks as the sizes of what
/// follows, the entries through forEachName, no checks.
template <typename Out> struct PlanWriter : PlanChecks {
  Out out;

  explicit PlanWriter(Out out) : out(out) {}
  void u8(uint8_t v, const Field &) { out.u8(v); }
  void u32(uint32_t v, const Field &) { out.u32(v); }
  void u64(uint64_t v, const Field &) { out.u64(v); }
  void i64(int64_t v, const Field &) { out.u64(static_cast<uint64_t>(v)); }
  void str(std::string_view s, const Field &) { out.str(s); }
  template <typename Items>
  uint32_t count(const Items &items, const Field &, size_t) {
    out.u32(static_cast<uint32_t>(items.size()));
    return static_cast<uint32_t>(items.size());
  }
  template <typename Values>
  uint32_t size(const Values &values, const Field &what) {
    return count(values, what, 0);
  }
  uint8_t flag(const std::optional<std::string> &text, const Field &) {
    out.u8(text.has_value());
    return text.has_value();
  }
  /// All of `values`, whatever `n`: tests write malformed plans.
  void i64s(const std::vector<int64_t> &values, uint32_t, const Field &) {
    out.i64s(values);
  }
  template <typename Items> void resize(const Items &, size_t) {}
  template <typename Fn> void names(const Plan &plan, Fn &&fn) {
    out.u32(static_cast<uint32_t>(plan.numNames()));
    uint32_t index = 0;
    forEachName(plan, [&](const PlanEntry &e, std::string_view name,
                          int64_t shift) { fn(e, name, shift, index++); });
  }
};
} // namespace

/// The payload's size in bytes.
static size_t payloadSize(const Plan &plan) {
  PlanWriter<ByteCounter> counter{ByteCounter()};
  visitPlan(counter, plan);
  return counter.out.bytes;
}

/// `plan`'s payload at `offset` of a string sized for it.
static std::string payloadAt(const Plan &plan, size_t offset) {
  std::string bytes(offset + payloadSize(plan), '\0');
  PlanWriter<BufferWriter> writer{
      BufferWriter{reinterpret_cast<uint8_t *>(bytes.data()) + offset}};
  visitPlan(writer, plan);
  return bytes;
}

std::string loadplan_format::encodePlan(const Plan &plan) {
  ByteWriter file;
  file.bytes = payloadAt(plan, FileHeader::kSize);
  writeHeader(file, LOADPLAN_PLAN_MAGIC, LOADPLAN_PLAN_VERSION,
              layoutFingerprint(plan.targets));
  return std::move(file.bytes);
}

std::string loadplan_format::encodePlanPayload(const Plan &plan) {
  return payloadAt(plan, 0);
}

std::string loadplan_format::framePlan(std::string_view payload,
                                       uint64_t fingerprint) {
  ByteWriter file = startFile();
  file.bytes.append(payload.data(), payload.size());
  writeHeader(file, LOADPLAN_PLAN_MAGIC, LOADPLAN_PLAN_VERSION, fingerprint);
  return std::move(file.bytes);
}
