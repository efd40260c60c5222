//===- Plan.cpp - The Plan class of loadplan._native -----------*- C++ -*-===//
//
// Plan's Python methods: open and check plan bytes or a file, read back its
// summary, targets and entries as the JSON plan spells them, and its report
// and JSON, which the runtime prints from the plan it read as the compiler
// printed them.
//
//===----------------------------------------------------------------------===//

#include "Plan.h"
#include "Errors.h"
#include "Runtime.h"

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

/// Box `box` of entry `entry`: ((start, stop), ...).
nb::tuple boxOf(const Plan &p, uint32_t entry, uint32_t box) {
  loadplan_box_info_t b;
  check(loadplan_plan_box(p.get(), entry, box, &b));
  nb::list dims;
  for (uint32_t k = 0; k < b.rank; ++k)
    dims.append(nb::make_tuple(b.starts[k], b.stops[k]));
  return nb::tuple(dims);
}

/// The text a runtime call (`call(&text, &size)`) gives, as a str; the
/// call runs without the GIL.
template <typename Call> nb::str textOf(Call &&call) {
  char *text = nullptr;
  size_t size = 0;
  loadplan_status_t status;
  {
    nb::gil_scoped_release release;
    status = call(&text, &size);
  }
  check(status);
  nb::str out(text, size);
  loadplan_text_free(text);
  return out;
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
    check(loadplan_plan_summary(p.get(), &s));
    nb::dict out;
    out["fingerprint"] = s.fingerprint;
    out["storages"] = s.num_storages;
    out["targets"] = s.num_targets;
    out["names"] = s.num_entries;
    out[loadplan_kind_name(LOADPLAN_KIND_DIRECT)] = s.num_direct;
    out[loadplan_kind_name(LOADPLAN_KIND_FALLBACK)] = s.num_fallback;
    out[loadplan_kind_name(LOADPLAN_KIND_UNNEEDED)] = s.num_unneeded;
    out["writes"] = s.num_writes;
    out["direct_bytes"] = s.direct_bytes;
    out["fallback_bytes"] = s.fallback_bytes;
    return out;
  }

  static uint64_t storageSize(const Plan &p, uint32_t index) {
    uint64_t size = 0;
    check(loadplan_plan_storage(p.get(), index, &size));
    return size;
  }

  static nb::dict target(const Plan &p, uint32_t index) {
    loadplan_target_info_t t;
    check(loadplan_plan_target(p.get(), index, &t));
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
    check(loadplan_plan_entry(p.get(), index, &e));
    nb::dict out;
    out["name"] = std::string(e.name, e.name_size);
    out["kind"] = loadplan_kind_name(e.kind);
    out["dtype"] = e.dtype;
    out["shape"] = ints(e.shape, e.rank);
    out["reason"] =
        e.reason ? nb::cast(std::string(e.reason, e.reason_size)) : nb::none();
    nb::list boxes;
    for (uint32_t b = 0; b < e.num_boxes; ++b)
      boxes.append(boxOf(p, index, b));
    out["boxes"] = boxes;
    nb::list writes;
    for (uint32_t w = 0; w < e.num_writes; ++w) {
      loadplan_write_info_t wi;
      check(loadplan_plan_write(p.get(), index, w, &wi));
      nb::dict region;
      region["offset"] = wi.offset;
      region["shape"] = ints(wi.shape, wi.rank);
      region["stride"] = ints(wi.stride, wi.rank);
      nb::dict write;
      write["target"] = wi.target;
      write["box"] = boxes[wi.box];
      write["region"] = region;
      if (wi.dtype != e.dtype)
        write["convert_to"] = wi.dtype;
      if (wi.transform)
        write["transform"] = std::string(loadplan_transform_name(wi.transform));
      writes.append(write);
    }
    out["writes"] = writes;
    return out;
  }

  static uint32_t findEntry(const Plan &p, const std::string &name) {
    uint32_t index = 0;
    check(loadplan_plan_find_entry(p.get(), name.data(), name.size(), &index));
    return index;
  }

  /// Every checkpoint name, in plan order.
  static nb::list names(const Plan &p) {
    loadplan_plan_summary_t s;
    check(loadplan_plan_summary(p.get(), &s));
    nb::list out;
    for (uint32_t i = 0; i < s.num_entries; ++i) {
      loadplan_entry_info_t e;
      check(loadplan_plan_entry(p.get(), i, &e));
      out.append(nb::str(e.name, e.name_size));
    }
    return out;
  }

  /// The format library's report of this plan (the compiler's), its last
  /// line ending with `how`.
  static nb::str report(const Plan &p, const std::string &how) {
    const loadplan_plan_t *plan = p.get();
    return textOf([&](char **text, size_t *size) {
      return loadplan_plan_report(plan, how.data(), how.size(), text, size);
    });
  }

  /// The format library's JSON of this plan (the compiler's).
  static nb::str json(const Plan &p) {
    const loadplan_plan_t *plan = p.get();
    return textOf([&](char **text, size_t *size) {
      return loadplan_plan_json(plan, text, size);
    });
  }

  /// The targets some write goes to, in plan order.
  static std::vector<uint32_t> writtenTargets(const Plan &p) {
    loadplan_plan_summary_t s;
    check(loadplan_plan_summary(p.get(), &s));
    std::vector<bool> written(s.num_targets);
    for (uint32_t i = 0; i < s.num_entries; ++i) {
      loadplan_entry_info_t e;
      check(loadplan_plan_entry(p.get(), i, &e));
      for (uint32_t w = 0; w < e.num_writes; ++w) {
        loadplan_write_info_t wi;
        check(loadplan_plan_write(p.get(), i, w, &wi));
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

} // namespace

void loadplan_python::definePlan(nb::module_ &m) {
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
            check(loadplan_plan_check_layout(p.get(), l.data(), l.size()));
          },
          nb::arg("layouts"),
          "Raises FingerprintMismatch, naming the first target and field "
          "that differ, unless `layouts` (data, byte_offset, storage_size, "
          "dtype, shape, stride per target) is the plan's layout.");
}
