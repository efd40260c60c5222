//===- CudaIpc.cpp - Colocated transfers of CUDA memory -------------------===//
//
// A colocated sender's CUDA tensors are read by its receivers through CUDA
// IPC. The sender finds, for each tensor, the allocation it lies in (the
// driver's cuMemGetAddressRange: torch's caching allocator hands out parts
// of larger cudaMalloc segments) and that allocation's IPC handle; its
// table names each allocation once. A receiver opens each handle
// (cudaIpcOpenMemHandle, with peer access enabled lazily when its device is
// another), keeps it open across updates while the tables name it, and
// closes it when they no longer do, after a failed update, or with the
// receiver.
//
// A table travels as bytes, native-endian (both ends are on one machine):
//   u32 magic "LPCI", u32 pid, u32 regions, u32 places,
//   regions x { 64-byte cudaIpcMemHandle_t, i32 device, u32 0, u64 size },
//   places  x { u32 region (kNoRegion: an empty tensor), u32 0, u64 offset }.
//
// Checked on every update, without reading the tensors: each allocation
// still starts where it did, has the same size and the same handle (an
// allocation freed and another made at its address has a new handle), so a
// trainer that reallocates a buffer changes its table and is not read
// stale.
//
// Allocations made through CUDA's virtual-memory API (torch's
// expandable_segments) have no cudaIpc handle: they are refused, naming
// the tensor. So is a tensor on another device than the rank's
// colocated_device.
//
//===----------------------------------------------------------------------===//

#include "../transfer/Colocation.h"
#include "CudaCheck.h"
#include "CudaExecutor.h"

#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <unistd.h>

using namespace loadplan;
using namespace loadplan::transfer;
using namespace loadplan::transfer::table;

namespace {

constexpr uint32_t kMagic = 0x4943504cu; // "LPCI"
constexpr size_t kHandle = sizeof(cudaIpcMemHandle_t);
constexpr size_t kRegion = kHandle + 16;
static_assert(kHandle == 64, "CUDA IPC handles are 64 bytes");

using AddressRange = CUresult (*)(CUdeviceptr *, size_t *, CUdeviceptr);

/// The driver's cuMemGetAddressRange, through the runtime (no link to
/// libcuda).
AddressRange addressRange() {
  static AddressRange fn = nullptr;
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    cudaError_t e = cudaGetDriverEntryPointByVersion(
        "cuMemGetAddressRange", &p, 12000, cudaEnableDefault, &found);
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || !p) {
      cudaGetLastError();
      error = e != cudaSuccess ? cudaGetErrorString(e) : "symbol not found";
      return;
    }
    fn = reinterpret_cast<AddressRange>(p);
  });
  if (!fn)
    fail(LOADPLAN_STATUS_UNAVAILABLE,
         "the CUDA driver's cuMemGetAddressRange is not available: ", error);
  return fn;
}

struct Region {
  cudaIpcMemHandle_t handle;
  int32_t device = -1;
  uint64_t size = 0;
  uintptr_t base = 0; // the sender's own: not sent
};

std::vector<uint8_t> tableBytesOf(uint32_t pid, const std::vector<Region> &regions,
                                  const std::vector<Place> &places) {
  std::vector<uint8_t> out;
  putHeader(out, kMagic, pid, regions.size(), kRegion, places.size());
  for (const Region &r : regions) {
    size_t at = out.size();
    out.resize(at + kHandle);
    std::memcpy(out.data() + at, &r.handle, kHandle);
    put<int32_t>(out, r.device);
    put<uint32_t>(out, 0);
    put<uint64_t>(out, r.size);
  }
  putPlaces(out, places);
  return out;
}

class CudaIpcExporter final : public Exporter {
public:
  explicit CudaIpcExporter(int device) : device(device) {}

  bool resolve(const std::vector<const uint8_t *> &data,
               const std::vector<uint64_t> &bytes,
               const std::function<std::string(size_t)> &what) override {
    DeviceGuard guard(device);
    AddressRange range = addressRange();
    if (!currentBytes.empty() && data == lastData && unchanged(range))
      return false;
    std::vector<Region> next;
    std::vector<Place> places(data.size());
    std::map<uintptr_t, uint32_t> regionOf;
    for (size_t i = 0; i < data.size(); ++i) {
      if (!bytes[i])
        continue;
      CUdeviceptr base = 0;
      size_t size = 0;
      CUresult r = range(&base, &size, CUdeviceptr(uintptr_t(data[i])));
      if (r != CUDA_SUCCESS)
        fail(LOADPLAN_STATUS_INVALID_UPDATE, what(i),
             " is not CUDA device memory (cuMemGetAddressRange: error ", int(r),
             "): a colocated transfer of CUDA memory reads a sender's tensors "
             "through CUDA IPC");
      uintptr_t at = uintptr_t(data[i]);
      if (at + bytes[i] > uintptr_t(base) + size)
        fail(LOADPLAN_STATUS_INVALID_UPDATE, what(i),
             " runs past the end of the CUDA allocation it starts in");
      auto [it, added] = regionOf.emplace(uintptr_t(base), uint32_t(next.size()));
      if (added) {
        Region region;
        region.base = uintptr_t(base);
        region.size = size;
        cudaPointerAttributes a;
        checkCuda(cudaPointerGetAttributes(&a, data[i]), "cudaPointerGetAttributes");
        // A rank that also receives reads its own tensors in place, on its
        // device, with no IPC mapping (and so no peer access) between them.
        if (a.device != device)
          fail(LOADPLAN_STATUS_INVALID_UPDATE, what(i), " is on CUDA device ",
               a.device, " but this rank's colocated transfers are on device ",
               device);
        region.device = a.device;
        cudaError_t e = cudaIpcGetMemHandle(&region.handle,
                                            reinterpret_cast<void *>(base));
        if (e != cudaSuccess) {
          cudaGetLastError();
          fail(LOADPLAN_STATUS_INVALID_UPDATE, what(i),
               " lies in a CUDA allocation without an IPC handle "
               "(cudaIpcGetMemHandle: ", cudaGetErrorString(e),
               "); allocations of CUDA's virtual-memory API, as torch's "
               "expandable_segments makes, cannot be shared this way");
        }
        next.push_back(region);
      }
      places[i] = {it->second, uint64_t(at - uintptr_t(base))};
    }
    std::vector<uint8_t> out = tableBytesOf(uint32_t(::getpid()), next, places);
    bool changed = out != currentBytes;
    regions = std::move(next);
    lastData = data;
    currentBytes = std::move(out);
    return changed;
  }

  const std::vector<uint8_t> &tableBytes() const override { return currentBytes; }

private:
  /// Whether every allocation of the table still starts where it did, at
  /// its size, with its handle.
  bool unchanged(AddressRange range) {
    for (const Region &r : regions) {
      CUdeviceptr base = 0;
      size_t size = 0;
      if (range(&base, &size, CUdeviceptr(r.base)) != CUDA_SUCCESS ||
          uintptr_t(base) != r.base || size != r.size)
        return false;
      cudaIpcMemHandle_t handle;
      if (cudaIpcGetMemHandle(&handle, reinterpret_cast<void *>(r.base)) !=
          cudaSuccess) {
        cudaGetLastError();
        return false;
      }
      if (std::memcmp(&handle, &r.handle, kHandle))
        return false;
    }
    return true;
  }

  int device;
  std::vector<Region> regions;
  std::vector<const uint8_t *> lastData;
  std::vector<uint8_t> currentBytes;
};

class CudaIpcMapper final : public Mapper {
public:
  explicit CudaIpcMapper(int device) : device(device) {}
  ~CudaIpcMapper() override { release(); }

  void map(const uint8_t *table, size_t size, const std::vector<uint64_t> &bytes,
           const std::string &who, std::vector<const uint8_t *> &out) override {
    auto bad = [&](const std::string &why) {
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "the CUDA IPC table of ", who,
           " is not one: ", why);
    };
    const uint8_t *p = table;
    Header h = getHeader(p, size, kMagic, kRegion, bytes.size(), bad);
    std::vector<Region> regions(h.regions);
    for (Region &r : regions) {
      std::memcpy(&r.handle, p, kHandle);
      p += kHandle;
      r.device = get<int32_t>(p);
      p += 4;
      r.size = get<uint64_t>(p);
    }
    std::vector<Place> places = getPlaces(p, bytes.size(), h.regions, bad);

    DeviceGuard guard(device);
    std::vector<Mapped> mapped = remap(
        opened, h.regions, [&](size_t k) { return keyOf(h.pid, regions[k]); },
        [&](size_t k) {
          const Region &r = regions[k];
          void *ptr = nullptr;
          cudaError_t e = cudaIpcOpenMemHandle(&ptr, r.handle,
                                               cudaIpcMemLazyEnablePeerAccess);
          if (e != cudaSuccess) {
            cudaGetLastError();
            fail(LOADPLAN_STATUS_DEVICE_ERROR, "cannot open the CUDA memory of ",
                 who, " (", r.size, " bytes on its device ", r.device,
                 ") on device ", device, ": cudaIpcOpenMemHandle: ",
                 cudaGetErrorString(e),
                 "; colocated ranks must run on one machine, with peer access "
                 "between their GPUs where they differ");
          }
          return Mapped{ptr, r.size};
        },
        close);
    cudaGetLastError();
    placeHoldings(places, mapped, bytes, concat("the CUDA IPC table of ", who),
                  "an allocation", out);
  }

  void release() override {
    if (opened.empty())
      return;
    int current = -1;
    cudaGetDevice(&current);
    cudaSetDevice(device);
    for (auto &[key, o] : opened)
      close(o);
    cudaGetLastError();
    if (current >= 0)
      cudaSetDevice(current);
    opened.clear();
  }

  size_t count() const override { return opened.size(); }

private:
  static void close(const Mapped &o) {
    if (o.data)
      cudaIpcCloseMemHandle(o.data);
  }
  /// The sender's pid, the handle's bytes and the size.
  using Key = std::string;
  static Key keyOf(uint32_t pid, const Region &r) {
    Key key(sizeof pid + kHandle + sizeof r.size, '\0');
    std::memcpy(key.data(), &pid, sizeof pid);
    std::memcpy(key.data() + sizeof pid, &r.handle, kHandle);
    std::memcpy(key.data() + sizeof pid + kHandle, &r.size, sizeof r.size);
    return key;
  }

  int device;
  std::map<Key, Mapped> opened;
};

class CudaMemory final : public DataMemory {
public:
  explicit CudaMemory(int device) : index(device) {}
  loadplan_device_t device() const override {
    return {LOADPLAN_DEVICE_CUDA, index};
  }
  void *allocate(size_t bytes) override {
    DeviceGuard guard(index);
    void *p = nullptr;
    checkCuda(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
    return p;
  }
  void release(void *p) override {
    int current = -1;
    cudaGetDevice(&current);
    cudaSetDevice(index);
    cudaFree(p);
    cudaGetLastError();
    if (current >= 0)
      cudaSetDevice(current);
  }
  void copy(void *dst, const void *src, size_t bytes, void *stream) override {
    DeviceGuard guard(index);
    checkCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                              static_cast<cudaStream_t>(stream)),
              "cudaMemcpyAsync");
  }
  void fill(void *dst, int value, size_t bytes) override {
    DeviceGuard guard(index);
    checkCuda(cudaMemset(dst, value, bytes), "cudaMemset");
  }
  void synchronize(void *stream) override {
    DeviceGuard guard(index);
    checkCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
              "cudaStreamSynchronize");
  }

private:
  int32_t index;
};

} // namespace

std::unique_ptr<Exporter> loadplan::transfer::makeCudaIpcExporter(int device) {
  checkCudaDevice(device);
  return std::make_unique<CudaIpcExporter>(device);
}

std::unique_ptr<Mapper> loadplan::transfer::makeCudaIpcMapper(int device) {
  checkCudaDevice(device);
  return std::make_unique<CudaIpcMapper>(device);
}

std::unique_ptr<DataMemory> loadplan::transfer::makeCudaMemory(int device) {
  checkCudaDevice(device);
  return std::make_unique<CudaMemory>(device);
}
