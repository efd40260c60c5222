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
/// (`rank` values), strided; with `notMeta`, not on the meta device.
bool tensorMatches(PyObject *t, uint32_t dtype, const int64_t *shape, size_t rank,
                   bool notMeta);

/// The first byte of `t`'s elements, contiguous, on device `deviceType`
/// (loadplan_device_type_t) and, for CUDA, `deviceIndex`; a contiguous copy
/// made here goes into `keep`. nullptr (and no Python error set) when `t`
/// is elsewhere or cannot be read.
const void *tensorData(PyObject *t, uint32_t deviceType, int32_t deviceIndex,
                       std::vector<nanobind::object> &keep);

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_TORCHTENSOR_H
