//===- ScheduleAgreementTest.cpp - loadplan_schedule_agree ------*- C++ -*-===//
//
// Ranks as threads over an in-memory store: every rank gets the schedule
// loadplan_schedule_build makes of the same inputs; a refusal, rank 0's
// build errors and a malformed offer reach every rank naming the rank; a
// late rank and a lost store give IO_ERRORs that say so.
//
//===----------------------------------------------------------------------===//

#include "TransferTestUtil.h"

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>

using namespace loadplan::testing;

namespace {

/// A store in memory; `lost` makes every get fail as a dead server does,
/// `peerGone` as the caller's does once it saw another rank gone.
struct MemoryStore {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::string> values;
  bool lost = false;
  bool peerGone = false;

  void put(const std::string &key, const std::string &value) {
    std::lock_guard<std::mutex> lock(mutex);
    values[key] = value;
    changed.notify_all();
  }

  static int32_t set(void *context, const char *key, size_t keySize,
                     const void *value, size_t valueSize) {
    static_cast<MemoryStore *>(context)->put(
        std::string(key, keySize),
        std::string(static_cast<const char *>(value), valueSize));
    return 0;
  }

  static int64_t get(void *context, const char *key, size_t keySize, void *out,
                     size_t capacity, int64_t timeoutMs) {
    auto *self = static_cast<MemoryStore *>(context);
    std::unique_lock<std::mutex> lock(self->mutex);
    std::string k(key, keySize);
    bool came =
        self->changed.wait_for(lock, std::chrono::milliseconds(timeoutMs), [&] {
          return self->lost || self->values.count(k);
        });
    if (self->lost)
      return LOADPLAN_STORE_LOST;
    if (self->peerGone)
      return LOADPLAN_STORE_PEER_GONE;
    if (!came)
      return LOADPLAN_STORE_TIMEOUT;
    const std::string &v = self->values[k];
    std::memcpy(out, v.data(), std::min(capacity, v.size()));
    return int64_t(v.size());
  }

  loadplan_store_t callbacks() { return {this, &set, &get}; }
};

/// One sender (rank 0, holding every tensor whole) and two TP=2 receivers.
class ScheduleAgree : public ::testing::Test {
protected:
  void SetUp() override {
    for (int64_t r = 0; r < 2; ++r) {
      plans.push_back(tpPlan(2, r));
      planBytes.push_back(plans.back().bytes());
      handles.push_back(openPlan(plans.back()));
    }
    tensors = tensorsOf(plans[0]);
    for (const TensorDecl &t : tensors)
      cTensors.push_back({t.name.data(), t.name.size(), t.dtype,
                          uint32_t(t.shape.size()), t.shape.data()});
    for (uint32_t i = 0; i < tensors.size(); ++i)
      holdings.push_back({i, nullptr, nullptr});
  }

  /// What `rank` offers: rank 0 sends, ranks 1 and 2 receive.
  loadplan_schedule_offer_t offerOf(int32_t rank) const {
    loadplan_schedule_offer_t o{};
    if (rank == 0) {
      o.role = LOADPLAN_OFFER_SENDER;
      o.tensors = cTensors.data();
      o.num_tensors = cTensors.size();
      o.holdings = holdings.data();
      o.num_holdings = holdings.size();
    } else {
      o.role = LOADPLAN_OFFER_RECEIVER;
      o.plan = handles[rank - 1].get();
      o.plan_data = planBytes[rank - 1].data();
      o.plan_size = planBytes[rank - 1].size();
    }
    return o;
  }

  loadplan_agree_options_t optionsOf(int32_t rank, loadplan_store_t *store,
                                     int64_t timeoutMs = 10000) const {
    loadplan_agree_options_t o;
    loadplan_agree_options_init(&o);
    o.rank = rank;
    o.world_size = 3;
    o.num_senders = 1;
    o.store = store;
    o.prefix = "test/";
    o.timeout_ms = timeoutMs;
    return o;
  }

  /// Each rank of `ranks` agrees on its own thread with `offers(rank)` and
  /// `options(rank)`; returns each one's status, with its schedule.
  struct Outcome {
    loadplan_status_t status = nullptr;
    SchedulePtr schedule;
  };
  std::map<int32_t, Outcome>
  agree(const std::vector<int32_t> &ranks,
        const std::function<loadplan_schedule_offer_t(int32_t)> &offers,
        const std::function<loadplan_agree_options_t(int32_t)> &options) {
    std::map<int32_t, Outcome> out;
    for (int32_t r : ranks)
      out[r];
    std::vector<std::thread> threads;
    for (int32_t r : ranks)
      threads.emplace_back([&, r] {
        loadplan_agree_options_t o = options(r);
        loadplan_schedule_offer_t offer = offers(r);
        loadplan_schedule_t *raw = nullptr;
        out[r].status = loadplan_schedule_agree(&o, &offer, &raw);
        out[r].schedule.reset(raw);
      });
    for (std::thread &t : threads)
      t.join();
    return out;
  }

  std::vector<TestPlan> plans;
  std::vector<std::vector<uint8_t>> planBytes;
  std::vector<PlanPtr> handles;
  std::vector<TensorDecl> tensors;
  std::vector<loadplan_checkpoint_tensor_t> cTensors;
  std::vector<loadplan_holding_t> holdings;
  MemoryStore memory;
  loadplan_store_t store = memory.callbacks();
};

TEST_F(ScheduleAgree, EveryRankGetsTheScheduleTheBuilderMakes) {
  ScheduleDecl decl;
  decl.world = 3;
  decl.tensors = tensors;
  decl.senders.push_back({0, 0, {}});
  for (uint32_t i = 0; i < tensors.size(); ++i)
    decl.senders[0].holdings.push_back({i, {}});
  for (int32_t r = 1; r < 3; ++r)
    decl.receivers.push_back({r, 0, false, handles[r - 1].get()});
  SchedulePtr built = decl.make();
  ASSERT_TRUE(built);

  auto got = agree(
      {0, 1, 2}, [&](int32_t r) { return offerOf(r); },
      [&](int32_t r) { return optionsOf(r, &store); });
  for (auto &[rank, outcome] : got) {
    ASSERT_TRUE(isOk(outcome.status)) << "rank " << rank;
    EXPECT_EQ(bytesOf(outcome.schedule.get()), bytesOf(built.get()))
        << "rank " << rank;
  }
}

TEST_F(ScheduleAgree, ARefusalFailsEveryRankNamingTheRank) {
  const std::string why = "cannot plan the update: no place for 'x'";
  auto got = agree(
      {0, 1, 2},
      [&](int32_t r) {
        loadplan_schedule_offer_t o = offerOf(r);
        if (r == 2) {
          o = {};
          o.role = LOADPLAN_OFFER_REFUSAL;
          o.message = why.data();
          o.message_size = why.size();
        }
        return o;
      },
      [&](int32_t r) { return optionsOf(r, &store); });
  for (auto &[rank, outcome] : got)
    EXPECT_TRUE(isError(outcome.status, LOADPLAN_STATUS_INVALID_ARGUMENT,
                        "rank 2 refused the set-up: " + why))
        << "rank " << rank;
}

TEST_F(ScheduleAgree, BadArgumentsOfARankAreItsRefusal) {
  // Rank 1's plan bytes are another plan's: every rank hears of it, rather
  // than waiting for rank 1 in vain.
  TestPlan other = tpPlan(1, 0);
  std::vector<uint8_t> otherBytes = other.bytes();
  auto got = agree(
      {0, 1, 2},
      [&](int32_t r) {
        loadplan_schedule_offer_t o = offerOf(r);
        if (r == 1) {
          o.plan_data = otherBytes.data();
          o.plan_size = otherBytes.size();
        }
        return o;
      },
      [&](int32_t r) { return optionsOf(r, &store); });
  for (auto &[rank, outcome] : got)
    EXPECT_TRUE(
        isError(outcome.status, LOADPLAN_STATUS_INVALID_ARGUMENT,
                "rank 1 refused the set-up: the plan bytes (fingerprint "))
        << "rank " << rank;
}

TEST_F(ScheduleAgree, RankZerosBuildErrorsReachEveryRank) {
  auto got = agree(
      {0, 1, 2}, [&](int32_t r) { return offerOf(r); },
      [&](int32_t r) {
        loadplan_agree_options_t o = optionsOf(r, &store);
        if (r == 2)
          o.engine = LOADPLAN_ENGINE_SLICED;
        return o;
      });
  for (auto &[rank, outcome] : got)
    EXPECT_TRUE(
        isError(outcome.status, LOADPLAN_STATUS_INVALID_ARGUMENT,
                "ranks ask for different engines: ['m_to_n', 'sliced']"))
        << "rank " << rank;
}

TEST_F(ScheduleAgree, AMalformedOfferIsNamed) {
  struct Case {
    std::string bytes, message;
  };
  std::string header =
      std::string(LOADPLAN_OFFER_MAGIC) + std::string("\1\0\0\0", 4);
  // After the engine: u64 join_below, u32 sequential.
  std::string joinAndRounds(12, '\0');
  std::vector<Case> cases = {
      {"{\"role\": \"receiver\"}", "rank 1's set-up data is not a loadplan "
                                   "offer: the magic is not \"LPOFFER2\""},
      {header.substr(0, 10),
       "rank 1's set-up data is malformed: truncated: rank"},
      {header + std::string("\1\0\0\0\2\0\0\0", 8) + "xy",
       "rank 1's set-up data is malformed: truncated: join_below"},
      {header + std::string("\1\0\0\0\2\0\0\0", 8) + joinAndRounds + "xy",
       "rank 1's set-up data is malformed: truncated: staging cap"},
      {header + std::string("\7\0\0\0\2\0\0\0", 8) + joinAndRounds,
       "rank 1's set-up data is malformed: unknown role 7"},
      {std::string(LOADPLAN_OFFER_MAGIC) + std::string("\2\0\0\0", 4),
       "rank 1's set-up data says it is rank 2"},
  };
  for (const Case &c : cases) {
    MemoryStore fresh;
    loadplan_store_t callbacks = fresh.callbacks();
    // Rank 1 is the test: it hands in the bad bytes and takes the answer.
    fresh.put("test/desc/1", c.bytes);
    fresh.put("test/settled/1", "1");
    auto got = agree(
        {0, 2}, [&](int32_t r) { return offerOf(r); },
        [&](int32_t r) { return optionsOf(r, &callbacks); });
    for (auto &[rank, outcome] : got)
      EXPECT_TRUE(
          isError(outcome.status, LOADPLAN_STATUS_INVALID_ARGUMENT, c.message))
          << "rank " << rank;
  }
}

TEST_F(ScheduleAgree, ALateRankIsNamedAndALostStoreSaidSo) {
  auto got = agree(
      {0, 1}, [&](int32_t r) { return offerOf(r); },
      [&](int32_t r) { return optionsOf(r, &store, 200); });
  EXPECT_TRUE(isError(got[0].status, LOADPLAN_STATUS_IO_ERROR,
                      "rank 0 waited 0.2 s for ranks [2] while handing in its "
                      "set-up data, in vain"));
  EXPECT_TRUE(
      isError(got[1].status, LOADPLAN_STATUS_IO_ERROR,
              "rank 1 waited 0.2 s for ranks [0] while waiting for rank "
              "0's schedule, in vain"));

  MemoryStore gone;
  gone.lost = true;
  loadplan_store_t callbacks = gone.callbacks();
  loadplan_agree_options_t o = optionsOf(1, &callbacks);
  loadplan_schedule_offer_t offer = offerOf(1);
  loadplan_schedule_t *raw = nullptr;
  EXPECT_TRUE(isError(loadplan_schedule_agree(&o, &offer, &raw),
                      LOADPLAN_STATUS_IO_ERROR,
                      "rank 1 lost the rendezvous store while waiting for rank "
                      "0's schedule: the process that serves it is gone"));
  EXPECT_EQ(raw, nullptr);
}

TEST_F(ScheduleAgree, AWaitStoppedForAGonePeerSaysSo) {
  MemoryStore watched;
  watched.peerGone = true;
  loadplan_store_t callbacks = watched.callbacks();
  for (int32_t rank : {0, 1}) {
    loadplan_agree_options_t o = optionsOf(rank, &callbacks);
    loadplan_schedule_offer_t offer = offerOf(rank);
    loadplan_schedule_t *raw = nullptr;
    EXPECT_TRUE(isError(
        loadplan_schedule_agree(&o, &offer, &raw), LOADPLAN_STATUS_IO_ERROR,
        rank == 0 ? "rank 0 gave up while handing in its set-up data: a rank "
                    "of the transfer is gone"
                  : "rank 1 gave up while waiting for rank 0's schedule: a "
                    "rank of the transfer is gone"));
    EXPECT_EQ(raw, nullptr);
  }
}

TEST_F(ScheduleAgree, NullArguments) {
  loadplan_agree_options_t o = optionsOf(0, &store);
  loadplan_schedule_offer_t offer = offerOf(0);
  loadplan_schedule_t *raw = nullptr;
  EXPECT_TRUE(isError(loadplan_schedule_agree(nullptr, &offer, &raw),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "options is NULL"));
  EXPECT_TRUE(isError(loadplan_schedule_agree(&o, nullptr, &raw),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "offer is NULL"));
  EXPECT_TRUE(isError(loadplan_schedule_agree(&o, &offer, nullptr),
                      LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "out_schedule is NULL"));
  o.store = nullptr;
  EXPECT_TRUE(isError(loadplan_schedule_agree(&o, &offer, &raw),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "needs a store"));
}

} // namespace
