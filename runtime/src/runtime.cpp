//===- runtime.cpp - The C API ----------------------------------*- C++ -*-===//
//
// Every entry point runs its body through guard(): whatever the C++ inside
// throws comes out as a status. Plans are Plan.cpp's (their report and JSON
// the format library's), bindings and updates Binding.cpp's; here are only
// the shims.
//
//===----------------------------------------------------------------------===//

#include "Binding.h"
#include "Plan.h"
#include "Status.h"
#include "loadplan/format/PlanJson.h"
#include "loadplan/format/Report.h"
#if LOADPLAN_HAVE_CUDA
#include "cuda/CudaExecutor.h"
#endif

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

using namespace loadplan;

namespace {

const Plan &planOf(const loadplan_plan_t *plan) {
  require(plan && plan->plan, "plan is NULL");
  return *plan->plan;
}

/// Entry `index` of `plan`; INVALID_ARGUMENT when it has no such entry.
const Entry &entryAt(const Plan &plan, uint32_t index) {
  if (index >= plan.entries.size())
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "entry index ", index,
         " is out of range (the plan has ", plan.entries.size(), " entries)");
  return plan.entries[index];
}

/// Item `index` of `e`'s `items` (its boxes or writes, `what` one and
/// `plural` several of them); INVALID_ARGUMENT when there is no such item.
template <typename Items>
const typename Items::value_type &itemOf(const Entry &e, const Items &items,
                                         uint32_t index, const char *what,
                                         const char *plural) {
  if (index >= items.size())
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, what, " index ", index,
         " is out of range (", quote(e.name), " has ", items.size(), " ",
         plural, ")");
  return items[index];
}

/// `text` in memory of its own, NUL-terminated, for loadplan_text_free.
void giveText(const std::string &text, char **out_text, size_t *out_size) {
  char *copy = static_cast<char *>(std::malloc(text.size() + 1));
  if (!copy)
    throw std::bad_alloc();
  std::memcpy(copy, text.data(), text.size());
  copy[text.size()] = '\0';
  *out_text = copy;
  if (out_size)
    *out_size = text.size();
}

loadplan_plan_t *adopt(std::unique_ptr<Plan> plan) {
  auto *handle = new loadplan_plan_t;
  handle->plan = std::move(plan);
  return handle;
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
    out->num_direct = static_cast<uint32_t>(p.byKind[LOADPLAN_KIND_DIRECT].size());
    out->num_fallback =
        static_cast<uint32_t>(p.byKind[LOADPLAN_KIND_FALLBACK].size());
    out->num_unneeded =
        static_cast<uint32_t>(p.byKind[LOADPLAN_KIND_UNNEEDED].size());
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
    const Entry &e = entryAt(p, index);
    out->name = e.name.c_str();
    out->name_size = e.name.size();
    out->kind = e.kind;
    out->dtype = e.dtype;
    out->rank = e.rank();
    out->shape = e.shape.data();
    out->reason = e.reason ? e.reason->c_str() : nullptr;
    out->reason_size = e.reason ? e.reason->size() : 0;
    out->num_boxes = static_cast<uint32_t>(e.boxes.size());
    out->num_writes = static_cast<uint32_t>(e.writes.size());
  });
}

loadplan_status_t loadplan_plan_box(const loadplan_plan_t *plan,
                                    uint32_t entry, uint32_t box,
                                    loadplan_box_info_t *out) {
  return guard([&] {
    const Plan &p = planOf(plan);
    require(out, "out_info is NULL");
    const Entry &e = entryAt(p, entry);
    const Box &b = itemOf(e, e.boxes, box, "box", "boxes");
    out->rank = b.rank();
    out->starts = b.lo.data();
    out->stops = b.hi.data();
  });
}

loadplan_status_t loadplan_plan_write(const loadplan_plan_t *plan,
                                      uint32_t entry, uint32_t write,
                                      loadplan_write_info_t *out) {
  return guard([&] {
    const Plan &p = planOf(plan);
    require(out, "out_info is NULL");
    const Entry &e = entryAt(p, entry);
    const Write &w = itemOf(e, e.writes, write, "write", "writes");
    out->target = w.target;
    out->box = w.box;
    out->offset = w.offset;
    out->rank = static_cast<uint32_t>(w.shape.size());
    out->shape = w.shape.data();
    out->stride = w.stride.data();
    out->dtype = writtenDtype(e, w);
    out->transform = w.transform;
  });
}

loadplan_status_t loadplan_plan_entries_of_kind(const loadplan_plan_t *plan,
                                                uint32_t kind,
                                                const uint32_t **out_indices,
                                                size_t *out_count) {
  return guard([&] {
    const Plan &p = planOf(plan);
    require(out_indices && out_count, "out_indices or out_count is NULL");
    if (kind >= LOADPLAN_KIND_COUNT_)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "unknown kind ", kind);
    *out_indices = p.byKind[kind].data();
    *out_count = p.byKind[kind].size();
  });
}

loadplan_status_t loadplan_plan_report(const loadplan_plan_t *plan,
                                       const char *how, size_t how_size,
                                       char **out_text, size_t *out_size) {
  return guard([&] {
    const Plan &p = planOf(plan);
    require(out_text, "out_text is NULL");
    *out_text = nullptr;
    require(how || !how_size, "how is NULL");
    giveText(loadplan_format::planReport(
                 p, std::string_view(how ? how : "", how_size)),
             out_text, out_size);
  });
}

loadplan_status_t loadplan_plan_json(const loadplan_plan_t *plan,
                                     char **out_text, size_t *out_size) {
  return guard([&] {
    const Plan &p = planOf(plan);
    require(out_text, "out_text is NULL");
    *out_text = nullptr;
    giveText(loadplan_format::planJson(p), out_text, out_size);
  });
}

void loadplan_text_free(char *text) { std::free(text); }

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
    auto handle = std::make_unique<loadplan_binding_t>();
    handle->binding = std::make_unique<Binding>(p, layouts, num_layouts, opts);
    loadplan_plan_retain(plan);
    handle->handle = plan;
    *out_binding = handle.release();
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
    require(binding && binding->binding, "binding is NULL");
    require(out_num_threads, "out_num_threads is NULL");
    *out_num_threads = binding->binding->numThreads();
  });
}

loadplan_status_t loadplan_binding_stats(loadplan_binding_t *binding,
                                         loadplan_binding_stats_t *out_stats) {
  return guard([&] {
    require(binding && binding->binding, "binding is NULL");
    require(out_stats, "out_stats is NULL");
    *out_stats = binding->binding->stats();
  });
}

//===----------------------------------------------------------------------===//
// Applying an update
//===----------------------------------------------------------------------===//

loadplan_status_t loadplan_apply_tensors(loadplan_binding_t *binding,
                                         const loadplan_tensor_t *tensors,
                                         size_t num_tensors, void *stream) {
  return guard([&] {
    require(binding && binding->binding, "binding is NULL");
    binding->binding->applyTensors(tensors, num_tensors, stream);
  });
}

loadplan_status_t loadplan_apply_entries(loadplan_binding_t *binding,
                                         const uint32_t *entries,
                                         const void *const *data, size_t count,
                                         void *stream) {
  return guard([&] {
    require(binding && binding->binding, "binding is NULL");
    binding->binding->applyEntries(entries, data, count, stream);
  });
}

loadplan_status_t loadplan_apply_boxes(loadplan_binding_t *binding,
                                       const loadplan_box_t *boxes,
                                       size_t num_boxes, void *stream) {
  return guard([&] {
    require(binding && binding->binding, "binding is NULL");
    binding->binding->applyBoxes(boxes, num_boxes, stream);
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
