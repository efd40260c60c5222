//===- TorchTensor.h - Reading torch tensors without torch -----*- C++ -*-===//
//
// What the update fast paths need of a torch.Tensor, read through Python's
// C API from the attributes torch exposes (the module links no libtorch):
// whether it has a given dtype and shape and is dense, and a pointer to its
// bytes on a given device, made contiguous. The fast checks answer "no"
// rather than raise; tensorMismatch and notDense then say why, for the
// caller's message.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_PYTHON_TORCHTENSOR_H
#define LOADPLAN_PYTHON_TORCHTENSOR_H

#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>
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

/// Why `t` is not what tensorMatches asks for, as the message after
/// "'name' is ": "not a tensor: list", "torch.float64 (2, 3), declared
/// torch.float32 (2, 3)", or what notDense says; "" when it is. Only for
/// a tensor the fast check refused: it reads what that check skips.
std::string tensorMismatch(PyObject *t, uint32_t dtype, const int64_t *shape, size_t rank,
                           bool forLoader);

/// Why the bytes of tensor `t` cannot be copied from ("a meta tensor, which
/// holds no data", "a torch.sparse_coo tensor, not a dense (strided) one"),
/// or "".
std::string notDense(PyObject *t);

/// Why `t` is not a sender's tensor of plan dtype `dtype` and shape
/// `shape` on `device` (torch's spelling: "cpu", "cuda:1"), as the message
/// after "'name' is ": "torch.float32 (2, 3) on cpu; this sender holds
/// torch.bfloat16 (2, 3) on cpu", "list; this sender holds ...", or what
/// notDense says. Only for a tensor the fast path refused.
std::string heldMismatch(PyObject *t, uint32_t dtype, const int64_t *shape, size_t rank,
                         const std::string &device);

/// The shape and plan dtype code (0 for a dtype the plan lacks) of tensor
/// `t` and, with `layout`, its strides and storage offset, in elements.
/// False, with no Python error set, for an object that is no tensor or
/// whose fields cannot be read.
bool tensorShape(PyObject *t, bool layout, std::vector<int64_t> &sizes,
                 std::vector<int64_t> &strides, int64_t &offset, uint32_t &dtype);

/// `repr(o)` (or a placeholder when that raises).
std::string reprOf(PyObject *o);

/// The first byte of `t`'s elements, contiguous, on device `deviceType`
/// (loadplan_device_type_t) and, for CUDA, `deviceIndex`; a contiguous copy
/// made here goes into `keep`. nullptr (and no Python error set) when `t`
/// is elsewhere or cannot be read.
const void *tensorData(PyObject *t, uint32_t deviceType, int32_t deviceIndex,
                       std::vector<nanobind::object> &keep);

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_TORCHTENSOR_H
