//===- TorchTensor.h - Reading torch tensors without torch -----*- C++ -*-===//
//
// What the update fast paths need of a torch.Tensor, read through Python's
// C API from the attributes torch exposes (the module links no libtorch):
// whether it has a given dtype and shape and is dense, and a pointer to its
// bytes on a given device, made contiguous. Each answers "no" rather than
// raise: the caller then lets the Python path say what is wrong.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_PYTHON_TORCHTENSOR_H
#define LOADPLAN_PYTHON_TORCHTENSOR_H

#include <nanobind/nanobind.h>

#include <cstdint>
#include <vector>

namespace loadplan_python {

/// Whether `t` is a torch.Tensor of plan dtype `dtype` and shape `shape`
/// (`rank` values). With `forLoader` (a tensor that goes to load_weights,
/// whose bytes tensorData never reads), also strided and not on the meta
/// device. Without, those are left to tensorData, which asks torch for the
/// tensor's data pointer: torch has none for a tensor without strided
/// storage (sparse, mkldnn, meta), so tensorData says "no" for it. At
/// 50,000 tensors per update, the two reads cost a sixth of the checks.
bool tensorMatches(PyObject *t, uint32_t dtype, const int64_t *shape, size_t rank,
                   bool forLoader);

/// The first byte of `t`'s elements, contiguous, on device `deviceType`
/// (loadplan_device_type_t) and, for CUDA, `deviceIndex`; a contiguous copy
/// made here goes into `keep`. nullptr (and no Python error set) when `t`
/// is elsewhere or cannot be read.
const void *tensorData(PyObject *t, uint32_t deviceType, int32_t deviceIndex,
                       std::vector<nanobind::object> &keep);

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_TORCHTENSOR_H
