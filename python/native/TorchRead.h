//===- TorchRead.h - What loadplan._torch_read exports ----------*- C++ -*-===//
//
// loadplan._torch_read reads a tensor's dtype, shape, device, contiguity and
// data pointer through torch's C++ API, in tens of nanoseconds where the
// Python properties take about a microsecond together: at tens of thousands
// of tensors per update that is the update's largest fixed cost. It is
// built against the torch the build finds, and it is optional: without it
// (or for a tensor it cannot read) the module reads the Python properties
// (TorchTensor.cpp). It hands _native this table in a capsule named
// kTorchReadCapsule; plain C types, so that the two modules share no C++.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_PYTHON_TORCHREAD_H
#define LOADPLAN_PYTHON_TORCHREAD_H

#include <Python.h>

#include <cstdint>

namespace loadplan_python {

inline constexpr const char *kTorchReadCapsule = "loadplan._torch_read.API";
inline constexpr uint32_t kTorchReadVersion = 1;

/// What a read finds. The sizes point into the tensor, valid while it lives
/// unchanged.
struct TensorFacts {
  const int64_t *sizes;
  uint32_t rank;
  /// torch's ScalarType code (the module learns each dtype's by reading an
  /// empty tensor of it).
  int32_t scalarType;
  /// loadplan_device_type_t for a CPU or CUDA tensor, else kOtherDevice.
  uint32_t deviceType;
  int32_t deviceIndex;
  bool contiguous;
  /// Strided, with storage whose data may be read.
  bool strided;
  bool meta;
  /// The first element's address; nullptr for an empty tensor.
  const void *data;
};

inline constexpr uint32_t kOtherDevice = 0xFFFFFFFFu;

struct TorchReadApi {
  uint32_t version;
  /// Reads tensor `t`, an instance of torch.Tensor: 1 when read, 0 when
  /// this tensor is not for a C++ read (no storage to read, symbolic or
  /// custom sizes, a Python-dispatched wrapper), with no Python error set.
  int (*read)(PyObject *t, TensorFacts *out);
};

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_TORCHREAD_H
