//===- LoadPlanModule.cpp - loadplan._native --------------------*- C++ -*-===//
//
// The Python module that compiles captured IR in process (no subprocess, no
// temporary files) and applies plans through the runtime, linked in
// statically (Runtime.cpp). Compile errors become
// loadplan._native.CompileError (a RuntimeError) carrying every error
// diagnostic.
//
//===----------------------------------------------------------------------===//

#include "AtenViewBinding.h"
#include "Compile.h"
#include "Runtime.h"

#include "loadplan/Records/RecordOps.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace nb = nanobind;

namespace {

/// The int at `item`, or a TypeError naming `what`.
int64_t recordInt(PyObject *item, const char *what) {
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
  if (overflow || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    throw nb::type_error(
        (std::string("loadplan._native.compile_records: ") + what +
         " holds something other than a 64-bit int")
            .c_str());
  }
  return v;
}

PyObject *recordSequence(PyObject *item, const char *what) {
  if (!PyTuple_Check(item) && !PyList_Check(item))
    throw nb::type_error(
        (std::string("loadplan._native.compile_records: ") + what +
         " is not a tuple or list")
            .c_str());
  return item;
}

/// Appends the records of `ops` (a sequence of int tuples) to `out`, each
/// as its length and its ints.
void readOps(PyObject *ops, std::vector<int64_t> &out) {
  Py_ssize_t nOps = PySequence_Fast_GET_SIZE(ops);
  for (Py_ssize_t k = 0; k < nOps; ++k) {
    PyObject *op = recordSequence(PySequence_Fast_GET_ITEM(ops, k), "an op");
    Py_ssize_t fields = PySequence_Fast_GET_SIZE(op);
    if (fields == 0)
      throw nb::type_error("loadplan._native.compile_records: an op is "
                           "empty");
    out.push_back(fields);
    for (Py_ssize_t f = 0; f < fields; ++f)
      out.push_back(recordInt(PySequence_Fast_GET_ITEM(op, f), "an op"));
  }
}

/// The UTF-8 bytes of the str `item`, which stays alive through the call.
std::string_view recordString(PyObject *item, const char *what) {
  if (!PyUnicode_Check(item))
    throw nb::type_error((std::string("loadplan._native.compile_records: ") +
                          what + " is not a str")
                             .c_str());
  Py_ssize_t size = 0;
  const char *bytes = PyUnicode_AsUTF8AndSize(item, &size);
  if (!bytes)
    throw nb::python_error();
  return std::string_view(bytes, size);
}

/// The Python side of compile_records' arguments, read into plain C++ (the
/// compile then runs without the GIL). Reads through CPython's own macros:
/// at 50,000 names this is a million ints. The names and strings stay the
/// strs' own bytes: the arguments hold them through the call.
mlir::loadplan::RecordedModule readRecords(nb::handle declarations,
                                           nb::handle types,
                                           nb::handle strings,
                                           nb::handle checkpoints) {
  mlir::loadplan::RecordedModule r;
  readOps(recordSequence(declarations.ptr(), "declarations"), r.declarations);
  PyObject *typeList = recordSequence(types.ptr(), "types");
  Py_ssize_t nTypes = PySequence_Fast_GET_SIZE(typeList);
  r.typeShapes.resize(nTypes);
  r.typeDtypes.resize(nTypes);
  for (Py_ssize_t i = 0; i < nTypes; ++i) {
    PyObject *t = recordSequence(PySequence_Fast_GET_ITEM(typeList, i), "a type");
    if (PySequence_Fast_GET_SIZE(t) != 2)
      throw nb::type_error("loadplan._native.compile_records: a type is not "
                           "(shape, dtype code)");
    PyObject *shape = recordSequence(PySequence_Fast_GET_ITEM(t, 0), "a shape");
    Py_ssize_t rank = PySequence_Fast_GET_SIZE(shape);
    r.typeShapes[i].reserve(rank);
    for (Py_ssize_t d = 0; d < rank; ++d)
      r.typeShapes[i].push_back(
          recordInt(PySequence_Fast_GET_ITEM(shape, d), "a shape"));
    int64_t dtype = recordInt(PySequence_Fast_GET_ITEM(t, 1), "a dtype code");
    if (dtype < 0 || dtype > UINT32_MAX)
      throw nb::value_error("loadplan._native.compile_records: a dtype code "
                            "out of range");
    r.typeDtypes[i] = static_cast<uint32_t>(dtype);
  }
  PyObject *stringList = recordSequence(strings.ptr(), "strings");
  Py_ssize_t nStrings = PySequence_Fast_GET_SIZE(stringList);
  r.strings.reserve(nStrings);
  for (Py_ssize_t i = 0; i < nStrings; ++i)
    r.strings.push_back(
        recordString(PySequence_Fast_GET_ITEM(stringList, i), "a string"));
  PyObject *list = recordSequence(checkpoints.ptr(), "checkpoints");
  Py_ssize_t n = PySequence_Fast_GET_SIZE(list);
  r.checkpoints.resize(n);
  // A view and a copy of rank 2 are about 24 ints: one allocation at the
  // size most captures need, not a doubling vector's twenty.
  r.ops.reserve(static_cast<size_t>(n) * 24);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *item = PySequence_Fast_GET_ITEM(list, i);
    if ((!PyTuple_Check(item) && !PyList_Check(item)) ||
        PySequence_Fast_GET_SIZE(item) != 3 ||
        !PyUnicode_Check(PySequence_Fast_GET_ITEM(item, 0)))
      throw nb::type_error("loadplan._native.compile_records: a checkpoint "
                           "is not (name, type, ops)");
    auto &ck = r.checkpoints[i];
    ck.name = recordString(PySequence_Fast_GET_ITEM(item, 0), "a name");
    ck.type = recordInt(PySequence_Fast_GET_ITEM(item, 1), "a checkpoint type");
    if (ck.type < 0)
      throw nb::value_error("loadplan._native.compile_records: a checkpoint "
                            "type out of range");
    ck.begin = r.ops.size();
    readOps(recordSequence(PySequence_Fast_GET_ITEM(item, 2), "ops"), r.ops);
    ck.end = r.ops.size();
  }
  return r;
}

} // namespace

NB_MODULE(_native, m) {
  m.doc() = "The loadplan compiler and runtime, in process";

  static nb::object compileError =
      nb::borrow(PyErr_NewExceptionWithDoc(
          "loadplan._native.CompileError",
          "The captured IR does not compile; args[0] is the message, "
          "`diagnostics` the error diagnostics one by one.",
          PyExc_RuntimeError, nullptr));
  m.attr("CompileError") = compileError;

  // A result that is not ok, as CompileError with its diagnostics.
  auto raise = [](const loadplan_python::CompileResult &r) {
    std::string message;
    for (const std::string &e : r.errors)
      message += (message.empty() ? "" : "\n") + e;
    nb::object exc = compileError(message);
    exc.attr("diagnostics") = nb::cast(r.errors);
    exc.attr("remarks") = nb::cast(r.remarks);
    PyErr_SetObject(compileError.ptr(), exc.ptr());
    throw nb::python_error();
  };

  auto finish = [raise](loadplan_python::CompileResult &r) {
    if (!r.ok)
      raise(r);
    nb::dict out;
    out["json"] = r.json;
    out["plan"] = nb::bytes(r.plan.data(), r.plan.size());
    out["report"] = r.report;
    out["ir"] = r.compiledIR;
    out["remarks"] = nb::cast(r.remarks);
    return out;
  };

  m.def(
      "compile",
      [finish](const std::string &ir, const std::string &sourceName,
               bool printIR, bool printJson) {
        loadplan_python::CompileResult r;
        {
          nb::gil_scoped_release release;
          r = loadplan_python::compile(ir, sourceName, printIR, printJson);
        }
        return finish(r);
      },
      nb::arg("ir"), nb::arg("source_name") = "<captured>",
      nb::arg("print_ir") = true, nb::arg("print_json") = true,
      "Compiles captured loadplan IR; returns a dict with 'json' (the plan "
      "as JSON, '' unless print_json), 'plan' (the binary plan file), "
      "'report', 'ir' (the compiled module, '' unless print_ir) and "
      "'remarks'. Raises CompileError with the diagnostics.");

  m.def(
      "compile_records",
      [finish](nb::handle declarations, nb::handle types, nb::handle strings,
               nb::handle checkpoints, const std::string &sourceName,
               bool printIR, bool printJson) {
        mlir::loadplan::RecordedModule records =
            readRecords(declarations, types, strings, checkpoints);
        loadplan_python::CompileResult r;
        {
          nb::gil_scoped_release release;
          r = loadplan_python::compileRecords(records, sourceName, printIR,
                                              printJson);
        }
        return finish(r);
      },
      nb::arg("declarations"), nb::arg("types"), nb::arg("strings"),
      nb::arg("checkpoints"), nb::arg("source_name") = "<captured>",
      nb::arg("print_ir") = true, nb::arg("print_json") = true,
      "Compiles a capture given as records (int tuples whose code indexes "
      "RECORD_OPS, built into the module without text): `declarations` the "
      "storages' and targets', `types` a list of (shape, dtype code), "
      "`strings` a list of the strs records index, `checkpoints` one (name, "
      "type, ops) per name in arrival order. Returns what compile() "
      "returns.");

  m.def(
      "records_ir",
      [raise](nb::handle declarations, nb::handle types, nb::handle strings,
              nb::handle checkpoints, const std::string &sourceName) {
        mlir::loadplan::RecordedModule records =
            readRecords(declarations, types, strings, checkpoints);
        loadplan_python::CompileResult r;
        {
          nb::gil_scoped_release release;
          r = loadplan_python::printRecords(records, sourceName);
        }
        if (!r.ok)
          raise(r);
        return r.compiledIR;
      },
      nb::arg("declarations"), nb::arg("types"), nb::arg("strings"),
      nb::arg("checkpoints"), nb::arg("source_name") = "<captured>",
      "The IR text of what compile_records takes: the module its records "
      "build, as MLIR prints it (every checkpoint, no members). Raises "
      "CompileError for records that do not build.");

  {
    using mlir::loadplan::RecordOp;
    nb::tuple names = nb::steal<nb::tuple>(
        PyTuple_New(static_cast<Py_ssize_t>(RecordOp::count)));
    for (size_t i = 0; i < static_cast<size_t>(RecordOp::count); ++i)
      PyTuple_SET_ITEM(names.ptr(), i,
                       PyUnicode_FromString(mlir::loadplan::kRecordOpNames[i]));
    m.attr("RECORD_OPS") = names;
  }
  loadplan_python::defineAtenViews(m);

  m.attr("HAS_COMPILER") = loadplan_python::compilerMissing() == nullptr;

  loadplan_python::defineRuntime(m);
  loadplan_python::defineTransfer(m);
}
