//===- CudaColocatedTest.cpp - Colocated transfers through CUDA IPC ------===//
//
// Built with the CUDA toolkit; skipped where no GPU is found. A sender
// process and a receiver process on GPU 0 (as a colocated trainer and
// engine often share one GPU), their tables and agreements over Gloo on
// loopback: the receiver reads the sender's cudaMalloc'd tensors through
// CUDA IPC and writes them into its live device memory, which must equal
// the reference application of its plan after every update, for each
// engine, atomic or not; a tensor the sender moves to a new buffer between
// updates is read from the new one. A sender's host memory is refused on
// both ranks before any byte moves.
//
// CUDA is not initialized in the test process before it forks: the GPU
// count comes from a child of its own. So these tests run in a process of
// their own (ctest runs each test alone; bench/gpu_transfer.sh filters
// CudaColocated.*), not after other CUDA tests of the same process, whose
// CUDA state a forked child cannot use.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"
#include "TransferTestUtil.h"

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

using namespace loadplan::testing;

namespace {

/// The number of CUDA devices, asked in a child process.
int gpusInChild() {
  pid_t pid = fork();
  if (pid == 0) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess)
      count = 0;
    _exit(std::min(count, 100));
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
    return 0;
  return WEXITSTATUS(status);
}

template <typename... Args> std::string concat(const Args &...args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

std::string cudaText(cudaError_t e, const char *what) {
  return e == cudaSuccess ? "" : std::string(what) + ": " + cudaGetErrorString(e);
}

/// Tensor `index`'s bytes in update `seed`.
std::vector<uint8_t> tensorBytes(const TensorDecl &t, uint64_t seed, size_t index) {
  std::mt19937_64 rng(seed * 1000 + index);
  std::vector<uint8_t> bytes(size_t(t.bytes()));
  fillRandom(bytes, rng);
  return bytes;
}

/// Rank 0 sends every tensor of a TP=1 plan, rank 1 receives it, over
/// `updates` updates; "" or what went wrong. `hostSource`: the sender
/// passes host memory instead (refused on both ranks, and nothing moves).
std::string runPair(int rank, const std::string &dir, uint32_t engine, bool atomic,
                    int updates, bool hostSource) {
  if (std::string e = cudaText(cudaSetDevice(0), "cudaSetDevice"); !e.empty())
    return e;
  loadplan_gloo_options_t gloo;
  loadplan_gloo_options_init(&gloo);
  gloo.hostname = "127.0.0.1";
  gloo.store_path = dir.c_str();
  gloo.timeout_ms = 30000;
  loadplan_comm_t *rawComm = nullptr;
  if (std::string e = take(loadplan_comm_create_gloo(rank, 2, &gloo, &rawComm));
      !e.empty())
    return e;
  CommPtr comm(rawComm);

  TestPlan plan = tpPlan(1, 0);
  PlanPtr handle = openPlan(plan);
  std::vector<TensorDecl> tensors = tensorsOf(plan);
  SchedulePtr schedule =
      wholeToOne(tensors, engine, 0, 1, 2, 64, atomic, handle.get()).make();
  if (!schedule)
    return "the schedule did not build";

  loadplan_transfer_options_t options;
  loadplan_transfer_options_init(&options);
  options.colocated = 1;
  options.colocated_device = 0;

  std::mt19937_64 rng(7);
  Memory host(plan);
  for (auto &s : host.storages)
    fillRandom(s, rng);
  DeviceStorages storages(host);
  std::vector<loadplan_target_layout_t> layouts = Memory::layoutsAt(plan, storages.bases);
  OnDevice fallback(std::vector<uint8_t>(2, 0));
  loadplan_fallback_buffer_t fb{"scale", 5, fallback.data, 2};
  loadplan_receiver_args_t args{handle.get(), layouts.data(), layouts.size(), 0, &fb, 1};
  loadplan_transfer_t *rawTransfer = nullptr;
  if (std::string e = take(loadplan_transfer_create(
          comm.get(), schedule.get(), rank == 1 ? &args : nullptr, &options,
          &rawTransfer));
      !e.empty())
    return e;
  TransferPtr transfer(rawTransfer);

  // The sender's tensors, one allocation each; before update 2, tensor 0
  // moves to a new buffer (the old one kept, as a trainer's allocator may).
  std::vector<std::unique_ptr<OnDevice>> sources, retired;
  for (size_t i = 0; i < tensors.size(); ++i)
    sources.push_back(std::make_unique<OnDevice>(tensorBytes(tensors[i], 0, i)));
  for (int seed = 1; seed <= updates; ++seed) {
    Update u;
    std::vector<loadplan_held_tensor_t> held;
    std::vector<std::vector<uint8_t>> hostBytes;
    if (rank == 0 && seed == 2) {
      retired.push_back(std::move(sources[0]));
      sources[0] = std::make_unique<OnDevice>(tensorBytes(tensors[0], 0, 0));
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorDecl &td = tensors[i];
      u.tensors[td.name] = tensorBytes(td, uint64_t(seed), i);
      if (rank != 0)
        continue;
      sources[i]->write(u.tensors[td.name]);
      hostBytes.push_back(u.tensors[td.name]);
      const void *data = hostSource ? hostBytes.back().data() : sources[i]->data;
      held.push_back({td.name.data(), td.name.size(), data, td.dtype,
                      uint32_t(td.shape.size()), td.shape.data()});
    }
    std::vector<std::vector<uint8_t>> before;
    if (rank == 1)
      before = storages.read();
    std::string e = take(loadplan_transfer_update(transfer.get(), held.data(),
                                                  held.size(), nullptr));
    if (hostSource) {
      if (e.find("is not CUDA device memory") == std::string::npos)
        return "a host source was not refused as such: " + e;
      if (rank == 1 && storages.read() != before)
        return "a refused update changed live memory";
      return "";
    }
    if (!e.empty())
      return concat("update ", seed, ": ", e);
    if (rank == 0)
      continue;
    if (storages.read() != referenceAfter(plan, before, u))
      return concat("update ", seed, ": live memory is not the plan's application");
    if (fallback.read() != u.tensors["scale"])
      return concat("update ", seed, ": the fallback buffer differs");
    loadplan_transfer_stats_t stats{};
    if (std::string s = take(loadplan_transfer_stats(transfer.get(), &stats)); !s.empty())
      return s;
    if (!stats.mappings)
      return "the receiver has no CUDA IPC handle open";
    // What the plan needs, whatever the engine: read where it lies.
    if (stats.bytes_received != neededBytes(handle.get()))
      return concat("received ", stats.bytes_received, " bytes, the plan needs ",
                    neededBytes(handle.get()));
  }
  return "";
}

std::string tempDir() {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("loadplan-cuda-colocated-" + std::to_string(getpid()) + "-" +
                      std::to_string(std::rand())))
                        .string();
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(CudaColocated, ReceiverReadsTheSendersGpuMemoryThroughIpc) {
  if (gpusInChild() == 0)
    GTEST_SKIP() << "no CUDA device";
  for (uint32_t engine : {LOADPLAN_ENGINE_FULL, LOADPLAN_ENGINE_SLICED,
                          LOADPLAN_ENGINE_M_TO_N})
    for (bool atomic : {false, true}) {
      std::string dir = tempDir();
      EXPECT_TRUE(runRanks(2, [&](int rank) {
        return runPair(rank, dir, engine, atomic, 3, false);
      })) << loadplan_engine_name(engine) << (atomic ? " atomic" : "");
      std::filesystem::remove_all(dir);
    }
}

TEST(CudaColocated, RefusesASendersHostMemoryOnEveryRank) {
  if (gpusInChild() == 0)
    GTEST_SKIP() << "no CUDA device";
  std::string dir = tempDir();
  EXPECT_TRUE(runRanks(2, [&](int rank) {
    return runPair(rank, dir, LOADPLAN_ENGINE_M_TO_N, true, 1, true);
  }));
  std::filesystem::remove_all(dir);
}

} // namespace
