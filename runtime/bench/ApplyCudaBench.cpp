//===- ApplyCudaBench.cpp - bench/apply_cuda: CUDA apply vs memcpy *- C++ -*-===//
//
// The Llama-3-8B update at TP=2, rank 0 (all 32 layers by default;
// --layers=N to change) applied by the CUDA executor on one stream, from
// device boxes, device full tensors and pinned host boxes, against
// cudaMemcpyAsync of the same number of bytes device to device (one copy:
// the bandwidth limit) and host to device. Times with CUDA events, median
// of --iters runs after warm-up. The last line is
//   gpu_ratio_vs_memcpy=A gpu_ratio_vs_memcpy_boxes=B gpu_ratio_vs_h2d=C
//
//===----------------------------------------------------------------------===//

#include "LlamaPlan.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace loadplan::testing;

namespace {

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "apply_cuda: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void check(loadplan_status_t s, const char *what) {
  if (s) {
    std::fprintf(stderr, "apply_cuda: %s: %s\n", what,
                 loadplan_status_message(s));
    std::exit(1);
  }
}

/// Median seconds of `iters` runs of `body` on `stream`, after two warm-ups.
double timeOn(cudaStream_t stream, int iters, const std::function<void()> &body) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < 2; ++i)
    body();
  check(cudaStreamSynchronize(stream), "warm-up");
  std::vector<double> seconds;
  for (int i = 0; i < iters; ++i) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    body();
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    seconds.push_back(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  int layers = 32, iters = 10;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--layers=", 9) == 0)
      layers = std::max(0, std::atoi(argv[i] + 9));
    else if (std::strncmp(argv[i], "--iters=", 8) == 0)
      iters = std::max(1, std::atoi(argv[i] + 8));
  }
  int32_t devices = 0;
  check(loadplan_cuda_device_count(&devices), "loadplan_cuda_device_count");
  if (devices == 0) {
    std::printf("apply_cuda: no CUDA device\n");
    return 2;
  }

  TestPlan plan = llamaPlan(layers, 2, 0);
  std::vector<uint8_t> bytes = plan.bytes();
  loadplan_plan_t *handle = nullptr;
  check(loadplan_plan_open_bytes(bytes.data(), bytes.size(), &handle), "open");
  loadplan_plan_summary_t summary;
  loadplan_plan_summary(handle, &summary);
  size_t moved = summary.direct_bytes;

  // Live storages, one allocation each as torch makes them.
  std::vector<uint8_t *> storages;
  for (uint64_t size : plan.storageSizes) {
    uint8_t *p = nullptr;
    check(cudaMalloc(&p, size), "cudaMalloc storage");
    storages.push_back(p);
  }
  std::vector<loadplan_target_layout_t> layouts =
      Memory::layoutsAt(plan, storages);
  loadplan_bind_options_t options;
  loadplan_bind_options_init(&options);
  options.device.type = LOADPLAN_DEVICE_CUDA;
  loadplan_binding_t *binding = nullptr;
  check(loadplan_bind(handle, layouts.data(), layouts.size(), &options,
                      &binding),
        "bind");

  // Sources: packed boxes and full tensors on the device, boxes pinned on
  // the host, and a second arena for the one-copy baseline.
  size_t tensorBytes = 0;
  for (const TestEntry &e : plan.entries)
    tensorBytes += size_t(product(e.shape)) * 2;
  uint8_t *boxArena, *tensorArena, *copyArena, *pinned;
  check(cudaMalloc(&boxArena, moved), "cudaMalloc boxes");
  check(cudaMalloc(&copyArena, moved), "cudaMalloc copy");
  check(cudaMalloc(&tensorArena, tensorBytes), "cudaMalloc tensors");
  check(cudaHostAlloc(reinterpret_cast<void **>(&pinned), moved,
                      cudaHostAllocDefault),
        "cudaHostAlloc");
  check(cudaMemset(boxArena, 0x5a, moved), "cudaMemset");
  check(cudaMemset(tensorArena, 0xa5, tensorBytes), "cudaMemset");
  std::memset(pinned, 0x3c, moved);
  std::vector<loadplan_box_t> boxes, pinnedBoxes;
  std::vector<loadplan_tensor_t> tensors;
  size_t boxAt = 0, tensorAt = 0;
  for (const TestEntry &e : plan.entries) {
    const TestBox &b = e.boxes[0];
    boxes.push_back({e.name.data(), e.name.size(), boxArena + boxAt, e.dtype,
                     uint32_t(e.shape.size()), b.starts.data(), b.stops.data()});
    pinnedBoxes.push_back(boxes.back());
    pinnedBoxes.back().data = pinned + boxAt;
    tensors.push_back({e.name.data(), e.name.size(), tensorArena + tensorAt,
                       e.dtype, uint32_t(e.shape.size()), e.shape.data()});
    boxAt += size_t(product(b.extents())) * 2;
    tensorAt += size_t(product(e.shape)) * 2;
  }

  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  double d2d = timeOn(stream, iters, [&] {
    check(cudaMemcpyAsync(copyArena, boxArena, moved, cudaMemcpyDeviceToDevice,
                          stream),
          "cudaMemcpyAsync");
  });
  double h2d = timeOn(stream, iters, [&] {
    check(cudaMemcpyAsync(copyArena, pinned, moved, cudaMemcpyHostToDevice,
                          stream),
          "cudaMemcpyAsync");
  });
  double applyBoxes = timeOn(stream, iters, [&] {
    check(loadplan_apply_boxes(binding, boxes.data(), boxes.size(), stream),
          "apply boxes");
  });
  double applyTensors = timeOn(stream, iters, [&] {
    check(loadplan_apply_tensors(binding, tensors.data(), tensors.size(), stream),
          "apply tensors");
  });
  double applyPinned = timeOn(stream, iters, [&] {
    check(loadplan_apply_boxes(binding, pinnedBoxes.data(), pinnedBoxes.size(),
                               stream),
          "apply pinned boxes");
  });

  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  auto gbps = [&](double s) { return double(moved) / s / 1e9; };
  std::printf("apply_cuda: %s, Llama-3-8B TP=2 rank 0, %d layers: %u names, "
              "%.2f GiB moved per update, median of %d\n",
              prop.name, layers, summary.num_direct,
              double(moved) / (1 << 30), iters);
  std::printf("memcpy d2d        %8.3f ms  %8.1f GB/s\n", d2d * 1e3, gbps(d2d));
  std::printf("apply boxes       %8.3f ms  %8.1f GB/s\n", applyBoxes * 1e3,
              gbps(applyBoxes));
  std::printf("apply tensors     %8.3f ms  %8.1f GB/s\n", applyTensors * 1e3,
              gbps(applyTensors));
  std::printf("memcpy h2d pinned %8.3f ms  %8.1f GB/s\n", h2d * 1e3, gbps(h2d));
  std::printf("apply pinned      %8.3f ms  %8.1f GB/s\n", applyPinned * 1e3,
              gbps(applyPinned));
  std::printf("gpu_ratio_vs_memcpy=%.3f gpu_ratio_vs_memcpy_boxes=%.3f "
              "gpu_ratio_vs_h2d=%.3f\n",
              d2d / applyTensors, d2d / applyBoxes, h2d / applyPinned);

  loadplan_binding_release(binding);
  loadplan_plan_release(handle);
  cudaFree(boxArena);
  cudaFree(copyArena);
  cudaFree(tensorArena);
  cudaFreeHost(pinned);
  for (uint8_t *p : storages)
    cudaFree(p);
  cudaStreamDestroy(stream);
  return 0;
}
