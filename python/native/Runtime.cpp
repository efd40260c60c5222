//===- Runtime.cpp - The runtime's C API in loadplan._native ----*- C++ -*-===//
//
// Plans, bindings and applies of the runtime (runtime/include/loadplan/
// runtime.h), linked statically into the module: one extension, no library
// to find at run time. The binding takes plain integers (data pointers,
// dtype codes, shapes) so that it knows nothing of torch; loadplan._runtime
// reads them off torch tensors. A failed call raises StatusError (a
// RuntimeError) or one of its subclasses, with the runtime's code and
// message.
//
//===----------------------------------------------------------------------===//

#include "Runtime.h"
#include "Compile.h"
#include "TorchTensor.h"

#include "loadplan/format/Report.h"
#include "loadplan/runtime.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nb = nanobind;
using namespace loadplan_python;

namespace {

/// The exception classes, made once at import.
struct Errors {
  nb::object base, invalidPlan, fingerprintMismatch, invalidUpdate, transfer;
};

Errors &errors() {
  static Errors e;
  return e;
}

nb::object newError(const char *name, const char *doc, PyObject *bases) {
  return nb::steal(PyErr_NewExceptionWithDoc(name, doc, bases, nullptr));
}

std::vector<int64_t> ints(const int64_t *values, uint32_t n) {
  return std::vector<int64_t>(values, values + n);
}

/// Box `b` of an entry of rank `rank`: ((start, stop), ...).
nb::tuple boxOf(const int64_t *boxes, uint32_t rank, uint32_t b) {
  nb::list dims;
  for (uint32_t k = 0; k < rank; ++k)
    dims.append(nb::make_tuple(boxes[2 * (b * rank + k)],
                               boxes[2 * (b * rank + k) + 1]));
  return nb::tuple(dims);
}

/// The Python methods of Plan.
struct PlanMethods {
  static Plan *fromBytes(nb::bytes data) {
    loadplan_plan_t *plan = nullptr;
    loadplan_status_t status;
    {
      // `data` (immutable) stays referenced by the caller meanwhile.
      nb::gil_scoped_release release;
      status = loadplan_plan_open_bytes(data.c_str(), data.size(), &plan);
    }
    check(status);
    return new Plan(plan);
  }

  static Plan *fromFile(const std::string &path) {
    loadplan_plan_t *plan = nullptr;
    loadplan_status_t status;
    {
      nb::gil_scoped_release release;
      status = loadplan_plan_open_file(path.c_str(), &plan);
    }
    check(status);
    return new Plan(plan);
  }

  static nb::dict summary(const Plan &p) {
    loadplan_plan_summary_t s;
    check(loadplan_plan_summary(p.plan, &s));
    nb::dict out;
    out["fingerprint"] = s.fingerprint;
    out["storages"] = s.num_storages;
    out["targets"] = s.num_targets;
    out["names"] = s.num_entries;
    out["direct"] = s.num_direct;
    out["fallback"] = s.num_fallback;
    out["unneeded"] = s.num_unneeded;
    out["writes"] = s.num_writes;
    out["direct_bytes"] = s.direct_bytes;
    out["fallback_bytes"] = s.fallback_bytes;
    return out;
  }

  static uint64_t storageSize(const Plan &p, uint32_t index) {
    uint64_t size = 0;
    check(loadplan_plan_storage(p.plan, index, &size));
    return size;
  }

  static nb::dict target(const Plan &p, uint32_t index) {
    loadplan_target_info_t t;
    check(loadplan_plan_target(p.plan, index, &t));
    nb::dict out;
    out["module"] = std::string(t.module, t.module_size);
    out["tensor"] = std::string(t.tensor, t.tensor_size);
    out["storage"] = t.storage;
    out["dtype"] = t.dtype;
    out["byte_offset"] = t.byte_offset;
    out["shape"] = ints(t.shape, t.rank);
    out["stride"] = ints(t.stride, t.rank);
    return out;
  }

  /// An entry with its boxes and writes, as the JSON plan spells them
  /// (dtype as a code, kind as its name).
  static nb::dict entry(const Plan &p, uint32_t index) {
    loadplan_entry_info_t e;
    check(loadplan_plan_entry(p.plan, index, &e));
    nb::dict out;
    out["name"] = std::string(e.name, e.name_size);
    static const char *const kinds[] = {"direct", "fallback", "unneeded"};
    out["kind"] = e.kind <= LOADPLAN_KIND_UNNEEDED ? kinds[e.kind] : "invalid";
    out["dtype"] = e.dtype;
    out["shape"] = ints(e.shape, e.rank);
    out["reason"] =
        e.reason ? nb::cast(std::string(e.reason, e.reason_size)) : nb::none();
    nb::list boxes;
    for (uint32_t b = 0; b < e.num_boxes; ++b)
      boxes.append(boxOf(e.boxes, e.rank, b));
    out["boxes"] = boxes;
    nb::list writes;
    for (uint32_t w = 0; w < e.num_writes; ++w) {
      loadplan_write_info_t wi;
      check(loadplan_plan_write(p.plan, index, w, &wi));
      nb::dict region;
      region["offset"] = wi.offset;
      region["shape"] = ints(wi.shape, wi.rank);
      region["stride"] = ints(wi.stride, wi.rank);
      nb::dict write;
      write["target"] = wi.target;
      write["box"] = boxOf(e.boxes, e.rank, wi.box);
      write["region"] = region;
      if (wi.dtype != e.dtype)
        write["convert_to"] = wi.dtype;
      writes.append(write);
    }
    out["writes"] = writes;
    return out;
  }

  static uint32_t findEntry(const Plan &p, const std::string &name) {
    uint32_t index = 0;
    check(loadplan_plan_find_entry(p.plan, name.data(), name.size(), &index));
    return index;
  }

  /// Every checkpoint name, in plan order.
  static nb::list names(const Plan &p) {
    loadplan_plan_summary_t s;
    check(loadplan_plan_summary(p.plan, &s));
    nb::list out;
    for (uint32_t i = 0; i < s.num_entries; ++i) {
      loadplan_entry_info_t e;
      check(loadplan_plan_entry(p.plan, i, &e));
      out.append(nb::str(e.name, e.name_size));
    }
    return out;
  }

  /// The plan as plain data, as the compiler had it before encoding.
  static loadplan_format::Plan toFormat(const Plan &p) {
    loadplan_plan_summary_t s;
    check(loadplan_plan_summary(p.plan, &s));
    loadplan_format::Plan plan;
    plan.storageSizes.resize(s.num_storages);
    for (uint32_t i = 0; i < s.num_storages; ++i)
      check(loadplan_plan_storage(p.plan, i, &plan.storageSizes[i]));
    plan.targets.resize(s.num_targets);
    for (uint32_t i = 0; i < s.num_targets; ++i) {
      loadplan_target_info_t t;
      check(loadplan_plan_target(p.plan, i, &t));
      loadplan_format::PlanTarget &out = plan.targets[i];
      out.module.assign(t.module, t.module_size);
      out.tensor.assign(t.tensor, t.tensor_size);
      out.storage = t.storage;
      out.byteOffset = t.byte_offset;
      out.dtype = t.dtype;
      out.shape = ints(t.shape, t.rank);
      out.stride = ints(t.stride, t.rank);
    }
    plan.entries.resize(s.num_entries);
    for (uint32_t i = 0; i < s.num_entries; ++i) {
      loadplan_entry_info_t e;
      check(loadplan_plan_entry(p.plan, i, &e));
      loadplan_format::PlanEntry &out = plan.entries[i];
      out.name.assign(e.name, e.name_size);
      out.kind = static_cast<uint8_t>(e.kind);
      out.dtype = e.dtype;
      out.shape = ints(e.shape, e.rank);
      if (e.reason)
        out.reason.emplace(e.reason, e.reason_size);
      out.boxes.resize(e.num_boxes);
      for (uint32_t b = 0; b < e.num_boxes; ++b)
        for (uint32_t k = 0; k < e.rank; ++k) {
          out.boxes[b].starts.push_back(e.boxes[2 * (b * e.rank + k)]);
          out.boxes[b].stops.push_back(e.boxes[2 * (b * e.rank + k) + 1]);
        }
      out.writes.resize(e.num_writes);
      for (uint32_t w = 0; w < e.num_writes; ++w) {
        loadplan_write_info_t wi;
        check(loadplan_plan_write(p.plan, i, w, &wi));
        out.writes[w] = {wi.target, wi.box, wi.offset, ints(wi.shape, wi.rank),
                         ints(wi.stride, wi.rank),
                         wi.dtype != e.dtype ? wi.dtype : 0u};
      }
    }
    return plan;
  }

  /// The compiler's report of this plan, ending with `how`.
  static std::string report(const Plan &p, const std::string &how) {
    return loadplan_format::planReport(toFormat(p), how);
  }

  /// The compiler's JSON of this plan.
  static std::string json(const Plan &p) {
    if (const char *missing = compilerMissing())
      throw std::runtime_error(std::string("load plan: ") + missing);
    return planJson(toFormat(p));
  }

  /// The targets some write goes to, in plan order.
  static std::vector<uint32_t> writtenTargets(const Plan &p) {
    loadplan_plan_summary_t s;
    check(loadplan_plan_summary(p.plan, &s));
    std::vector<bool> written(s.num_targets);
    for (uint32_t i = 0; i < s.num_entries; ++i) {
      loadplan_entry_info_t e;
      check(loadplan_plan_entry(p.plan, i, &e));
      for (uint32_t w = 0; w < e.num_writes; ++w) {
        loadplan_write_info_t wi;
        check(loadplan_plan_write(p.plan, i, w, &wi));
        written[wi.target] = true;
      }
    }
    std::vector<uint32_t> out;
    for (uint32_t t = 0; t < s.num_targets; ++t)
      if (written[t])
        out.push_back(t);
    return out;
  }
};

/// Raises InvalidUpdate with `message`: an update batch refused before a
/// byte was written.
[[noreturn]] void refuseUpdate(const std::string &message) {
  nb::object exc = errors().invalidUpdate("load plan: " + message);
  exc.attr("code") = static_cast<int>(LOADPLAN_STATUS_INVALID_UPDATE);
  exc.attr("code_name") = loadplan_status_code_name(LOADPLAN_STATUS_INVALID_UPDATE);
  PyErr_SetObject(errors().invalidUpdate.ptr(), exc.ptr());
  throw nb::python_error();
}

/// An item of a batch for a message, without printing a tensor's values.
std::string describe(PyObject *item) {
  if (PyUnicode_Check(item) || PyLong_Check(item) || PyFloat_Check(item) || item == Py_None)
    return reprOf(item);
  std::string type = nb::cast<std::string>(nb::handle(item).type().attr("__name__"));
  if (PyList_Check(item) || PyTuple_Check(item))
    return "a " + type + " of " + std::to_string(PySequence_Size(item)) + " items";
  return "a " + type;
}

/// An update of full tensors, checked against a plan: a list of (name,
/// torch.Tensor) pairs, names of the plan, each once, with the declared
/// dtype and shape, and dense. The one place these rules are written: a
/// batch that breaks one raises InvalidUpdate naming the first item that
/// is wrong and how. Holds the direct entries by index, with their bytes
/// where the executor reads them on the given device, and gives back the
/// fallback pairs. Writes nothing.
class UpdateCheck {
public:
  explicit UpdateCheck(Plan &plan) : plan(&plan) {}

  /// Checks `batch`. `deviceType` is the binding's (loadplan_device_type_t),
  /// or -1 for none: then no bytes are read and each direct tensor is
  /// checked dense as a fallback's is. `ready()` says afterwards whether
  /// every direct tensor's bytes were read.
  nb::list check(nb::handle batch, int32_t deviceType, int32_t deviceIndex) {
    buildEntries();
    pendingEntries.clear();
    pendingData.clear();
    pendingItems.clear();
    keep.clear();
    checked = nb::object();
    allRead = deviceType >= 0;
    if (++generation == 0) {
      std::fill(seen.begin(), seen.end(), 0);
      generation = 1;
    }
    if (!torchTypes().tensorType.is_valid())
      throw nb::type_error("load plan: loadplan._runtime sets torch's types first");
    if (!PyList_Check(batch.ptr()))
      throw nb::type_error("load plan: an update batch is a list");
    size_t next = 0;
    nb::list fallbacks;
    Py_ssize_t n = PyList_GET_SIZE(batch.ptr());
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject *item = PyList_GET_ITEM(batch.ptr(), i);
      if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2)
        refuseUpdate("expected (name, tensor) pairs, got " + describe(item));
      PyObject *name = PyTuple_GET_ITEM(item, 0), *t = PyTuple_GET_ITEM(item, 1);
      uint32_t index = find(name, next);
      next = index + 1;
      const EntryInfo &e = entries[index];
      // A fallback's tensor goes to load_weights: strided, not a meta
      // tensor. (A direct one's bytes are read on the binding's device,
      // which tensorData checks.)
      bool forLoader = e.kind != LOADPLAN_KIND_DIRECT || deviceType < 0;
      if (!tensorMatches(t, e.dtype, e.shape.data(), e.shape.size(), forLoader))
        refuseUpdate(reprOf(name) + " is " +
                     tensorMismatch(t, e.dtype, e.shape.data(), e.shape.size(), forLoader));
      if (seen[index] == generation)
        refuseUpdate(reprOf(name) + " is sent twice in one update");
      seen[index] = generation;
      if (e.kind == LOADPLAN_KIND_FALLBACK) {
        fallbacks.append(nb::handle(item));
        continue;
      }
      if (e.kind != LOADPLAN_KIND_DIRECT)
        continue; // unneeded: this rank needs none of it
      const void *data = nullptr;
      if (allRead) {
        data = tensorData(t, deviceType, deviceIndex, keep);
        if (!data) {
          // No data pointer: torch has none for a tensor without strided
          // storage; else it is elsewhere, for torch to move.
          std::string problem = notDense(t);
          if (!problem.empty())
            refuseUpdate(reprOf(name) + " is " + problem);
          allRead = false;
        }
      }
      pendingEntries.push_back(index);
      pendingData.push_back(data);
      pendingItems.push_back(i);
    }
    // The tensors live in `batch`, which is held until taken.
    checked = nb::borrow(batch);
    return fallbacks;
  }

  bool ready() const { return allRead && checked.is_valid(); }

  /// The direct pairs of the batch checked, in order.
  nb::list direct() const {
    nb::list out;
    if (checked.is_valid())
      for (Py_ssize_t i : pendingItems)
        out.append(nb::handle(PyList_GET_ITEM(checked.ptr(), i)));
    return out;
  }

  /// The names held for an apply, in order.
  std::vector<std::string> pendingNames() const {
    std::vector<std::string> out;
    out.reserve(pendingEntries.size());
    for (uint32_t index : pendingEntries)
      out.push_back(names[index]);
    return out;
  }

  /// Hands what `check` held to `apply(entries, data)`, the batch and any
  /// contiguous copies alive through it, then forgets it.
  template <typename Apply> void take(Apply apply) {
    if (!ready())
      throw nb::value_error("apply_checked without a check_update whose tensors were read");
    std::vector<uint32_t> e = std::move(pendingEntries);
    std::vector<const void *> d = std::move(pendingData);
    pendingEntries.clear();
    pendingData.clear();
    pendingItems.clear();
    nb::object hold = std::move(checked);
    std::vector<nb::object> held = std::move(keep);
    keep.clear();
    apply(e, d);
  }

private:
  /// The entry of `name`: trainers send in the checkpoint's order, the
  /// plan's, so the entry after the last one is tried before hashing.
  uint32_t find(PyObject *name, size_t next) {
    Py_ssize_t size = 0;
    const char *utf8 = PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, &size) : nullptr;
    if (!utf8)
      PyErr_Clear(); // a str with no UTF-8 spelling names no entry
    else {
      std::string_view key(utf8, size);
      if (next < names.size() && names[next] == key)
        return static_cast<uint32_t>(next);
      auto found = byName.find(key);
      if (found != byName.end())
        return found->second;
    }
    refuseUpdate(reprOf(name) + " is not a declared checkpoint name");
  }

  /// What a check needs of each entry, by name (made on first use).
  struct EntryInfo {
    uint8_t kind;
    uint32_t dtype;
    std::vector<int64_t> shape;
  };

  void buildEntries() {
    if (entriesBuilt)
      return;
    loadplan_plan_summary_t s;
    loadplan_python::check(loadplan_plan_summary(plan->plan, &s));
    names.reserve(s.num_entries);
    entries.reserve(s.num_entries);
    for (uint32_t i = 0; i < s.num_entries; ++i) {
      loadplan_entry_info_t e;
      loadplan_python::check(loadplan_plan_entry(plan->plan, i, &e));
      names.emplace_back(e.name, e.name_size);
      entries.push_back({static_cast<uint8_t>(e.kind), e.dtype, ints(e.shape, e.rank)});
    }
    for (uint32_t i = 0; i < s.num_entries; ++i)
      byName.emplace(names[i], i);
    seen.assign(s.num_entries, 0);
    entriesBuilt = true;
  }

  Plan *plan;
  bool entriesBuilt = false;
  std::vector<std::string> names;
  std::vector<EntryInfo> entries;
  std::unordered_map<std::string_view, uint32_t> byName;
  std::vector<uint32_t> seen;
  uint32_t generation = 0;
  bool allRead = false;
  /// What check holds: entry indices, their data (null where unread), the
  /// items' places in the batch.
  std::vector<uint32_t> pendingEntries;
  std::vector<const void *> pendingData;
  std::vector<Py_ssize_t> pendingItems;
  std::vector<nb::object> keep;
  nb::object checked;
};

/// A plan bound to live memory.
class Binding {
public:
  Binding(Plan &plan, const std::vector<LayoutTuple> &layouts,
          uint32_t deviceType, int32_t deviceIndex, uint32_t numThreads)
      : plan(&plan), deviceType(deviceType), deviceIndex(deviceIndex) {
    std::vector<loadplan_target_layout_t> l = toLayouts(layouts);
    loadplan_bind_options_t options;
    loadplan_bind_options_init(&options);
    options.device.type = deviceType;
    options.device.index = deviceIndex;
    options.num_threads = numThreads;
    loadplan_status_t status;
    {
      // Binding precomputes every copy (and, for CUDA, uploads them).
      nb::gil_scoped_release release;
      status = loadplan_bind(plan.plan, l.data(), l.size(), &options, &binding);
    }
    check(status);
  }
  Binding(const Binding &) = delete;
  Binding &operator=(const Binding &) = delete;
  ~Binding() { close(); }

  void close() {
    if (binding) {
      nb::gil_scoped_release release; // CUDA: waits for pending work
      loadplan_binding_release(binding);
      binding = nullptr;
    }
  }

  loadplan_binding_t *get() const {
    if (!binding)
      throw nb::value_error("the binding is closed");
    return binding;
  }

  uint32_t numThreads() const {
    uint32_t n = 0;
    check(loadplan_binding_num_threads(get(), &n));
    return n;
  }

  /// The fast path of an update of full tensors: checks the batch
  /// (UpdateCheck, which raises InvalidUpdate saying what is wrong) and
  /// holds the direct entries, read on the binding's device, for
  /// applyChecked. Returns the fallback pairs in order. Writes nothing.
  nb::list checkUpdate(nb::handle batch) {
    get();
    return updates.check(batch, static_cast<int32_t>(deviceType), deviceIndex);
  }

  /// Applies what checkUpdate held, in one runtime call: by entry index,
  /// since checkUpdate found each name's entry and checked its dtype and
  /// shape (the runtime checks the rest again before it writes a byte).
  void applyChecked(uintptr_t stream) {
    updates.take([&](const std::vector<uint32_t> &entries,
                     const std::vector<const void *> &data) {
      run(
          [&](loadplan_binding_t *b, void *s) {
            return loadplan_apply_entries(b, entries.data(), data.data(), entries.size(), s);
          },
          stream);
    });
  }

  const UpdateCheck &checked() const { return updates; }

  nb::dict stats() const {
    loadplan_binding_stats_t s;
    check(loadplan_binding_stats(get(), &s));
    nb::dict out;
    out["applies"] = s.applies;
    out["kernel_launches"] = s.kernel_launches;
    out["memcpy_calls"] = s.memcpy_calls;
    return out;
  }

  /// tensors: (name, data, dtype, shape) per full tensor.
  void applyTensors(nb::list tensors, uintptr_t stream) {
    size_t n = tensors.size();
    std::vector<loadplan_tensor_t> in(n);
    std::vector<int64_t> dims;
    std::vector<size_t> at(n);
    for (size_t i = 0; i < n; ++i) {
      at[i] = dims.size();
      in[i].rank =
          read(tensors[i], 1, "a tensor is (name, data, dtype, shape)",
               in[i].name, in[i].name_size, in[i].data, in[i].dtype, dims);
    }
    // Pointers into `dims` only once it no longer grows.
    for (size_t i = 0; i < n; ++i)
      in[i].shape = dims.data() + at[i];
    run(
        [&](loadplan_binding_t *b, void *s) {
          return loadplan_apply_tensors(b, in.data(), in.size(), s);
        },
        stream);
  }

  /// boxes: (name, data, dtype, starts, stops) per packed box.
  void applyBoxes(nb::list boxes, uintptr_t stream) {
    size_t n = boxes.size();
    std::vector<loadplan_box_t> in(n);
    std::vector<int64_t> dims;
    std::vector<size_t> at(n);
    for (size_t i = 0; i < n; ++i) {
      at[i] = dims.size();
      in[i].rank =
          read(boxes[i], 2,
               "a box is (name, data, dtype, starts, stops) with "
               "starts and stops of one rank",
               in[i].name, in[i].name_size, in[i].data, in[i].dtype, dims);
    }
    for (size_t i = 0; i < n; ++i) {
      in[i].starts = dims.data() + at[i];
      in[i].stops = dims.data() + at[i] + in[i].rank;
    }
    run(
        [&](loadplan_binding_t *b, void *s) {
          return loadplan_apply_boxes(b, in.data(), in.size(), s);
        },
        stream);
  }

private:
  /// Reads (name, data, dtype, ints_1, ..., ints_lists) into the fields of
  /// one input, appending the int tuples to `dims`; returns their rank.
  static uint32_t read(nb::handle item, size_t lists, const char *form,
                       const char *&name, size_t &nameSize, const void *&data,
                       uint32_t &dtype, std::vector<int64_t> &dims) {
    nb::tuple t = nb::cast<nb::tuple>(item);
    if (t.size() != 3 + lists)
      throw nb::value_error(form);
    // The UTF-8 bytes of a str are owned by the str, which the caller's
    // list keeps alive through the call.
    if (!PyUnicode_Check(t[0].ptr()))
      throw nb::type_error("a name must be a str");
    Py_ssize_t size = 0;
    name = PyUnicode_AsUTF8AndSize(t[0].ptr(), &size);
    if (!name)
      throw nb::python_error();
    nameSize = static_cast<size_t>(size);
    data = reinterpret_cast<const void *>(nb::cast<uintptr_t>(t[1]));
    dtype = nb::cast<uint32_t>(t[2]);
    size_t rank = 0;
    for (size_t k = 0; k < lists; ++k) {
      size_t before = dims.size();
      for (nb::handle d : t[3 + k])
        dims.push_back(nb::cast<int64_t>(d));
      if (k == 0)
        rank = dims.size() - before;
      else if (dims.size() - before != rank)
        throw nb::value_error(form);
    }
    return static_cast<uint32_t>(rank);
  }

  /// One runtime call for the whole batch, `apply(binding, stream)`,
  /// without the GIL.
  template <typename Apply> void run(Apply apply, uintptr_t stream) {
    loadplan_binding_t *b = get();
    loadplan_status_t status;
    {
      nb::gil_scoped_release release;
      status = apply(b, reinterpret_cast<void *>(stream));
    }
    check(status);
  }

  Plan *plan;
  uint32_t deviceType;
  int32_t deviceIndex;
  loadplan_binding_t *binding = nullptr;
  UpdateCheck updates{*plan};
};

} // namespace

TorchTypes &loadplan_python::torchTypes() {
  static TorchTypes t;
  return t;
}

PyObject *loadplan_python::attrName(const char *name) {
  PyObject *s = PyUnicode_InternFromString(name);
  if (!s)
    throw nb::python_error();
  return s;
}

void loadplan_python::check(loadplan_status_t status, bool transfer) {
  if (!status)
    return;
  loadplan_status_code_t code = loadplan_status_code(status);
  std::string message = loadplan_status_message(status);
  loadplan_status_free(status);
  Errors &e = errors();
  nb::object cls = e.base;
  if (transfer)
    cls = e.transfer;
  else if (code == LOADPLAN_STATUS_INVALID_PLAN)
    cls = e.invalidPlan;
  else if (code == LOADPLAN_STATUS_FINGERPRINT_MISMATCH)
    cls = e.fingerprintMismatch;
  else if (code == LOADPLAN_STATUS_INVALID_UPDATE)
    cls = e.invalidUpdate;
  nb::object exc = cls(transfer ? "load plan: " + message : message);
  exc.attr("code") = static_cast<int>(code);
  exc.attr("code_name") = loadplan_status_code_name(code);
  PyErr_SetObject(cls.ptr(), exc.ptr());
  throw nb::python_error();
}

std::vector<loadplan_target_layout_t>
loadplan_python::toLayouts(const std::vector<LayoutTuple> &in) {
  std::vector<loadplan_target_layout_t> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const auto &[data, offset, size, dtype, shape, stride] = in[i];
    if (shape.size() != stride.size())
      throw nb::value_error("a layout's shape and stride differ in rank");
    out[i] = {
        reinterpret_cast<void *>(data),      offset,       size,         dtype,
        static_cast<uint32_t>(shape.size()), shape.data(), stride.data()};
  }
  return out;
}

void loadplan_python::defineRuntime(nb::module_ &m) {
  Errors &e = errors();
  e.base = newError("loadplan._native.StatusError",
                    "A runtime call failed; `code` and `code_name` say how, "
                    "args[0] is the runtime's message.",
                    PyExc_RuntimeError);
  nb::object bases = nb::make_tuple(e.base, nb::handle(PyExc_ValueError));
  e.invalidPlan = newError("loadplan._native.InvalidPlan",
                           "The plan bytes are malformed.", bases.ptr());
  e.invalidUpdate = newError("loadplan._native.InvalidUpdate",
                             "An update batch was refused; nothing was "
                             "written.",
                             bases.ptr());
  e.fingerprintMismatch = newError(
      "loadplan._native.FingerprintMismatch",
      "The live layout is not the one the plan was made for.", e.base.ptr());
  e.transfer = newError("loadplan._native.TransferError",
                        "A transfer call failed; raised on every rank of a failed "
                        "collective, with the first failing rank's message.",
                        e.base.ptr());
  m.attr("StatusError") = e.base;
  m.attr("TransferError") = e.transfer;
  // The runtime's status codes by name ("invalid_update": 5, ...).
  nb::dict codes;
  for (int c = LOADPLAN_STATUS_OK; c <= LOADPLAN_STATUS_INTERNAL; ++c)
    codes[loadplan_status_code_name(static_cast<loadplan_status_code_t>(c))] = c;
  m.attr("STATUS_CODES") = codes;
  m.attr("InvalidPlan") = e.invalidPlan;
  m.attr("InvalidUpdate") = e.invalidUpdate;
  m.attr("FingerprintMismatch") = e.fingerprintMismatch;

  nb::class_<Plan>(m, "Plan", "A checked plan file, held by the runtime")
      .def_static("from_bytes", &PlanMethods::fromBytes, nb::arg("data"),
                  "Parses and checks plan bytes.")
      .def_static("from_file", &PlanMethods::fromFile, nb::arg("path"),
                  "Reads and checks a plan file.")
      .def("summary", &PlanMethods::summary,
           "Counts, bytes and the fingerprint (an int).")
      .def("storage_size", &PlanMethods::storageSize, nb::arg("index"))
      .def("target", &PlanMethods::target, nb::arg("index"),
           "Target `index` as the plan recorded it (dtype as a code).")
      .def("entry", &PlanMethods::entry, nb::arg("index"),
           "Entry `index`: name, kind, dtype code, shape, reason, boxes, "
           "writes.")
      .def("find_entry", &PlanMethods::findEntry, nb::arg("name"))
      .def("names", &PlanMethods::names, "Every checkpoint name, in order.")
      .def("json", &PlanMethods::json,
           "The plan as the compiler's JSON (--loadplan-emit-plan-json).")
      .def("report", &PlanMethods::report, nb::arg("how"),
           "The compiler's report of the plan, its last line ending with "
           "`how`.")
      .def("written_targets", &PlanMethods::writtenTargets,
           "Indices of the targets some write goes to, in order.")
      .def(
          "check_layout",
          [](Plan &p, const std::vector<LayoutTuple> &layouts) {
            std::vector<loadplan_target_layout_t> l = toLayouts(layouts);
            check(loadplan_plan_check_layout(p.plan, l.data(), l.size()));
          },
          nb::arg("layouts"),
          "Raises FingerprintMismatch, naming the first target and field "
          "that differ, unless `layouts` (data, byte_offset, storage_size, "
          "dtype, shape, stride per target) is the plan's layout.");

  nb::class_<UpdateCheck>(m, "UpdateCheck",
                          "An update batch's check against a plan, without a "
                          "binding")
      .def(nb::init<Plan &>(), nb::arg("plan"), nb::keep_alive<1, 2>())
      .def(
          "check", [](UpdateCheck &c, nb::handle batch) { return c.check(batch, -1, 0); },
          nb::arg("batch"),
          "Checks (name, torch.Tensor) pairs against the plan, as "
          "Binding.check_update does; returns the fallback pairs.")
      .def("direct", &UpdateCheck::direct,
           "The direct pairs of the batch checked, in order.");

  nb::class_<Binding>(m, "Binding", "A plan bound to live memory")
      .def(nb::init<Plan &, const std::vector<LayoutTuple> &, uint32_t, int32_t,
                    uint32_t>(),
           nb::arg("plan"), nb::arg("layouts"), nb::arg("device_type") = 0,
           nb::arg("device_index") = 0, nb::arg("num_threads") = 0,
           "Binds `plan` to `layouts` (one (data, byte_offset, storage_size, "
           "dtype, shape, stride) per target) on a device (0: CPU, 1: CUDA); "
           "num_threads 0 means all hardware threads.")
      .def_prop_ro("num_threads", &Binding::numThreads)
      .def("stats", &Binding::stats,
           "What the applies so far did: applies, kernel_launches, "
           "memcpy_calls (loadplan_binding_stats).")
      .def("apply_tensors", &Binding::applyTensors, nb::arg("tensors"),
           nb::arg("stream") = 0,
           "Applies full tensors, (name, data, dtype, shape) each, in one "
           "call; all or nothing.")
      .def("apply_boxes", &Binding::applyBoxes, nb::arg("boxes"),
           nb::arg("stream") = 0,
           "Applies packed boxes, (name, data, dtype, starts, stops) each, "
           "in one call; all or nothing.")
      .def("check_update", &Binding::checkUpdate, nb::arg("batch"),
           "Checks (name, torch.Tensor) pairs against the plan (InvalidUpdate "
           "says what is wrong) and holds the direct ones; returns the "
           "fallback pairs. Writes nothing.")
      .def_prop_ro(
          "check_ready", [](const Binding &b) { return b.checked().ready(); },
          "Whether check_update read every direct tensor on the binding's "
          "device (else torch moves them first: checked_direct).")
      .def(
          "checked_direct", [](const Binding &b) { return b.checked().direct(); },
          "The direct pairs check_update held, in order.")
      .def(
          "pending_names", [](const Binding &b) { return b.checked().pendingNames(); },
          "The direct names check_update holds, in order.")
      .def("apply_checked", &Binding::applyChecked, nb::arg("stream") = 0,
           "Applies what check_update held, in one runtime call.")
      .def("close", &Binding::close, "Releases the binding now.");

  m.def(
      "set_torch_types",
      [](nb::object tensorType, nb::object strided, nb::dict dtypeCodes) {
        TorchTypes &t = torchTypes();
        t.tensorType = tensorType;
        t.strided = strided;
        t.dtypeCodes.clear();
        for (auto [dtype, code] : dtypeCodes) {
          Py_INCREF(dtype.ptr()); // held for the process, as torch holds it
          t.dtypeCodes[dtype.ptr()] = nb::cast<uint32_t>(code);
        }
      },
      nb::arg("tensor_type"), nb::arg("strided"), nb::arg("dtype_codes"),
      "The torch objects Binding.check_update compares with.");

  m.def(
      "dtype_name", [](uint32_t code) { return loadplan_dtype_name(code); },
      nb::arg("code"), "torch's name of a plan dtype code ('invalid' if none)");
  m.def(
      "dtype_mlir_type",
      [](uint32_t code) { return loadplan_dtype_mlir_type(code); },
      nb::arg("code"),
      "The MLIR element type of a plan dtype code as IR text spells it "
      "('' if none)");
  m.attr("DTYPE_COUNT") = static_cast<int>(LOADPLAN_DTYPE_COUNT_);
  m.def(
      "cuda_device_count",
      []() {
        int32_t count = 0;
        loadplan_status_t status = loadplan_cuda_device_count(&count);
        if (status) {
          // Built without CUDA: no devices for the runtime.
          loadplan_status_free(status);
          return -1;
        }
        return static_cast<int>(count);
      },
      "CUDA devices the runtime sees; -1 when built without CUDA.");
}
