//===- runtime.cpp - The C API ----------------------------------*- C++ -*-===//
//
// Every entry point runs its body through guard(): whatever the C++ inside
// throws comes out as a status.
//
//===----------------------------------------------------------------------===//

#include "Executor.h"
#include "Plan.h"
#include "Status.h"
#include "host/HostExecutor.h"
#if LOADPLAN_HAVE_CUDA
#include "cuda/CudaExecutor.h"
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

using namespace loadplan;

namespace {

/// More CPU threads than any machine has is a caller's mistake, not a
/// reason to start them.
constexpr uint32_t kMaxThreads = 4096;

void require(bool condition, const char *what) {
  if (!condition)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, what);
}

const Plan &planOf(const loadplan_plan_t *plan) {
  require(plan && plan->plan, "plan is NULL");
  return *plan->plan;
}

loadplan_plan_t *adopt(std::unique_ptr<Plan> plan) {
  auto *handle = new loadplan_plan_t;
  handle->plan = std::move(plan);
  return handle;
}

/// "[(0, 4), (2, 6)]".
std::string boxText(uint32_t rank, const int64_t *starts, const int64_t *stops) {
  std::vector<std::string> dims;
  for (uint32_t d = 0; d < rank; ++d)
    dims.push_back(concat("(", starts[d], ", ", stops[d], ")"));
  return concat(dims);
}

std::string hexAddress(uintptr_t p) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(p));
  return text;
}

} // namespace

/// A plan bound to live memory, with the scratch an apply needs, sized once
/// here so that applying allocates nothing.
struct loadplan_binding_t {
  loadplan_plan_t *handle = nullptr;
  const Plan *plan = nullptr;
  loadplan_device_t device{};
  std::unique_ptr<Executor> executor;
  /// One apply at a time: the scratch below is shared.
  std::mutex mutex;

  std::vector<const uint8_t *> entrySource, boxSource;
  /// An entry or box was seen in the current batch when its stamp is
  /// `stamp`; bumping `stamp` clears all marks at once.
  std::vector<uint32_t> entryStamp, boxStamp;
  uint32_t stamp = 0;
  /// Which input of the batch named each entry or box.
  std::vector<uint32_t> entryInput, boxInput, entryBoxCount;
  std::vector<uint32_t> active;
  const char *inputKind = "tensor";

  ~loadplan_binding_t() {
    executor.reset(); // before the plan it points into
    loadplan_plan_release(handle);
  }

  void nextStamp() {
    if (++stamp == 0) {
      std::fill(entryStamp.begin(), entryStamp.end(), 0);
      std::fill(boxStamp.begin(), boxStamp.end(), 0);
      stamp = 1;
    }
  }

  std::string label(size_t input, std::string_view name) const {
    return concat(inputKind, " ", input, " (", quote(name), ")");
  }

  /// The direct entry `name` names, or an INVALID_UPDATE saying why not.
  uint32_t lookup(const char *name, size_t size, size_t input) const {
    if (!name && size)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, inputKind, " ", input,
           ": name is NULL");
    std::string_view key(name ? name : "", size);
    auto it = plan->byName.find(key);
    if (it == plan->byName.end())
      fail(LOADPLAN_STATUS_INVALID_UPDATE, label(input, key),
           ": no such name in the plan");
    const Entry &e = plan->entries[it->second];
    if (e.kind == LOADPLAN_KIND_FALLBACK)
      fail(LOADPLAN_STATUS_INVALID_UPDATE, label(input, key),
           " is a fallback (", e.reason,
           "); send it through the model's loader");
    if (e.kind == LOADPLAN_KIND_UNNEEDED)
      fail(LOADPLAN_STATUS_INVALID_UPDATE, label(input, key),
           " is not needed on this rank; do not send it");
    return it->second;
  }

  bool sameBox(const Entry &e, uint32_t box, const int64_t *starts,
               const int64_t *stops) const {
    for (uint32_t d = 0; d < e.rank(); ++d)
      if (starts[d] != e.boxStart(box, d) || stops[d] != e.boxStop(box, d))
        return false;
    return true;
  }

  /// Refuses a box batch that names an entry without sending all its boxes.
  void requireAllBoxes() const {
    for (uint32_t ei : active) {
      const Entry &e = plan->entries[ei];
      if (entryBoxCount[ei] == e.numBoxes)
        continue;
      uint32_t missing = 0;
      while (boxStamp[e.firstBox + missing] == stamp)
        ++missing;
      std::vector<int64_t> starts, stops;
      for (uint32_t d = 0; d < e.rank(); ++d) {
        starts.push_back(e.boxStart(missing, d));
        stops.push_back(e.boxStop(missing, d));
      }
      fail(LOADPLAN_STATUS_INVALID_UPDATE, "box ", entryInput[ei], " (",
           quote(e.name), "): the batch lacks box ", missing, " ",
           boxText(e.rank(), starts.data(), stops.data()), " of ",
           quote(e.name), " (it sends ", entryBoxCount[ei], " of its ",
           e.numBoxes, " boxes)");
    }
  }

  Batch batch(SourceForm form) {
    return Batch{form,
                 active.data(),
                 active.size(),
                 entrySource.data(),
                 boxSource.data(),
                 [](const void *context, uint32_t entry, uint32_t box) {
                   auto *b = static_cast<const loadplan_binding_t *>(context);
                   const Entry &e = b->plan->entries[entry];
                   bool byBox = std::strcmp(b->inputKind, "box") == 0;
                   return b->label(byBox ? b->boxInput[box]
                                         : b->entryInput[entry],
                                   e.name);
                 },
                 this};
  }

  void run(SourceForm form, void *stream) {
    if (device.type == LOADPLAN_DEVICE_CPU && stream)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT,
           "stream must be NULL for a CPU binding");
    Batch b = batch(form);
    executor->checkSources(b);
    executor->run(b, stream);
  }
};

namespace {

/// Checks a batch whole, then copies it: `checkInput` checks one input
/// past its name and dtype and records its source. Nothing is written
/// unless every input passes.
template <typename Input, typename CheckInput>
loadplan_status_t applyBatch(loadplan_binding_t *binding, const Input *inputs,
                             size_t count, void *stream, SourceForm form,
                             CheckInput checkInput) {
  return guard([&] {
    bool byBox = form == SourceForm::Box;
    require(binding, "binding is NULL");
    require(inputs || !count, byBox ? "boxes is NULL" : "tensors is NULL");
    std::lock_guard<std::mutex> lock(binding->mutex);
    loadplan_binding_t &b = *binding;
    b.inputKind = byBox ? "box" : "tensor";
    b.nextStamp();
    b.active.clear();
    for (size_t i = 0; i < count; ++i) {
      const Input &in = inputs[i];
      uint32_t ei = b.lookup(in.name, in.name_size, i);
      const Entry &e = b.plan->entries[ei];
      // Messages are built only on failure: the good path allocates nothing.
      auto label = [&] { return b.label(i, e.name); };
      if (in.dtype != e.dtype)
        fail(LOADPLAN_STATUS_INVALID_UPDATE, label(), " has dtype ",
             dtypeText(in.dtype), " but the plan expects ",
             loadplan_dtype_name(e.dtype));
      checkInput(b, in, i, ei, e, label);
    }
    if (byBox)
      b.requireAllBoxes();
    b.run(form, stream);
  });
}

} // namespace

extern "C" {

//===----------------------------------------------------------------------===//
// Plans
//===----------------------------------------------------------------------===//

loadplan_status_t loadplan_plan_open_bytes(const void *data, size_t size,
                                           loadplan_plan_t **out_plan) {
  return guard([&] {
    require(out_plan, "out_plan is NULL");
    *out_plan = nullptr;
    require(data || !size, "data is NULL");
    *out_plan = adopt(parsePlan(static_cast<const uint8_t *>(data), size));
  });
}

loadplan_status_t loadplan_plan_open_file(const char *path,
                                          loadplan_plan_t **out_plan) {
  return guard([&] {
    require(out_plan, "out_plan is NULL");
    *out_plan = nullptr;
    require(path, "path is NULL");
    std::unique_ptr<FILE, int (*)(FILE *)> file(std::fopen(path, "rb"),
                                                &std::fclose);
    if (!file)
      fail(errno == ENOENT ? LOADPLAN_STATUS_NOT_FOUND
                           : LOADPLAN_STATUS_IO_ERROR,
           "cannot open plan file ", quote(path), ": ", std::strerror(errno));
    std::vector<uint8_t> bytes;
    uint8_t chunk[1 << 16];
    size_t n;
    while ((n = std::fread(chunk, 1, sizeof chunk, file.get())) > 0)
      bytes.insert(bytes.end(), chunk, chunk + n);
    if (std::ferror(file.get()))
      fail(LOADPLAN_STATUS_IO_ERROR, "cannot read plan file ", quote(path));
    try {
      *out_plan = adopt(parsePlan(bytes.data(), bytes.size()));
    } catch (StatusError &e) {
      e.message = concat(path, ": ", e.message);
      throw;
    }
  });
}

void loadplan_plan_retain(loadplan_plan_t *plan) {
  if (plan)
    plan->refs.fetch_add(1, std::memory_order_relaxed);
}

void loadplan_plan_release(loadplan_plan_t *plan) {
  if (plan && plan->refs.fetch_sub(1, std::memory_order_acq_rel) == 1)
    delete plan;
}

loadplan_status_t loadplan_plan_summary(const loadplan_plan_t *plan,
                                        loadplan_plan_summary_t *out) {
  return guard([&] {
    const Plan &p = planOf(plan);
    require(out, "out_summary is NULL");
    out->fingerprint = p.fingerprint;
    out->num_storages = static_cast<uint32_t>(p.storageSizes.size());
    out->num_targets = static_cast<uint32_t>(p.targets.size());
    out->num_entries = static_cast<uint32_t>(p.entries.size());
    out->num_direct = static_cast<uint32_t>(p.byKind[0].size());
    out->num_fallback = static_cast<uint32_t>(p.byKind[1].size());
    out->num_unneeded = static_cast<uint32_t>(p.byKind[2].size());
    out->num_writes = p.numWrites;
    out->direct_bytes = p.directBytes;
    out->fallback_bytes = p.fallbackBytes;
  });
}

loadplan_status_t loadplan_plan_storage(const loadplan_plan_t *plan,
                                        uint32_t index,
                                        uint64_t *out_size_bytes) {
  return guard([&] {
    const Plan &p = planOf(plan);
    require(out_size_bytes, "out_size_bytes is NULL");
    if (index >= p.storageSizes.size())
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "storage index ", index,
           " is out of range (the plan has ", p.storageSizes.size(),
           " storages)");
    *out_size_bytes = p.storageSizes[index];
  });
}

loadplan_status_t loadplan_plan_target(const loadplan_plan_t *plan,
                                       uint32_t index,
                                       loadplan_target_info_t *out) {
  return guard([&] {
    const Plan &p = planOf(plan);
    require(out, "out_info is NULL");
    if (index >= p.targets.size())
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "target index ", index,
           " is out of range (the plan has ", p.targets.size(), " targets)");
    const Target &t = p.targets[index];
    out->module = t.module.c_str();
    out->module_size = t.module.size();
    out->tensor = t.tensor.c_str();
    out->tensor_size = t.tensor.size();
    out->storage = t.storage;
    out->dtype = t.dtype;
    out->byte_offset = t.byteOffset;
    out->rank = static_cast<uint32_t>(t.shape.size());
    out->shape = t.shape.data();
    out->stride = t.stride.data();
  });
}

loadplan_status_t loadplan_plan_find_entry(const loadplan_plan_t *plan,
                                           const char *name, size_t name_size,
                                           uint32_t *out_index) {
  return guard([&] {
    const Plan &p = planOf(plan);
    require(out_index, "out_index is NULL");
    require(name || !name_size, "name is NULL");
    std::string_view key(name ? name : "", name_size);
    auto it = p.byName.find(key);
    if (it == p.byName.end())
      fail(LOADPLAN_STATUS_NOT_FOUND, "no entry ", quote(key), " in the plan");
    *out_index = it->second;
  });
}

loadplan_status_t loadplan_plan_entry(const loadplan_plan_t *plan,
                                      uint32_t index,
                                      loadplan_entry_info_t *out) {
  return guard([&] {
    const Plan &p = planOf(plan);
    require(out, "out_info is NULL");
    if (index >= p.entries.size())
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "entry index ", index,
           " is out of range (the plan has ", p.entries.size(), " entries)");
    const Entry &e = p.entries[index];
    out->name = e.name.c_str();
    out->name_size = e.name.size();
    out->kind = e.kind;
    out->dtype = e.dtype;
    out->rank = e.rank();
    out->shape = e.shape.data();
    out->reason = e.hasReason ? e.reason.c_str() : nullptr;
    out->reason_size = e.hasReason ? e.reason.size() : 0;
    out->num_boxes = e.numBoxes;
    out->boxes = e.boxes.data();
    out->num_writes = static_cast<uint32_t>(e.writes.size());
  });
}

loadplan_status_t loadplan_plan_write(const loadplan_plan_t *plan,
                                      uint32_t entry, uint32_t write,
                                      loadplan_write_info_t *out) {
  return guard([&] {
    const Plan &p = planOf(plan);
    require(out, "out_info is NULL");
    if (entry >= p.entries.size())
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "entry index ", entry,
           " is out of range (the plan has ", p.entries.size(), " entries)");
    const Entry &e = p.entries[entry];
    if (write >= e.writes.size())
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "write index ", write,
           " is out of range (", quote(e.name), " has ", e.writes.size(),
           " writes)");
    const Write &w = e.writes[write];
    out->target = w.target;
    out->box = w.box;
    out->offset = w.offset;
    out->rank = static_cast<uint32_t>(w.shape.size());
    out->shape = w.shape.data();
    out->stride = w.stride.data();
  });
}

loadplan_status_t loadplan_plan_entries_of_kind(const loadplan_plan_t *plan,
                                                uint32_t kind,
                                                const uint32_t **out_indices,
                                                size_t *out_count) {
  return guard([&] {
    const Plan &p = planOf(plan);
    require(out_indices && out_count, "out_indices or out_count is NULL");
    if (kind > LOADPLAN_KIND_UNNEEDED)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "unknown kind ", kind);
    *out_indices = p.byKind[kind].data();
    *out_count = p.byKind[kind].size();
  });
}

//===----------------------------------------------------------------------===//
// Binding
//===----------------------------------------------------------------------===//

loadplan_status_t loadplan_plan_check_layout(const loadplan_plan_t *plan,
                                             const loadplan_target_layout_t *layouts,
                                             size_t num_layouts) {
  return guard([&] { checkLayout(planOf(plan), layouts, num_layouts); });
}

void loadplan_bind_options_init(loadplan_bind_options_t *options) {
  if (!options)
    return;
  options->device.type = LOADPLAN_DEVICE_CPU;
  options->device.index = 0;
  options->num_threads = 0;
}

loadplan_status_t loadplan_bind(loadplan_plan_t *plan,
                                const loadplan_target_layout_t *layouts,
                                size_t num_layouts,
                                const loadplan_bind_options_t *options,
                                loadplan_binding_t **out_binding) {
  return guard([&] {
    require(out_binding, "out_binding is NULL");
    *out_binding = nullptr;
    const Plan &p = planOf(plan);
    loadplan_bind_options_t opts;
    loadplan_bind_options_init(&opts);
    if (options)
      opts = *options;
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
    checkLayout(p, layouts, num_layouts);

    // Storage bases: the plan may only write where it was told storages
    // are, so the caller's memory must have the plan's storage structure.
    size_t numStorages = p.storageSizes.size();
    std::vector<uint8_t *> bases(numStorages, nullptr);
    std::vector<int64_t> firstTarget(numStorages, -1);
    for (size_t i = 0; i < num_layouts; ++i) {
      const loadplan_target_layout_t &l = layouts[i];
      const Target &t = p.targets[i];
      std::string label =
          concat("target ", i, " (", quote(t.module + "." + t.tensor), ")");
      uintptr_t data = reinterpret_cast<uintptr_t>(l.data);
      if (!data && !t.spanBytes)
        continue; // no bytes: torch gives empty tensors no memory
      if (!data)
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, ": data is NULL");
      if (data < l.byte_offset)
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, ": data ",
             hexAddress(data), " is below its byte offset ", l.byte_offset);
      uint64_t planSize = p.storageSizes[t.storage];
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
      if (bases[s] && p.storageSizes[s])
        order.push_back(s);
    std::sort(order.begin(), order.end(),
              [&](uint32_t a, uint32_t b) { return bases[a] < bases[b]; });
    for (size_t k = 1; k < order.size(); ++k) {
      uint32_t a = order[k - 1], b = order[k];
      if (reinterpret_cast<uintptr_t>(bases[b]) -
              reinterpret_cast<uintptr_t>(bases[a]) <
          p.storageSizes[a])
        fail(LOADPLAN_STATUS_FINGERPRINT_MISMATCH, "storages ", a, " and ", b,
             " (of targets ", firstTarget[a], " and ", firstTarget[b],
             ") overlap in memory but the plan holds them apart");
    }

    auto binding = std::make_unique<loadplan_binding_t>();
    binding->device = opts.device;
    if (opts.device.type == LOADPLAN_DEVICE_CPU) {
      unsigned threads = opts.num_threads;
      if (!threads)
        threads = std::max(1u, std::thread::hardware_concurrency());
      binding->executor = makeHostExecutor(p, bases, threads);
    } else {
#if LOADPLAN_HAVE_CUDA
      binding->executor = makeCudaExecutor(p, bases, opts.device.index);
#else
      fail(LOADPLAN_STATUS_UNAVAILABLE,
           "this runtime was built without CUDA; bind to the CPU or rebuild "
           "with the CUDA toolkit");
#endif
    }
    binding->entrySource.assign(p.entries.size(), nullptr);
    binding->boxSource.assign(p.numBoxes, nullptr);
    binding->entryStamp.assign(p.entries.size(), 0);
    binding->boxStamp.assign(p.numBoxes, 0);
    binding->entryInput.assign(p.entries.size(), 0);
    binding->boxInput.assign(p.numBoxes, 0);
    binding->entryBoxCount.assign(p.entries.size(), 0);
    binding->active.reserve(p.entries.size());
    loadplan_plan_retain(plan);
    binding->handle = plan;
    binding->plan = &p;
    *out_binding = binding.release();
  });
}

void loadplan_binding_release(loadplan_binding_t *binding) {
  // Destructors here only free memory, join threads and (CUDA) synchronize;
  // none of that is worth letting an exception out of a void C function.
  try {
    delete binding;
  } catch (...) {
  }
}

loadplan_status_t loadplan_binding_num_threads(const loadplan_binding_t *binding,
                                               uint32_t *out_num_threads) {
  return guard([&] {
    require(binding, "binding is NULL");
    require(out_num_threads, "out_num_threads is NULL");
    *out_num_threads = binding->executor->numThreads();
  });
}

//===----------------------------------------------------------------------===//
// Applying an update
//===----------------------------------------------------------------------===//

loadplan_status_t loadplan_apply_tensors(loadplan_binding_t *binding,
                                         const loadplan_tensor_t *tensors,
                                         size_t num_tensors, void *stream) {
  return applyBatch(
      binding, tensors, num_tensors, stream, SourceForm::Tensor,
      [](loadplan_binding_t &b, const loadplan_tensor_t &t, size_t i,
         uint32_t ei, const Entry &e, auto label) {
        if (b.entryStamp[ei] == b.stamp)
          fail(LOADPLAN_STATUS_INVALID_UPDATE, label(),
               " is sent twice (also as tensor ", b.entryInput[ei], ")");
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
        if (!t.data && e.numElements)
          fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label(), ": data is NULL");
        b.entryStamp[ei] = b.stamp;
        b.entryInput[ei] = static_cast<uint32_t>(i);
        b.entrySource[ei] = static_cast<const uint8_t *>(t.data);
        b.active.push_back(ei);
      });
}

loadplan_status_t loadplan_apply_boxes(loadplan_binding_t *binding,
                                       const loadplan_box_t *boxes,
                                       size_t num_boxes, void *stream) {
  return applyBatch(
      binding, boxes, num_boxes, stream, SourceForm::Box,
      [](loadplan_binding_t &b, const loadplan_box_t &in, size_t i,
         uint32_t ei, const Entry &e, auto label) {
        if (in.rank != e.rank())
          fail(LOADPLAN_STATUS_INVALID_UPDATE, label(), " has rank ", in.rank,
               " but the plan's tensor has rank ", e.rank());
        if (in.rank && (!in.starts || !in.stops))
          fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label(),
               ": starts or stops is NULL");
        uint32_t box = 0;
        while (box < e.numBoxes && !b.sameBox(e, box, in.starts, in.stops))
          ++box;
        if (box == e.numBoxes)
          fail(LOADPLAN_STATUS_INVALID_UPDATE, label(), ": box ",
               boxText(in.rank, in.starts, in.stops), " is not one of the ",
               e.numBoxes, " boxes the plan needs");
        uint32_t gb = e.firstBox + box;
        if (b.boxStamp[gb] == b.stamp)
          fail(LOADPLAN_STATUS_INVALID_UPDATE, label(), ": box ", box,
               " is sent twice (also as box ", b.boxInput[gb], ")");
        if (!in.data && e.boxElements(box))
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

loadplan_status_t loadplan_cuda_device_count(int32_t *out_count) {
  return guard([&] {
    require(out_count, "out_count is NULL");
    *out_count = 0;
#if LOADPLAN_HAVE_CUDA
    *out_count = cudaDeviceCount();
#else
    fail(LOADPLAN_STATUS_UNAVAILABLE, "this runtime was built without CUDA");
#endif
  });
}

} // extern "C"
