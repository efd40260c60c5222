//===- PlanFile.cpp - Encode a plan file ------------------------*- C++ -*-===//

#include "loadplan/format/PlanFile.h"
#include "loadplan/format/ByteIO.h"

#include <cstring>

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
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    std::memcpy(at, s.data(), s.size());
    at += s.size();
  }
  void i64s(const std::vector<int64_t> &values) {
    for (int64_t v : values)
      i64(v);
  }
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
    for (const Box &b : e.boxes)
      for (uint32_t k = 0; k < b.rank(); ++k) {
        p.i64(b.lo[k]);
        p.i64(b.hi[k]);
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

/// `plan`'s payload at `offset` of a string sized for it.
static std::string payloadAt(const Plan &plan, size_t offset) {
  std::string bytes(offset + payloadSize(plan), '\0');
  BufferWriter writer{reinterpret_cast<uint8_t *>(bytes.data()) + offset};
  writePayload(plan, writer);
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
