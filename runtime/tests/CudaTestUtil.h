//===- CudaTestUtil.h - Device memory for the CUDA tests ---------*- C++ -*-===//
//
// Shared by the tests built with the CUDA toolkit: device buffers with the
// bytes of host ones, and a plan's storages on the device.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_TESTS_CUDATESTUTIL_H
#define LOADPLAN_RUNTIME_TESTS_CUDATESTUTIL_H

#include "TestUtil.h"

#include <cuda_runtime.h>

#include <memory>
#include <stdexcept>
#include <vector>

namespace loadplan::testing {

/// Device memory of the current device with the bytes of `host`, freed at
/// scope exit. Throws when CUDA fails (a forked rank reports it).
struct OnDevice {
  explicit OnDevice(const std::vector<uint8_t> &host) : size(host.size()) {
    if (cudaMalloc(&data, std::max<size_t>(size, 1)) != cudaSuccess)
      throw std::runtime_error("cudaMalloc failed");
    write(host);
  }
  ~OnDevice() { cudaFree(data); }
  OnDevice(const OnDevice &) = delete;
  OnDevice &operator=(const OnDevice &) = delete;
  void write(const std::vector<uint8_t> &host) {
    if (cudaMemcpy(data, host.data(), size, cudaMemcpyHostToDevice) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy to the device failed");
  }
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> out(size);
    if (cudaMemcpy(out.data(), data, size, cudaMemcpyDeviceToHost) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy from the device failed");
    return out;
  }
  void *data = nullptr;
  size_t size;
};

/// A plan's storages on the device, with the bytes of `host`'s.
struct DeviceStorages {
  explicit DeviceStorages(const Memory &host) {
    for (const auto &s : host.storages) {
      storages.push_back(std::make_unique<OnDevice>(s));
      bases.push_back(static_cast<uint8_t *>(storages.back()->data));
    }
  }
  std::vector<std::vector<uint8_t>> read() const {
    std::vector<std::vector<uint8_t>> out;
    for (const auto &s : storages)
      out.push_back(s->read());
    return out;
  }
  std::vector<std::unique_ptr<OnDevice>> storages;
  std::vector<uint8_t *> bases;
};

} // namespace loadplan::testing

#endif // LOADPLAN_RUNTIME_TESTS_CUDATESTUTIL_H
