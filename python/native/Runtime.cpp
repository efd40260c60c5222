//===- Runtime.cpp - The runtime's C API in loadplan._native ----*- C++ -*-===//
//
// Plans, bindings and applies of the runtime (runtime/include/loadplan/
// runtime.h), linked statically into the module: one extension, no library
// to find at run time. The binding takes plain integers (data pointers,
// dtype codes, shapes) so that it knows nothing of torch; loadplan._runtime
// reads them off torch tensors. A failed call raises StatusError (a
// RuntimeError) or one of its subclasses, with the runtime's code and
// message. Each class is defined in a file of its own (Errors.cpp,
// Plan.cpp, UpdateCheck.cpp, Binding.cpp); here are the helpers they share
// and the module's functions of the runtime.
//
//===----------------------------------------------------------------------===//

#include "Runtime.h"
#include "TorchRead.h"

#include "loadplan/runtime.h"

#include <cstdint>
#include <vector>

namespace nb = nanobind;
using namespace loadplan_python;

TorchTypes &loadplan_python::torchTypes() {
  static TorchTypes t;
  return t;
}

PyObject *loadplan_python::attrName(const char *name) {
  PyObject *s = PyUnicode_InternFromString(name);
  if (!s)
    throw nb::python_error();
  return s;
}

std::vector<loadplan_target_layout_t>
loadplan_python::toLayouts(const std::vector<LayoutTuple> &in) {
  std::vector<loadplan_target_layout_t> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const auto &[data, offset, size, dtype, shape, stride] = in[i];
    if (shape.size() != stride.size())
      throw nb::value_error("a layout's shape and stride differ in rank");
    out[i] = {
        reinterpret_cast<void *>(data),      offset,       size,         dtype,
        static_cast<uint32_t>(shape.size()), shape.data(), stride.data()};
  }
  return out;
}

void loadplan_python::defineRuntime(nb::module_ &m) {
  defineErrors(m);
  definePlan(m);
  defineUpdateCheck(m);
  defineBinding(m);

  m.def(
      "set_torch_types",
      [](nb::object tensorType, nb::object strided, nb::dict dtypeCodes, nb::object reader) {
        TorchTypes &t = torchTypes();
        t.tensorType = tensorType;
        t.strided = strided;
        t.dtypeCodes.clear();
        t.reader = nullptr;
        t.scalarCodes.clear();
        if (!reader.is_none()) {
          auto *api = static_cast<const TorchReadApi *>(
              PyCapsule_GetPointer(reader.ptr(), kTorchReadCapsule));
          if (!api)
            throw nb::python_error();
          if (api->version != kTorchReadVersion)
            throw nb::value_error("load plan: loadplan._torch_read is of another build");
          t.reader = api;
        }
        for (auto [dtype, code] : dtypeCodes) {
          Py_INCREF(dtype.ptr()); // held for the process, as torch holds it
          t.dtypeCodes[dtype.ptr()] = nb::cast<uint32_t>(code);
          int32_t scalar = -1;
          if (t.reader) {
            // The dtype's ScalarType, as a read of an empty tensor of it says.
            nb::object sample = nb::module_::import_("torch").attr("empty")(
                0, nb::arg("dtype") = dtype, nb::arg("device") = "meta");
            TensorFacts facts;
            if (t.reader->read(sample.ptr(), &facts) == 1)
              scalar = facts.scalarType;
          }
          if (scalar >= 0) {
            if (t.scalarCodes.size() <= size_t(scalar))
              t.scalarCodes.resize(size_t(scalar) + 1, 0);
            t.scalarCodes[size_t(scalar)] = nb::cast<uint32_t>(code);
          }
        }
      },
      nb::arg("tensor_type"), nb::arg("strided"), nb::arg("dtype_codes"),
      nb::arg("reader") = nb::none(),
      "The torch objects the update checks compare with; ``reader``: "
      "loadplan._torch_read.API, to read tensors through torch's C++ API.");

  m.def(
      "torch_read_loaded", []() { return torchTypes().reader != nullptr; },
      "Whether set_torch_types was given loadplan._torch_read's table.");
  m.def(
      "dtype_name", [](uint32_t code) { return loadplan_dtype_name(code); },
      nb::arg("code"), "torch's name of a plan dtype code ('invalid' if none)");
  m.def(
      "dtype_mlir_type",
      [](uint32_t code) { return loadplan_dtype_mlir_type(code); },
      nb::arg("code"),
      "The MLIR element type of a plan dtype code as IR text spells it "
      "('' if none)");
  m.attr("DTYPE_COUNT") = static_cast<int>(LOADPLAN_DTYPE_COUNT_);
  nb::list kinds;
  for (uint32_t kind = 0; kind < LOADPLAN_KIND_COUNT_; ++kind)
    kinds.append(loadplan_kind_name(kind));
  m.attr("KIND_NAMES") = nb::tuple(kinds);
  nb::dict transforms;
#define LOADPLAN_TRANSFORM_ENTRY_(e, code, name, dtype, rows, cols, words)     \
  transforms[name] = nb::make_tuple(code, static_cast<int>(dtype), rows, cols, \
                                    words);
  LOADPLAN_TRANSFORMS(LOADPLAN_TRANSFORM_ENTRY_)
#undef LOADPLAN_TRANSFORM_ENTRY_
  m.attr("TRANSFORMS") = transforms;
  m.def(
      "cuda_device_count",
      []() {
        int32_t count = 0;
        loadplan_status_t status = loadplan_cuda_device_count(&count);
        if (status) {
          // Built without CUDA: no devices for the runtime.
          loadplan_status_free(status);
          return -1;
        }
        return static_cast<int>(count);
      },
      "CUDA devices the runtime sees; -1 when built without CUDA.");
}
