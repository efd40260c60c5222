//===- PlanWriter.h - Plan files for tests and benchmarks --------*- C++ -*-===//
//
// Writes plan files byte for byte as plan_format.h describes them (as the
// compiler's serializePlan does), without checking anything, so that tests
// can write malformed plans as easily as good ones. Also holds live memory
// for a plan's storages and the layouts that bind them.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_TESTS_PLANWRITER_H
#define LOADPLAN_RUNTIME_TESTS_PLANWRITER_H

#include "loadplan/runtime.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace loadplan::testing {

struct TestTarget {
  std::string module, tensor;
  uint32_t storage = 0;
  uint64_t byteOffset = 0;
  uint32_t dtype = LOADPLAN_DTYPE_FLOAT32;
  std::vector<int64_t> shape, stride;
};

struct TestBox {
  std::vector<int64_t> starts, stops;
  std::vector<int64_t> extents() const {
    std::vector<int64_t> out;
    for (size_t k = 0; k < starts.size(); ++k)
      out.push_back(stops[k] - starts[k]);
    return out;
  }
};

struct TestWrite {
  uint32_t target = 0;
  uint32_t box = 0;
  int64_t offset = 0;
  std::vector<int64_t> shape, stride;
};

struct TestEntry {
  std::string name;
  uint8_t kind = LOADPLAN_KIND_DIRECT;
  uint32_t dtype = LOADPLAN_DTYPE_FLOAT32;
  std::vector<int64_t> shape;
  std::optional<std::string> reason;
  std::vector<TestBox> boxes;
  std::vector<TestWrite> writes;
};

/// Little-endian bytes, as plan_format.h lays them out.
struct ByteWriter {
  std::vector<uint8_t> bytes;
  void u8(uint8_t v) { bytes.push_back(v); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i)
      u8(uint8_t(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i)
      u8(uint8_t(v >> (8 * i)));
  }
  void i64(int64_t v) { u64(uint64_t(v)); }
  void str(const std::string &s) {
    u32(uint32_t(s.size()));
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void i64s(const std::vector<int64_t> &values) {
    for (int64_t v : values)
      i64(v);
  }
};

struct TestPlan {
  std::vector<uint64_t> storages;
  std::vector<TestTarget> targets;
  std::vector<TestEntry> entries;

  /// The fingerprint of the targets, as the compiler computes it.
  uint64_t fingerprint() const {
    uint64_t h = LOADPLAN_FNV1A64_INIT;
    for (const TestTarget &t : targets)
      h = loadplan_fingerprint_target(
          h, t.module.data(), t.module.size(), t.tensor.data(),
          t.tensor.size(), t.storage, t.byteOffset, t.dtype,
          uint32_t(t.shape.size()), t.shape.data(), t.stride.data());
    return h;
  }

  std::vector<uint8_t> payload() const {
    ByteWriter p;
    p.u32(uint32_t(storages.size()));
    for (uint64_t s : storages)
      p.u64(s);
    p.u32(uint32_t(targets.size()));
    for (const TestTarget &t : targets) {
      p.str(t.module);
      p.str(t.tensor);
      p.u32(t.storage);
      p.u64(t.byteOffset);
      p.u32(t.dtype);
      p.u32(uint32_t(t.shape.size()));
      p.i64s(t.shape);
      p.i64s(t.stride);
    }
    p.u32(uint32_t(entries.size()));
    for (const TestEntry &e : entries) {
      p.str(e.name);
      p.u8(e.kind);
      p.u32(e.dtype);
      p.u32(uint32_t(e.shape.size()));
      p.i64s(e.shape);
      p.u8(e.reason.has_value());
      if (e.reason)
        p.str(*e.reason);
      p.u32(uint32_t(e.boxes.size()));
      for (const TestBox &b : e.boxes)
        for (size_t k = 0; k < b.starts.size(); ++k) {
          p.i64(b.starts[k]);
          p.i64(b.stops[k]);
        }
      p.u32(uint32_t(e.writes.size()));
      for (const TestWrite &w : e.writes) {
        p.u32(w.target);
        p.u32(w.box);
        p.i64(w.offset);
        p.u32(uint32_t(w.shape.size()));
        p.i64s(w.shape);
        p.i64s(w.stride);
      }
    }
    return p.bytes;
  }

  std::vector<uint8_t> bytes() const { return frame(payload(), fingerprint()); }

  /// A header (right size and checksum) in front of `payload`.
  static std::vector<uint8_t> frame(const std::vector<uint8_t> &payload,
                                    uint64_t fingerprint) {
    ByteWriter h;
    h.bytes.assign(LOADPLAN_PLAN_MAGIC,
                   LOADPLAN_PLAN_MAGIC + LOADPLAN_PLAN_MAGIC_SIZE);
    h.u32(LOADPLAN_PLAN_VERSION);
    h.u32(LOADPLAN_PLAN_HEADER_SIZE);
    h.u64(fingerprint);
    h.u64(payload.size());
    h.u64(loadplan_fnv1a64(LOADPLAN_FNV1A64_INIT, payload.data(),
                           payload.size()));
    h.bytes.insert(h.bytes.end(), payload.begin(), payload.end());
    return h.bytes;
  }

  /// Adds a target; returns its index.
  uint32_t addTarget(TestTarget t) {
    targets.push_back(std::move(t));
    return uint32_t(targets.size() - 1);
  }
};

/// Row-major strides of `shape`.
inline std::vector<int64_t> rowMajor(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;)
    s[k - 1] = s[k] * shape[k];
  return s;
}

inline int64_t product(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t v : shape)
    n *= v;
  return n;
}

/// Host memory for a plan's storages (16-byte aligned, plus slack so tests
/// can misalign), and the layouts that bind its targets there.
struct Memory {
  explicit Memory(const TestPlan &plan) : plan(plan) {
    for (uint64_t size : plan.storages)
      storages.emplace_back(size);
  }
  const TestPlan &plan;
  std::vector<std::vector<uint8_t>> storages;

  uint8_t *base(uint32_t storage) { return storages[storage].data(); }

  std::vector<loadplan_target_layout_t> layouts() {
    std::vector<uint8_t *> bases;
    for (auto &s : storages)
      bases.push_back(s.data());
    return layoutsAt(plan, bases);
  }

  /// The layouts of `plan`'s targets in storages starting at `bases`.
  static std::vector<loadplan_target_layout_t>
  layoutsAt(const TestPlan &plan, const std::vector<uint8_t *> &bases) {
    std::vector<loadplan_target_layout_t> out;
    for (const TestTarget &t : plan.targets) {
      loadplan_target_layout_t l{};
      l.data = bases[t.storage] + t.byteOffset;
      l.byte_offset = t.byteOffset;
      l.storage_size = plan.storages[t.storage];
      l.dtype = t.dtype;
      l.rank = uint32_t(t.shape.size());
      l.shape = t.shape.data();
      l.stride = t.stride.data();
      out.push_back(l);
    }
    return out;
  }
};

} // namespace loadplan::testing

#endif // LOADPLAN_RUNTIME_TESTS_PLANWRITER_H
