//===- CudaTest.cpp - The CUDA executor on a GPU ----------------*- C++ -*-===//
//
// Built with the CUDA toolkit; every test skips where cudaGetDeviceCount
// finds no device. The same random plans as the CPU tests, applied from
// device memory (aligned and not), pinned host memory (kernel and copy
// engine paths) and refused from pageable memory, compared with the
// reference.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <cuda_runtime.h>

using namespace loadplan::testing;

namespace {

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

bool haveGpu() {
  int32_t count = 0;
  Status status(loadplan_cuda_device_count(&count));
  return !status && count > 0;
}

#define SKIP_WITHOUT_GPU()                                                     \
  do {                                                                         \
    if (!haveGpu())                                                            \
      GTEST_SKIP() << "no CUDA device";                                        \
  } while (0)

/// A device buffer holding `bytes`, freed at scope exit.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t size, size_t slack = 0) {
    EXPECT_EQ(cudaMalloc(&base, size + slack + 1), cudaSuccess);
    data = static_cast<uint8_t *>(base) + slack;
  }
  DeviceBuffer(const std::vector<uint8_t> &bytes, size_t slack = 0)
      : DeviceBuffer(bytes.size(), slack) {
    EXPECT_EQ(cudaMemcpy(data, bytes.data(), bytes.size(),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(base); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  void *base = nullptr;
  uint8_t *data = nullptr;
};

/// Where sources live for a test.
enum class Where { Device, DeviceMisaligned, Pinned, Pageable };

/// A plan's storages on the device, mirrored from a host Memory.
struct DeviceStorages {
  DeviceStorages(const TestPlan &plan, const Memory &host) : plan(plan) {
    for (const auto &s : host.storages)
      buffers.push_back(std::make_unique<DeviceBuffer>(s));
  }
  std::vector<loadplan_target_layout_t> layouts() {
    std::vector<uint8_t *> bases;
    for (auto &b : buffers)
      bases.push_back(b->data);
    return Memory::layoutsAt(plan, bases);
  }
  std::vector<std::vector<uint8_t>> download() {
    std::vector<std::vector<uint8_t>> out;
    for (size_t s = 0; s < buffers.size(); ++s) {
      out.emplace_back(plan.storageSizes[s]);
      EXPECT_EQ(cudaMemcpy(out.back().data(), buffers[s]->data,
                           out.back().size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return out;
  }
  const TestPlan &plan;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
};

/// Sources of an update moved to `where`: the argument arrays point there.
struct PlacedUpdate {
  PlacedUpdate(Update &u, Where where) {
    auto place = [&](const void *host, size_t bytes) -> const void * {
      switch (where) {
      case Where::Device:
      case Where::DeviceMisaligned: {
        size_t slack = where == Where::DeviceMisaligned ? 2 : 0;
        device.push_back(std::make_unique<DeviceBuffer>(bytes, slack));
        EXPECT_EQ(cudaMemcpy(device.back()->data, host, bytes,
                             cudaMemcpyHostToDevice),
                  cudaSuccess);
        return device.back()->data;
      }
      case Where::Pinned: {
        void *p = nullptr;
        EXPECT_EQ(cudaHostAlloc(&p, bytes + 1, cudaHostAllocDefault),
                  cudaSuccess);
        std::memcpy(p, host, bytes);
        pinned.push_back(p);
        return p;
      }
      case Where::Pageable:
        return host;
      }
      return host;
    };
    for (loadplan_tensor_t &t : u.tensorArgs) {
      size_t bytes = u.tensors.at(std::string(t.name, t.name_size)).size();
      t.data = place(t.data, bytes);
    }
    for (size_t i = 0; i < u.boxArgs.size(); ++i)
      u.boxArgs[i].data = place(u.boxArgs[i].data, u.boxData[i].size());
  }
  ~PlacedUpdate() {
    for (void *p : pinned)
      cudaFreeHost(p);
  }
  std::vector<std::unique_ptr<DeviceBuffer>> device;
  std::vector<void *> pinned;
};

BindingPtr bindCuda(loadplan_plan_t *plan, DeviceStorages &storages) {
  auto layouts = storages.layouts();
  loadplan_bind_options_t options;
  loadplan_bind_options_init(&options);
  options.device.type = LOADPLAN_DEVICE_CUDA;
  loadplan_binding_t *raw = nullptr;
  EXPECT_TRUE(isOk(loadplan_bind(plan, layouts.data(), layouts.size(),
                                 &options, &raw)));
  return BindingPtr(raw);
}

/// Applies `u` from its boxes or its full tensors.
loadplan_status_t applyUpdate(loadplan_binding_t *binding, const Update &u,
                              bool boxes, cudaStream_t stream) {
  return boxes ? loadplan_apply_boxes(binding, u.boxArgs.data(),
                                      u.boxArgs.size(), stream)
               : loadplan_apply_tensors(binding, u.tensorArgs.data(),
                                        u.tensorArgs.size(), stream);
}

void checkOnDevice(const TestPlan &p, Where where, bool boxes,
                   std::mt19937_64 &rng) {
  PlanPtr plan = openPlan(p);
  Memory host(p);
  for (auto &s : host.storages)
    fillRandom(s, rng);
  DeviceStorages storages(p, host);
  BindingPtr binding = bindCuda(plan.get(), storages);
  ASSERT_TRUE(binding);
  Update u = makeUpdate(p, rng);
  auto expected = referenceAfter(p, host.storages, u);
  PlacedUpdate placed(u, where);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  ASSERT_TRUE(isOk(applyUpdate(binding.get(), u, boxes, stream)));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaStreamDestroy(stream));
  auto got = storages.download();
  for (size_t s = 0; s < got.size(); ++s)
    ASSERT_EQ(got[s], expected[s]) << "storage " << s;
}

/// checkOnDevice of `p` from device, misaligned device and pinned host
/// sources, tensors and boxes.
void checkFromEverySource(const TestPlan &p, std::mt19937_64 &rng) {
  for (Where where : {Where::Device, Where::DeviceMisaligned, Where::Pinned})
    for (bool boxes : {false, true})
      checkOnDevice(p, where, boxes, rng);
}

TEST(Cuda, DeviceCountAnswersWithoutAGpu) {
  int32_t count = -1;
  ASSERT_TRUE(isOk(loadplan_cuda_device_count(&count)));
  EXPECT_GE(count, 0);
}

TEST(Cuda, RandomPlansFromDeviceMemory) {
  SKIP_WITHOUT_GPU();
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    RandomPlanBuilder builder(seed);
    TestPlan p = builder.build(8, 9);
    for (Where where : {Where::Device, Where::DeviceMisaligned})
      for (bool boxes : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "seed " << seed);
        checkOnDevice(p, where, boxes, builder.rng);
      }
  }
}

TEST(Cuda, LargeCopies) {
  SKIP_WITHOUT_GPU();
  RandomPlanBuilder builder(3);
  checkFromEverySource(builder.buildLarge(2053, 1031), builder.rng);
}

TEST(Cuda, ConvertingWrites) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(41);
  checkFromEverySource(convertingPlan(), rng);
}

TEST(Cuda, TransformingWrites) {
  // Marlin's words computed by the kernel, also from sources 2 bytes off a
  // word (a view into a byte buffer): never a misaligned word load.
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(43);
  checkFromEverySource(transformingPlan(), rng);
}

TEST(Cuda, PinnedHostSources) {
  SKIP_WITHOUT_GPU();
  for (uint64_t seed = 30; seed <= 35; ++seed) {
    RandomPlanBuilder builder(seed);
    TestPlan p = builder.build(6, 40);
    checkOnDevice(p, Where::Pinned, seed % 2, builder.rng);
  }
}

TEST(Cuda, RefusedBatchesLeaveDeviceMemoryAlone) {
  SKIP_WITHOUT_GPU();
  TestPlan p = samplePlan();
  PlanPtr plan = openPlan(p);
  std::mt19937_64 rng(5);
  Memory host(p);
  for (auto &s : host.storages)
    fillRandom(s, rng);
  DeviceStorages storages(p, host);
  BindingPtr binding = bindCuda(plan.get(), storages);
  Update u = makeUpdate(p, rng);
  {
    // Pageable host memory: the kernel cannot read it.
    Update pageable = makeUpdate(p, rng);
    PlacedUpdate placed(pageable, Where::Pageable);
    EXPECT_TRUE(isError(loadplan_apply_tensors(binding.get(),
                                               pageable.tensorArgs.data(),
                                               pageable.tensorArgs.size(),
                                               nullptr),
                        LOADPLAN_STATUS_INVALID_UPDATE,
                        "tensor 0 ('q') is pageable host memory"));
  }
  PlacedUpdate placed(u, Where::Device);
  auto batch = u.tensorArgs;
  batch.push_back(batch[1]);
  EXPECT_TRUE(isError(loadplan_apply_tensors(binding.get(), batch.data(),
                                             batch.size(), nullptr),
                      LOADPLAN_STATUS_INVALID_UPDATE, "sent twice"));
  auto boxes = u.boxArgs;
  boxes.pop_back();
  boxes.push_back(u.boxArgs[0]);
  EXPECT_TRUE(isError(loadplan_apply_boxes(binding.get(), boxes.data(),
                                           boxes.size(), nullptr),
                      LOADPLAN_STATUS_INVALID_UPDATE, "sent twice"));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(storages.download(), host.storages);
}

/// The binding's counts after one apply of a random plan from `where`.
loadplan_binding_stats_t statsAfterOneApply(Where where, bool boxes) {
  RandomPlanBuilder builder(41);
  TestPlan p = builder.buildLarge(2053, 1031);
  PlanPtr plan = openPlan(p);
  Memory host(p);
  DeviceStorages storages(p, host);
  BindingPtr binding = bindCuda(plan.get(), storages);
  Update u = makeUpdate(p, builder.rng);
  PlacedUpdate placed(u, where);
  EXPECT_TRUE(isOk(applyUpdate(binding.get(), u, boxes, nullptr)));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  loadplan_binding_stats_t stats{};
  EXPECT_TRUE(isOk(loadplan_binding_stats(binding.get(), &stats)));
  return stats;
}

TEST(Cuda, AnApplyFromDeviceMemoryIsOneCopyAndOneKernel) {
  SKIP_WITHOUT_GPU();
  for (bool boxes : {false, true}) {
    loadplan_binding_stats_t stats = statsAfterOneApply(Where::Device, boxes);
    EXPECT_EQ(stats.applies, 1u);
    EXPECT_EQ(stats.kernel_launches, 1u);
    EXPECT_EQ(stats.memcpy_calls, 1u);
  }
  // From pinned host memory the contiguous box goes to the copy engine (one
  // more call) and the transposed one to the kernel.
  loadplan_binding_stats_t stats = statsAfterOneApply(Where::Pinned, true);
  EXPECT_EQ(stats.applies, 1u);
  EXPECT_EQ(stats.kernel_launches, 1u);
  EXPECT_EQ(stats.memcpy_calls, 2u);
}

TEST(Cuda, BackToBackUpdatesOnTwoStreams) {
  SKIP_WITHOUT_GPU();
  RandomPlanBuilder builder(77);
  TestPlan p = builder.build(10, 30);
  PlanPtr plan = openPlan(p);
  Memory host(p);
  DeviceStorages storages(p, host);
  BindingPtr binding = bindCuda(plan.get(), storages);
  cudaStream_t streams[2];
  CUDA_OK(cudaStreamCreate(&streams[0]));
  CUDA_OK(cudaStreamCreate(&streams[1]));
  Memory expected(p);
  expected.storages = host.storages;
  std::vector<std::unique_ptr<Update>> updates;
  std::vector<std::unique_ptr<PlacedUpdate>> placed;
  for (int round = 0; round < 6; ++round) {
    updates.push_back(std::make_unique<Update>(makeUpdate(p, builder.rng)));
    applyReference(p, expected, *updates.back());
    placed.push_back(std::make_unique<PlacedUpdate>(*updates.back(), Where::Device));
    Update &u = *updates.back();
    // Alternate streams; waiting for the other one keeps the updates in
    // order, so the last one wins.
    cudaStream_t s = streams[round % 2];
    if (round) {
      CUDA_OK(cudaStreamSynchronize(streams[(round + 1) % 2]));
    }
    ASSERT_TRUE(isOk(loadplan_apply_boxes(binding.get(), u.boxArgs.data(),
                                          u.boxArgs.size(), s)));
  }
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(storages.download(), expected.storages);
  cudaStreamDestroy(streams[0]);
  cudaStreamDestroy(streams[1]);
}

} // namespace
