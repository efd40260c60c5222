//===- Errors.cpp - The runtime's errors in loadplan._native ---*- C++ -*-===//
//
// StatusError (a RuntimeError) and its subclasses InvalidPlan,
// InvalidUpdate, FingerprintMismatch and TransferError, with the runtime's
// status codes by name, and the one place a runtime status is turned into
// one of them.
//
//===----------------------------------------------------------------------===//

#include "Errors.h"
#include "Runtime.h"

#include <nanobind/stl/string.h>

#include <string>

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

} // namespace

void loadplan_python::refuseUpdate(const std::string &message) {
  nb::object exc = errors().invalidUpdate("load plan: " + message);
  exc.attr("code") = static_cast<int>(LOADPLAN_STATUS_INVALID_UPDATE);
  exc.attr("code_name") = loadplan_status_code_name(LOADPLAN_STATUS_INVALID_UPDATE);
  PyErr_SetObject(errors().invalidUpdate.ptr(), exc.ptr());
  throw nb::python_error();
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

void loadplan_python::defineErrors(nb::module_ &m) {
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
}
