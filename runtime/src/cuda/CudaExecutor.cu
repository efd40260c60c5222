//===- CudaExecutor.cu - The CUDA executor ----------------------*- C++ -*-===//
//
// At bind time the copies of both update forms go to device memory once.
// An apply writes one small record per copy of the batch (which copy, its
// source pointer, its first chunk) into pinned memory, sends that array to
// the device and launches one kernel over all chunks of the batch, all on
// the caller's stream. Copies from pinned host memory with long rows go to
// the copy engine with cudaMemcpy2DAsync instead, which moves host memory
// at full PCIe speed without taking SMs from the kernel.
//
//===----------------------------------------------------------------------===//

#include "CudaExecutor.h"
#include "CudaCheck.h"
#include "DeviceCopy.h"
#include "../Status.h"

#include <cuda_runtime.h>

#include <algorithm>

using namespace loadplan;

namespace {

/// Rows at least this long from pinned host memory go to the copy engine.
constexpr int64_t kMemcpy2DMinRun = 4096;
/// cudaMemcpy2DAsync refuses pitches above the device's limit; stay well
/// below any (2^31 on current parts).
constexpr int64_t kMemcpy2DMaxPitch = int64_t(1) << 30;
/// Blocks per launch; a batch with more chunks takes several launches.
constexpr uint64_t kMaxBlocksPerLaunch = uint64_t(1) << 30;


__global__ void __launch_bounds__(kDeviceBlockThreads)
    copyKernel(const DeviceCopy *copies, const DeviceActive *active,
               uint32_t numActive, uint64_t firstChunk) {
  runBlock(copies, active, numActive, firstChunk + blockIdx.x, threadIdx.x,
           blockDim.x);
}

/// Where a source lives, as far as the executor cares.
enum class Memory : uint8_t { Device, PinnedHost };

class CudaExecutor final : public Executor {
public:
  explicit CudaExecutor(int device) : device(device) {}

  /// Everything that can fail, after construction, so that the destructor
  /// frees what was allocated before a failure.
  void init(const Plan &plan, const std::vector<uint8_t *> &bases) {
    for (uint32_t s = 0; s < bases.size(); ++s) {
      if (!bases[s] || !plan.storageSizes[s])
        continue;
      cudaPointerAttributes attributes;
      checkCuda(cudaPointerGetAttributes(&attributes, bases[s]),
            "cudaPointerGetAttributes");
      bool onDevice = (attributes.type == cudaMemoryTypeDevice ||
                       attributes.type == cudaMemoryTypeManaged) &&
                      attributes.device == device;
      if (!onDevice)
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "storage ", s, " at ",
             static_cast<const void *>(bases[s]),
             " is not memory of CUDA device ", device,
             "; bind a CUDA plan to the model's device tensors");
    }
    DeviceGuard guard(device);
    size_t most = 0;
    for (SourceForm form : {SourceForm::Tensor, SourceForm::Box}) {
      Program &p = programs[int(form)];
      p.copies = buildCopies(plan, form, bases);
      p.device = buildDeviceProgram(p.copies);
      most = std::max(most, p.device.copies.size());
      if (p.device.copies.empty())
        continue;
      size_t bytes = p.device.copies.size() * sizeof(DeviceCopy);
      checkCuda(cudaMalloc(&p.table, bytes), "cudaMalloc");
      checkCuda(cudaMemcpy(p.table, p.device.copies.data(), bytes,
                       cudaMemcpyHostToDevice),
            "cudaMemcpy");
    }
    capacity = std::max<size_t>(most, 1);
    checkCuda(cudaHostAlloc(reinterpret_cast<void **>(&staging),
                        capacity * sizeof(DeviceActive), cudaHostAllocDefault),
          "cudaHostAlloc");
    checkCuda(cudaMalloc(&activeOnDevice, capacity * sizeof(DeviceActive)),
          "cudaMalloc");
    checkCuda(cudaEventCreateWithFlags(&staged, cudaEventDisableTiming),
          "cudaEventCreate");
    checkCuda(cudaEventCreateWithFlags(&finished, cudaEventDisableTiming),
          "cudaEventCreate");
    entryMemory.assign(plan.entries.size(), Memory::Device);
    boxMemory.assign(plan.numBoxes, Memory::Device);
    entryAddress.assign(plan.entries.size(), 0);
    boxAddress.assign(plan.numBoxes, 0);
  }

  ~CudaExecutor() override {
    int current = -1;
    cudaGetDevice(&current);
    cudaSetDevice(device);
    if (pending)
      cudaEventSynchronize(finished);
    for (Program &p : programs)
      cudaFree(p.table);
    cudaFree(activeOnDevice);
    cudaFreeHost(staging);
    if (staged)
      cudaEventDestroy(staged);
    if (finished)
      cudaEventDestroy(finished);
    if (current >= 0)
      cudaSetDevice(current);
  }

  uint32_t numThreads() const override { return 1; }
  DeviceWork deviceWork() const override { return work; }

  void checkSources(const Batch &batch) override {
    DeviceGuard guard(device);
    const Program &p = programs[int(batch.form)];
    for (size_t i = 0; i < batch.numEntries; ++i) {
      uint32_t e = batch.entries[i];
      if (p.copies.entryBegin[e] == p.copies.entryBegin[e + 1])
        continue; // nothing to read
      if (batch.form == SourceForm::Tensor) {
        classify(batch, e, 0, batch.entrySource[e], entryMemory[e],
                 entryAddress[e]);
        continue;
      }
      // Each box of the entry that a copy reads.
      for (uint32_t k = p.copies.entryBegin[e]; k < p.copies.entryBegin[e + 1];
           ++k) {
        uint32_t box = p.copies.copies[k].box;
        classify(batch, e, box, batch.boxSource[box], boxMemory[box],
                 boxAddress[box]);
      }
    }
  }

  void run(const Batch &batch, void *stream) override {
    DeviceGuard guard(device);
    auto s = static_cast<cudaStream_t>(stream);
    const Program &p = programs[int(batch.form)];
    bool byBox = batch.form == SourceForm::Box;
    // The staging buffer is free once the previous batch's array reached
    // the device.
    if (pending)
      checkCuda(cudaEventSynchronize(staged), "cudaEventSynchronize");
    uint32_t numActive = 0;
    uint64_t chunks = 0;
    for (size_t i = 0; i < batch.numEntries; ++i) {
      uint32_t e = batch.entries[i];
      for (uint32_t k = p.copies.entryBegin[e]; k < p.copies.entryBegin[e + 1];
           ++k) {
        const Copy &c = p.copies.copies[k];
        Memory memory = byBox ? boxMemory[c.box] : entryMemory[c.entry];
        uint64_t src = byBox ? boxAddress[c.box] : entryAddress[c.entry];
        if (memory == Memory::PinnedHost && copyEngine(p, c, src, s))
          continue;
        staging[numActive++] = {chunks, src, k, 0};
        chunks += p.device.chunks[k];
      }
    }
    if (!numActive)
      return;
    // The device array is free once the previous batch's kernel is done,
    // whichever stream it ran on.
    if (pending)
      checkCuda(cudaStreamWaitEvent(s, finished, 0), "cudaStreamWaitEvent");
    checkCuda(cudaMemcpyAsync(activeOnDevice, staging,
                          numActive * sizeof(DeviceActive),
                          cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync");
    ++work.memcpyCalls;
    checkCuda(cudaEventRecord(staged, s), "cudaEventRecord");
    for (uint64_t first = 0; first < chunks; first += kMaxBlocksPerLaunch) {
      auto blocks =
          static_cast<unsigned>(std::min(chunks - first, kMaxBlocksPerLaunch));
      copyKernel<<<blocks, kDeviceBlockThreads, 0, s>>>(
          p.table, activeOnDevice, numActive, first);
      checkCuda(cudaGetLastError(), "launching the copy kernel");
      ++work.kernelLaunches;
    }
    checkCuda(cudaEventRecord(finished, s), "cudaEventRecord");
    pending = true;
  }

private:
  struct Program {
    Copies copies;
    DeviceProgram device;
    DeviceCopy *table = nullptr;
  };

  /// Records where `source` lives and the address the kernel reads it at;
  /// refuses memory the device cannot read.
  void classify(const Batch &batch, uint32_t entry, uint32_t box,
                const uint8_t *source, Memory &memory, uint64_t &address) {
    cudaPointerAttributes a;
    checkCuda(cudaPointerGetAttributes(&a, source), "cudaPointerGetAttributes");
    auto what = [&] {
      return batch.describe(batch.describeContext, entry, box);
    };
    switch (a.type) {
    case cudaMemoryTypeDevice:
      if (a.device != device) {
        int peer = 0;
        if (!batch.peerSources ||
            cudaDeviceCanAccessPeer(&peer, device, a.device) != cudaSuccess || !peer) {
          cudaGetLastError();
          fail(LOADPLAN_STATUS_INVALID_UPDATE, what(), " is on CUDA device ",
               a.device, " but the plan is bound to device ", device,
               batch.peerSources ? ", which has no peer access to it" : "");
        }
      }
      [[fallthrough]];
    case cudaMemoryTypeManaged:
      memory = Memory::Device;
      address = reinterpret_cast<uint64_t>(source);
      return;
    case cudaMemoryTypeHost:
      if (!a.devicePointer)
        fail(LOADPLAN_STATUS_INVALID_UPDATE, what(),
             " is pinned host memory that is not mapped for the device");
      memory = Memory::PinnedHost;
      address = reinterpret_cast<uint64_t>(a.devicePointer);
      return;
    default:
      fail(LOADPLAN_STATUS_INVALID_UPDATE, what(),
           " is pageable host memory, which the device cannot read; send a "
           "tensor on the device or in pinned memory");
    }
  }

  /// Hands copy `c` to the copy engine if it is rows long enough for it;
  /// false leaves it to the kernel.
  bool copyEngine(const Program &p, const Copy &c, uint64_t src,
                  cudaStream_t s) {
    if (c.run < kMemcpy2DMinRun || c.numDims > 1 || c.converts() ||
        c.transforms())
      return false;
    const ByteDim *dims = p.copies.dimsOf(c);
    int64_t srcPitch = c.numDims ? dims[0].srcStride : c.run;
    int64_t dstPitch = c.numDims ? dims[0].dstStride : c.run;
    if (srcPitch > kMemcpy2DMaxPitch || dstPitch > kMemcpy2DMaxPitch)
      return false;
    checkCuda(cudaMemcpy2DAsync(c.dst, dstPitch,
                            reinterpret_cast<const void *>(src + c.srcOffset),
                            srcPitch, c.run, c.rows, cudaMemcpyDefault, s),
          "cudaMemcpy2DAsync");
    ++work.memcpyCalls;
    return true;
  }

  int device;
  Program programs[2];
  size_t capacity = 0;
  DeviceActive *staging = nullptr;
  DeviceActive *activeOnDevice = nullptr;
  cudaEvent_t staged = nullptr, finished = nullptr;
  bool pending = false;
  DeviceWork work;
  std::vector<Memory> entryMemory, boxMemory;
  std::vector<uint64_t> entryAddress, boxAddress;
};

} // namespace

int32_t loadplan::cudaDeviceCount() {
  // On a machine without a driver this fails (error 35) and must come
  // before any other CUDA call.
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

void loadplan::checkCudaDevice(int32_t device) {
  int32_t count = cudaDeviceCount();
  if (count == 0)
    fail(LOADPLAN_STATUS_UNAVAILABLE,
         "no CUDA device: cudaGetDeviceCount finds none");
  if (device < 0 || device >= count)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "CUDA device ", device,
         " does not exist (there are ", count, ")");
}

std::unique_ptr<Executor>
loadplan::makeCudaExecutor(const Plan &plan,
                           const std::vector<uint8_t *> &bases,
                           int32_t device) {
  checkCudaDevice(device);
  auto executor = std::make_unique<CudaExecutor>(device);
  executor->init(plan, bases);
  return executor;
}
