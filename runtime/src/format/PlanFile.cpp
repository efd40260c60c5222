//===- PlanFile.cpp - Encode a plan file ------------------------*- C++ -*-===//

#include "loadplan/format/PlanFile.h"
#include "loadplan/format/ByteIO.h"

using namespace loadplan_format;

namespace {
/// Counts the bytes a ByteWriter would append, so that a file is allocated
/// once at its size: a plan runs to tens of MB, and growing a string that
/// large copies and faults in each larger buffer in turn.
struct ByteCounter {
  size_t size = 0;
  void u8(uint8_t) { size += 1; }
  void u32(uint32_t) { size += 4; }
  void u64(uint64_t) { size += 8; }
  void i64(int64_t) { size += 8; }
  void str(std::string_view s) { size += 4 + s.size(); }
  void i64s(const std::vector<int64_t> &values) { size += 8 * values.size(); }
};
} // namespace

/// Appends the payload of `plan`, field by field as plan_format.h lays it
/// out (or counts its bytes, with a ByteCounter).
template <typename Writer>
static void writePayload(const Plan &plan, Writer &p) {
  p.u32(static_cast<uint32_t>(plan.storageSizes.size()));
  for (uint64_t size : plan.storageSizes)
    p.u64(size);
  p.u32(static_cast<uint32_t>(plan.targets.size()));
  for (const PlanTarget &t : plan.targets) {
    p.str(t.module);
    p.str(t.tensor);
    p.u32(t.storage);
    p.u64(t.byteOffset);
    p.u32(t.dtype);
    p.u32(static_cast<uint32_t>(t.shape.size()));
    p.i64s(t.shape);
    p.i64s(t.stride);
  }
  p.u32(static_cast<uint32_t>(plan.numNames()));
  forEachName(plan, [&](const PlanEntry &e, std::string_view name,
                        int64_t shift) {
    p.str(name);
    p.u8(e.kind);
    p.u32(e.dtype);
    p.u32(static_cast<uint32_t>(e.shape.size()));
    p.i64s(e.shape);
    p.u8(e.reason.has_value());
    if (e.reason)
      p.str(*e.reason);
    p.u32(static_cast<uint32_t>(e.boxes.size()));
    for (const PlanBox &b : e.boxes)
      for (size_t k = 0; k < b.starts.size(); ++k) {
        p.i64(b.starts[k]);
        p.i64(b.stops[k]);
      }
    p.u32(static_cast<uint32_t>(e.writes.size()));
    for (const PlanWrite &w : e.writes) {
      p.u32(w.target);
      p.u32(w.box);
      p.u32(w.convertTo);
      p.i64(movedOffset(e.dtype, w, shift));
      p.u32(static_cast<uint32_t>(w.shape.size()));
      p.i64s(w.shape);
      p.i64s(w.stride);
    }
  });
}

/// The payload's size in bytes.
static size_t payloadSize(const Plan &plan) {
  ByteCounter counter;
  writePayload(plan, counter);
  return counter.size;
}

std::string loadplan_format::encodePlan(const Plan &plan) {
  ByteWriter file = startFile();
  file.bytes.reserve(file.bytes.size() + payloadSize(plan));
  writePayload(plan, file);
  writeHeader(file, LOADPLAN_PLAN_MAGIC, LOADPLAN_PLAN_VERSION,
              layoutFingerprint(plan.targets));
  return std::move(file.bytes);
}

std::string loadplan_format::encodePlanPayload(const Plan &plan) {
  ByteWriter payload;
  payload.bytes.reserve(payloadSize(plan));
  writePayload(plan, payload);
  return std::move(payload.bytes);
}

std::string loadplan_format::framePlan(std::string_view payload,
                                       uint64_t fingerprint) {
  ByteWriter file = startFile();
  file.bytes.append(payload.data(), payload.size());
  writeHeader(file, LOADPLAN_PLAN_MAGIC, LOADPLAN_PLAN_VERSION, fingerprint);
  return std::move(file.bytes);
}
