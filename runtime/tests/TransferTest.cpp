//===- TransferTest.cpp - Transfers between processes over Gloo --*- C++ -*-===//
//
// Each test forks its ranks (2 to 6 processes), which connect over TCP on
// loopback through a file store and run a schedule: full, sliced and M-to-N
// updates from replicas, TP and FSDP shards into TP receivers with a
// fallback and expert subsets. Every receiver's live memory must equal the
// reference application of its plan to the same full tensors, its fallback
// buffer the whole tensor, and the bytes it received exactly what its plan
// needs (the model for FULL). Failures: a rank that fails at a round, a bad
// input, a plan that is not the schedule's and a rank that dies must give
// every other rank the error (and leave atomic receivers untouched); a rank
// that dies in the middle of an update, within 2 s of its death, far inside
// the timeout. Every rank is bounded in time.
//
//===----------------------------------------------------------------------===//

#include "TransferTestUtil.h"

#include "../src/transfer/Schedule.h"

#include <chrono>
#include <csignal>
#include <functional>
#include <set>
#include <sys/mman.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace loadplan::testing;

namespace {

/// A fresh directory for a file store.
std::string storeDir() {
  char path[] = "/tmp/loadplan-transfer-XXXXXX";
  if (!mkdtemp(path))
    throw std::runtime_error("mkdtemp failed");
  return path;
}

CommPtr connect(int rank, int size, const std::string &dir, int64_t timeoutMs,
                std::string &error) {
  loadplan_gloo_options_t options;
  loadplan_gloo_options_init(&options);
  options.hostname = "127.0.0.1";
  options.store_path = dir.c_str();
  options.timeout_ms = timeoutMs;
  loadplan_comm_t *comm = nullptr;
  error = take(loadplan_comm_create_gloo(rank, size, &options, &comm));
  return CommPtr(comm);
}

/// The full tensor of checkpoint tensor `t` in update `seed`.
std::vector<uint8_t> fullTensor(const TensorDecl &t, uint64_t seed, size_t index) {
  std::mt19937_64 rng(seed * 1000 + index);
  std::vector<uint8_t> bytes(size_t(t.bytes()));
  fillRandom(bytes, rng);
  return bytes;
}

/// Box `box` of a full tensor, packed.
std::vector<uint8_t> pack(const TensorDecl &t, const TestBox &box,
                          const std::vector<uint8_t> &full) {
  TestEntry e;
  e.dtype = t.dtype;
  e.shape = t.shape;
  if (box.lo.empty())
    return full;
  return packBox(e, box, full);
}

/// How the senders hold the checkpoint.
enum class Layout { Replica, RowShards, TpShards };

/// One scenario: `senders` then `receivers` ranks of TP receivers (tpPlan).
struct Topology {
  int senders, receivers;
  uint32_t engine;
  Layout layout;
  bool atomic = false;
  uint64_t cap = 0;
  /// Rows of a "big" weight added to every plan (addBigWeight); 0: none.
  int64_t bigRows = 0;
  /// Whether every plan has converting writes (addConvertingNames).
  bool converting = false;
  /// Whether every plan has transforming writes (addTransformingNames).
  bool transforming = false;
  /// Experts of every plan (tpPlan): many make many small pieces.
  int64_t experts = 4;
  /// The schedule's join_below and sequential (ScheduleDecl), and whether
  /// each engine times a link probe.
  uint64_t joinBelow = 0;
  bool sequential = false;
  bool probe = false;
  /// Colocated: senders hold their tensors in a memfd, receivers read it.
  bool colocated = false;

  std::vector<TestPlan> plans;
  std::vector<PlanPtr> handles;
  ScheduleDecl decl;

  void build() {
    for (int r = 0; r < receivers; ++r) {
      plans.push_back(tpPlan(receivers, r, experts));
      if (bigRows)
        addBigWeight(plans.back(), receivers, r, bigRows, 1024);
      if (converting)
        addConvertingNames(plans.back(), receivers, r);
      if (transforming)
        addTransformingNames(plans.back(), receivers, r);
      handles.push_back(openPlan(plans.back()));
    }
    decl.engine = engine;
    decl.world = senders + receivers;
    decl.joinBelow = joinBelow;
    decl.sequential = sequential;
    decl.tensors = tensorsOf(plans[0]);
    for (int s = 0; s < senders; ++s) {
      SenderDecl x{s, cap, {}};
      if (layout == Layout::Replica)
        x.holdings = wholeOf(decl.tensors);
      else if (layout == Layout::RowShards)
        x.holdings = shardsOf(decl.tensors, senders, s);
      else
        x.holdings = tpShards(s);
      decl.senders.push_back(x);
    }
    for (int r = 0; r < receivers; ++r)
      decl.receivers.push_back({senders + r, cap, atomic, handles[r].get()});
  }

  /// A Megatron-style TP trainer: qkv rows, o columns, experts split,
  /// the rest replicated.
  std::vector<HoldingDecl> tpShards(int s) const {
    std::vector<HoldingDecl> out;
    for (uint32_t t = 0; t < decl.tensors.size(); ++t) {
      const TensorDecl &td = decl.tensors[t];
      if (td.name == "qkv" || td.name == "o") {
        size_t dim = td.name == "o" ? 1 : 0;
        TestBox box{{0, 0}, td.shape};
        std::tie(box.lo[dim], box.hi[dim]) =
            chunkOf(td.shape[dim], senders, s);
        out.push_back({t, box});
      } else if (td.name.rfind("expert.", 0) == 0) {
        if (std::stoi(td.name.substr(7)) % senders == s)
          out.push_back({t, {}});
      } else {
        out.push_back({t, {}});
      }
    }
    return out;
  }

  uint64_t modelBytes() const {
    uint64_t n = 0;
    for (const TensorDecl &t : decl.tensors)
      n += uint64_t(t.bytes());
    return n;
  }
};

/// What a rank does in one update and what it checks after it.
struct RankRun {
  Topology &sc;
  int rank;
  loadplan_transfer_t *transfer = nullptr;
  const loadplan::transfer::Schedule *schedule = nullptr;
  // Receiver state.
  std::unique_ptr<Memory> memory;
  std::vector<uint8_t> fallback;
  std::vector<loadplan_target_layout_t> layouts;

  bool isSender() const { return rank < sc.senders; }
  int receiver() const { return rank - sc.senders; }

  /// Creates the engine; "" or the error.
  std::string create(loadplan_comm_t *comm, loadplan_schedule_t *schedule,
                     const loadplan_plan_t *planOverride = nullptr,
                     int32_t failRound = -1) {
    loadplan_receiver_args_t args{};
    loadplan_fallback_buffer_t fb{};
    if (!isSender()) {
      const TestPlan &plan = sc.plans[receiver()];
      memory = std::make_unique<Memory>(plan);
      std::mt19937_64 rng(77 + rank);
      for (auto &s : memory->storages)
        fillRandom(s, rng);
      layouts = memory->layouts();
      fallback.assign(2, 0);
      fb = {"scale", 5, fallback.data(), fallback.size()};
      args.plan = const_cast<loadplan_plan_t *>(
          planOverride ? planOverride : sc.handles[receiver()].get());
      args.layouts = layouts.data();
      args.num_layouts = layouts.size();
      args.num_threads = 1;
      args.fallbacks = &fb;
      args.num_fallbacks = 1;
    }
    loadplan_transfer_options_t options;
    loadplan_transfer_options_init(&options);
    options.num_threads = 1;
    options.debug_fail_round = failRound;
    options.link_probe = sc.probe;
    options.colocated = sc.colocated;
    this->schedule = schedule->schedule.get();
    return take(loadplan_transfer_create(comm, schedule, isSender() ? nullptr : &args,
                                         &options, &transfer));
  }

  /// Sends (a sender) or receives (a receiver) update `seed`; "" or the
  /// error. `corrupt` passes a wrong shape.
  std::string update(uint64_t seed, bool corrupt = false) {
    std::vector<std::vector<uint8_t>> data;
    std::vector<loadplan_held_tensor_t> held;
    std::vector<std::vector<int64_t>> shapes;
    if (isSender()) {
      const SenderDecl &x = sc.decl.senders[rank];
      for (const HoldingDecl &h : x.holdings) {
        const TensorDecl &t = sc.decl.tensors[h.tensor];
        data.push_back(pack(t, h.box, fullTensor(t, seed, h.tensor)));
        shapes.push_back(h.box.lo.empty() ? t.shape : h.box.extents());
      }
      if (corrupt)
        shapes[0][0] += 1;
      // Colocated: every held tensor in one new memfd per update (a trainer
      // that reallocates its buffers every time), 64-byte aligned.
      std::vector<size_t> at;
      size_t total = 0;
      for (const auto &d : data) {
        at.push_back(total);
        total += (d.size() + 63) / 64 * 64;
      }
      if (sc.colocated) {
        shared = SharedFile(std::max<size_t>(total, 1));
        for (size_t i = 0; i < data.size(); ++i)
          std::memcpy(shared.data + at[i], data[i].data(), data[i].size());
      }
      for (size_t i = 0; i < x.holdings.size(); ++i) {
        const TensorDecl &t = sc.decl.tensors[x.holdings[i].tensor];
        const void *bytes = sc.colocated ? static_cast<const void *>(shared.data + at[i])
                                         : data[i].data();
        held.push_back({t.name.data(), t.name.size(), bytes, t.dtype,
                        uint32_t(shapes[i].size()), shapes[i].data()});
      }
    }
    return take(loadplan_transfer_update(transfer, held.data(), held.size(), nullptr));
  }

  /// A sender's memory in a memfd, mapped shared; the descriptor stays
  /// open, as receivers open it through /proc.
  struct SharedFile {
    uint8_t *data = nullptr;
    size_t size = 0;
    int fd = -1;
    SharedFile() = default;
    explicit SharedFile(size_t bytes) : size(bytes) {
      fd = memfd_create("loadplan-test", MFD_CLOEXEC);
      if (fd < 0 || ftruncate(fd, off_t(bytes)) != 0)
        throw std::runtime_error("memfd_create failed");
      void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED)
        throw std::runtime_error("mmap failed");
      data = static_cast<uint8_t *>(p);
    }
    SharedFile &operator=(SharedFile &&o) noexcept {
      std::swap(data, o.data);
      std::swap(size, o.size);
      std::swap(fd, o.fd);
      return *this;
    }
    ~SharedFile() {
      if (data)
        munmap(data, size);
      if (fd >= 0)
        close(fd);
    }
  };
  SharedFile shared;

  /// Live memory now (none on a sender).
  std::vector<std::vector<uint8_t>> snapshot() const {
    return memory ? memory->storages : std::vector<std::vector<uint8_t>>{};
  }

  /// A receiver's memory, fallback and byte count after update `seed`
  /// (`before` is its memory before); "" or what differs.
  std::string check(uint64_t seed, const std::vector<std::vector<uint8_t>> &before) {
    loadplan_transfer_stats_t stats{};
    if (std::string e = take(loadplan_transfer_stats(transfer, &stats)); !e.empty())
      return e;
    // One message per schedule message, and the probe's bytes those of an
    // update.
    uint64_t messages = 0;
    for (const auto &p : schedule->pieces)
      messages += !(p.flags & LOADPLAN_PIECE_JOINED) &&
                  (isSender() ? int(p.sender) == rank
                              : int(p.receiver) == receiver());
    if (sc.colocated) {
      // A header from each sender to each of its receivers and, the memory
      // being new each update, its table; no data.
      std::set<std::pair<uint32_t, uint32_t>> pairs;
      for (const auto &p : schedule->pieces)
        pairs.insert({p.sender, p.receiver});
      messages = 0;
      for (const auto &[from, to] : pairs)
        messages += 2 * (isSender() ? int(from) == rank : int(to) == receiver());
      if (!isSender() && !stats.mappings)
        return "a colocated receiver has nothing mapped";
      if (stats.bytes_sent)
        return "a colocated sender sent bytes";
    }
    if ((isSender() ? stats.messages_sent : stats.messages_received) != messages)
      return concat(isSender() ? "sent " : "received ",
                    isSender() ? stats.messages_sent : stats.messages_received,
                    " messages, the schedule has ", messages);
    if (sc.probe && !(sc.colocated && isSender()) && (stats.probe_seconds <= 0 ||
                     stats.probe_bytes != stats.bytes_sent +
                                              stats.bytes_received +
                                              stats.bytes_local))
      return concat("the probe took ", stats.probe_seconds, " s for ",
                    stats.probe_bytes, " bytes");
    if (!sc.probe && (stats.probe_seconds || stats.probe_bytes))
      return "a probe ran though none was asked for";
    if (isSender())
      return stats.bytes_received ? "a sender received bytes" : "";
    const TestPlan &plan = sc.plans[receiver()];
    Update u;
    for (size_t i = 0; i < sc.decl.tensors.size(); ++i)
      u.tensors[sc.decl.tensors[i].name] = fullTensor(sc.decl.tensors[i], seed, i);
    if (memory->storages != referenceAfter(plan, before, u))
      return "live memory differs from the reference";
    if (fallback != u.tensors["scale"])
      return "the fallback buffer is not the whole tensor";
    // Colocated receivers read only what their plan needs, whatever the
    // engine.
    uint64_t expected = sc.engine == LOADPLAN_ENGINE_FULL && !sc.colocated
                            ? sc.modelBytes()
                            : neededBytes(sc.handles[receiver()].get());
    if (stats.bytes_received != expected)
      return concat("received ", stats.bytes_received, " bytes, expected ",
                    expected);
    if (stats.bytes_in_place + stats.bytes_staged != expected)
      return "in place + staged is not what was received";
    return "";
  }

  template <typename... Args> static std::string concat(const Args &...args) {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
  }
};

/// Builds `t` on `rank`, connects it to the others and builds the
/// schedule; "" or the error.
std::string join(Topology &t, int rank, const std::string &dir,
                 int64_t timeoutMs, CommPtr &comm, SchedulePtr &schedule) {
  t.build();
  std::string error;
  comm = connect(rank, t.senders + t.receivers, dir, timeoutMs, error);
  if (!comm)
    return error;
  schedule = t.decl.make();
  return "";
}

/// Every rank: connect, build the schedule, create its engine, run two
/// updates and check each.
std::string runScenario(Topology &sc, int rank, const std::string &dir) {
  CommPtr comm;
  SchedulePtr schedule;
  if (std::string e = join(sc, rank, dir, 30000, comm, schedule); !e.empty())
    return e;
  RankRun run{sc, rank};
  if (std::string e = run.create(comm.get(), schedule.get()); !e.empty())
    return e;
  TransferPtr owner(run.transfer);
  for (uint64_t seed : {1, 2}) {
    std::vector<std::vector<uint8_t>> before = run.snapshot();
    if (std::string e = run.update(seed); !e.empty())
      return "update " + std::to_string(seed) + ": " + e;
    if (std::string e = run.check(seed, before); !e.empty())
      return "update " + std::to_string(seed) + ": " + e;
  }
  return "";
}

struct Case {
  const char *name;
  int senders, receivers;
  uint32_t engine;
  Layout layout;
  bool atomic;
  uint64_t cap;
  bool converting = false;
  int64_t experts = 4;
  uint64_t joinBelow = 0;
  bool sequential = false;
  bool probe = false;
  bool colocated = false;
  bool transforming = false;
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

/// Tests over parameters `P` that skip where the runtime has no Gloo.
template <typename P> class WithGloo : public ::testing::TestWithParam<P> {
protected:
  void SetUp() override {
    int32_t gloo = 0;
    ASSERT_TRUE(isOk(loadplan_backend_available(LOADPLAN_BACKEND_GLOO, &gloo)));
    if (!gloo)
      GTEST_SKIP() << "built without Gloo";
  }
};

class TransferGloo : public WithGloo<Case> {};

TEST_P(TransferGloo, ReceiversMatchTheReferenceAndMoveWhatTheyNeed) {
  Case c = GetParam();
  std::string dir = storeDir();
  EXPECT_TRUE(runRanks(c.senders + c.receivers, [&](int rank) {
    Topology sc{c.senders, c.receivers, c.engine, c.layout, c.atomic, c.cap};
    sc.converting = c.converting;
    sc.experts = c.experts;
    sc.joinBelow = c.joinBelow;
    sc.sequential = c.sequential;
    sc.probe = c.probe;
    sc.colocated = c.colocated;
    sc.transforming = c.transforming;
    return runScenario(sc, rank, dir);
  }));
}

INSTANTIATE_TEST_SUITE_P(
    Engines, TransferGloo,
    ::testing::Values(
        Case{"FullOneToTwo", 1, 2, LOADPLAN_ENGINE_FULL, Layout::Replica, false, 0},
        Case{"SlicedOneToTwo", 1, 2, LOADPLAN_ENGINE_SLICED, Layout::Replica, false, 0},
        Case{"SlicedTpTwoToFour", 2, 4, LOADPLAN_ENGINE_SLICED, Layout::TpShards, false, 0},
        Case{"MToNTpTwoToFour", 2, 4, LOADPLAN_ENGINE_M_TO_N, Layout::TpShards, false, 0},
        Case{"MToNFsdpFourToTwo", 4, 2, LOADPLAN_ENGINE_M_TO_N, Layout::RowShards, false, 0},
        Case{"FullFsdpFourToTwoSmallCap", 4, 2, LOADPLAN_ENGINE_FULL, Layout::RowShards, false, 64},
        Case{"MToNAtomicSmallCap", 2, 2, LOADPLAN_ENGINE_M_TO_N, Layout::RowShards, true, 64},
        // Writes that convert (bf16 into f32, f32 into fp8): staged and
        // scattered converting, whatever the engine.
        Case{"ConvertingFullOneToTwo", 1, 2, LOADPLAN_ENGINE_FULL, Layout::Replica, false, 0,
             true},
        Case{"ConvertingSlicedOneToTwo", 1, 2, LOADPLAN_ENGINE_SLICED, Layout::Replica, false,
             0, true},
        Case{"ConvertingMToNFsdpFourToTwoSmallCap", 4, 2, LOADPLAN_ENGINE_M_TO_N,
             Layout::RowShards, false, 64, true},
        Case{"ConvertingMToNAtomic", 2, 2, LOADPLAN_ENGINE_M_TO_N, Layout::RowShards, true, 0,
             true},
        // Many small names: pieces between a pair join into few messages,
        // overlapping rounds (a small cap makes many), each engine probing.
        Case{"ManyNamesMToNTpTwoToTwo", 2, 2, LOADPLAN_ENGINE_M_TO_N, Layout::TpShards, false,
             0, true, 256, 0, false, true},
        Case{"ManyNamesMToNTpTwoToTwoAtomicSmallCap", 2, 2, LOADPLAN_ENGINE_M_TO_N,
             Layout::TpShards, true, 1024, true, 256, 0, false, true},
        Case{"ManyNamesMToNFsdpTwoToTwoSmallCap", 2, 2, LOADPLAN_ENGINE_M_TO_N,
             Layout::RowShards, false, 1024, true, 256},
        // The same with every piece a message of its own, rounds in turn.
        Case{"ManyNamesEachPieceAloneSequential", 2, 2, LOADPLAN_ENGINE_M_TO_N,
             Layout::RowShards, false, 1024, true, 256, 1, true, true},
        // Colocated: receivers read the senders' memfds in place, each
        // engine, converting writes, atomic, a probe.
        Case{"ColocatedFullOneToTwo", 1, 2, LOADPLAN_ENGINE_FULL, Layout::Replica, false, 0,
             true, 4, 0, false, true, true},
        Case{"ColocatedSlicedTpTwoToFour", 2, 4, LOADPLAN_ENGINE_SLICED, Layout::TpShards,
             false, 0, false, 4, 0, false, false, true},
        Case{"ColocatedMToNFsdpFourToTwo", 4, 2, LOADPLAN_ENGINE_M_TO_N, Layout::RowShards,
             false, 0, true, 256, 0, false, true, true},
        Case{"ColocatedMToNAtomicSmallCap", 2, 2, LOADPLAN_ENGINE_M_TO_N, Layout::RowShards,
             true, 64, true, 4, 0, false, false, true},
        // Writes that transform (Marlin's int4 repack): staged, cut between
        // atoms (a cap of a few atoms per round), scattered transforming,
        // from senders holding whole atoms (row shards of whole subtiles).
        Case{"TransformingSlicedOneToTwo", 1, 2, LOADPLAN_ENGINE_SLICED, Layout::Replica,
             false, 0, false, 4, 0, false, false, false, true},
        Case{"TransformingMToNFsdpFourToTwoSmallCap", 4, 2, LOADPLAN_ENGINE_M_TO_N,
             Layout::RowShards, false, 1024, false, 4, 0, false, false, false, true},
        Case{"TransformingMToNAtomicTwoToFour", 2, 4, LOADPLAN_ENGINE_M_TO_N,
             Layout::RowShards, true, 0, false, 4, 0, false, false, false, true},
        Case{"TransformingColocatedMToNFsdpFourToTwo", 4, 2, LOADPLAN_ENGINE_M_TO_N,
             Layout::RowShards, false, 0, false, 4, 0, false, false, true, true}),
    [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

class TransferFailures : public TransferGloo {};

/// Two senders (row shards) to two atomic receivers, in rounds (small cap).
Topology failureScenario(bool atomic) {
  return Topology{2, 2, LOADPLAN_ENGINE_M_TO_N, Layout::RowShards, atomic, 64};
}

TEST_F(TransferFailures, ARankFailingMidwayFailsEveryRankAndAtomicLeavesMemory) {
  for (bool atomic : {true, false}) {
    std::string dir = storeDir();
    EXPECT_TRUE(runRanks(4, [&](int rank) -> std::string {
      Topology sc = failureScenario(atomic);
      CommPtr comm;
      SchedulePtr schedule;
      if (std::string e = join(sc, rank, dir, 30000, comm, schedule); !e.empty())
        return e;
      // Sender 1 fails at round 1 of the update.
      RankRun run{sc, rank};
      if (std::string e = run.create(comm.get(), schedule.get(), nullptr,
                                     rank == 1 ? 1 : -1);
          !e.empty())
        return e;
      TransferPtr owner(run.transfer);
      std::vector<std::vector<uint8_t>> before = run.snapshot();
      std::string e = run.update(1);
      if (e.find("rank 1 (sender 1) failed the update: debug_fail_round: this rank "
                 "failed on "
                 "purpose at round 1") == std::string::npos)
        return "expected the failure of rank 1, got: " + e;
      if (atomic && run.memory && run.memory->storages != before)
        return "an atomic receiver changed live memory";
      return "";
    }));
  }
}

TEST_F(TransferFailures, BadInputsAndPlansFailEveryRankAndMoveNothing) {
  std::string dir = storeDir();
  EXPECT_TRUE(runRanks(3, [&](int rank) -> std::string {
    Topology sc{1, 2, LOADPLAN_ENGINE_SLICED, Layout::Replica, false, 0};
    CommPtr comm;
    SchedulePtr schedule;
    if (std::string e = join(sc, rank, dir, 30000, comm, schedule); !e.empty())
      return e;
    // Receiver 1 brings receiver 0's plan: every rank refuses the engine.
    RankRun wrong{sc, rank};
    std::string e = wrong.create(comm.get(), schedule.get(),
                                 rank == 2 ? sc.handles[0].get() : nullptr);
    if (e.find("rank 2 (receiver 1) refused the set-up: receiver 1: the plan is "
                   "not the one the "
               "schedule was made for: both are of layout") ==
        std::string::npos)
      return "expected a plan mismatch on rank 2, got: " + e;
    RankRun run{sc, rank};
    if (std::string e2 = run.create(comm.get(), schedule.get()); !e2.empty())
      return e2;
    TransferPtr owner(run.transfer);
    std::vector<std::vector<uint8_t>> before = run.snapshot();
    e = run.update(1, /*corrupt=*/true);
    if (e.find("rank 0 (sender 0) refused the update: held tensor 0 ('qkv') is "
                   "bfloat16 [17, 8]") ==
        std::string::npos)
      return "expected the sender's bad input, got: " + e;
    if (run.memory && run.memory->storages != before)
      return "a refused update changed live memory";
    // A rank that cannot take part fails the update for all.
    if (rank == 2)
      e = take(loadplan_transfer_fail(run.transfer, LOADPLAN_STATUS_INVALID_UPDATE,
                                      "my model moved", 14));
    else
      e = run.update(2);
    if (e != "invalid_update: rank 2 (receiver 1) refused the update: my model "
                "moved")
      return "expected rank 2's failure, got: " + e;
    if (run.memory && run.memory->storages != before)
      return "a failed update changed live memory";
    // The communicator still works.
    if (std::string e2 = run.update(3); !e2.empty())
      return "after a refused update: " + e2;
    return run.check(3, before);
  }));
}

TEST_F(TransferFailures, ADeadRankFailsTheOthersWithinTheTimeout) {
  std::string dir = storeDir();
  EXPECT_TRUE(runRanks(3, [&](int rank) -> std::string {
    Topology sc{1, 2, LOADPLAN_ENGINE_SLICED, Layout::Replica, true, 0};
    CommPtr comm;
    SchedulePtr schedule;
    if (std::string e = join(sc, rank, dir, 2000, comm, schedule); !e.empty())
      return e;
    RankRun run{sc, rank};
    if (std::string e = run.create(comm.get(), schedule.get()); !e.empty())
      return e;
    if (rank == 2)
      _exit(0); // dies without a word
    TransferPtr owner(run.transfer);
    std::vector<std::vector<uint8_t>> before = run.snapshot();
    std::string e = run.update(1);
    if (e.find("io_error") != 0)
      return "expected an I/O error, got: " + e;
    if (run.memory && run.memory->storages != before)
      return "an atomic receiver changed live memory";
    loadplan_comm_info_t info;
    if (std::string e2 = take(loadplan_comm_info(comm.get(), &info)); !e2.empty())
      return e2;
    return info.failed ? "" : "the communicator is not marked failed";
  }, 40));
}

/// What the ranks of a death test share across fork(): whether receiver
/// 1's live memory began to change, and when a rank died (nowNs()).
struct Shared {
  std::atomic<bool> landing{false};
  std::atomic<int64_t> diedAt{0};
};

/// Which rank dies, and how.
struct Death {
  const char *name;
  int rank;
  bool sigkill; // else _exit
};

void PrintTo(const Death &d, std::ostream *os) { *os << d.name; }

class TransferDeaths : public WithGloo<Death> {};

/// Two senders (row shards) to an atomic receiver 0 (rank 2) and an
/// in-place receiver 1 (rank 3) of a 16 MiB weight in 64 KiB rounds, with a
/// 30 s timeout. The dying rank goes once receiver 1's live memory begins
/// to change: in the middle of the update. Every other rank must fail
/// within 2 s (the socket closing says so, not the timeout) with the dead
/// rank named, the atomic receiver untouched; then all, the dead rank in a
/// new process, make a new communicator and a whole update.
TEST_P(TransferDeaths, ARankDyingMidUpdateFailsEveryOtherRankAtOnce) {
  Death death = GetParam();
  Shared *shared = sharedAcrossFork<Shared>();
  std::string first = storeDir(), second = storeDir();
  auto topology = [] {
    Topology sc{2, 2, LOADPLAN_ENGINE_M_TO_N, Layout::RowShards, true, 64 << 10,
                4096};
    sc.build();
    sc.decl.receivers[1].atomic = false;
    return sc;
  };
  // Connects to the others in `dir` and creates the engine.
  auto start = [](Topology &sc, RankRun &run, int rank, const std::string &dir,
                  CommPtr &comm, SchedulePtr &schedule) {
    std::string error;
    comm = connect(rank, 4, dir, 30000, error);
    if (!comm)
      return error;
    schedule = sc.decl.make();
    return run.create(comm.get(), schedule.get());
  };
  // The update that a rank dies in; "" when this rank failed as it must.
  auto doomed = [&](int rank) -> std::string {
    Topology sc = topology();
    RankRun run{sc, rank};
    CommPtr comm;
    SchedulePtr schedule;
    if (std::string e = start(sc, run, rank, first, comm, schedule); !e.empty())
      return e;
    TransferPtr owner(run.transfer);
    auto die = [&] {
      shared->diedAt = nowNs();
      if (death.sigkill)
        kill(getpid(), SIGKILL);
      _exit(3);
    };
    // Receiver 1 says when its live memory begins to change (the first 64
    // bytes of "big" land in round 0); the dying rank then dies.
    std::atomic<bool> done{false};
    std::thread watcher([&] {
      const uint64_t *live = nullptr;
      std::vector<uint64_t> was;
      if (rank == 3) {
        live = reinterpret_cast<const uint64_t *>(
            run.memory->storages.back().data());
        was.assign(live, live + 8);
      }
      while (!done && !shared->landing) {
        for (size_t i = 0; i < was.size(); ++i)
          if (__atomic_load_n(live + i, __ATOMIC_RELAXED) != was[i])
            shared->landing = true;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      if (!done && rank == death.rank)
        die();
    });
    std::vector<std::vector<uint8_t>> before = run.snapshot();
    std::string e = run.update(1);
    int64_t failedAt = nowNs();
    done = true;
    watcher.join();
    if (rank == death.rank)
      return "rank " + std::to_string(rank) + " did not die; its update: " + e;
    if (!shared->diedAt)
      return "the update ended before rank " + std::to_string(death.rank) +
             " died: " + (e.empty() ? "it succeeded" : e);
    double ms = double(failedAt - shared->diedAt) / 1e6;
    std::fprintf(stderr, "rank %d failed %.1f ms after rank %d died: %s\n",
                 rank, ms, death.rank, e.c_str());
    if (ms > 2000)
      return "the update failed " + std::to_string(ms) +
             " ms after the death, not within 2 s (the timeout is 30 s): " + e;
    std::string dead = "rank " + std::to_string(death.rank);
    if (e.find("io_error: ") != 0 ||
        e.find(dead + " is gone: its connection ") == std::string::npos)
      return "expected an I/O error naming " + dead + ", got: " + e;
    if (rank == 2 && run.memory->storages != before)
      return "the atomic receiver changed live memory";
    loadplan_comm_info_t info;
    if (std::string e2 = take(loadplan_comm_info(comm.get(), &info));
        !e2.empty())
      return e2;
    return info.failed ? "" : "the communicator is not marked failed";
  };
  EXPECT_TRUE(runRanks(4, [&](int rank) -> std::string {
    if (rank != death.rank) {
      if (std::string e = doomed(rank); !e.empty())
        return e;
    } else {
      // The dying rank runs in a child; this process takes its place after.
      if (std::string e = inDyingChild([&] { return doomed(rank); }, 3);
          !e.empty())
        return e;
    }
    // A new communicator works, with a new process for the dead rank.
    Topology sc = topology();
    RankRun run{sc, rank};
    CommPtr comm;
    SchedulePtr schedule;
    if (std::string e = start(sc, run, rank, second, comm, schedule);
        !e.empty())
      return "the new communicator: " + e;
    TransferPtr owner(run.transfer);
    std::vector<std::vector<uint8_t>> before = run.snapshot();
    if (std::string e = run.update(2); !e.empty())
      return "the new communicator's update: " + e;
    return run.check(2, before);
  }, 50));
  munmap(shared, sizeof(Shared));
}

INSTANTIATE_TEST_SUITE_P(
    Deaths, TransferDeaths,
    ::testing::Values(Death{"SenderKilled", 1, true},
                      Death{"ReceiverExits", 3, false}),
    [](const ::testing::TestParamInfo<Death> &info) { return info.param.name; });

TEST(TransferApi, RefusesBadArguments) {
  loadplan_comm_t *comm = nullptr;
  loadplan_gloo_options_t options;
  loadplan_gloo_options_init(&options);
  EXPECT_TRUE(isError(loadplan_comm_create_gloo(0, 2, &options, &comm),
                      LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "needs a store_path or a store"));
  options.store_path = "/tmp";
  EXPECT_TRUE(isError(loadplan_comm_create_gloo(2, 2, &options, &comm),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "rank 2 of 2"));
  EXPECT_TRUE(isError(loadplan_comm_create_gloo(0, 1, nullptr, &comm),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "options is NULL"));
  uint8_t id[128];
  int32_t nccl = 0;
  ASSERT_TRUE(isOk(loadplan_backend_available(LOADPLAN_BACKEND_NCCL, &nccl)));
  if (!nccl) {
    EXPECT_TRUE(isError(loadplan_nccl_unique_id(id), LOADPLAN_STATUS_UNAVAILABLE, ""));
  }
  EXPECT_TRUE(isError(loadplan_backend_available(7, &nccl),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "unknown backend 7"));
  loadplan_transfer_t *transfer = nullptr;
  EXPECT_TRUE(isError(loadplan_transfer_create(nullptr, nullptr, nullptr, nullptr,
                                               &transfer),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "comm is NULL"));
  EXPECT_TRUE(isError(loadplan_transfer_update(nullptr, nullptr, 0, nullptr),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "transfer is NULL"));
}

TEST(TransferApi, SaysWhatLiesInSharedMemory) {
  // Two pages of a memfd mapped shared, and a heap buffer.
  long page = sysconf(_SC_PAGESIZE);
  int fd = memfd_create("loadplan-shared-check", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t(2 * page)), 0);
  void *mapped = mmap(nullptr, size_t(2 * page), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  auto *file = static_cast<uint8_t *>(mapped);
  std::vector<uint8_t> heap(size_t(4 * page));
  const void *data[] = {file, file + page, file + page, heap.data(), nullptr,
                        heap.data()};
  uint64_t bytes[] = {uint64_t(2 * page), 16, uint64_t(page + 1), 16, 0, 0};
  uint8_t shared[6] = {9, 9, 9, 9, 9, 9};
  ASSERT_TRUE(isOk(loadplan_shared_memory_check(data, bytes, 6, shared)));
  // The whole file; a part; past its end (not); the heap (not); empty.
  EXPECT_EQ(std::vector<uint8_t>(shared, shared + 6),
            (std::vector<uint8_t>{1, 1, 0, 0, 1, 1}));
  munmap(mapped, size_t(2 * page));
  ASSERT_TRUE(isOk(loadplan_shared_memory_check(data, bytes, 1, shared)));
  EXPECT_EQ(shared[0], 0) << "an unmapped file is no longer shared memory";
  close(fd);
  EXPECT_TRUE(isOk(loadplan_shared_memory_check(nullptr, nullptr, 0, nullptr)));
  EXPECT_TRUE(isError(loadplan_shared_memory_check(data, nullptr, 1, shared),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "is NULL"));
}

/// Rank 0 of a world of one, sender and receiver of an M-to-N schedule
/// from row shards (TransferApi tests drive both roles by hand).
struct OneRank {
  Topology sc{1, 1, LOADPLAN_ENGINE_M_TO_N, Layout::RowShards, false, 0};
  std::string dir = storeDir(), error;
  CommPtr comm;
  SchedulePtr schedule;
  std::unique_ptr<Memory> memory;
  std::vector<loadplan_target_layout_t> layouts;
  std::vector<uint8_t> fallback = std::vector<uint8_t>(2);
  loadplan_fallback_buffer_t fb{"scale", 5, nullptr, 2};
  loadplan_receiver_args_t args{};

  OneRank() {
    sc.build();
    sc.decl.receivers[0].rank = 0;
    sc.decl.world = 1;
    comm = connect(0, 1, dir, 5000, error);
    schedule = sc.decl.make();
    memory = std::make_unique<Memory>(sc.plans[0]);
    layouts = memory->layouts();
    fb.data = fallback.data();
    args = {sc.handles[0].get(), layouts.data(), layouts.size(), 1, &fb, 1};
  }
};

bool haveGloo() {
  int32_t gloo = 0;
  return isOk(loadplan_backend_available(LOADPLAN_BACKEND_GLOO, &gloo)) && gloo;
}

TEST(TransferApi, ColocatedCudaMemoryNeedsItsDevice) {
  if (!haveGloo())
    GTEST_SKIP() << "built without Gloo";
  int32_t gpus = 0;
  ASSERT_TRUE(isOk(loadplan_cuda_device_count(&gpus)));
  if (gpus)
    GTEST_SKIP() << "a GPU is here (CudaColocatedTest runs it)";
  OneRank one;
  ASSERT_TRUE(one.comm) << one.error;
  loadplan_transfer_options_t options;
  loadplan_transfer_options_init(&options);
  EXPECT_EQ(options.colocated_device, -1);
  loadplan_transfer_t *raw = nullptr;
  // A CUDA device without a colocated transfer means nothing.
  options.colocated_device = 0;
  EXPECT_TRUE(isError(loadplan_transfer_create(one.comm.get(), one.schedule.get(),
                                               &one.args, &options, &raw),
                      LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "colocated_device is 0 but the transfer is not colocated"));
  // Colocated CUDA memory on a machine without a GPU (or a runtime built
  // without CUDA): refused, saying so, on every rank.
  options.colocated = 1;
  loadplan_status_t status = loadplan_transfer_create(
      one.comm.get(), one.schedule.get(), &one.args, &options, &raw);
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(loadplan_status_code(status), LOADPLAN_STATUS_UNAVAILABLE);
  std::string message = loadplan_status_message(status);
  loadplan_status_free(status);
  EXPECT_TRUE(message.find("no CUDA device") != std::string::npos ||
              message.find("built without CUDA") != std::string::npos)
      << message;
  EXPECT_EQ(raw, nullptr);
}

TEST(TransferApi, OneRankCopiesItsOwnPieces) {
  if (!haveGloo())
    GTEST_SKIP() << "built without Gloo";
  // Rank 0 is sender and receiver: no transport ops, local copies.
  OneRank one;
  ASSERT_TRUE(one.comm) << one.error;
  Topology &sc = one.sc;
  TestPlan &plan = sc.plans[0];
  Memory &memory = *one.memory;
  std::vector<uint8_t> &fallback = one.fallback;
  loadplan_transfer_t *raw = nullptr;
  ASSERT_TRUE(isOk(loadplan_transfer_create(one.comm.get(), one.schedule.get(),
                                            &one.args, nullptr, &raw)));
  TransferPtr transfer(raw);
  std::vector<std::vector<uint8_t>> data;
  std::vector<loadplan_held_tensor_t> held;
  Update u;
  for (size_t i = 0; i < sc.decl.tensors.size(); ++i) {
    const TensorDecl &t = sc.decl.tensors[i];
    data.push_back(fullTensor(t, 5, i));
    u.tensors[t.name] = data.back();
  }
  for (size_t i = 0; i < sc.decl.tensors.size(); ++i) {
    const TensorDecl &t = sc.decl.tensors[i];
    held.push_back({t.name.data(), t.name.size(), data[i].data(), t.dtype,
                    uint32_t(t.shape.size()), t.shape.data()});
  }
  auto before = memory.storages;
  ASSERT_TRUE(isOk(loadplan_transfer_update(transfer.get(), held.data(),
                                            held.size(), nullptr)));
  EXPECT_EQ(memory.storages, referenceAfter(plan, before, u));
  EXPECT_EQ(fallback, u.tensors["scale"]);
  loadplan_transfer_stats_t stats;
  ASSERT_TRUE(isOk(loadplan_transfer_stats(transfer.get(), &stats)));
  EXPECT_EQ(stats.bytes_sent + stats.bytes_received, 0u);
  EXPECT_EQ(stats.bytes_local, neededBytes(sc.handles[0].get()));
  // Releasing mappings: nothing to do where the transfer is not colocated;
  // a NULL transfer is refused.
  EXPECT_TRUE(isOk(loadplan_transfer_release_mappings(transfer.get())));
  EXPECT_TRUE(isError(loadplan_transfer_release_mappings(nullptr),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "transfer is NULL"));
  // A held tensor of a dtype code that names none: the message gives it.
  held[0].dtype = 99;
  EXPECT_TRUE(isError(loadplan_transfer_update(transfer.get(), held.data(),
                                               held.size(), nullptr),
                      LOADPLAN_STATUS_INVALID_UPDATE,
                      " is code 99 (no such dtype) ["));
  held[0].dtype = sc.decl.tensors[0].dtype;
  EXPECT_EQ(memory.storages, referenceAfter(plan, before, u));
  // A held tensor missing: refused before anything moves.
  held.pop_back();
  EXPECT_TRUE(isError(loadplan_transfer_update(transfer.get(), held.data(),
                                               held.size(), nullptr),
                      LOADPLAN_STATUS_INVALID_UPDATE,
                      "rank 0 (sender 0, receiver 0) refused the update: the update "
                      "lacks 'expert.3'"));
}

} // namespace
