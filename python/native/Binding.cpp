//===- Binding.cpp - The Binding class of loadplan._native -----*- C++ -*-===//
//
// A plan bound to live memory, and its applies: full tensors, packed boxes,
// or an update batch checked first (UpdateCheck) and then applied by entry
// index. Each apply is one runtime call, without the GIL.
//
//===----------------------------------------------------------------------===//

#include "Errors.h"
#include "Handle.h"
#include "Plan.h"
#include "Runtime.h"
#include "UpdateCheck.h"

#include "loadplan/runtime.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <vector>

namespace nb = nanobind;
using namespace loadplan_python;

namespace {

constexpr char kBindingName[] = "binding";

/// A plan bound to live memory.
class Binding
    : public Handle<loadplan_binding_t, loadplan_binding_release, kBindingName> {
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
    loadplan_binding_t *binding = nullptr;
    loadplan_status_t status;
    {
      // Binding precomputes every copy (and, for CUDA, uploads them).
      nb::gil_scoped_release release;
      status = loadplan_bind(plan.get(), l.data(), l.size(), &options, &binding);
    }
    check(status);
    reset(binding);
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
  UpdateCheck updates{*plan};
};

} // namespace

void loadplan_python::defineBinding(nb::module_ &m) {
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
}
