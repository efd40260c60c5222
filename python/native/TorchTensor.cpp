//===- TorchTensor.cpp - Reading torch tensors without torch ---*- C++ -*-===//

#include "TorchTensor.h"

#include "Runtime.h"

#include "loadplan/runtime.h"

namespace nb = nanobind;
using namespace loadplan_python;

namespace {

/// The tensor properties the fast paths read. torch defines them as getset
/// descriptors of its tensor base type; for a type whose lookup finds those
/// very descriptors (torch.Tensor, Parameter, a subclass that does not
/// redefine them), calling the getter directly skips the generic attribute
/// lookup, which costs about as much as the getter at tens of thousands of
/// tensors per update.
enum Property { kDtype, kShape, kLayout, kIsMeta, kIsCpu, kIsCuda, kNumProperties };
constexpr const char *kPropertyNames[kNumProperties] = {"dtype",   "shape",  "layout",
                                                        "is_meta", "is_cpu", "is_cuda"};

struct Getters {
  PyObject *names[kNumProperties] = {};
  /// The descriptors torch.Tensor's lookup finds, and their getters.
  PyObject *descriptors[kNumProperties] = {};
  PyGetSetDef *defs[kNumProperties] = {};
  /// The last type checked (a reference), and whether its lookup finds them
  /// all.
  PyTypeObject *lastType = nullptr;
  bool lastTypeDirect = false;

  Getters() {
    for (int k = 0; k < kNumProperties; ++k)
      names[k] = attrName(kPropertyNames[k]);
  }

  /// Resolves the descriptors once torch's types are known.
  void resolve(PyTypeObject *tensorType) {
    if (descriptors[0])
      return;
    for (int k = 0; k < kNumProperties; ++k) {
      PyObject *d = _PyType_Lookup(tensorType, names[k]); // borrowed
      if (!d || Py_TYPE(d) != &PyGetSetDescr_Type) {
        std::fill(std::begin(defs), std::end(defs), nullptr);
        descriptors[0] = Py_None; // resolved: no direct getters
        return;
      }
      Py_INCREF(d); // held for the process, as the type holds it
      descriptors[k] = d;
      defs[k] = reinterpret_cast<PyGetSetDescrObject *>(d)->d_getset;
    }
  }

  bool direct(PyTypeObject *type) {
    if (type == lastType)
      return lastTypeDirect;
    bool ok = defs[0] != nullptr;
    for (int k = 0; ok && k < kNumProperties; ++k)
      ok = _PyType_Lookup(type, names[k]) == descriptors[k];
    // Held, so that no other type can take its address while it is cached.
    Py_INCREF(type);
    Py_XDECREF(lastType);
    lastType = type;
    lastTypeDirect = ok;
    return ok;
  }
};

Getters &getters() {
  static Getters g;
  return g;
}

/// Property `k` of tensor `t` (a new reference, or invalid with an error set).
nb::object property(PyObject *t, Property k) {
  Getters &g = getters();
  if (g.direct(Py_TYPE(t))) {
    PyGetSetDef *def = g.defs[k];
    return nb::steal(def->get(t, def->closure));
  }
  return nb::steal(PyObject_GetAttr(t, g.names[k]));
}

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
                                    size_t rank, bool forLoader) {
  const TorchTypes &torch = torchTypes();
  if (!torch.tensorType.is_valid())
    return false;
  auto *tensorType = reinterpret_cast<PyTypeObject *>(torch.tensorType.ptr());
  if (!PyObject_TypeCheck(t, tensorType))
    return false;
  getters().resolve(tensorType);
  nb::object d = property(t, kDtype), s = property(t, kShape);
  if (!d.is_valid() || !s.is_valid())
    return fail();
  auto code = torch.dtypeCodes.find(d.ptr());
  if (code == torch.dtypeCodes.end() || code->second != dtype || !PyTuple_Check(s.ptr()) ||
      PyTuple_GET_SIZE(s.ptr()) != static_cast<Py_ssize_t>(rank))
    return false;
  for (size_t k = 0; k < rank; ++k)
    if (PyLong_AsLongLong(PyTuple_GET_ITEM(s.ptr(), k)) != shape[k])
      return fail();
  if (forLoader) {
    nb::object layout = property(t, kLayout), meta = property(t, kIsMeta);
    if (!layout.is_valid() || layout.ptr() != torch.strided.ptr() || !meta.is_valid() ||
        meta.ptr() != Py_False)
      return fail();
  }
  return true;
}

const void *loadplan_python::tensorData(PyObject *t, uint32_t deviceType, int32_t deviceIndex,
                                        std::vector<nb::object> &keep) {
  static nb::object getDevice = tensorMethod(attrName("get_device")),
                    isContiguous = tensorMethod(attrName("is_contiguous")),
                    contiguousOf = tensorMethod(attrName("contiguous")),
                    dataPtr = tensorMethod(attrName("data_ptr"));
  bool cpu = deviceType == LOADPLAN_DEVICE_CPU;
  nb::object here = property(t, cpu ? kIsCpu : kIsCuda);
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
