//===- ScheduleAgreement.cpp - Agree on a schedule through a store -*- C++ -*-===//
//
// loadplan_schedule_agree: every rank writes its offer (schedule_format.h,
// "Offers") under its key; rank 0 reads them all, builds the schedule with
// buildSchedule and writes the answer; every rank, rank 0 too, reads the
// answer back, so that all parse the same bytes; last, rank 0 waits until
// every rank has it, since it may serve the store the others read. The
// offer's one writer and one reader are here.
//
//===----------------------------------------------------------------------===//

#include "Schedule.h"
#include "../Status.h"
#include "loadplan/format/ByteIO.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <unordered_map>

using namespace loadplan;
using namespace loadplan::transfer;
using loadplan_format::ByteReader;
using loadplan_format::ByteWriter;
using loadplan_format::Field;

namespace {

//===----------------------------------------------------------------------===//
// Offers: the writer
//===----------------------------------------------------------------------===//

/// The bytes of `offer`; throws INVALID_ARGUMENT saying what in it is wrong.
std::string writeOffer(const loadplan_agree_options_t &o,
                       const loadplan_schedule_offer_t &offer) {
  if (offer.role != LOADPLAN_OFFER_REFUSAL) {
    if (o.num_senders < 1 || o.num_senders >= o.world_size)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "num_senders ", o.num_senders,
           " must leave room for receivers among ", o.world_size, " ranks");
    if (!loadplan_engine_name(o.engine))
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "unknown engine ", o.engine);
  }
  ByteWriter w;
  w.bytes.append(LOADPLAN_OFFER_MAGIC, LOADPLAN_OFFER_MAGIC_SIZE);
  w.u32(uint32_t(o.rank));
  w.u32(offer.role);
  w.u32(o.engine);
  w.u64(o.join_below);
  w.u32(o.sequential ? 1 : 0);
  switch (offer.role) {
  case LOADPLAN_OFFER_SENDER: {
    require(offer.tensors || !offer.num_tensors, "offer tensors is NULL");
    require(offer.holdings || !offer.num_holdings, "offer holdings is NULL");
    w.u64(offer.staging_cap);
    w.u32(uint32_t(offer.num_tensors));
    for (size_t i = 0; i < offer.num_tensors; ++i) {
      const loadplan_checkpoint_tensor_t &t = offer.tensors[i];
      require(t.name || !t.name_size, "a tensor's name is NULL");
      require(t.shape || !t.rank, "a tensor's shape is NULL");
      w.str(std::string_view(t.name, t.name_size));
      w.u32(t.dtype);
      w.u32(t.rank);
      for (uint32_t k = 0; k < t.rank; ++k)
        w.i64(t.shape[k]);
    }
    w.u32(uint32_t(offer.num_holdings));
    for (size_t i = 0; i < offer.num_holdings; ++i) {
      const loadplan_holding_t &h = offer.holdings[i];
      if (h.tensor >= offer.num_tensors)
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "holding ", i, " names tensor ",
             h.tensor, " of ", offer.num_tensors);
      if (!h.starts != !h.stops)
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "holding ", i,
             " has starts or stops NULL but not both");
      w.u32(h.tensor);
      w.u8(h.starts ? 1 : 0);
      for (uint32_t k = 0; h.starts && k < offer.tensors[h.tensor].rank; ++k) {
        w.i64(h.starts[k]);
        w.i64(h.stops[k]);
      }
    }
    break;
  }
  case LOADPLAN_OFFER_RECEIVER: {
    require(offer.plan && offer.plan->plan, "a receiver's offer has no plan");
    require(offer.plan_data && offer.plan_size >= LOADPLAN_PLAN_HEADER_SIZE,
            "a receiver's offer has no plan bytes");
    uint64_t fingerprint =
        loadplan_format::loadU64(static_cast<const uint8_t *>(offer.plan_data) +
                                 loadplan_format::FileHeader::kFingerprintAt);
    if (fingerprint != offer.plan->plan->fingerprint)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "the plan bytes (fingerprint ",
           loadplan_format::hex64(fingerprint), ") are not the plan's (",
           loadplan_format::hex64(offer.plan->plan->fingerprint), ")");
    w.u64(offer.staging_cap);
    w.u8(offer.atomic ? 1 : 0);
    w.u64(offer.plan_size);
    w.bytes.append(static_cast<const char *>(offer.plan_data), offer.plan_size);
    break;
  }
  case LOADPLAN_OFFER_REFUSAL:
    require(offer.message || !offer.message_size,
            "a refusal's message is NULL");
    w.str(std::string_view(offer.message, offer.message_size));
    break;
  default:
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "unknown offer role ", offer.role);
  }
  return std::move(w.bytes);
}

//===----------------------------------------------------------------------===//
// Offers: the reader
//===----------------------------------------------------------------------===//

/// An offer as rank 0 reads it; the plan bytes point into the offer's.
struct Offer {
  uint32_t rank = 0, role = 0, engine = 0;
  uint64_t joinBelow = 0;
  uint32_t sequential = 0;
  uint64_t stagingCap = 0;
  std::vector<Tensor> tensors;
  struct Held {
    uint32_t tensor = 0;
    bool boxed = false;
    std::vector<int64_t> starts, stops;
  };
  std::vector<Held> holdings;
  bool atomic = false;
  const uint8_t *plan = nullptr;
  size_t planSize = 0;
  std::string message;
};

/// "rank 2's set-up data ": how messages about an offer start.
std::string offerOf(int32_t rank) {
  return concat("rank ", rank, "'s set-up data ");
}

/// Reads of one rank's offer: every flaw is an INVALID_ARGUMENT naming the
/// rank.
class OfferReader : public ByteReader {
public:
  OfferReader(const std::string &bytes, int32_t rank)
      : ByteReader(reinterpret_cast<const uint8_t *>(bytes.data()),
                   bytes.size()),
        rank(rank) {}

  [[noreturn]] void bad(const std::string &why) const {
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, offerOf(rank), why);
  }
  /// A count of records of at least `minBytes` each.
  uint32_t count(const Field &what, size_t minBytes) {
    uint32_t n = u32(what);
    if (n > left() / minBytes)
      bad(concat("is malformed: ", n, " ", what.str(), " cannot fit in the ",
                 left(), " bytes left at byte ", offset()));
    return n;
  }

protected:
  [[noreturn]] void truncated(const Field &what, size_t n) override {
    bad("is malformed: truncated: " + shortfall(what, n));
  }

private:
  int32_t rank;
};

Offer readOffer(const std::string &bytes, int32_t rank) {
  OfferReader r(bytes, rank);
  const uint8_t *magic = r.take(LOADPLAN_OFFER_MAGIC_SIZE, "magic");
  if (std::memcmp(magic, LOADPLAN_OFFER_MAGIC, LOADPLAN_OFFER_MAGIC_SIZE))
    r.bad("is not a loadplan offer: the magic is not \"" LOADPLAN_OFFER_MAGIC
          "\" (a rank of another loadplan version?)");
  Offer o;
  o.rank = r.u32("rank");
  if (o.rank != uint32_t(rank))
    r.bad(concat("says it is rank ", o.rank));
  o.role = r.u32("role");
  o.engine = r.u32("engine");
  o.joinBelow = r.u64("join_below");
  o.sequential = r.u32("sequential");
  switch (o.role) {
  case LOADPLAN_OFFER_SENDER: {
    o.stagingCap = r.u64("staging cap");
    o.tensors.resize(r.count("tensors", 12));
    for (Tensor &t : o.tensors) {
      t.name = r.str("tensor name");
      t.dtype = r.u32("tensor dtype");
      t.shape = r.i64s(r.count("tensor dims", 8), "tensor shape");
    }
    o.holdings.resize(r.count("holdings", 5));
    for (size_t i = 0; i < o.holdings.size(); ++i) {
      Offer::Held &h = o.holdings[i];
      h.tensor = r.u32("holding tensor");
      if (h.tensor >= o.tensors.size())
        r.bad(concat("is malformed: holding ", i, " names tensor ", h.tensor,
                     " of ", o.tensors.size()));
      h.boxed = r.u8("holding boxed") != 0;
      for (size_t k = 0; h.boxed && k < o.tensors[h.tensor].shape.size(); ++k) {
        h.starts.push_back(r.i64("holding box"));
        h.stops.push_back(r.i64("holding box"));
      }
    }
    break;
  }
  case LOADPLAN_OFFER_RECEIVER: {
    o.stagingCap = r.u64("staging cap");
    o.atomic = r.u8("atomic") != 0;
    uint64_t size = r.u64("plan size");
    if (size > r.left())
      r.bad(concat("is malformed: a plan of ", size, " bytes, but ", r.left(),
                   " are left"));
    o.planSize = size_t(size);
    o.plan = r.take(o.planSize, "plan");
    break;
  }
  case LOADPLAN_OFFER_REFUSAL:
    o.message = r.str("refusal");
    break;
  default:
    r.bad(concat("is malformed: unknown role ", o.role));
  }
  if (r.left())
    r.bad(concat("is malformed: ", r.left(), " bytes follow the offer"));
  return o;
}

//===----------------------------------------------------------------------===//
// Rank 0: the schedule of every offer
//===----------------------------------------------------------------------===//

std::string quoted(const char *name) { return concat("'", name, "'"); }

/// The schedule of `offers` (one per rank, in rank order); throws a
/// StatusError saying why there is none.
std::unique_ptr<Schedule> scheduleOf(const std::vector<Offer> &offers,
                                     int32_t numSenders, int32_t worldSize) {
  for (const Offer &o : offers)
    if (o.role == LOADPLAN_OFFER_REFUSAL)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "rank ", o.rank,
           " refused the set-up: ", o.message);
  std::set<std::string> engines;
  for (const Offer &o : offers) {
    const char *name = loadplan_engine_name(o.engine);
    if (!name)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, offerOf(int32_t(o.rank)),
           "asks for unknown engine ", o.engine);
    engines.insert(quoted(name));
  }
  if (engines.size() != 1)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "ranks ask for different engines: ",
         std::vector<std::string>(engines.begin(), engines.end()));
  for (const Offer &o : offers)
    if (o.joinBelow != offers.front().joinBelow ||
        o.sequential != offers.front().sequential)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "ranks ask for different "
           "messages or rounds: rank 0 for join_below ", offers.front().joinBelow,
           " and sequential ", offers.front().sequential, ", rank ", o.rank,
           " for ", o.joinBelow, " and ", o.sequential);
  size_t senders = 0;
  bool misplaced = false;
  for (const Offer &o : offers)
    if (o.role == LOADPLAN_OFFER_SENDER) {
      ++senders;
      misplaced |= o.rank >= uint32_t(numSenders);
    }
  if (senders != size_t(numSenders) || misplaced)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "ranks disagree on num_senders (",
         numSenders, " on rank 0)");

  // The checkpoint's tensors in the order the senders first declare them.
  std::vector<const Tensor *> tensors;
  std::unordered_map<std::string_view, uint32_t> index;
  for (const Offer &o : offers)
    for (const Tensor &t : o.tensors) {
      auto [it, fresh] = index.emplace(t.name, uint32_t(tensors.size()));
      if (fresh) {
        tensors.push_back(&t);
        continue;
      }
      const Tensor &first = *tensors[it->second];
      if (first.dtype != t.dtype || first.shape != t.shape)
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "senders declare ",
             quote(t.name), " differently: ", tensorText(first), " and ",
             tensorText(t));
    }

  std::vector<loadplan_checkpoint_tensor_t> specTensors;
  for (const Tensor *t : tensors)
    specTensors.push_back({t->name.data(), t->name.size(), t->dtype,
                           uint32_t(t->shape.size()), t->shape.data()});
  std::vector<std::vector<loadplan_holding_t>> held;
  std::vector<loadplan_sender_spec_t> specSenders;
  std::vector<std::unique_ptr<loadplan_plan_t>> plans;
  std::vector<loadplan_receiver_spec_t> specReceivers;
  held.reserve(offers.size());
  for (const Offer &o : offers) {
    if (o.role == LOADPLAN_OFFER_SENDER) {
      std::vector<loadplan_holding_t> &hs = held.emplace_back();
      for (const Offer::Held &h : o.holdings)
        hs.push_back({index.at(o.tensors[h.tensor].name),
                      h.boxed ? h.starts.data() : nullptr,
                      h.boxed ? h.stops.data() : nullptr});
      specSenders.push_back(
          {int32_t(o.rank), o.stagingCap, hs.data(), hs.size()});
    } else {
      auto plan = std::make_unique<loadplan_plan_t>();
      try {
        plan->plan = parsePlan(o.plan, o.planSize);
      } catch (StatusError &e) {
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "rank ", o.rank,
             "'s plan: ", e.message);
      }
      specReceivers.push_back(
          {int32_t(o.rank), o.stagingCap, o.atomic ? 1u : 0u, plan.get()});
      plans.push_back(std::move(plan));
    }
  }
  loadplan_schedule_spec_t spec{offers.front().engine, worldSize,
                                specTensors.data(),    specTensors.size(),
                                specSenders.data(),    specSenders.size(),
                                specReceivers.data(),  specReceivers.size(),
                                offers.front().joinBelow,
                                offers.front().sequential};
  return buildSchedule(spec);
}

/// Rank 0's answer to `offers`: OK and the schedule file, or why not.
std::string answer(const std::vector<std::string> &offers, int32_t numSenders,
                   int32_t worldSize) {
  ByteWriter w;
  try {
    std::vector<Offer> read;
    for (size_t r = 0; r < offers.size(); ++r)
      read.push_back(readOffer(offers[r], int32_t(r)));
    std::unique_ptr<Schedule> s = scheduleOf(read, numSenders, worldSize);
    w.u32(LOADPLAN_STATUS_OK);
    w.bytes.append(reinterpret_cast<const char *>(s->bytes.data()),
                   s->bytes.size());
  } catch (StatusError &e) {
    w.u32(e.code);
    w.bytes += e.message;
  }
  return std::move(w.bytes);
}

//===----------------------------------------------------------------------===//
// The store
//===----------------------------------------------------------------------===//

/// The caller's store under `prefix`, with the messages of its failures.
class Meeting {
public:
  Meeting(const loadplan_agree_options_t &o)
      : store(*o.store), prefix(o.prefix ? o.prefix : ""), rank(o.rank),
        timeoutMs(o.timeout_ms > 0 ? o.timeout_ms : 60000) {}

  void set(const std::string &key, const std::string &value,
           const char *doing) {
    std::string k = prefix + key;
    if (store.set(store.context, k.data(), k.size(), value.data(),
                  value.size()) != 0)
      lost(doing);
  }

  /// The values of `keys` (rank -> key), each waited for until one timeout
  /// from now has passed; throws naming the ranks whose keys did not come.
  std::vector<std::string>
  get(const std::vector<std::pair<int32_t, std::string>> &keys,
      const char *doing) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
    std::vector<std::string> values(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      if (fetch(keys[i].second, left(deadline), values[i], doing))
        continue;
      std::vector<int32_t> late{keys[i].first};
      std::string ignored;
      for (size_t j = i + 1; j < keys.size(); ++j)
        if (!fetch(keys[j].second, 1, ignored, doing))
          late.push_back(keys[j].first);
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", double(timeoutMs) / 1000);
      fail(LOADPLAN_STATUS_IO_ERROR, "rank ", rank, " waited ", seconds,
           " s for ranks ", late, " while ", doing, ", in vain");
    }
    return values;
  }

private:
  using Clock = std::chrono::steady_clock;

  static int64_t left(Clock::time_point deadline) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - Clock::now())
                  .count();
    return std::max<int64_t>(ms, 1);
  }

  /// False when `key` did not come in `ms`.
  bool fetch(const std::string &key, int64_t ms, std::string &out,
             const char *doing) {
    std::string k = prefix + key;
    out.resize(std::max<size_t>(out.capacity(), 4096));
    for (;;) {
      int64_t n = store.get(store.context, k.data(), k.size(), out.data(),
                            out.size(), ms);
      if (n == LOADPLAN_STORE_TIMEOUT)
        return false;
      if (n == LOADPLAN_STORE_PEER_GONE)
        fail(LOADPLAN_STATUS_IO_ERROR, "rank ", rank, " gave up while ", doing,
             ": a rank of the transfer is gone");
      if (n < 0)
        lost(doing);
      bool fits = size_t(n) <= out.size();
      out.resize(size_t(n));
      if (fits)
        return true;
    }
  }

  [[noreturn]] void lost(const char *doing) const {
    fail(LOADPLAN_STATUS_IO_ERROR, "rank ", rank,
         " lost the rendezvous store while ", doing,
         ": the process that serves it is gone (rank 0's, where rank 0 made "
         "it: it exited or was killed)");
  }

  const loadplan_store_t &store;
  std::string prefix;
  int32_t rank;
  int64_t timeoutMs;
};

std::vector<std::pair<int32_t, std::string>>
rankKeys(const char *stem, int32_t from, int32_t worldSize) {
  std::vector<std::pair<int32_t, std::string>> keys;
  for (int32_t r = from; r < worldSize; ++r)
    keys.emplace_back(r, concat(stem, r));
  return keys;
}

} // namespace

std::unique_ptr<Schedule>
loadplan::transfer::agreeOnSchedule(const loadplan_agree_options_t &o,
                                    const loadplan_schedule_offer_t &offer) {
  require(o.store && o.store->set && o.store->get,
          "the agreement needs a store with set and get");
  if (o.world_size < 2 || o.rank < 0 || o.rank >= o.world_size)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "rank ", o.rank, " of ",
         o.world_size, " is not a rank of a transfer (two ranks or more)");
  std::string mine;
  try {
    mine = writeOffer(o, offer);
  } catch (StatusError &e) {
    // Told to every rank, which would otherwise wait for this one in vain.
    loadplan_schedule_offer_t refusal{};
    refusal.role = LOADPLAN_OFFER_REFUSAL;
    refusal.message = e.message.data();
    refusal.message_size = e.message.size();
    mine = writeOffer(o, refusal);
  }

  Meeting store(o);
  const char *handing = "handing in its set-up data";
  store.set(concat("desc/", o.rank), mine, handing);
  if (o.rank == 0) {
    std::vector<std::string> offers =
        store.get(rankKeys("desc/", 1, o.world_size), handing);
    offers.insert(offers.begin(), std::move(mine));
    store.set("schedule", answer(offers, o.num_senders, o.world_size), handing);
  }
  std::string reply = std::move(
      store.get({{0, "schedule"}}, "waiting for rank 0's schedule")[0]);
  store.set(concat("settled/", o.rank), "1",
            "waiting for every rank to take the schedule");
  if (o.rank == 0)
    store.get(rankKeys("settled/", 0, o.world_size),
              "waiting for every rank to take the schedule");

  if (reply.size() < 4)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "rank 0's answer has ", reply.size(),
         " bytes, too few for a status");
  const auto *bytes = reinterpret_cast<const uint8_t *>(reply.data());
  uint32_t code = loadplan_format::loadU32(bytes);
  if (code > LOADPLAN_STATUS_INTERNAL)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "rank 0's answer has status ", code,
         ", which is none");
  if (code != LOADPLAN_STATUS_OK)
    throw StatusError(loadplan_status_code_t(code), reply.substr(4));
  return parseSchedule(bytes + 4, reply.size() - 4);
}
