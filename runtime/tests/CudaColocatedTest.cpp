//===- CudaColocatedTest.cpp - Colocated transfers through CUDA IPC ------===//
//
// Built with the CUDA toolkit; skipped where no GPU is found. A sender
// process and a receiver process on GPU 0 (as a colocated trainer and
// engine often share one GPU), their tables and agreements over Gloo on
// loopback: the receiver reads the sender's cudaMalloc'd tensors through
// CUDA IPC and writes them into its live device memory, which must equal
// the reference application of its plan after every update, for each
// engine, atomic or not; the tensors lie at offsets in one 2 MiB segment,
// as torch's caching allocator places them, and a tensor the sender moves
// to a segment of its own between updates is read from the new one. A
// sender's host memory is refused on both ranks before any byte moves.
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
#include <fstream>
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

/// The sender's tensors as torch's caching allocator lays them out: one
/// cudaMalloc'd segment, a multiple of 2 MiB (CUDA's programming guide: IPC
/// shares whole blocks, and smaller allocations may share one), each tensor
/// at its 512-byte aligned offset in it.
struct Segment {
  explicit Segment(const std::vector<uint64_t> &sizes) {
    uint64_t end = 0;
    for (uint64_t n : sizes) {
      offsets.push_back(end);
      end += (n + 511) / 512 * 512;
    }
    size_t bytes = std::max<uint64_t>((end + kTwoMiB - 1) / kTwoMiB * kTwoMiB, kTwoMiB);
    if (cudaMalloc(&base, bytes) != cudaSuccess)
      throw std::runtime_error("cudaMalloc failed");
  }
  ~Segment() { cudaFree(base); }
  Segment(const Segment &) = delete;
  Segment &operator=(const Segment &) = delete;
  void *at(size_t i) const { return static_cast<uint8_t *>(base) + offsets[i]; }
  void write(size_t i, const std::vector<uint8_t> &host) const {
    if (cudaMemcpy(at(i), host.data(), host.size(), cudaMemcpyHostToDevice) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy to the device failed");
  }
  static constexpr uint64_t kTwoMiB = uint64_t(2) << 20;
  void *base = nullptr;
  std::vector<uint64_t> offsets;
};

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

  // The sender's tensors, in one segment; before update 2, tensor 0 moves
  // to a segment of its own (the old one kept, as a trainer's allocator
  // may).
  std::vector<uint64_t> sizes;
  for (const TensorDecl &td : tensors)
    sizes.push_back(td.bytes());
  std::unique_ptr<Segment> segment, moved;
  if (rank == 0)
    segment = std::make_unique<Segment>(sizes);
  // Closes the receiver's handles before the sender frees what they map
  // (cudaIpcOpenMemHandle: freeing exported memory an importer still has
  // open is undefined): the receiver's transfer goes first and says so in
  // a file the sender waits for.
  std::string released = dir + "/released";
  auto finish = [&](std::string error) {
    if (rank == 1) {
      transfer.reset();
      std::ofstream(released) << "closed";
      return error;
    }
    for (int i = 0; i < 600 && !std::filesystem::exists(released); ++i)
      usleep(50000);
    return error;
  };
  for (int seed = 1; seed <= updates; ++seed) {
    Update u;
    std::vector<loadplan_held_tensor_t> held;
    std::vector<std::vector<uint8_t>> hostBytes;
    if (rank == 0 && seed == 2)
      moved = std::make_unique<Segment>(std::vector<uint64_t>{sizes[0]});
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorDecl &td = tensors[i];
      u.tensors[td.name] = tensorBytes(td, uint64_t(seed), i);
      if (rank != 0)
        continue;
      const Segment &in = i == 0 && moved ? *moved : *segment;
      size_t at = i == 0 && moved ? 0 : i;
      in.write(at, u.tensors[td.name]);
      hostBytes.push_back(u.tensors[td.name]);
      const void *data = hostSource ? hostBytes.back().data() : in.at(at);
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
        return finish("a host source was not refused as such: " + e);
      if (rank == 1 && storages.read() != before)
        return finish("a refused update changed live memory");
      return finish("");
    }
    if (!e.empty())
      return finish(concat("update ", seed, ": ", e));
    if (rank == 0)
      continue;
    if (storages.read() != referenceAfter(plan, before, u))
      return finish(concat("update ", seed, ": live memory is not the plan's application"));
    if (fallback.read() != u.tensors["scale"])
      return finish(concat("update ", seed, ": the fallback buffer differs"));
    loadplan_transfer_stats_t stats{};
    if (std::string s = take(loadplan_transfer_stats(transfer.get(), &stats)); !s.empty())
      return finish(s);
    // One segment, then two once tensor 0 moved.
    if (stats.mappings != (seed == 1 ? 1u : 2u))
      return finish(concat("update ", seed, ": the receiver has ", stats.mappings,
                           " CUDA IPC handles open"));
    // What the plan needs, whatever the engine: read where it lies.
    if (stats.bytes_received != neededBytes(handle.get()))
      return finish(concat("received ", stats.bytes_received, " bytes, the plan needs ",
                           neededBytes(handle.get())));
  }
  return finish("");
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
