//===- Handle.h - A runtime handle that a Python object owns ---*- C++ -*-===//
//
// Plans, bindings, communicators, schedules and transfer engines are C
// handles of the runtime; the module's class for each owns one reference
// through this template: dropped when the Python object goes or on close(),
// refused with a clear error once closed.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_PYTHON_HANDLE_H
#define LOADPLAN_PYTHON_HANDLE_H

#include <nanobind/nanobind.h>

#include <string>
#include <utility>

namespace loadplan_python {

/// Owns one reference to a `T` of the runtime, released by `Release`.
/// `What` names it in the error of a use after close() ("the binding is
/// closed"). Releasing may wait (CUDA work, a peer's goodbye), so it runs
/// without the GIL.
template <typename T, void (*Release)(T *), const char *What> class Handle {
public:
  explicit Handle(T *handle = nullptr) : handle(handle) {}
  Handle(const Handle &) = delete;
  Handle &operator=(const Handle &) = delete;
  ~Handle() { close(); }

  /// Drops the reference now; later uses raise ValueError.
  void close() {
    if (T *h = std::exchange(handle, nullptr)) {
      nanobind::gil_scoped_release release;
      Release(h);
    }
  }

  /// Owns `h` instead, releasing the one held before.
  void reset(T *h) {
    close();
    handle = h;
  }

  /// The handle; ValueError once closed.
  T *get() const {
    if (!handle)
      throw nanobind::value_error((std::string("the ") + What + " is closed").c_str());
    return handle;
  }

private:
  T *handle;
};

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_HANDLE_H
