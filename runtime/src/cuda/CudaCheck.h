//===- CudaCheck.h - CUDA errors as statuses, device scopes -----*- C++ -*-===//
//
// Shared by the CUDA executor and the NCCL transport. Built only with the
// CUDA toolkit.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_CUDA_CUDACHECK_H
#define LOADPLAN_RUNTIME_CUDA_CUDACHECK_H

#include "../Status.h"

#include <cuda_runtime.h>

namespace loadplan {

/// Throws a device-error status naming `what` when `error` is not success,
/// after clearing a sticky launch error so the next call starts clean.
inline void checkCuda(cudaError_t error, const char *what) {
  if (error != cudaSuccess) {
    cudaGetLastError();
    fail(LOADPLAN_STATUS_DEVICE_ERROR, what, " failed: ",
         cudaGetErrorString(error), " (", cudaGetErrorName(error), ")");
  }
}

/// Makes `device` current for a scope and restores the caller's device:
/// torch keeps its own notion of the current device. It sets the device even
/// where it is already the current one: on a thread that never used CUDA,
/// cudaGetDevice says 0 with no context current, and only cudaSetDevice
/// makes the device's primary context current, which driver calls
/// (cuMemGetAddressRange) need.
class DeviceGuard {
public:
  explicit DeviceGuard(int device) {
    checkCuda(cudaGetDevice(&previous), "cudaGetDevice");
    checkCuda(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current != previous)
      cudaSetDevice(previous);
  }
  DeviceGuard(const DeviceGuard &) = delete;
  DeviceGuard &operator=(const DeviceGuard &) = delete;

private:
  int previous = 0;
};

} // namespace loadplan

#endif // LOADPLAN_RUNTIME_CUDA_CUDACHECK_H
