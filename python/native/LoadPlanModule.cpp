//===- LoadPlanModule.cpp - loadplan._native --------------------*- C++ -*-===//
//
// The Python module that compiles captured IR in process (no subprocess, no
// temporary files) and applies plans through the runtime, linked in
// statically (Runtime.cpp). Compile errors become
// loadplan._native.CompileError (a RuntimeError) carrying every error
// diagnostic.
//
//===----------------------------------------------------------------------===//

#include "Compile.h"
#include "Runtime.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace nb = nanobind;

NB_MODULE(_native, m) {
  m.doc() = "The loadplan compiler and runtime, in process";

  static nb::object compileError =
      nb::borrow(PyErr_NewExceptionWithDoc(
          "loadplan._native.CompileError",
          "The captured IR does not compile; args[0] is the message, "
          "`diagnostics` the error diagnostics one by one.",
          PyExc_RuntimeError, nullptr));
  m.attr("CompileError") = compileError;

  m.def(
      "compile",
      [](const std::string &ir, const std::string &sourceName, bool printIR,
         bool printJson) {
        loadplan_python::CompileResult r;
        {
          nb::gil_scoped_release release;
          r = loadplan_python::compile(ir, sourceName, printIR, printJson);
        }
        if (!r.ok) {
          std::string message;
          for (const std::string &e : r.errors)
            message += (message.empty() ? "" : "\n") + e;
          nb::object exc = compileError(message);
          exc.attr("diagnostics") = nb::cast(r.errors);
          exc.attr("remarks") = nb::cast(r.remarks);
          PyErr_SetObject(compileError.ptr(), exc.ptr());
          throw nb::python_error();
        }
        nb::dict out;
        out["json"] = r.json;
        out["plan"] = nb::bytes(r.plan.data(), r.plan.size());
        out["report"] = r.report;
        out["ir"] = r.compiledIR;
        out["remarks"] = nb::cast(r.remarks);
        return out;
      },
      nb::arg("ir"), nb::arg("source_name") = "<captured>",
      nb::arg("print_ir") = true, nb::arg("print_json") = true,
      "Compiles captured loadplan IR; returns a dict with 'json' (the plan "
      "as JSON, '' unless print_json), 'plan' (the binary plan file), "
      "'report', 'ir' (the compiled module, '' unless print_ir) and "
      "'remarks'. Raises CompileError with the diagnostics.");

  m.attr("HAS_COMPILER") = loadplan_python::compilerMissing() == nullptr;

  loadplan_python::defineRuntime(m);
  loadplan_python::defineTransfer(m);
}
