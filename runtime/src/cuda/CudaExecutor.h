//===- CudaExecutor.h - The CUDA executor ------------------------*- C++ -*-===//
//
// Built only with the CUDA toolkit (LOADPLAN_HAVE_CUDA). Every CUDA entry
// point first asks cudaGetDeviceCount, which fails cleanly (error 35, no
// driver) on a machine without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_CUDA_CUDAEXECUTOR_H
#define LOADPLAN_RUNTIME_CUDA_CUDAEXECUTOR_H

#include "../Executor.h"

#include <memory>

namespace loadplan {

/// The number of CUDA devices; 0 when the driver reports none or fails.
int32_t cudaDeviceCount();

/// Fails UNAVAILABLE without a GPU, INVALID_ARGUMENT for a device that
/// does not exist.
void checkCudaDevice(int32_t device);

/// An executor for targets in the memory of CUDA device `device`; checks
/// that every storage the plan writes is memory of that device.
std::unique_ptr<Executor> makeCudaExecutor(const Plan &plan,
                                           const std::vector<uint8_t *> &bases,
                                           int32_t device);

} // namespace loadplan

#endif // LOADPLAN_RUNTIME_CUDA_CUDAEXECUTOR_H
