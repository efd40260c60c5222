//===- TorchTensor.cpp - Reading torch tensors without torch ---*- C++ -*-===//

#include "TorchTensor.h"

#include "Runtime.h"

#include "loadplan/runtime.h"

namespace nb = nanobind;
using namespace loadplan_python;

namespace {

nb::object attr(PyObject *o, PyObject *name) { return nb::steal(PyObject_GetAttr(o, name)); }

/// torch.Tensor's method `name`, looked up once.
nb::object tensorMethod(PyObject *name) {
  return nb::steal(PyObject_GetAttr(torchTypes().tensorType.ptr(), name));
}

/// `method(self)`, without looking the method up on `self`.
nb::object callOn(const nb::object &method, PyObject *self) {
  PyObject *args[] = {self};
  return nb::steal(PyObject_Vectorcall(method.ptr(), args, 1, nullptr));
}

bool fail() {
  PyErr_Clear();
  return false;
}

} // namespace

bool loadplan_python::tensorMatches(PyObject *t, uint32_t dtype, const int64_t *shape,
                                    size_t rank, bool notMeta) {
  static PyObject *sDtype = attrName("dtype"), *sShape = attrName("shape"),
                  *sLayout = attrName("layout"), *sIsMeta = attrName("is_meta");
  const TorchTypes &torch = torchTypes();
  if (!torch.tensorType.is_valid() ||
      !PyObject_TypeCheck(t, reinterpret_cast<PyTypeObject *>(torch.tensorType.ptr())))
    return false;
  nb::object d = attr(t, sDtype), s = attr(t, sShape), layout = attr(t, sLayout);
  if (!d.is_valid() || !s.is_valid() || !layout.is_valid())
    return fail();
  auto code = torch.dtypeCodes.find(d.ptr());
  if (code == torch.dtypeCodes.end() || code->second != dtype ||
      layout.ptr() != torch.strided.ptr() || !PyTuple_Check(s.ptr()) ||
      PyTuple_GET_SIZE(s.ptr()) != static_cast<Py_ssize_t>(rank))
    return false;
  for (size_t k = 0; k < rank; ++k)
    if (PyLong_AsLongLong(PyTuple_GET_ITEM(s.ptr(), k)) != shape[k])
      return fail();
  if (notMeta) {
    nb::object meta = attr(t, sIsMeta);
    if (!meta.is_valid() || meta.ptr() != Py_False)
      return fail();
  }
  return true;
}

const void *loadplan_python::tensorData(PyObject *t, uint32_t deviceType, int32_t deviceIndex,
                                        std::vector<nb::object> &keep) {
  static PyObject *sIsCpu = attrName("is_cpu"), *sIsCuda = attrName("is_cuda");
  static nb::object getDevice = tensorMethod(attrName("get_device")),
                    isContiguous = tensorMethod(attrName("is_contiguous")),
                    contiguousOf = tensorMethod(attrName("contiguous")),
                    dataPtr = tensorMethod(attrName("data_ptr"));
  bool cpu = deviceType == LOADPLAN_DEVICE_CPU;
  nb::object here = attr(t, cpu ? sIsCpu : sIsCuda);
  if (!here.is_valid() || here.ptr() != Py_True)
    return fail(), nullptr; // torch moves it first (the Python path)
  if (!cpu) {
    nb::object device = callOn(getDevice, t);
    if (!device.is_valid() || PyLong_AsLong(device.ptr()) != deviceIndex)
      return fail(), nullptr;
  }
  nb::object source = nb::borrow(t), contiguous = callOn(isContiguous, t);
  if (!contiguous.is_valid())
    return fail(), nullptr;
  if (contiguous.ptr() != Py_True) {
    source = callOn(contiguousOf, t);
    if (!source.is_valid())
      return fail(), nullptr;
    keep.push_back(source);
  }
  nb::object data = callOn(dataPtr, source.ptr());
  if (!data.is_valid())
    return fail(), nullptr;
  return reinterpret_cast<const void *>(PyLong_AsUnsignedLongLong(data.ptr()));
}
