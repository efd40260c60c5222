//===- UpdateCheck.cpp - An update batch checked against a plan -*- C++ -*-===//
//
// The checks of UpdateCheck, which the module's UpdateCheck class and
// Binding.check_update run: each name declared and sent once, each tensor
// of the declared dtype and shape and dense, and the direct tensors' bytes
// found on the binding's device. A batch that fails raises InvalidUpdate
// naming the first wrong item, before anything is written.
//
//===----------------------------------------------------------------------===//

#include "UpdateCheck.h"
#include "Errors.h"
#include "Runtime.h"
#include "TorchTensor.h"

#include "loadplan/runtime.h"

#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nb = nanobind;
using namespace loadplan_python;

namespace {

/// An item of a batch for a message, without printing a tensor's values.
std::string describe(PyObject *item) {
  if (PyUnicode_Check(item) || PyLong_Check(item) || PyFloat_Check(item) || item == Py_None)
    return reprOf(item);
  std::string type = nb::cast<std::string>(nb::handle(item).type().attr("__name__"));
  if (PyList_Check(item) || PyTuple_Check(item))
    return "a " + type + " of " + std::to_string(PySequence_Size(item)) + " items";
  return "a " + type;
}

} // namespace

nb::list UpdateCheck::check(nb::handle batch, int32_t deviceType, int32_t deviceIndex) {
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

nb::list UpdateCheck::direct() const {
  nb::list out;
  if (checked.is_valid())
    for (Py_ssize_t i : pendingItems)
      out.append(nb::handle(PyList_GET_ITEM(checked.ptr(), i)));
  return out;
}

std::vector<std::string> UpdateCheck::pendingNames() const {
  std::vector<std::string> out;
  out.reserve(pendingEntries.size());
  for (uint32_t index : pendingEntries)
    out.push_back(names[index]);
  return out;
}

uint32_t UpdateCheck::find(PyObject *name, size_t next) {
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

void UpdateCheck::buildEntries() {
  if (entriesBuilt)
    return;
  loadplan_plan_summary_t s;
  loadplan_python::check(loadplan_plan_summary(plan->get(), &s));
  names.reserve(s.num_entries);
  entries.reserve(s.num_entries);
  for (uint32_t i = 0; i < s.num_entries; ++i) {
    loadplan_entry_info_t e;
    loadplan_python::check(loadplan_plan_entry(plan->get(), i, &e));
    names.emplace_back(e.name, e.name_size);
    entries.push_back({static_cast<uint8_t>(e.kind), e.dtype, ints(e.shape, e.rank)});
  }
  for (uint32_t i = 0; i < s.num_entries; ++i)
    byName.emplace(names[i], i);
  seen.assign(s.num_entries, 0);
  entriesBuilt = true;
}

void loadplan_python::defineUpdateCheck(nb::module_ &m) {
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
}
