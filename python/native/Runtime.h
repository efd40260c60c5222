//===- Runtime.h - The runtime's C API in loadplan._native ------*- C++ -*-===//
//
// Plan, Binding and their errors, defined on the module by defineRuntime;
// the transfers' classes, by defineTransfer. What both share is here: the
// status check, the plan handle, target layouts as Python passes them.
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

/// Raises the Python error of a non-NULL status, and frees it: StatusError
/// or, by its code, InvalidPlan, FingerprintMismatch or InvalidUpdate. With
/// `transfer`, always TransferError (a StatusError too).
void check(loadplan_status_t status, bool transfer = false);

/// The torch objects the fast update paths compare with (set once, by
/// loadplan._runtime at import): the tensor type, torch.strided, and each
/// torch.dtype's plan code. torch's dtypes and layouts are singletons.
struct TorchTypes {
  nanobind::object tensorType, strided;
  std::unordered_map<PyObject *, uint32_t> dtypeCodes;
};
TorchTypes &torchTypes();

/// An attribute name, interned once.
PyObject *attrName(const char *name);

/// A reference-counted runtime plan.
class Plan {
public:
  explicit Plan(loadplan_plan_t *plan) : plan(plan) {}
  Plan(const Plan &) = delete;
  Plan &operator=(const Plan &) = delete;
  ~Plan() { loadplan_plan_release(plan); }

  loadplan_plan_t *plan;
};

/// A target layout as Python gives it: (data, byte_offset, storage_size,
/// dtype, shape, stride).
using LayoutTuple = std::tuple<uintptr_t, uint64_t, uint64_t, uint32_t,
                               std::vector<int64_t>, std::vector<int64_t>>;

/// The C layouts of `in`; they point into `in`'s vectors.
std::vector<loadplan_target_layout_t>
toLayouts(const std::vector<LayoutTuple> &in);

/// Adds the runtime's classes, errors and helpers to `m`.
void defineRuntime(nanobind::module_ &m);
/// Adds the transfers' classes (communicators, schedules, engines) to `m`.
void defineTransfer(nanobind::module_ &m);

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_RUNTIME_H
