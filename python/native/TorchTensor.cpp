//===- TorchTensor.cpp - Reading torch tensors without torch ---*- C++ -*-===//

#include "TorchTensor.h"

#include "Runtime.h"
#include "TorchRead.h"

#include "loadplan/runtime.h"

#include <algorithm>
#include <string>

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

/// Reads `t` through loadplan._torch_read when it is loaded and `t`'s type
/// finds torch.Tensor's properties (a subclass that redefines them says
/// what it is through them). False: read the properties instead.
bool readFacts(PyObject *t, TensorFacts &facts) {
  const TorchTypes &torch = torchTypes();
  return torch.reader &&
         PyObject_TypeCheck(t, reinterpret_cast<PyTypeObject *>(torch.tensorType.ptr())) &&
         getters().direct(Py_TYPE(t)) && torch.reader->read(t, &facts) == 1;
}

/// The plan code of a fact's ScalarType; 0 for none.
uint32_t planCode(const TensorFacts &facts) {
  const std::vector<uint32_t> &codes = torchTypes().scalarCodes;
  return facts.scalarType >= 0 && size_t(facts.scalarType) < codes.size()
             ? codes[size_t(facts.scalarType)]
             : 0;
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
  if (TensorFacts facts; readFacts(t, facts)) {
    // forLoader: strided (a read is) and not on the meta device.
    if (planCode(facts) != dtype || facts.rank != rank || (forLoader && facts.meta))
      return false;
    return std::equal(shape, shape + rank, facts.sizes);
  }
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
  if (TensorFacts facts; readFacts(t, facts) && facts.contiguous && facts.data &&
                          facts.deviceType == deviceType &&
                          (deviceType == LOADPLAN_DEVICE_CPU || facts.deviceIndex == deviceIndex))
    return facts.data;
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

/// The ints of tuple `tuple` (torch.Size, a stride) into `out`.
static bool tupleInts(PyObject *tuple, std::vector<int64_t> &out) {
  if (!PyTuple_Check(tuple))
    return false;
  Py_ssize_t n = PyTuple_GET_SIZE(tuple);
  out.resize(n);
  for (Py_ssize_t k = 0; k < n; ++k) {
    out[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, k));
    if (out[k] == -1 && PyErr_Occurred())
      return fail();
  }
  return true;
}

bool loadplan_python::tensorShape(PyObject *t, bool layout, std::vector<int64_t> &sizes,
                                  std::vector<int64_t> &strides, int64_t &offset,
                                  uint32_t &dtype) {
  static nb::object stride = tensorMethod(attrName("stride")),
                    storageOffset = tensorMethod(attrName("storage_offset"));
  const TorchTypes &torch = torchTypes();
  auto *tensorType = reinterpret_cast<PyTypeObject *>(torch.tensorType.ptr());
  if (!tensorType || !PyObject_TypeCheck(t, tensorType))
    return false;
  getters().resolve(tensorType);
  nb::object d = property(t, kDtype), s = property(t, kShape);
  if (!d.is_valid() || !s.is_valid() || !tupleInts(s.ptr(), sizes))
    return fail();
  auto code = torch.dtypeCodes.find(d.ptr());
  dtype = code == torch.dtypeCodes.end() ? 0 : code->second;
  if (!layout)
    return true;
  nb::object st = callOn(stride, t), off = callOn(storageOffset, t);
  if (!st.is_valid() || !off.is_valid() || !tupleInts(st.ptr(), strides))
    return fail();
  offset = PyLong_AsLongLong(off.ptr());
  return !(offset == -1 && PyErr_Occurred()) || fail();
}

/// `repr(o)`, or with `!repr` `str(o)`; a placeholder when that raises.
static std::string textOf(PyObject *o, bool repr) {
  nb::object r = nb::steal(repr ? PyObject_Repr(o) : PyObject_Str(o));
  const char *text = r.is_valid() ? PyUnicode_AsUTF8(r.ptr()) : nullptr;
  if (!text) {
    PyErr_Clear();
    return "<unprintable>";
  }
  return text;
}

std::string loadplan_python::reprOf(PyObject *o) { return textOf(o, true); }

static std::string strOf(PyObject *o) { return textOf(o, false); }

/// torch's name of plan dtype `code` ("torch.float32").
static std::string torchDtypeName(uint32_t code) {
  for (const auto &[dtype, c] : torchTypes().dtypeCodes)
    if (c == code)
      return strOf(dtype);
  return std::string("torch.") + loadplan_dtype_name(code);
}

/// A shape as Python prints a tuple: "()", "(3,)", "(2, 3)".
static std::string shapeText(const int64_t *shape, size_t rank) {
  std::string out = "(";
  for (size_t k = 0; k < rank; ++k)
    out += (k ? ", " : "") + std::to_string(shape[k]);
  return out + (rank == 1 ? ",)" : ")");
}

std::string loadplan_python::notDense(PyObject *t) {
  nb::object meta = property(t, kIsMeta), layout = property(t, kLayout);
  if (!meta.is_valid() || !layout.is_valid()) {
    PyErr_Clear();
    return "a tensor whose layout cannot be read";
  }
  if (meta.ptr() == Py_True)
    return "a meta tensor, which holds no data";
  if (layout.ptr() != torchTypes().strided.ptr())
    return "a " + strOf(layout.ptr()) + " tensor, not a dense (strided) one";
  return "";
}

std::string loadplan_python::tensorMismatch(PyObject *t, uint32_t dtype, const int64_t *shape,
                                            size_t rank, bool forLoader) {
  const TorchTypes &torch = torchTypes();
  if (!PyObject_TypeCheck(t, reinterpret_cast<PyTypeObject *>(torch.tensorType.ptr())))
    return "not a tensor: " + strOf(nb::handle(t).type().attr("__name__").ptr());
  nb::object d = property(t, kDtype), s = property(t, kShape);
  nb::object dims = s.is_valid() ? nb::steal(PySequence_Tuple(s.ptr())) : nb::object();
  if (!d.is_valid() || !dims.is_valid()) {
    PyErr_Clear();
    return "a tensor whose dtype and shape cannot be read";
  }
  auto code = torch.dtypeCodes.find(d.ptr());
  bool same = code != torch.dtypeCodes.end() && code->second == dtype &&
              PyTuple_GET_SIZE(dims.ptr()) == static_cast<Py_ssize_t>(rank);
  for (size_t k = 0; same && k < rank; ++k)
    same = PyLong_AsLongLong(PyTuple_GET_ITEM(dims.ptr(), k)) == shape[k];
  PyErr_Clear();
  if (!same)
    return strOf(d.ptr()) + " " + reprOf(dims.ptr()) + ", declared " + torchDtypeName(dtype) +
           " " + shapeText(shape, rank);
  return forLoader ? notDense(t) : "";
}

std::string loadplan_python::heldMismatch(PyObject *t, uint32_t dtype, const int64_t *shape,
                                          size_t rank, const std::string &device) {
  std::string held = torchDtypeName(dtype) + " " + shapeText(shape, rank) + " on " + device;
  if (!PyObject_TypeCheck(t, reinterpret_cast<PyTypeObject *>(torchTypes().tensorType.ptr())))
    return strOf(nb::handle(t).type().attr("__name__").ptr()) + "; this sender holds " + held;
  nb::object d = property(t, kDtype), s = property(t, kShape);
  nb::object dims = s.is_valid() ? nb::steal(PySequence_Tuple(s.ptr())) : nb::object();
  nb::object where = nb::steal(PyObject_GetAttr(t, attrName("device")));
  if (!d.is_valid() || !dims.is_valid() || !where.is_valid()) {
    PyErr_Clear();
    return "a tensor whose dtype, shape and device cannot be read; this sender holds " + held;
  }
  // Equal text is equal dtype, shape and device: each is printed as torch
  // prints it on both sides.
  std::string is = strOf(d.ptr()) + " " + reprOf(dims.ptr()) + " on " + strOf(where.ptr());
  if (is != held)
    return is + "; this sender holds " + held;
  std::string problem = notDense(t);
  return problem.empty() ? "a tensor whose bytes cannot be read" : problem;
}
