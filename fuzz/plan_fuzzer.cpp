//===- plan_fuzzer.cpp - Fuzz the runtime from plan file bytes ------------===//
//
// libFuzzer target (b): arbitrary bytes as a plan file, through
// loadplan_plan_open_bytes, every query, loadplan_bind to scratch storages
// laid out as the plan says, and both update forms. Bad bytes must end in a
// status with a message; a crash, a leak, a sanitizer report (a write outside
// the scratch storages among them) or a refused update that wrote anything
// is a bug.
//
// Mutations rarely keep a header's checksum and fingerprint right, so the
// target sets both (and the payload size) before opening: most inputs then
// reach the payload checks, binding and apply. The runtime's own tests cover
// the header checks.
//
//===----------------------------------------------------------------------===//

#include "loadplan/format/ByteIO.h"
#include "loadplan/format/PlanFields.h"
#include "loadplan/format/PlanFile.h"
#include "loadplan/runtime.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

using loadplan_format::ByteReader;
using loadplan_format::Field;
using loadplan_format::FileHeader;
using loadplan_format::layoutFingerprint;
using loadplan_format::Plan;
using loadplan_format::resealHeader;
using loadplan_format::storeU64;

namespace {

/// Scratch memory the target binds to, at most this much in all, so that a
/// plan that declares huge storages is opened but not bound.
constexpr uint64_t kMaxScratchBytes = 1 << 20;

/// Frees `status`; true when it was success. An error must say what was
/// wrong.
bool ok(loadplan_status_t status) {
  if (!status)
    return true;
  const char *message = loadplan_status_message(status);
  if (!message || !*message)
    __builtin_trap();
  loadplan_status_free(status);
  return false;
}

/// Reads the storages and targets of a payload as PlanFields.h describes
/// them, checking only what keeps it from allocating more than the bytes
/// hold; `readable` turns false where the runtime would refuse them (a
/// count the bytes cannot hold, a rank past 64) or the bytes run out. The
/// entries are left unread.
struct TargetReader
    : loadplan_format::PlanReading<TargetReader, ByteReader> {
  bool readable = true;

  using PlanReading::PlanReading;
  template <typename Items>
  uint32_t count(const Items &, const Field &what, size_t leastBytes) {
    uint32_t n = r.u32(what);
    if (leastBytes && n > r.left() / leastBytes) {
      readable = false;
      return 0;
    }
    return n;
  }
  template <typename Fn> void names(Plan &, Fn &&) {}
  void checkTargetRank(uint32_t, uint32_t rank) { readable &= rank <= 64; }
};

/// Sets the header's fingerprint to that of the targets in the payload,
/// when they can be read, then its payload size and checksum.
void fixHeader(std::string &bytes) {
  auto *file = reinterpret_cast<uint8_t *>(bytes.data());
  TargetReader reader(file + FileHeader::kSize,
                      bytes.size() - FileHeader::kSize);
  Plan plan;
  loadplan_format::visitPlan(reader, plan);
  if (reader.readable && reader.r.ok())
    storeU64(file + FileHeader::kFingerprintAt,
             layoutFingerprint(plan.targets));
  resealHeader(file, bytes.size());
}

/// Asks the plan everything it answers, in and out of range.
void queryAll(const loadplan_plan_t *plan,
              const loadplan_plan_summary_t &summary) {
  uint64_t size;
  for (uint32_t i = 0; i <= summary.num_storages; ++i)
    ok(loadplan_plan_storage(plan, i, &size));
  loadplan_target_info_t target;
  ok(loadplan_plan_target(plan, summary.num_targets, &target));
  for (uint32_t e = 0; e <= summary.num_entries; ++e) {
    loadplan_entry_info_t entry;
    if (!ok(loadplan_plan_entry(plan, e, &entry)))
      continue;
    uint32_t index;
    if (!ok(loadplan_plan_find_entry(plan, entry.name, entry.name_size,
                                     &index)))
      __builtin_trap(); // every entry can be found by its name
    for (uint32_t w = 0; w <= entry.num_writes; ++w) {
      loadplan_write_info_t write;
      ok(loadplan_plan_write(plan, e, w, &write));
    }
    for (uint32_t b = 0; b <= entry.num_boxes; ++b) {
      loadplan_box_info_t box;
      if (ok(loadplan_plan_box(plan, e, b, &box)) != (b < entry.num_boxes))
        __builtin_trap(); // every box of the entry, and no other
    }
  }
  for (uint32_t kind = 0; kind <= LOADPLAN_KIND_COUNT_; ++kind) {
    const uint32_t *indices;
    size_t count;
    ok(loadplan_plan_entries_of_kind(plan, kind, &indices, &count));
  }
  // The report and the JSON of whatever the reader accepted.
  char *text = nullptr;
  if (!ok(loadplan_plan_report(plan, "fuzz", 4, &text, nullptr)))
    __builtin_trap();
  loadplan_text_free(text);
  if (!ok(loadplan_plan_json(plan, &text, nullptr)))
    __builtin_trap();
  loadplan_text_free(text);
}

/// Binds the plan to scratch storages and applies every direct name, as
/// full tensors and as boxes, then a batch the runtime must refuse.
void bindAndApply(loadplan_plan_t *plan,
                  const loadplan_plan_summary_t &summary) {
  std::vector<std::vector<uint8_t>> storages(summary.num_storages);
  uint64_t total = 0;
  for (uint32_t i = 0; i < summary.num_storages; ++i) {
    uint64_t size;
    if (!ok(loadplan_plan_storage(plan, i, &size)))
      __builtin_trap();
    total += size;
    if (size > kMaxScratchBytes || total > kMaxScratchBytes)
      return;
    storages[i].assign(size + 1, 0); // + 1: a valid pointer when empty
  }
  std::vector<loadplan_target_layout_t> layouts(summary.num_targets);
  for (uint32_t i = 0; i < summary.num_targets; ++i) {
    loadplan_target_info_t t;
    if (!ok(loadplan_plan_target(plan, i, &t)) ||
        t.storage >= summary.num_storages)
      __builtin_trap(); // the reader checked these
    if (t.byte_offset >= storages[t.storage].size())
      return; // (the reader checks targets with elements)
    layouts[i] = {storages[t.storage].data() + t.byte_offset,
                  t.byte_offset,
                  storages[t.storage].size() - 1,
                  t.dtype,
                  t.rank,
                  t.shape,
                  t.stride};
  }
  if (!ok(loadplan_plan_check_layout(plan, layouts.data(), layouts.size())))
    __builtin_trap(); // the plan's own layout, with its own fingerprint
  loadplan_bind_options_t options;
  loadplan_bind_options_init(&options);
  options.num_threads = 1;
  loadplan_binding_t *binding = nullptr;
  if (!ok(loadplan_bind(plan, layouts.data(), layouts.size(), &options,
                        &binding)))
    return;

  // Sources: full tensors and packed boxes of every direct name.
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<loadplan_tensor_t> tensors;
  std::vector<std::vector<int64_t>> starts, stops;
  std::vector<loadplan_box_t> boxes;
  uint64_t sourceBytes = 0;
  auto buffer = [&](uint64_t elements, uint32_t dtype) -> const void * {
    uint64_t bytes = elements * loadplan_dtype_size(dtype);
    sourceBytes += bytes;
    buffers.emplace_back(bytes + 1, static_cast<uint8_t>(buffers.size() + 1));
    return buffers.back().data();
  };
  const uint32_t *direct;
  size_t numDirect;
  if (!ok(loadplan_plan_entries_of_kind(plan, LOADPLAN_KIND_DIRECT, &direct,
                                        &numDirect)))
    __builtin_trap();
  for (size_t i = 0; i < numDirect && sourceBytes <= kMaxScratchBytes; ++i) {
    loadplan_entry_info_t e;
    if (!ok(loadplan_plan_entry(plan, direct[i], &e)))
      __builtin_trap();
    uint64_t numel = 1;
    for (uint32_t k = 0; k < e.rank; ++k)
      numel = __builtin_mul_overflow(numel, uint64_t(e.shape[k]), &numel)
                  ? UINT64_MAX
                  : numel;
    if (numel > kMaxScratchBytes || e.num_boxes > 64)
      continue;
    tensors.push_back({e.name, e.name_size, buffer(numel, e.dtype), e.dtype,
                       e.rank, e.shape});
    for (uint32_t b = 0; b < e.num_boxes; ++b) {
      loadplan_box_info_t box;
      if (!ok(loadplan_plan_box(plan, direct[i], b, &box)))
        __builtin_trap();
      std::vector<int64_t> lo(box.starts, box.starts + box.rank),
          hi(box.stops, box.stops + box.rank);
      uint64_t elements = 1;
      for (uint32_t k = 0; k < box.rank; ++k)
        elements *= uint64_t(hi[k] - lo[k]); // within the tensor: no overflow
      starts.push_back(std::move(lo));
      stops.push_back(std::move(hi));
      boxes.push_back({e.name, e.name_size, buffer(elements, e.dtype), e.dtype,
                       e.rank, starts.back().data(), stops.back().data()});
    }
  }
  // All or nothing: a refused batch leaves every byte as it was.
  auto apply = [&](auto call) {
    std::vector<std::vector<uint8_t>> before = storages;
    bool applied = ok(call());
    if (!applied && storages != before)
      __builtin_trap();
    return applied;
  };
  apply([&] {
    return loadplan_apply_tensors(binding, tensors.data(), tensors.size(),
                                  nullptr);
  });
  apply([&] {
    return loadplan_apply_boxes(binding, boxes.data(), boxes.size(), nullptr);
  });
  // A name sent twice is refused.
  if (!tensors.empty() && apply([&] {
        loadplan_tensor_t twice[] = {tensors.back(), tensors.back()};
        return loadplan_apply_tensors(binding, twice, 2, nullptr);
      }))
    __builtin_trap();
  loadplan_binding_release(binding);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  if (bytes.size() >= LOADPLAN_PLAN_HEADER_SIZE)
    fixHeader(bytes);
  loadplan_plan_t *plan = nullptr;
  if (!ok(loadplan_plan_open_bytes(bytes.data(), bytes.size(), &plan)))
    return 0;
  loadplan_plan_summary_t summary;
  if (!ok(loadplan_plan_summary(plan, &summary)))
    __builtin_trap();
  queryAll(plan, summary);
  bindAndApply(plan, summary);
  loadplan_plan_release(plan);
  return 0;
}
