//===- Runtime.h - The runtime's C API in loadplan._native ------*- C++ -*-===//
//
// Plan, Binding and their errors, defined on the module by defineRuntime.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_PYTHON_RUNTIME_H
#define LOADPLAN_PYTHON_RUNTIME_H

#include <nanobind/nanobind.h>

namespace loadplan_python {

/// Adds the runtime's classes, errors and helpers to `m`.
void defineRuntime(nanobind::module_ &m);

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_RUNTIME_H
