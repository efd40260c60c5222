//===- NcclTransferTest.cpp - Transfers over NCCL on one GPU -----*- C++ -*-===//
//
// Built with the CUDA toolkit and nccl.h; skipped where NCCL does not load
// or cudaGetDeviceCount finds no device. One GPU allows one NCCL rank (NCCL
// refuses two ranks on one device), so rank 0 is both the sender and a
// TP=2 receiver and its pieces go through ncclSend/ncclRecv to itself:
// column blocks packed on the device, a replicated norm staged and
// scattered by the CUDA executor, the rest received in place, a fallback
// into its buffer. With two GPUs or more, one sender thread and TP
// receiver threads each on its own GPU. Live memory must equal the
// reference.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"
#include "TransferTestUtil.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

using namespace loadplan::testing;

namespace {

bool haveNccl() {
  int32_t available = 0;
  return isOk(loadplan_backend_available(LOADPLAN_BACKEND_NCCL, &available)) &&
         available;
}

TEST(NcclTransfer, OneRankSendsToItselfForEveryEngine) {
  if (!haveNccl())
    GTEST_SKIP() << "NCCL does not load or no CUDA device";
  uint8_t id[LOADPLAN_NCCL_UNIQUE_ID_BYTES];
  ASSERT_TRUE(isOk(loadplan_nccl_unique_id(id)));
  loadplan_comm_t *raw = nullptr;
  ASSERT_TRUE(isOk(loadplan_comm_create_nccl(0, 1, id, 0, 30000, &raw)));
  CommPtr comm(raw);

  TestPlan plan = tpPlan(2, 0);
  PlanPtr handle = openPlan(plan);
  std::vector<TensorDecl> tensors = tensorsOf(plan);
  std::mt19937_64 rng(21);
  for (uint32_t engine : {LOADPLAN_ENGINE_FULL, LOADPLAN_ENGINE_SLICED,
                          LOADPLAN_ENGINE_M_TO_N}) {
    for (bool atomic : {false, true}) {
      SchedulePtr schedule =
          wholeToOne(tensors, engine, 0, 0, 1, 64, atomic, handle.get()).make();

      Memory host(plan);
      for (auto &s : host.storages)
        fillRandom(s, rng);
      DeviceStorages storages(host);
      std::vector<loadplan_target_layout_t> layouts =
          Memory::layoutsAt(plan, storages.bases);
      OnDevice fallback(std::vector<uint8_t>(2, 0));
      loadplan_fallback_buffer_t fb{"scale", 5, fallback.data, 2};
      loadplan_receiver_args_t args{handle.get(), layouts.data(),
                                    layouts.size(), 0, &fb, 1};
      loadplan_transfer_t *t = nullptr;
      ASSERT_TRUE(isOk(loadplan_transfer_create(comm.get(), schedule.get(),
                                                &args, nullptr, &t)));
      TransferPtr transfer(t);

      Update u;
      std::vector<std::unique_ptr<OnDevice>> sources;
      std::vector<loadplan_held_tensor_t> held;
      for (const TensorDecl &td : tensors) {
        std::vector<uint8_t> &bytes = u.tensors[td.name];
        bytes.resize(size_t(td.bytes()));
        fillRandom(bytes, rng);
        sources.push_back(std::make_unique<OnDevice>(bytes));
        held.push_back({td.name.data(), td.name.size(), sources.back()->data,
                        td.dtype, uint32_t(td.shape.size()), td.shape.data()});
      }
      ASSERT_TRUE(isOk(loadplan_transfer_update(transfer.get(), held.data(),
                                                held.size(), nullptr)));
      EXPECT_EQ(storages.read(), referenceAfter(plan, host.storages, u))
          << loadplan_engine_name(engine) << (atomic ? " atomic" : "");
      EXPECT_EQ(fallback.read(), u.tensors["scale"]);
      loadplan_transfer_stats_t stats;
      ASSERT_TRUE(isOk(loadplan_transfer_stats(transfer.get(), &stats)));
      EXPECT_EQ(stats.bytes_local, summaryOf(schedule.get()).bytes_moved);

      // Host memory is refused before anything moves.
      held[0].data = u.tensors[tensors[0].name].data();
      EXPECT_TRUE(isError(loadplan_transfer_update(transfer.get(), held.data(),
                                                   held.size(), nullptr),
                          LOADPLAN_STATUS_INVALID_UPDATE,
                          "is not CUDA device memory"));
    }
  }
}

TEST(NcclTransfer, OneSenderToTpReceiversOnOtherGpus) {
  if (!haveNccl())
    GTEST_SKIP() << "NCCL does not load or no CUDA device";
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2)
    GTEST_SKIP() << "needs two GPUs (one NCCL rank per GPU)";
  int receivers = devices >= 5 ? 4 : devices >= 3 ? 2 : 1;
  int world = 1 + receivers;
  std::vector<TestPlan> plans;
  std::vector<PlanPtr> handles;
  for (int r = 0; r < receivers; ++r) {
    plans.push_back(tpPlan(receivers, r));
    handles.push_back(openPlan(plans.back()));
  }
  std::vector<TensorDecl> tensors = tensorsOf(plans[0]);
  uint8_t id[LOADPLAN_NCCL_UNIQUE_ID_BYTES];
  ASSERT_TRUE(isOk(loadplan_nccl_unique_id(id)));
  std::mt19937_64 rng(8);
  Update u;
  for (const TensorDecl &td : tensors) {
    std::vector<uint8_t> &bytes = u.tensors[td.name];
    bytes.resize(size_t(td.bytes()));
    fillRandom(bytes, rng);
  }
  // One thread per rank, each on its own GPU: NCCL ranks of one process.
  std::vector<std::string> errors(world);
  auto rankMain = [&](int rank) {
    auto failed = [&](const std::string &what, loadplan_status_t s) {
      if (!s)
        return false;
      errors[rank] = what + ": " + loadplan_status_message(s);
      loadplan_status_free(s);
      return true;
    };
    if (cudaSetDevice(rank) != cudaSuccess) {
      errors[rank] = "cudaSetDevice failed";
      return;
    }
    loadplan_comm_t *rawComm = nullptr;
    if (failed("comm", loadplan_comm_create_nccl(rank, world, id, rank, 60000,
                                                 &rawComm)))
      return;
    CommPtr comm(rawComm);
    ScheduleDecl decl;
    decl.engine = LOADPLAN_ENGINE_M_TO_N;
    decl.world = world;
    decl.tensors = tensors;
    decl.senders.push_back({0, 0, wholeOf(tensors)});
    for (int r = 0; r < receivers; ++r)
      decl.receivers.push_back({1 + r, 0, false, handles[r].get()});
    loadplan_schedule_t *rawSchedule = nullptr;
    if (failed("schedule", decl.build(&rawSchedule)))
      return;
    SchedulePtr schedule(rawSchedule);
    std::unique_ptr<DeviceStorages> memory;
    std::vector<loadplan_target_layout_t> layouts;
    std::unique_ptr<OnDevice> fallback;
    loadplan_fallback_buffer_t fb{};
    loadplan_receiver_args_t args{};
    Memory host(plans[std::max(rank - 1, 0)]);
    if (rank > 0) {
      memory = std::make_unique<DeviceStorages>(host);
      layouts = Memory::layoutsAt(plans[rank - 1], memory->bases);
      fallback = std::make_unique<OnDevice>(std::vector<uint8_t>(2, 0));
      fb = {"scale", 5, fallback->data, 2};
      args = {handles[rank - 1].get(), layouts.data(), layouts.size(), 0, &fb, 1};
    }
    loadplan_transfer_t *rawTransfer = nullptr;
    if (failed("create", loadplan_transfer_create(comm.get(), schedule.get(),
                                                  rank ? &args : nullptr,
                                                  nullptr, &rawTransfer)))
      return;
    TransferPtr transfer(rawTransfer);
    std::vector<std::unique_ptr<OnDevice>> sources;
    std::vector<loadplan_held_tensor_t> held;
    if (rank == 0)
      for (const TensorDecl &td : tensors) {
        sources.push_back(std::make_unique<OnDevice>(u.tensors[td.name]));
        held.push_back({td.name.data(), td.name.size(), sources.back()->data,
                        td.dtype, uint32_t(td.shape.size()), td.shape.data()});
      }
    if (failed("update", loadplan_transfer_update(transfer.get(), held.data(),
                                                  held.size(), nullptr)))
      return;
    if (rank == 0)
      return;
    if (memory->read() != referenceAfter(plans[rank - 1], host.storages, u))
      errors[rank] = "live memory differs from the reference";
    else if (fallback->read() != u.tensors["scale"])
      errors[rank] = "the fallback buffer is not the whole tensor";
  };
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      try {
        rankMain(rank);
      } catch (const std::exception &e) { // CUDA failed (CudaTestUtil.h)
        errors[rank] = e.what();
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (int rank = 0; rank < world; ++rank)
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
}

TEST(NcclTransfer, RefusesADeviceThatDoesNotExist) {
  if (!haveNccl())
    GTEST_SKIP() << "NCCL does not load or no CUDA device";
  uint8_t id[LOADPLAN_NCCL_UNIQUE_ID_BYTES];
  ASSERT_TRUE(isOk(loadplan_nccl_unique_id(id)));
  loadplan_comm_t *raw = nullptr;
  EXPECT_TRUE(isError(loadplan_comm_create_nccl(0, 1, id, 1000, 1000, &raw),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "CUDA device 1000"));
}

TEST(NcclTransfer, UnavailableWithoutAGpuSaysWhy) {
  if (haveNccl())
    GTEST_SKIP() << "NCCL is available here";
  uint8_t id[LOADPLAN_NCCL_UNIQUE_ID_BYTES];
  EXPECT_TRUE(isError(loadplan_nccl_unique_id(id), LOADPLAN_STATUS_UNAVAILABLE,
                      "nccl: "));
}

/// Whether the dynamic linker finds a libnccl.so.2 at all on this machine.
bool linkerFindsNccl() {
  void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib)
    dlclose(lib);
  return lib != nullptr;
}

// NCCL's library is found and loaded without a GPU, and the runtime says
// which file it uses.
TEST(NcclTransfer, FindsItsLibraryWithoutAGpu) {
  if (!linkerFindsNccl() && !std::getenv("LOADPLAN_NCCL_LIBRARY"))
    GTEST_SKIP() << "no libnccl.so.2 on this machine";
  const char *path = nullptr;
  ASSERT_TRUE(isOk(loadplan_nccl_library(&path)));
  ASSERT_NE(path, nullptr);
  EXPECT_EQ(path[0], '/') << path;
  EXPECT_NE(std::string(path).find("libnccl.so"), std::string::npos) << path;
  struct stat info{};
  EXPECT_EQ(stat(path, &info), 0) << path;
  const char *again = nullptr;
  ASSERT_TRUE(isOk(loadplan_nccl_library(&again)));
  EXPECT_EQ(std::string(again), std::string(path));
}

// $LOADPLAN_NCCL_LIBRARY names the one file to load: a file that is not
// there is an error naming it, not a quiet fall back to another NCCL. Each
// case runs in a fresh process (the library loads once per process).
TEST(NcclTransfer, TheEnvironmentNamesTheLibrary) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("LOADPLAN_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
        const char *path = nullptr;
        loadplan_status_t status = loadplan_nccl_library(&path);
        if (status)
          std::fprintf(stderr, "%s\n", loadplan_status_message(status));
        std::exit(status && loadplan_status_code(status) == LOADPLAN_STATUS_UNAVAILABLE
                      ? 3
                      : 0);
      },
      testing::ExitedWithCode(3), "LOADPLAN_NCCL_LIBRARY.*/nonexistent/libnccl.so.2");
  if (!linkerFindsNccl())
    return;
  const char *found = nullptr;
  ASSERT_TRUE(isOk(loadplan_nccl_library(&found)));
  std::string expected = found;
  EXPECT_EXIT(
      {
        setenv("LOADPLAN_NCCL_LIBRARY", expected.c_str(), 1);
        const char *path = nullptr;
        loadplan_status_t status = loadplan_nccl_library(&path);
        std::exit(!status && path && expected == path ? 3 : 0);
      },
      testing::ExitedWithCode(3), "");
}

} // namespace
