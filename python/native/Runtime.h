//===- Runtime.h - The runtime's C API in loadplan._native ------*- C++ -*-===//
//
// Plan, Binding and their errors, defined on the module by defineRuntime;
// the transfers' classes, by defineTransfer. What both share is here
// (target layouts as Python passes them, the torch objects the update
// checks compare with), with the status check in Errors.h and the plan
// handle in Plan.h.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_PYTHON_RUNTIME_H
#define LOADPLAN_PYTHON_RUNTIME_H

#include "loadplan/runtime.h"

#include <nanobind/nanobind.h>

#include <cstdint>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace loadplan_python {

struct TorchReadApi;

/// The torch objects the fast update paths compare with (set once, by
/// loadplan._runtime at import): the tensor type, torch.strided, and each
/// torch.dtype's plan code. torch's dtypes and layouts are singletons.
struct TorchTypes {
  nanobind::object tensorType, strided;
  std::unordered_map<PyObject *, uint32_t> dtypeCodes;
  /// loadplan._torch_read's table, when it is loaded (TorchRead.h), and
  /// the plan code of each torch ScalarType code it reads (0: none).
  const TorchReadApi *reader = nullptr;
  std::vector<uint32_t> scalarCodes;
};
TorchTypes &torchTypes();

/// An attribute name, interned once.
PyObject *attrName(const char *name);

/// A target layout as Python gives it: (data, byte_offset, storage_size,
/// dtype, shape, stride).
using LayoutTuple = std::tuple<uintptr_t, uint64_t, uint64_t, uint32_t,
                               std::vector<int64_t>, std::vector<int64_t>>;

/// The C layouts of `in`; they point into `in`'s vectors.
std::vector<loadplan_target_layout_t>
toLayouts(const std::vector<LayoutTuple> &in);

/// Adds the runtime's classes, errors and helpers to `m`, each class by its
/// file's function below.
void defineRuntime(nanobind::module_ &m);
/// StatusError and its subclasses, STATUS_CODES (Errors.cpp).
void defineErrors(nanobind::module_ &m);
/// Plan (Plan.cpp).
void definePlan(nanobind::module_ &m);
/// UpdateCheck (UpdateCheck.cpp).
void defineUpdateCheck(nanobind::module_ &m);
/// Binding (Binding.cpp).
void defineBinding(nanobind::module_ &m);
/// Adds the transfers' classes (communicators, schedules, engines) to `m`.
void defineTransfer(nanobind::module_ &m);

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_RUNTIME_H
