//===- PlanWriter.h - Plan files for tests and benchmarks -------*- C++ -*-===//
//
// Plans as the format library's plain data (loadplan/format/PlanFile.h),
// written by its encoder, the compiler's, which checks nothing: tests write
// malformed plans as easily as good ones. Also holds live memory for a
// plan's storages and the layouts that bind them.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_TESTS_PLANWRITER_H
#define LOADPLAN_RUNTIME_TESTS_PLANWRITER_H

#include "loadplan/format/ByteIO.h"
#include "loadplan/format/PlanFile.h"
#include "loadplan/runtime.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loadplan::testing {

using loadplan_format::FileHeader;
using loadplan_format::storeU32;

/// The format library's structs, under the names the tests use.
using TestTarget = loadplan_format::PlanTarget;
using TestBox = loadplan_format::Box;
using TestWrite = loadplan_format::PlanWrite;
using TestEntry = loadplan_format::PlanEntry;

/// The encoder's bytes as the runtime's C API takes them.
inline std::vector<uint8_t> toBytes(const std::string &s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

/// A plan and the ways tests write it.
struct TestPlan : loadplan_format::Plan {
  /// The fingerprint of the targets, as the compiler computes it.
  uint64_t fingerprint() const {
    return loadplan_format::layoutFingerprint(targets);
  }

  std::vector<uint8_t> payload() const {
    return toBytes(loadplan_format::encodePlanPayload(*this));
  }

  std::vector<uint8_t> bytes() const {
    return toBytes(loadplan_format::encodePlan(*this));
  }

  /// A header (right size and checksum) in front of `payload`.
  static std::vector<uint8_t> frame(const std::vector<uint8_t> &payload,
                                    uint64_t fingerprint) {
    return toBytes(loadplan_format::framePlan(
        std::string_view(reinterpret_cast<const char *>(payload.data()),
                         payload.size()),
        fingerprint));
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
    for (uint64_t size : plan.storageSizes)
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
      l.storage_size = plan.storageSizes[t.storage];
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
