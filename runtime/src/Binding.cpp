//===- Binding.cpp - Bind a plan and apply updates --------------*- C++ -*-===//

#include "Binding.h"
#include "Status.h"
#include "host/HostExecutor.h"
#if LOADPLAN_HAVE_CUDA
#include "cuda/CudaExecutor.h"
#endif

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

using namespace loadplan;

namespace {

/// More CPU threads than any machine has is a caller's mistake, not a
/// reason to start them.
constexpr uint32_t kMaxThreads = 4096;

/// "[(0, 4), (2, 6)]".
std::string boxText(uint32_t rank, const int64_t *starts,
                    const int64_t *stops) {
  std::vector<std::string> dims;
  for (uint32_t d = 0; d < rank; ++d)
    dims.push_back(concat("(", starts[d], ", ", stops[d], ")"));
  return concat(dims);
}

std::string hexAddress(uintptr_t p) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx",
                static_cast<unsigned long long>(p));
  return text;
}

} // namespace

Binding::Binding(const Plan &plan, const loadplan_target_layout_t *layouts,
                 size_t numLayouts, const loadplan_bind_options_t &opts)
    : plan(plan) {
  if (opts.device.type != LOADPLAN_DEVICE_CPU &&
      opts.device.type != LOADPLAN_DEVICE_CUDA)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "unknown device type ",
         opts.device.type);
  if (opts.device.type == LOADPLAN_DEVICE_CPU && opts.device.index != 0)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "CPU device index must be 0, not ",
         opts.device.index);
  if (opts.num_threads > kMaxThreads)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "num_threads ", opts.num_threads,
         " is more than ", kMaxThreads);
  checkLayout(plan, layouts, numLayouts);

  // Storage bases: the plan may only write where it was told storages
  // are, so the caller's memory must have the plan's storage structure.
  size_t numStorages = plan.storageSizes.size();
  std::vector<uint8_t *> bases(numStorages, nullptr);
  std::vector<int64_t> firstTarget(numStorages, -1);
  for (size_t i = 0; i < numLayouts; ++i) {
    const loadplan_target_layout_t &l = layouts[i];
    const Target &t = plan.targets[i];
    std::string label =
        concat("target ", i, " (", quote(t.module + "." + t.tensor), ")");
    uintptr_t data = reinterpret_cast<uintptr_t>(l.data);
    if (!data && std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end())
      continue; // no bytes: torch gives empty tensors no memory
    if (!data)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, ": data is NULL");
    if (data < l.byte_offset)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, ": data ", hexAddress(data),
           " is below its byte offset ", l.byte_offset);
    uint64_t planSize = plan.storageSizes[t.storage];
    if (l.storage_size < planSize)
      fail(LOADPLAN_STATUS_FINGERPRINT_MISMATCH, label, ": its storage has ",
           l.storage_size, " bytes but the plan was made for ", planSize);
    uint8_t *base = reinterpret_cast<uint8_t *>(data - l.byte_offset);
    if (firstTarget[t.storage] < 0) {
      firstTarget[t.storage] = static_cast<int64_t>(i);
      bases[t.storage] = base;
    } else if (bases[t.storage] != base) {
      fail(LOADPLAN_STATUS_FINGERPRINT_MISMATCH, label, " and target ",
           firstTarget[t.storage], " share storage ", t.storage,
           " in the plan but are bound to different storages (starting at ",
           hexAddress(reinterpret_cast<uintptr_t>(base)), " and ",
           hexAddress(reinterpret_cast<uintptr_t>(bases[t.storage])), ")");
    }
  }
  // Storages the plan keeps apart must be apart: its overlap check was
  // done per storage.
  std::vector<uint32_t> order;
  for (uint32_t s = 0; s < numStorages; ++s)
    if (bases[s] && plan.storageSizes[s])
      order.push_back(s);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return bases[a] < bases[b]; });
  for (size_t k = 1; k < order.size(); ++k) {
    uint32_t a = order[k - 1], b = order[k];
    if (reinterpret_cast<uintptr_t>(bases[b]) -
            reinterpret_cast<uintptr_t>(bases[a]) <
        plan.storageSizes[a])
      fail(LOADPLAN_STATUS_FINGERPRINT_MISMATCH, "storages ", a, " and ", b,
           " (of targets ", firstTarget[a], " and ", firstTarget[b],
           ") overlap in memory but the plan holds them apart");
  }

  device = opts.device;
  if (opts.device.type == LOADPLAN_DEVICE_CPU) {
    unsigned threads = opts.num_threads;
    if (!threads)
      threads = std::max(1u, std::thread::hardware_concurrency());
    executor = makeHostExecutor(plan, bases, threads);
  } else {
#if LOADPLAN_HAVE_CUDA
    executor = makeCudaExecutor(plan, bases, opts.device.index);
#else
    fail(LOADPLAN_STATUS_UNAVAILABLE,
         "this runtime was built without CUDA; bind to the CPU or rebuild "
         "with the CUDA toolkit");
#endif
  }
  entrySource.assign(plan.entries.size(), nullptr);
  boxSource.assign(plan.numBoxes, nullptr);
  entryStamp.assign(plan.entries.size(), 0);
  boxStamp.assign(plan.numBoxes, 0);
  entryInput.assign(plan.entries.size(), 0);
  boxInput.assign(plan.numBoxes, 0);
  entryBoxCount.assign(plan.entries.size(), 0);
  active.reserve(plan.entries.size());
}

void Binding::nextStamp() {
  if (++stamp == 0) {
    std::fill(entryStamp.begin(), entryStamp.end(), 0);
    std::fill(boxStamp.begin(), boxStamp.end(), 0);
    stamp = 1;
  }
}

std::string Binding::label(size_t input, std::string_view name) const {
  return concat(inputKind, " ", input, " (", quote(name), ")");
}

uint32_t Binding::lookup(const char *name, size_t size, size_t input) const {
  if (!name && size)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, inputKind, " ", input,
         ": name is NULL");
  std::string_view key(name ? name : "", size);
  auto it = plan.byName.find(key);
  if (it == plan.byName.end())
    fail(LOADPLAN_STATUS_INVALID_UPDATE, label(input, key),
         ": no such name in the plan");
  requireDirect(it->second, input);
  return it->second;
}

void Binding::requireDirect(uint32_t index, size_t input) const {
  const Entry &e = plan.entries[index];
  if (e.kind == LOADPLAN_KIND_FALLBACK)
    fail(LOADPLAN_STATUS_INVALID_UPDATE, label(input, e.name),
         " is a fallback (", e.reason ? *e.reason : std::string(),
         "); send it through the model's loader");
  if (e.kind == LOADPLAN_KIND_UNNEEDED)
    fail(LOADPLAN_STATUS_INVALID_UPDATE, label(input, e.name),
         " is not needed on this rank; do not send it");
}

void Binding::takeTensor(uint32_t ei, size_t input, const void *data) {
  const Entry &e = plan.entries[ei];
  if (entryStamp[ei] == stamp)
    fail(LOADPLAN_STATUS_INVALID_UPDATE, label(input, e.name),
         " is sent twice (also as ", inputKind, " ", entryInput[ei], ")");
  if (!data && e.numElements())
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label(input, e.name),
         ": data is NULL");
  entryStamp[ei] = stamp;
  entryInput[ei] = static_cast<uint32_t>(input);
  entrySource[ei] = static_cast<const uint8_t *>(data);
  active.push_back(ei);
}

bool Binding::sameBox(const Entry &e, uint32_t box, const int64_t *starts,
                      const int64_t *stops) const {
  const Box &b = e.boxes[box];
  return std::equal(b.lo.begin(), b.lo.end(), starts) &&
         std::equal(b.hi.begin(), b.hi.end(), stops);
}

void Binding::requireAllBoxes() const {
  for (uint32_t ei : active) {
    const Entry &e = plan.entries[ei];
    if (entryBoxCount[ei] == e.boxes.size())
      continue;
    uint32_t missing = 0;
    while (boxStamp[plan.firstBox[ei] + missing] == stamp)
      ++missing;
    const Box &box = e.boxes[missing];
    fail(LOADPLAN_STATUS_INVALID_UPDATE, "box ", entryInput[ei], " (",
         quote(e.name), "): the batch lacks box ", missing, " ",
         boxText(e.rank(), box.lo.data(), box.hi.data()), " of ",
         quote(e.name), " (it sends ", entryBoxCount[ei], " of its ",
         e.boxes.size(), " boxes)");
  }
}

Batch Binding::batch(SourceForm form) {
  return Batch{form,
               active.data(),
               active.size(),
               entrySource.data(),
               boxSource.data(),
               [](const void *context, uint32_t entry, uint32_t box) {
                 auto *b = static_cast<const Binding *>(context);
                 const Entry &e = b->plan.entries[entry];
                 bool byBox = std::strcmp(b->inputKind, "box") == 0;
                 return b->label(
                     byBox ? b->boxInput[box] : b->entryInput[entry], e.name);
               },
               this};
}

void Binding::run(SourceForm form, void *stream) {
  if (device.type == LOADPLAN_DEVICE_CPU && stream)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT,
         "stream must be NULL for a CPU binding");
  Batch b = batch(form);
  executor->checkSources(b);
  executor->run(b, stream);
  ++applies;
}

loadplan_binding_stats_t Binding::stats() {
  std::lock_guard<std::mutex> lock(mutex);
  DeviceWork work = executor->deviceWork();
  return {applies, work.kernelLaunches, work.memcpyCalls};
}

template <typename Input, typename CheckInput>
void Binding::applyBatch(const Input *inputs, size_t count, void *stream,
                         SourceForm form, CheckInput checkInput) {
  bool byBox = form == SourceForm::Box;
  require(inputs || !count, byBox ? "boxes is NULL" : "tensors is NULL");
  std::lock_guard<std::mutex> lock(mutex);
  inputKind = byBox ? "box" : "tensor";
  nextStamp();
  active.clear();
  for (size_t i = 0; i < count; ++i) {
    const Input &in = inputs[i];
    uint32_t ei = lookup(in.name, in.name_size, i);
    const Entry &e = plan.entries[ei];
    // Messages are built only on failure: the good path allocates nothing.
    auto label = [&] { return this->label(i, e.name); };
    if (in.dtype != e.dtype)
      fail(LOADPLAN_STATUS_INVALID_UPDATE, label(), " has dtype ",
           dtypeText(in.dtype), " but the plan expects ",
           loadplan_dtype_name(e.dtype));
    checkInput(*this, in, i, ei, e, label);
  }
  if (byBox)
    requireAllBoxes();
  run(form, stream);
}

void Binding::applyTensors(const loadplan_tensor_t *tensors, size_t count,
                           void *stream) {
  applyBatch(
      tensors, count, stream, SourceForm::Tensor,
      [](Binding &b, const loadplan_tensor_t &t, size_t i, uint32_t ei,
         const Entry &e, auto label) {
        if (t.rank && !t.shape)
          fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label(), ": shape is NULL");
        // The message below prints the shape: not one of 2^32 values.
        if (t.rank > kMaxRank)
          fail(LOADPLAN_STATUS_INVALID_UPDATE, label(), " has rank ", t.rank,
               " but the plan expects rank ", e.rank());
        if (t.rank != e.rank() ||
            !std::equal(e.shape.begin(), e.shape.end(), t.shape))
          fail(LOADPLAN_STATUS_INVALID_UPDATE, label(), " has shape ",
               std::vector<int64_t>(t.shape, t.shape + t.rank),
               " but the plan expects ", e.shape);
        b.takeTensor(ei, i, t.data);
      });
}

void Binding::applyEntries(const uint32_t *entries, const void *const *data,
                           size_t count, void *stream) {
  require((entries && data) || !count, "entries or data is NULL");
  std::lock_guard<std::mutex> lock(mutex);
  inputKind = "entry";
  nextStamp();
  active.clear();
  for (size_t i = 0; i < count; ++i) {
    uint32_t ei = entries[i];
    if (ei >= plan.entries.size())
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "entry ", i, ": index ", ei,
           " is not one of the plan's ", plan.entries.size(), " entries");
    requireDirect(ei, i);
    takeTensor(ei, i, data[i]);
  }
  run(SourceForm::Tensor, stream);
}

void Binding::applyBoxes(const loadplan_box_t *boxes, size_t count,
                         void *stream) {
  applyBatch(
      boxes, count, stream, SourceForm::Box,
      [](Binding &b, const loadplan_box_t &in, size_t i, uint32_t ei,
         const Entry &e, auto label) {
        if (in.rank != e.rank())
          fail(LOADPLAN_STATUS_INVALID_UPDATE, label(), " has rank ", in.rank,
               " but the plan's tensor has rank ", e.rank());
        if (in.rank && (!in.starts || !in.stops))
          fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label(),
               ": starts or stops is NULL");
        uint32_t box = 0;
        while (box < e.boxes.size() && !b.sameBox(e, box, in.starts, in.stops))
          ++box;
        if (box == e.boxes.size())
          fail(LOADPLAN_STATUS_INVALID_UPDATE, label(), ": box ",
               boxText(in.rank, in.starts, in.stops), " is not one of the ",
               e.boxes.size(), " boxes the plan needs");
        uint32_t gb = b.plan.firstBox[ei] + box;
        if (b.boxStamp[gb] == b.stamp)
          fail(LOADPLAN_STATUS_INVALID_UPDATE, label(), ": box ", box,
               " is sent twice (also as box ", b.boxInput[gb], ")");
        if (!in.data && e.boxes[box].volume())
          fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label(), ": data is NULL");
        b.boxStamp[gb] = b.stamp;
        b.boxInput[gb] = static_cast<uint32_t>(i);
        b.boxSource[gb] = static_cast<const uint8_t *>(in.data);
        if (b.entryStamp[ei] != b.stamp) {
          b.entryStamp[ei] = b.stamp;
          b.entryInput[ei] = static_cast<uint32_t>(i);
          b.entryBoxCount[ei] = 0;
          b.active.push_back(ei);
        }
        ++b.entryBoxCount[ei];
      });
}
