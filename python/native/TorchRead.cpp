//===- TorchRead.cpp - loadplan._torch_read ---------------------*- C++ -*-===//
//
// Tensor facts through torch's C++ API (TorchRead.h). Only inline parts of
// c10's TensorImpl are used, and libc10 (which `import torch` has loaded)
// for the few out-of-line ones (nothing of libtorch_python); a tensor whose read could throw in torch is
// refused rather than read.
//
//===----------------------------------------------------------------------===//

#include "TorchRead.h"

#include "loadplan/runtime.h"

#include <c10/core/TensorImpl.h>
#include <torch/csrc/autograd/python_variable.h>

using namespace loadplan_python;

namespace {

int read(PyObject *t, TensorFacts *out) {
  try {
    const c10::TensorImpl *impl =
        reinterpret_cast<THPVariable *>(t)->cdata.unsafeGetTensorImpl();
    // Wrapper subclasses (fake, functional, distributed tensors) keep their
    // own sizes and data: their Python properties say what they are.
    if (!impl || impl->is_python_dispatch() || impl->has_symbolic_sizes_strides() ||
        impl->is_nested())
      return 0;
    out->strided = impl->layout() == c10::kStrided && impl->has_storage();
    if (!out->strided)
      return 0;
    c10::IntArrayRef sizes = impl->sizes();
    out->sizes = sizes.data();
    out->rank = static_cast<uint32_t>(sizes.size());
    out->scalarType = static_cast<int32_t>(c10::typeMetaToScalarType(impl->dtype()));
    c10::Device device = impl->device();
    out->meta = device.is_meta();
    out->deviceType = device.is_cpu()    ? LOADPLAN_DEVICE_CPU
                      : device.is_cuda() ? LOADPLAN_DEVICE_CUDA
                                         : kOtherDevice;
    out->deviceIndex = device.index();
    out->contiguous = impl->is_contiguous();
    out->data = out->meta || out->deviceType == kOtherDevice ? nullptr : impl->data();
    return 1;
  } catch (...) {
    return 0;
  }
}

TorchReadApi api = {kTorchReadVersion, read};

PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_torch_read",
    "Tensor facts through torch's C++ API, for loadplan._native.", -1, nullptr,
    nullptr, nullptr, nullptr, nullptr};

} // namespace

PyMODINIT_FUNC PyInit__torch_read() {
  PyObject *m = PyModule_Create(&module);
  if (!m)
    return nullptr;
  PyObject *capsule = PyCapsule_New(&api, kTorchReadCapsule, nullptr);
  if (!capsule || PyModule_AddObject(m, "API", capsule) < 0) {
    Py_XDECREF(capsule);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
