//===- AtenViewBinding.cpp - The aten view table in Python -----*- C++ -*-===//
//
// What the capture (python/loadplan/capture/trace.py) asks of the aten view
// table (loadplan/Records/AtenViews.h) for each view or element copy a
// loader makes of a trace: ATEN_VIEWS, the table's packets by index, and
// lower_view, one call per op, which reads the call's arguments and the meta
// tensors torch computed and gives the record ops. The rules are the
// table's; nothing here decides what an op becomes.
//
//===----------------------------------------------------------------------===//

#include "AtenViewBinding.h"

#include "TorchTensor.h"

#include "loadplan/Records/AtenViews.h"

#include <nanobind/nanobind.h>

#include <iterator>
#include <string>

namespace nb = nanobind;
using namespace mlir::loadplan;

namespace {

/// A Python call's arguments, `args` (`self` first) and `kwargs`, as aten
/// ops take them: ints, lists of them, None.
class CallArgs final : public ViewArgs {
public:
  CallArgs(const AtenView &view, PyObject *args, PyObject *kwargs)
      : view(view), args(args), kwargs(kwargs) {}

  std::optional<int64_t> getInt(const AtenArg &arg) const override {
    PyObject *value = find(arg);
    if (!value || value == Py_None)
      return std::nullopt;
    return toInt(value, arg);
  }

  std::optional<std::vector<int64_t>>
  getInts(const AtenArg &arg) const override {
    PyObject *value = find(arg);
    if (!value || value == Py_None)
      return std::nullopt;
    if (PyLong_Check(value))
      return std::vector<int64_t>{toInt(value, arg)};
    if (!PyTuple_Check(value) && !PyList_Check(value))
      throw nb::type_error(message(arg, "is not an int list").c_str());
    Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
    std::vector<int64_t> out(n);
    for (Py_ssize_t k = 0; k < n; ++k)
      out[k] = toInt(PySequence_Fast_GET_ITEM(value, k), arg);
    return out;
  }

private:
  /// The argument by position, else by name; null when left out.
  PyObject *find(const AtenArg &arg) const {
    if (arg.position < PyTuple_GET_SIZE(args))
      return PyTuple_GET_ITEM(args, arg.position);
    if (!PyDict_Check(kwargs) || PyDict_GET_SIZE(kwargs) == 0)
      return nullptr;
    nb::object key = nb::steal(
        PyUnicode_FromStringAndSize(arg.name.data(), arg.name.size()));
    PyObject *value = PyDict_GetItemWithError(kwargs, key.ptr());
    if (!value && PyErr_Occurred())
      throw nb::python_error();
    return value;
  }

  int64_t toInt(PyObject *value, const AtenArg &arg) const {
    int overflow = 0;
    long long v = PyLong_Check(value)
                      ? PyLong_AsLongLongAndOverflow(value, &overflow)
                      : -1;
    if (!PyLong_Check(value) || overflow || (v == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      throw nb::type_error(message(arg, "is not a 64-bit int").c_str());
    }
    return v;
  }

  std::string message(const AtenArg &arg, const char *what) const {
    return "load plan: " + std::string(view.packet) + "'s " +
           std::string(arg.name) + " " + what;
  }

  const AtenView &view;
  PyObject *args, *kwargs;
};

/// The tensor `t` as the lowering reads it; false for one that is no
/// tensor of a layout torch can say.
bool readTensor(PyObject *t, bool layout, ViewTensor &out) {
  return loadplan_python::tensorShape(t, layout, out.sizes, out.strides,
                                      out.offset, out.dtype);
}

/// lower_view: the record ops of one call, `(code, ints...)` per output, or
/// None for a call the records do not hold (which the capture records as
/// any other op).
nb::object lowerView(size_t index, nb::handle src, nb::handle out,
                     nb::handle args, nb::handle kwargs) {
  if (index >= std::size(kAtenViews))
    throw nb::index_error("load plan: no such aten view");
  if (!PyTuple_Check(args.ptr()))
    throw nb::type_error("load plan: lower_view's args are not a tuple");
  const AtenView &view = kAtenViews[index];
  bool layouts = readsLayouts(view.rule);
  // Reused: one call per view op of a capture, 50,000 names' worth.
  static ViewTensor input;
  static std::vector<ViewTensor> outs;
  static std::vector<ViewRecord> records;
  static std::string error;
  if (!readTensor(src.ptr(), false, input))
    throw nb::type_error("load plan: lower_view's input is not a tensor");
  PyObject *o = out.ptr();
  bool many = PyTuple_Check(o) || PyList_Check(o);
  size_t n = many ? PySequence_Fast_GET_SIZE(o) : 1;
  outs.resize(n);
  for (size_t k = 0; k < n; ++k)
    if (!readTensor(many ? PySequence_Fast_GET_ITEM(o, k) : o, layouts,
                    outs[k]))
      return nb::none();
  if (!lowerAtenView(view, input, outs,
                     CallArgs(view, args.ptr(), kwargs.ptr()), records, error))
    throw nb::value_error(("load plan: " + error).c_str());
  if (records.empty())
    return nb::none();
  nb::object list = nb::steal(PyList_New(records.size()));
  for (size_t k = 0; k < records.size(); ++k) {
    const ViewRecord &r = records[k];
    PyObject *tuple = PyTuple_New(1 + r.ints.size());
    if (!tuple)
      throw nb::python_error();
    PyTuple_SET_ITEM(tuple, 0, PyLong_FromLong(static_cast<long>(r.op)));
    for (size_t i = 0; i < r.ints.size(); ++i)
      PyTuple_SET_ITEM(tuple, 1 + i, PyLong_FromLongLong(r.ints[i]));
    PyList_SET_ITEM(list.ptr(), k, tuple);
  }
  return list;
}

} // namespace

void loadplan_python::defineAtenViews(nb::module_ &m) {
  nb::object packets = nb::steal(PyTuple_New(std::size(kAtenViews)));
  for (size_t i = 0; i < std::size(kAtenViews); ++i)
    PyTuple_SET_ITEM(packets.ptr(), i,
                     PyUnicode_FromStringAndSize(kAtenViews[i].packet.data(),
                                                 kAtenViews[i].packet.size()));
  m.attr("ATEN_VIEWS") = packets;
  m.def("lower_view", &lowerView, nb::arg("index"), nb::arg("src"),
        nb::arg("out"), nb::arg("args"), nb::arg("kwargs"),
        "The record ops of a call of ATEN_VIEWS[index] on meta tensor `src` "
        "that gave `out` (a meta tensor, or a list or tuple of them), with "
        "the call's `args` (a tuple, `self` first) and `kwargs`: a list of "
        "(record code, ints...) per output, or None for a call the records "
        "do not hold as such (a view into another dtype, a copy into a "
        "dtype the plan lacks, an output that is no tensor). ValueError for "
        "a call that cannot be lowered.");
}
