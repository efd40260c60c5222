//===- ApplyCudaBench.cpp - bench/apply_cuda: CUDA apply vs memcpy *- C++ -*-===//
//
// Two updates applied by the CUDA executor on one stream, each against one
// cudaMemcpyAsync of the same number of bytes (the bandwidth limit):
//
// - Llama-3-8B at TP=2, rank 0 (all 32 layers by default; --layers=N), from
//   device full tensors, device boxes and pinned host boxes (against a
//   host-to-device copy);
// - the MoE blocks of Qwen3-Next-80B-A3B at TP=4, rank 0 (--moe-layers=N, 16
//   by default: about 25,000 names of 512 KiB; 0 leaves it out), from
//   device full tensors and boxes. The full tensors share an arena of at
//   most --moe-arena-gib=N GiB (8 by default), far larger than the L2, so
//   that the sources fit beside the live tensors.
//
// Times with CUDA events, median of --iters runs after two warm-ups. The
// sources hold random bytes, and after each form's timings a sample of
// names is read back and compared with its source. The runtime's own
// counts (loadplan_binding_stats) give the kernel launches and copies each
// update enqueues. The last line is
//   gpu_ratio_vs_memcpy=A gpu_ratio_vs_memcpy_boxes=B gpu_ratio_vs_h2d=C
//   launches_per_update=N moe_time_over_memcpy=D moe_boxes_time_over_memcpy=E
// (memcpy's time over the apply's for the ratios, the apply's over memcpy's
// for the MoE; launches: kernels plus copies per update from device
// tensors).
//
//===----------------------------------------------------------------------===//

#include "ModelPlans.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace loadplan::testing;

namespace {

constexpr size_t kGiB = size_t(1) << 30;

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

/// Random bytes to fill sources with: windows of one random block at
/// shifting offsets, so that no two nearby megabytes are alike.
class RandomBytes {
public:
  RandomBytes() : block(2 * kWindow) {
    std::mt19937_64 rng(7);
    for (size_t i = 0; i < block.size(); i += 8) {
      uint64_t v = rng();
      std::memcpy(&block[i], &v, 8);
    }
  }
  /// Fills `size` bytes at `dst`, device or host memory.
  void fill(void *dst, size_t size) {
    for (size_t at = 0, k = 0; at < size; at += kWindow, ++k) {
      size_t n = std::min(kWindow, size - at);
      check(cudaMemcpy(static_cast<uint8_t *>(dst) + at,
                       block.data() + (k * 7919 * 64) % kWindow, n,
                       cudaMemcpyDefault),
            "filling sources");
    }
  }

private:
  static constexpr size_t kWindow = size_t(64) << 20;
  std::vector<uint8_t> block;
};

size_t boxBytes(const TestEntry &e) {
  return size_t(product(e.boxes[0].extents())) * 2;
}
size_t tensorBytes(const TestEntry &e) { return size_t(product(e.shape)) * 2; }

/// One plan bound to live device storages, with its sources.
class DeviceUpdate {
public:
  /// Full tensors go into an arena of at most `tensorArenaCap` bytes, at
  /// offsets that wrap around; pinned host boxes only when `pinnedToo`.
  DeviceUpdate(TestPlan p, size_t tensorArenaCap, bool pinnedToo)
      : plan(std::move(p)) {
    std::vector<uint8_t> bytes = plan.bytes();
    check(loadplan_plan_open_bytes(bytes.data(), bytes.size(), &handle), "open");
    loadplan_plan_summary_t summary;
    check(loadplan_plan_summary(handle, &summary), "summary");
    moved = summary.direct_bytes;
    names = summary.num_direct;
    // Live storages, one allocation each as torch makes them.
    for (uint64_t size : plan.storageSizes) {
      uint8_t *s = nullptr;
      check(cudaMalloc(&s, size), "cudaMalloc storage");
      storages.push_back(s);
    }
    std::vector<loadplan_target_layout_t> layouts =
        Memory::layoutsAt(plan, storages);
    loadplan_bind_options_t options;
    loadplan_bind_options_init(&options);
    options.device.type = LOADPLAN_DEVICE_CUDA;
    check(loadplan_bind(handle, layouts.data(), layouts.size(), &options,
                        &binding),
          "bind");

    size_t largest = 0, allTensors = 0;
    for (const TestEntry &e : plan.entries) {
      largest = std::max(largest, tensorBytes(e));
      allTensors += tensorBytes(e);
    }
    tensorArena = std::min(allTensors, std::max(tensorArenaCap, largest));
    check(cudaMalloc(&boxes, moved), "cudaMalloc boxes");
    check(cudaMalloc(&copy, moved), "cudaMalloc copy");
    check(cudaMalloc(&tensors, tensorArena), "cudaMalloc tensors");
    RandomBytes random;
    random.fill(boxes, moved);
    random.fill(tensors, tensorArena);
    if (pinnedToo) {
      check(cudaHostAlloc(reinterpret_cast<void **>(&pinned), moved,
                          cudaHostAllocDefault),
            "cudaHostAlloc");
      random.fill(pinned, moved);
    }
    size_t boxAt = 0, tensorAt = 0;
    for (const TestEntry &e : plan.entries) {
      const TestBox &b = e.boxes[0];
      uint32_t rank = uint32_t(e.shape.size());
      if (tensorAt + tensorBytes(e) > tensorArena)
        tensorAt = 0;
      boxArgs.push_back({e.name.data(), e.name.size(), boxes + boxAt, e.dtype,
                         rank, b.lo.data(), b.hi.data()});
      tensorArgs.push_back({e.name.data(), e.name.size(), tensors + tensorAt,
                            e.dtype, rank, e.shape.data()});
      if (pinned) {
        pinnedArgs.push_back(boxArgs.back());
        pinnedArgs.back().data = pinned + boxAt;
      }
      boxAt += boxBytes(e);
      tensorAt += tensorBytes(e);
    }
  }

  ~DeviceUpdate() {
    loadplan_binding_release(binding);
    loadplan_plan_release(handle);
    cudaFree(boxes);
    cudaFree(copy);
    cudaFree(tensors);
    cudaFreeHost(pinned);
    for (uint8_t *s : storages)
      cudaFree(s);
  }
  DeviceUpdate(const DeviceUpdate &) = delete;

  enum class Form { Tensors, Boxes, PinnedBoxes };

  void apply(Form form, cudaStream_t stream) {
    switch (form) {
    case Form::Tensors:
      check(loadplan_apply_tensors(binding, tensorArgs.data(),
                                   tensorArgs.size(), stream),
            "apply tensors");
      return;
    case Form::Boxes:
      check(loadplan_apply_boxes(binding, boxArgs.data(), boxArgs.size(),
                                 stream),
            "apply boxes");
      return;
    case Form::PinnedBoxes:
      check(loadplan_apply_boxes(binding, pinnedArgs.data(), pinnedArgs.size(),
                                 stream),
            "apply pinned boxes");
      return;
    }
  }

  /// Median seconds of an apply of `form`, after which a fresh apply into
  /// zeroed storages must write every sampled name's source bytes.
  double time(Form form, cudaStream_t stream, int iters) {
    double seconds = timeOn(stream, iters, [&] { apply(form, stream); });
    for (size_t s = 0; s < storages.size(); ++s)
      check(cudaMemsetAsync(storages[s], 0, plan.storageSizes[s], stream),
            "cudaMemsetAsync");
    apply(form, stream);
    check(cudaStreamSynchronize(stream), "apply");
    verified = verifySample(form);
    return seconds;
  }

  /// One memcpy of the moved bytes, device to device or host to device.
  double timeMemcpy(bool fromHost, cudaStream_t stream, int iters) {
    const void *src = fromHost ? static_cast<void *>(pinned) : boxes;
    return timeOn(stream, iters, [&] {
      check(cudaMemcpyAsync(copy, src, moved, cudaMemcpyDefault, stream),
            "cudaMemcpyAsync");
    });
  }

  /// Kernel launches plus copies per apply of `form`, over `n` applies.
  double launchesPerApply(Form form, cudaStream_t stream, int n,
                          loadplan_binding_stats_t *delta) {
    loadplan_binding_stats_t before, after;
    check(loadplan_binding_stats(binding, &before), "stats");
    for (int i = 0; i < n; ++i)
      apply(form, stream);
    check(cudaStreamSynchronize(stream), "apply");
    check(loadplan_binding_stats(binding, &after), "stats");
    *delta = {after.applies - before.applies,
              after.kernel_launches - before.kernel_launches,
              after.memcpy_calls - before.memcpy_calls};
    return double(delta->kernel_launches + delta->memcpy_calls) /
           double(delta->applies);
  }

  TestPlan plan;
  size_t moved = 0;
  uint32_t names = 0;
  /// Names the last `time` compared with their sources.
  size_t verified = 0;

private:
  /// Compares up to eight names spread over the plan (of at most 64 MiB
  /// each) element by element with their sources; exits on a difference.
  /// Returns how many it compared.
  size_t verifySample(Form form) {
    std::vector<size_t> small, picked;
    for (size_t i = 0; i < plan.entries.size(); ++i)
      if (tensorBytes(plan.entries[i]) <= (size_t(64) << 20))
        small.push_back(i);
    for (size_t k = 0; k < 8 && !small.empty(); ++k)
      picked.push_back(small[k * (small.size() - 1) / 7]);
    picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
    for (size_t i : picked)
      verifyEntry(i, form);
    return picked.size();
  }

  void verifyEntry(size_t i, Form form) {
    const TestEntry &e = plan.entries[i];
    const TestWrite &w = e.writes[0];
    const TestTarget &t = plan.targets[w.target];
    std::vector<int64_t> extents = e.boxes[0].extents();
    size_t rank = extents.size();
    int64_t span = 0;
    for (size_t k = 0; k < rank; ++k)
      span += (extents[k] - 1) * w.stride[k];
    std::vector<uint16_t> live(size_t(span) + 1);
    check(cudaMemcpy(live.data(),
                     storages[t.storage] + t.byteOffset + 2 * w.offset,
                     live.size() * 2, cudaMemcpyDeviceToHost),
          "reading back");
    bool full = form == Form::Tensors;
    const TestBox &b = e.boxes[0];
    std::vector<int64_t> srcStride =
        full ? rowMajor(e.shape) : rowMajor(extents);
    std::vector<uint16_t> src(full ? tensorBytes(e) / 2 : boxBytes(e) / 2);
    const void *from = full ? tensorArgs[i].data
                       : form == Form::Boxes ? boxArgs[i].data
                                             : pinnedArgs[i].data;
    check(cudaMemcpy(src.data(), from, src.size() * 2, cudaMemcpyDefault),
          "reading a source");
    std::vector<int64_t> index(rank, 0);
    for (int64_t n = 0, count = product(extents); n < count; ++n) {
      int64_t d = 0, s = 0;
      for (size_t k = 0; k < rank; ++k) {
        d += index[k] * w.stride[k];
        s += (index[k] + (full ? b.lo[k] : 0)) * srcStride[k];
      }
      if (live[size_t(d)] != src[size_t(s)]) {
        std::fprintf(stderr,
                     "apply_cuda: '%s' differs from its source at element %lld\n",
                     e.name.c_str(), static_cast<long long>(n));
        std::exit(1);
      }
      for (size_t k = rank; k-- > 0 && ++index[k] == extents[k];)
        index[k] = 0;
    }
  }

  loadplan_plan_t *handle = nullptr;
  loadplan_binding_t *binding = nullptr;
  std::vector<uint8_t *> storages;
  uint8_t *boxes = nullptr, *copy = nullptr, *tensors = nullptr,
          *pinned = nullptr;
  size_t tensorArena = 0;
  std::vector<loadplan_box_t> boxArgs, pinnedArgs;
  std::vector<loadplan_tensor_t> tensorArgs;
};

int intFlag(const char *arg, const char *name, int value) {
  size_t n = std::strlen(name);
  return std::strncmp(arg, name, n) == 0 ? std::max(0, std::atoi(arg + n))
                                         : value;
}

} // namespace

int main(int argc, char **argv) {
  int layers = 32, iters = 10, moeLayers = 16, moeArenaGiB = 8;
  for (int i = 1; i < argc; ++i) {
    layers = intFlag(argv[i], "--layers=", layers);
    iters = std::max(1, intFlag(argv[i], "--iters=", iters));
    moeLayers = intFlag(argv[i], "--moe-layers=", moeLayers);
    moeArenaGiB = intFlag(argv[i], "--moe-arena-gib=", moeArenaGiB);
  }
  int32_t devices = 0;
  check(loadplan_cuda_device_count(&devices), "loadplan_cuda_device_count");
  if (devices == 0) {
    std::printf("apply_cuda: no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  using Form = DeviceUpdate::Form;

  double d2d, h2d, applyTensors, applyBoxes, applyPinned, launches = 0;
  {
    DeviceUpdate u(llamaPlan(layers, 2, 0), ~size_t(0), true);
    auto gbps = [&](double s) { return double(u.moved) / s / 1e9; };
    std::printf("apply_cuda: %s, Llama-3-8B TP=2 rank 0, %d layers: %u names, "
                "%.2f GiB moved per update, median of %d\n",
                prop.name, layers, u.names, double(u.moved) / kGiB, iters);
    d2d = u.timeMemcpy(false, stream, iters);
    h2d = u.timeMemcpy(true, stream, iters);
    applyBoxes = u.time(Form::Boxes, stream, iters);
    applyTensors = u.time(Form::Tensors, stream, iters);
    applyPinned = u.time(Form::PinnedBoxes, stream, iters);
    std::printf("memcpy d2d        %8.3f ms  %8.1f GB/s\n", d2d * 1e3, gbps(d2d));
    std::printf("apply boxes       %8.3f ms  %8.1f GB/s\n", applyBoxes * 1e3,
                gbps(applyBoxes));
    std::printf("apply tensors     %8.3f ms  %8.1f GB/s\n", applyTensors * 1e3,
                gbps(applyTensors));
    std::printf("memcpy h2d pinned %8.3f ms  %8.1f GB/s\n", h2d * 1e3, gbps(h2d));
    std::printf("apply pinned      %8.3f ms  %8.1f GB/s\n", applyPinned * 1e3,
                gbps(applyPinned));
    std::printf("checked: %zu sampled names of each form equal their sources\n",
                u.verified);
    for (Form form : {Form::Tensors, Form::Boxes, Form::PinnedBoxes}) {
      loadplan_binding_stats_t d;
      double per = u.launchesPerApply(form, stream, iters, &d);
      if (form == Form::Tensors)
        launches = per;
      std::printf("launches per update (%s): %.1f (%llu kernels, %llu copies "
                  "in %llu updates)\n",
                  form == Form::Tensors ? "device tensors"
                  : form == Form::Boxes ? "device boxes"
                                        : "pinned boxes",
                  per, static_cast<unsigned long long>(d.kernel_launches),
                  static_cast<unsigned long long>(d.memcpy_calls),
                  static_cast<unsigned long long>(d.applies));
    }
  }

  double moeOverMemcpy = 0, moeBoxesOverMemcpy = 0;
  if (moeLayers) {
    DeviceUpdate u(moePlan(moeLayers, 4, 0), size_t(moeArenaGiB) * kGiB, false);
    auto gbps = [&](double s) { return double(u.moved) / s / 1e9; };
    std::printf("apply_cuda: %s, Qwen3-Next-80B-A3B MoE blocks TP=4 rank 0, "
                "%d layers: %u names, %.2f GiB moved per update, median of %d\n",
                prop.name, moeLayers, u.names, double(u.moved) / kGiB, iters);
    double memcpy = u.timeMemcpy(false, stream, iters);
    double boxes = u.time(Form::Boxes, stream, iters);
    double tensors = u.time(Form::Tensors, stream, iters);
    loadplan_binding_stats_t d;
    double per = u.launchesPerApply(Form::Tensors, stream, iters, &d);
    std::printf("moe memcpy d2d    %8.3f ms  %8.1f GB/s\n", memcpy * 1e3,
                gbps(memcpy));
    std::printf("moe apply boxes   %8.3f ms  %8.1f GB/s\n", boxes * 1e3,
                gbps(boxes));
    std::printf("moe apply tensors %8.3f ms  %8.1f GB/s\n", tensors * 1e3,
                gbps(tensors));
    std::printf("checked: %zu sampled names of each form equal their sources\n",
                u.verified);
    std::printf("moe launches per update (device tensors): %.1f\n", per);
    moeOverMemcpy = tensors / memcpy;
    moeBoxesOverMemcpy = boxes / memcpy;
  }

  std::printf("gpu_ratio_vs_memcpy=%.3f gpu_ratio_vs_memcpy_boxes=%.3f "
              "gpu_ratio_vs_h2d=%.3f launches_per_update=%.1f "
              "moe_time_over_memcpy=%.3f moe_boxes_time_over_memcpy=%.3f\n",
              d2d / applyTensors, d2d / applyBoxes, h2d / applyPinned, launches,
              moeOverMemcpy, moeBoxesOverMemcpy);
  cudaStreamDestroy(stream);
  return 0;
}
