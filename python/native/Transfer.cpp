//===- Transfer.cpp - The runtime's transfers in loadplan._native -*- C++ -*-===//
//
// Communicators, schedules and transfer engines of the runtime
// (runtime/include/loadplan/transfer.h), in the same module as its plans:
// one binding of the C API, so Python has no mirror of its structs. Like
// the plan binding it takes plain integers (data pointers, dtype codes,
// shapes); loadplan.transfer reads them off torch tensors. Every failed call
// raises TransferError with the runtime's code and message.
//
//===----------------------------------------------------------------------===//

#include "Errors.h"
#include "Handle.h"
#include "Plan.h"
#include "Runtime.h"
#include "TorchTensor.h"

#include "loadplan/transfer.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace nb = nanobind;
using namespace loadplan_python;

namespace {

void checkTransfer(loadplan_status_t status) { check(status, true); }

/// (name, dtype, shape) of a checkpoint tensor, and (name, data, dtype,
/// shape) of a held one, as Python passes them.
using TensorTuple = std::tuple<std::string, uint32_t, std::vector<int64_t>>;
using HeldTuple =
    std::tuple<std::string, uintptr_t, uint32_t, std::vector<int64_t>>;
/// A sender's holding: (tensor index, starts, stops); no starts and stops
/// for the whole tensor.
using HoldingTuple =
    std::tuple<uint32_t, std::optional<std::vector<int64_t>>,
               std::optional<std::vector<int64_t>>>;
using SenderTuple =
    std::tuple<int32_t, uint64_t, std::vector<HoldingTuple>>;
/// (comm_rank, staging_cap, atomic, plan).
using ReceiverTuple = std::tuple<int32_t, uint64_t, bool, Plan *>;
/// (name, data, size_bytes) of a fallback buffer.
using FallbackTuple = std::tuple<std::string, uintptr_t, uint64_t>;
/// What a sender offers to the agreement: (staging_cap, tensors,
/// holdings), the holdings indexing the tensors.
using SenderOffer = std::tuple<uint64_t, std::vector<TensorTuple>,
                               std::vector<HoldingTuple>>;
/// What a receiver offers: (staging_cap, atomic, plan, plan_bytes).
using ReceiverOffer = std::tuple<uint64_t, bool, Plan *, nb::bytes>;

/// The C tensors of `tensors`; they point into `tensors`.
std::vector<loadplan_checkpoint_tensor_t>
toTensors(const std::vector<TensorTuple> &tensors) {
  std::vector<loadplan_checkpoint_tensor_t> ts(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto &[name, dtype, shape] = tensors[i];
    ts[i] = {name.data(), name.size(), dtype,
             static_cast<uint32_t>(shape.size()), shape.data()};
  }
  return ts;
}

/// The C holdings of `holdings`; they point into `holdings`.
std::vector<loadplan_holding_t>
toHoldings(const std::vector<HoldingTuple> &holdings) {
  std::vector<loadplan_holding_t> held;
  for (const auto &[tensor, starts, stops] : holdings) {
    if (starts.has_value() != stops.has_value())
      throw nb::value_error("a holding has starts and stops, or neither");
    held.push_back({tensor, starts ? starts->data() : nullptr,
                    stops ? stops->data() : nullptr});
  }
  return held;
}

/// A store over two Python callables, for Gloo's rendezvous and the
/// schedule's agreement: set(key: str, value: bytes), and get(key: str,
/// timeout_ms: int) -> bytes, or None when the key did not come in time.
/// Either raising means the store cannot be reached, except get raising
/// loadplan.transfer.liveness.PeerGone: another rank is gone. The runtime calls them
/// on the thread that made the call, which holds no GIL meanwhile.
struct PyStore {
  nb::object set, get;

  loadplan_store_t store() { return {this, &PyStore::setFn, &PyStore::getFn}; }

  static int32_t setFn(void *context, const char *key, size_t keySize,
                       const void *value, size_t valueSize) {
    nb::gil_scoped_acquire gil;
    try {
      static_cast<PyStore *>(context)->set(
          nb::str(key, keySize),
          nb::bytes(static_cast<const char *>(value), valueSize));
      return 0;
    } catch (nb::python_error &) {
      return -1; // the runtime reports a lost store
    }
  }

  static int64_t getFn(void *context, const char *key, size_t keySize,
                       void *out, size_t capacity, int64_t timeoutMs) {
    nb::gil_scoped_acquire gil;
    try {
      nb::object got =
          static_cast<PyStore *>(context)->get(nb::str(key, keySize), timeoutMs);
      if (got.is_none())
        return LOADPLAN_STORE_TIMEOUT;
      nb::bytes value = nb::cast<nb::bytes>(got);
      std::memcpy(out, value.c_str(), std::min(value.size(), capacity));
      return static_cast<int64_t>(value.size());
    } catch (nb::python_error &e) {
      nb::object gone =
          nb::module_::import_("loadplan.transfer.liveness").attr("PeerGone");
      return e.matches(gone) ? LOADPLAN_STORE_PEER_GONE : LOADPLAN_STORE_LOST;
    }
  }
};

constexpr char kCommName[] = "communicator", kScheduleName[] = "schedule",
               kTransferName[] = "transfer";

/// A communicator (reference-counted by the runtime).
class Comm : public Handle<loadplan_comm_t, loadplan_comm_release, kCommName> {
public:
  using Handle::Handle;

  static Comm *gloo(int32_t rank, int32_t size, const std::string &hostname,
                    nb::object set, nb::object get, const std::string &prefix,
                    int64_t timeoutMs) {
    PyStore py{std::move(set), std::move(get)};
    loadplan_store_t store = py.store();
    loadplan_gloo_options_t options;
    loadplan_gloo_options_init(&options);
    options.hostname = hostname.c_str();
    options.store = &store;
    options.prefix = prefix.c_str();
    options.timeout_ms = timeoutMs;
    loadplan_comm_t *comm = nullptr;
    loadplan_status_t status;
    {
      nb::gil_scoped_release release;
      status = loadplan_comm_create_gloo(rank, size, &options, &comm);
    }
    checkTransfer(status);
    return new Comm(comm);
  }

  static Comm *nccl(int32_t rank, int32_t size, nb::bytes id, int32_t device,
                    int64_t timeoutMs) {
    if (id.size() != LOADPLAN_NCCL_UNIQUE_ID_BYTES)
      throw nb::value_error("an NCCL unique id has 128 bytes");
    loadplan_comm_t *comm = nullptr;
    loadplan_status_t status;
    {
      nb::gil_scoped_release release;
      status = loadplan_comm_create_nccl(
          rank, size, reinterpret_cast<const uint8_t *>(id.c_str()), device,
          timeoutMs, &comm);
    }
    checkTransfer(status);
    return new Comm(comm);
  }

};

/// A transfer schedule (reference-counted by the runtime).
class Schedule
    : public Handle<loadplan_schedule_t, loadplan_schedule_release, kScheduleName> {
public:
  using Handle::Handle;

  static Schedule *build(uint32_t engine, int32_t worldSize,
                         const std::vector<TensorTuple> &tensors,
                         const std::vector<SenderTuple> &senders,
                         const std::vector<ReceiverTuple> &receivers,
                         uint64_t joinBelow, bool sequential) {
    std::vector<loadplan_checkpoint_tensor_t> ts = toTensors(tensors);
    std::vector<std::vector<loadplan_holding_t>> held(senders.size());
    std::vector<loadplan_sender_spec_t> ss(senders.size());
    for (size_t i = 0; i < senders.size(); ++i) {
      const auto &[rank, cap, holdings] = senders[i];
      held[i] = toHoldings(holdings);
      ss[i] = {rank, cap, held[i].data(), held[i].size()};
    }
    std::vector<loadplan_receiver_spec_t> rs(receivers.size());
    for (size_t i = 0; i < receivers.size(); ++i) {
      const auto &[rank, cap, atomic, plan] = receivers[i];
      if (!plan)
        throw nb::value_error("a receiver has no plan");
      rs[i] = {rank, cap, atomic ? 1u : 0u, plan->get()};
    }
    loadplan_schedule_spec_t spec{engine,    worldSize, ts.data(), ts.size(),
                                  ss.data(), ss.size(), rs.data(), rs.size(),
                                  joinBelow, sequential ? 1u : 0u};
    loadplan_schedule_t *schedule = nullptr;
    loadplan_status_t status;
    {
      nb::gil_scoped_release release;
      status = loadplan_schedule_build(&spec, &schedule);
    }
    checkTransfer(status);
    return new Schedule(schedule);
  }

  /// Collective over the store (loadplan_schedule_agree): a sender gives
  /// (staging_cap, tensors, holdings), a receiver (staging_cap, atomic,
  /// plan, plan_bytes), a refusing rank its message.
  static Schedule *agree(int32_t rank, int32_t worldSize, int32_t numSenders,
                         uint32_t engine, nb::object set, nb::object get,
                         const std::string &prefix, int64_t timeoutMs,
                         uint64_t joinBelow, bool sequential,
                         std::optional<SenderOffer> sender,
                         std::optional<ReceiverOffer> receiver,
                         std::optional<std::string> refusal) {
    if (int(sender.has_value()) + int(receiver.has_value()) +
            int(refusal.has_value()) != 1)
      throw nb::value_error("give one of sender, receiver and refusal");
    loadplan_schedule_offer_t offer{};
    std::vector<loadplan_checkpoint_tensor_t> ts;
    std::vector<loadplan_holding_t> held;
    if (sender) {
      const auto &[cap, tensors, holdings] = *sender;
      ts = toTensors(tensors);
      held = toHoldings(holdings);
      offer.role = LOADPLAN_OFFER_SENDER;
      offer.staging_cap = cap;
      offer.tensors = ts.data();
      offer.num_tensors = ts.size();
      offer.holdings = held.data();
      offer.num_holdings = held.size();
    } else if (receiver) {
      const auto &[cap, atomic, plan, bytes] = *receiver;
      if (!plan)
        throw nb::value_error("a receiver has no plan");
      offer.role = LOADPLAN_OFFER_RECEIVER;
      offer.staging_cap = cap;
      offer.atomic = atomic ? 1u : 0u;
      offer.plan = plan->get();
      offer.plan_data = bytes.c_str();
      offer.plan_size = bytes.size();
    } else {
      offer.role = LOADPLAN_OFFER_REFUSAL;
      offer.message = refusal->data();
      offer.message_size = refusal->size();
    }
    PyStore py{std::move(set), std::move(get)};
    loadplan_store_t store = py.store();
    loadplan_agree_options_t options;
    loadplan_agree_options_init(&options);
    options.engine = engine;
    options.rank = rank;
    options.world_size = worldSize;
    options.num_senders = numSenders;
    options.store = &store;
    options.prefix = prefix.c_str();
    options.timeout_ms = timeoutMs;
    options.join_below = joinBelow;
    options.sequential = sequential ? 1u : 0u;
    loadplan_schedule_t *schedule = nullptr;
    loadplan_status_t status;
    {
      nb::gil_scoped_release release;
      status = loadplan_schedule_agree(&options, &offer, &schedule);
    }
    checkTransfer(status);
    return new Schedule(schedule);
  }

  static Schedule *fromBytes(nb::bytes data) {
    loadplan_schedule_t *schedule = nullptr;
    checkTransfer(
        loadplan_schedule_open_bytes(data.c_str(), data.size(), &schedule));
    return new Schedule(schedule);
  }

  nb::bytes toBytes() const {
    const void *data = nullptr;
    size_t size = 0;
    checkTransfer(loadplan_schedule_bytes(get(), &data, &size));
    return nb::bytes(static_cast<const char *>(data), size);
  }

  nb::dict summary() const {
    loadplan_schedule_summary_t s;
    checkTransfer(loadplan_schedule_summary(get(), &s));
    nb::dict out;
    const char *engine = loadplan_engine_name(s.engine);
    out["engine"] = engine ? engine : "unknown";
    out["world_size"] = s.world_size;
    out["fingerprint"] = s.fingerprint;
    out["checksum"] = s.checksum;
    out["num_tensors"] = s.num_tensors;
    out["num_senders"] = s.num_senders;
    out["num_receivers"] = s.num_receivers;
    out["num_rounds"] = s.num_rounds;
    out["num_pieces"] = s.num_pieces;
    out["num_messages"] = s.num_messages;
    out["overlap"] = (s.flags & LOADPLAN_SCHEDULE_OVERLAP) != 0;
    out["join_below"] = s.join_below;
    out["bytes_moved"] = s.bytes_moved;
    out["bytes_between_ranks"] = s.bytes_between_ranks;
    out["bytes_needed"] = s.bytes_needed;
    out["bytes_in_place"] = s.bytes_in_place;
    out["bytes_staged"] = s.bytes_staged;
    out["bytes_packed"] = s.bytes_packed;
    out["max_sender_staging"] = s.max_sender_staging;
    out["max_receiver_staging"] = s.max_receiver_staging;
    return out;
  }

  std::string text(bool pieces) {
    const char *text = nullptr;
    size_t size = 0;
    checkTransfer(loadplan_schedule_text(get(), pieces ? 1 : 0, &text, &size));
    return std::string(text, size);
  }
};

/// A sender's update: what it holds, read once per update from a dict of
/// torch tensors in one native call (no Python per name), and checked:
/// the one place that says what is wrong with a sender's tensors.
class SendBatch {
public:
  /// `expected`: (name, dtype, shape) of each held box, in the order sent;
  /// `rank` and `device` (torch's spelling) for the messages.
  SendBatch(const std::vector<TensorTuple> &expected, uint32_t rank, std::string device)
      : rank(rank), device(std::move(device)), keySet(nb::steal(PySet_New(nullptr))),
        indexOf(nb::steal(PyDict_New())) {
    for (const auto &[name, dtype, shape] : expected) {
      keys.push_back(nb::steal(PyUnicode_FromStringAndSize(name.data(), name.size())));
      if (PySet_Add(keySet.ptr(), keys.back().ptr()) != 0)
        throw nb::python_error();
      nb::object index = nb::steal(PyLong_FromSize_t(names.size()));
      if (PyDict_SetItem(indexOf.ptr(), keys.back().ptr(), index.ptr()) != 0)
        throw nb::python_error();
      names.push_back(name);
      dtypes.push_back(dtype);
      shapes.push_back(shape);
    }
  }

  /// Reads `given` (name -> tensor): exactly the held names, each of its
  /// dtype and shape, dense, on the device; raises ValueError saying which
  /// name is not so, and how. Writes nothing.
  void read(nb::handle given, uint32_t deviceType, int32_t deviceIndex) {
    clear();
    if (!PyDict_Check(given.ptr()))
      throw nb::type_error("load plan: a sender's update is a dict of tensors");
    std::vector<PyObject *> tensors(keys.size());
    bool complete = PyDict_GET_SIZE(given.ptr()) == static_cast<Py_ssize_t>(keys.size());
    for (size_t i = 0; complete && i < keys.size(); ++i) {
      tensors[i] = PyDict_GetItemWithError(given.ptr(), keys[i].ptr());
      if (!tensors[i] && PyErr_Occurred())
        throw nb::python_error();
      complete = tensors[i] != nullptr;
    }
    if (!complete)
      refuseNames(given);
    check(tensors, deviceType, deviceIndex);
    holdGiven = nb::borrow(given);
    this->given = std::move(tensors);
  }

  /// Reads (name, tensor) pairs from `pairs` (a WeightSource's iterator,
  /// say) as read() reads a dict, keeping the tensors; pairs of names not
  /// held are passed over. An error the iterator raises goes through as
  /// it is, with source_failed() true.
  void readPairs(nb::handle pairs, uint32_t deviceType, int32_t deviceIndex) {
    clear();
    std::vector<PyObject *> tensors(keys.size(), nullptr);
    nb::object iterator = nb::steal(PyObject_GetIter(pairs.ptr()));
    if (!iterator.is_valid())
      throw nb::python_error();
    nb::list items; // keeps every pair (and so its tensor) alive
    while (true) {
      nb::object item = nb::steal(PyIter_Next(iterator.ptr()));
      if (!item.is_valid()) {
        if (PyErr_Occurred()) {
          sourceFailed = true;
          throw nb::python_error();
        }
        break;
      }
      if (!PyTuple_Check(item.ptr()) || PyTuple_GET_SIZE(item.ptr()) != 2)
        throw nb::type_error("load plan: a sender's update yields (name, tensor) pairs");
      PyObject *index = PyDict_GetItemWithError(indexOf.ptr(), PyTuple_GET_ITEM(item.ptr(), 0));
      if (!index) {
        if (PyErr_Occurred())
          throw nb::python_error();
        continue;
      }
      size_t i = PyLong_AsSize_t(index);
      if (tensors[i])
        refuse("yields " + reprOf(keys[i].ptr()) + " twice");
      tensors[i] = PyTuple_GET_ITEM(item.ptr(), 1);
      items.append(item);
    }
    if (std::string what = lacking([&](size_t i) { return tensors[i] != nullptr; });
        !what.empty())
      refuse(what);
    check(tensors, deviceType, deviceIndex);
    holdGiven = std::move(items);
    given = std::move(tensors);
  }

  /// Colocated: the tensors of the last read whose bytes do not lie in
  /// shared memory, where receivers could read them (none: an empty list).
  /// The same tensors at the same addresses as the last read found all
  /// shared are not looked up again (the engine's own table check still
  /// proves each file before an update reads it).
  nb::list unshared() {
    nb::list out;
    bool same = given.size() == sharedGiven.size();
    for (size_t i = 0; same && i < given.size(); ++i)
      same = given[i] == sharedGiven[i] && held[i].data == sharedData[i];
    if (same)
      return out;
    std::vector<const void *> data(held.size());
    std::vector<uint64_t> bytes(held.size());
    for (size_t i = 0; i < held.size(); ++i) {
      uint64_t n = loadplan_dtype_size(held[i].dtype);
      for (uint32_t k = 0; k < held[i].rank; ++k)
        n *= uint64_t(held[i].shape[k]);
      data[i] = held[i].data;
      bytes[i] = n;
    }
    std::vector<uint8_t> shared(held.size());
    checkTransfer(loadplan_shared_memory_check(data.data(), bytes.data(), data.size(),
                                               shared.data()));
    for (size_t i = 0; i < held.size(); ++i)
      if (!shared[i])
        out.append(nb::handle(given[i]));
    if (out.size() == 0) {
      sharedGiven = given;
      sharedData = std::move(data);
    }
    return out;
  }

  /// Reads the last read's tensors again (their addresses, after
  /// share_memory_() moved some).
  void refresh(uint32_t deviceType, int32_t deviceIndex) {
    held.clear();
    keep.clear();
    check(given, deviceType, deviceIndex);
  }

  /// Whether the last read failed in the iterator it was given.
  bool sourceFailed = false;

  std::vector<loadplan_held_tensor_t> held;
  std::vector<nb::object> keep;
  nb::object holdGiven;
  /// The tensors of the last read (held order), alive through holdGiven.
  std::vector<PyObject *> given;
  /// The tensors and addresses unshared() last found all in shared
  /// memory (compared, never dereferenced).
  std::vector<PyObject *> sharedGiven;
  std::vector<const void *> sharedData;

private:
  void clear() {
    held.clear();
    keep.clear();
    holdGiven = nb::object();
    given.clear();
    sourceFailed = false;
  }

  /// Checks every held tensor (in held order) and fills `held`.
  void check(const std::vector<PyObject *> &tensors, uint32_t deviceType,
             int32_t deviceIndex) {
    held.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      PyObject *t = tensors[i];
      const int64_t *shape = shapes[i].data();
      size_t rank = shapes[i].size();
      const void *data = tensorMatches(t, dtypes[i], shape, rank, /*forLoader=*/false)
                             ? tensorData(t, deviceType, deviceIndex, keep)
                             : nullptr;
      if (!data) {
        keep.clear();
        throw nb::value_error(("load plan: " + reprOf(keys[i].ptr()) + " is " +
                               heldMismatch(t, dtypes[i], shape, rank, device))
                                  .c_str());
      }
      held.push_back({names[i].data(), names[i].size(), data, dtypes[i],
                      static_cast<uint32_t>(rank), shape});
    }
  }

  /// Raises the ValueError of a dict whose names are not the held ones:
  /// how many it lacks and has besides, the first few of each.
  [[noreturn]] void refuseNames(nb::handle given) {
    nb::list extra;
    size_t numExtra = 0;
    std::string what = lacking([&](size_t i) {
      int found = PyDict_Contains(given.ptr(), keys[i].ptr());
      if (found < 0)
        throw nb::python_error();
      return found != 0;
    });
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(given.ptr(), &pos, &key, &value)) {
      int found = PySet_Contains(keySet.ptr(), key);
      if (found < 0)
        throw nb::python_error();
      if (!found && numExtra++ < kShown)
        extra.append(nb::handle(key));
    }
    if (numExtra)
      what += (what.empty() ? "has " : " and has ") + std::to_string(numExtra) +
              " names it does not hold, e.g. " + reprOf(extra.ptr());
    refuse(what);
  }

  /// "lacks N names this rank holds, e.g. [...]" of the held names for
  /// which `present(index)` is false; "" when there are none.
  template <typename Present> std::string lacking(Present present) const {
    nb::list missing;
    size_t numMissing = 0;
    for (size_t i = 0; i < keys.size(); ++i)
      if (!present(i) && numMissing++ < kShown)
        missing.append(keys[i]);
    if (!numMissing)
      return "";
    return "lacks " + std::to_string(numMissing) + " names this rank holds, e.g. " +
           reprOf(missing.ptr());
  }

  /// Raises the ValueError "the update of sender rank N <what>".
  [[noreturn]] void refuse(const std::string &what) const {
    throw nb::value_error(
        ("load plan: the update of sender rank " + std::to_string(rank) + " " + what).c_str());
  }

  /// Names a message shows of those missing or extra.
  static constexpr size_t kShown = 5;

  uint32_t rank;
  std::string device;
  nb::object keySet;
  /// Name (str) -> its index in `keys`.
  nb::object indexOf;
  std::vector<nb::object> keys;
  std::vector<std::string> names;
  std::vector<uint32_t> dtypes;
  std::vector<std::vector<int64_t>> shapes;
};

/// One rank's transfer engine. A receiver's layouts and fallback buffers
/// stay here for the engine's life.
class Transfer
    : public Handle<loadplan_transfer_t, loadplan_transfer_release, kTransferName> {
public:
  Transfer(Comm &comm, Schedule &schedule, Plan *plan,
           const std::vector<LayoutTuple> &layouts,
           const std::vector<FallbackTuple> &fallbacks, uint32_t numThreads,
           int32_t debugFailRound, bool linkProbe, bool colocated,
           int32_t colocatedDevice)
      : layoutTuples(layouts), fallbackTuples(fallbacks) {
    loadplan_transfer_options_t options;
    loadplan_transfer_options_init(&options);
    options.num_threads = numThreads;
    options.debug_fail_round = debugFailRound;
    options.link_probe = linkProbe ? 1u : 0u;
    options.colocated = colocated ? 1u : 0u;
    options.colocated_device = colocatedDevice;
    loadplan_receiver_args_t receiver{};
    if (plan) {
      cLayouts = toLayouts(layoutTuples);
      for (const auto &[name, data, size] : fallbackTuples)
        cFallbacks.push_back({name.data(), name.size(),
                              reinterpret_cast<void *>(data), size});
      receiver = {plan->get(),        cLayouts.data(),   cLayouts.size(),
                  numThreads,        cFallbacks.data(), cFallbacks.size()};
    }
    loadplan_comm_t *c = comm.get();
    loadplan_transfer_t *transfer = nullptr;
    loadplan_status_t status;
    {
      nb::gil_scoped_release release;
      status = loadplan_transfer_create(c, schedule.get(),
                                        plan ? &receiver : nullptr, &options,
                                        &transfer);
    }
    checkTransfer(status);
    reset(transfer);
  }
  /// The engine goes before the layouts and buffers it was given.
  ~Transfer() { close(); }

  /// Collective: one update; `held` is every tensor a sender holds.
  void update(const std::vector<HeldTuple> &held, uintptr_t stream) {
    std::vector<loadplan_held_tensor_t> in(held.size());
    for (size_t i = 0; i < held.size(); ++i) {
      const auto &[name, data, dtype, shape] = held[i];
      in[i] = {name.data(), name.size(), reinterpret_cast<const void *>(data),
               dtype,       static_cast<uint32_t>(shape.size()), shape.data()};
    }
    loadplan_transfer_t *t = get();
    loadplan_status_t status;
    {
      nb::gil_scoped_release release;
      status = loadplan_transfer_update(t, in.data(), in.size(),
                                        reinterpret_cast<void *>(stream));
    }
    checkTransfer(status);
  }

  /// Collective: one update of what `batch` read (SendBatch::read); the
  /// batch lets go of the tensors afterwards.
  void updateBatch(SendBatch &batch, uintptr_t stream) {
    loadplan_transfer_t *t = get();
    std::vector<loadplan_held_tensor_t> in = std::move(batch.held);
    std::vector<nb::object> keep = std::move(batch.keep);
    nb::object given = std::move(batch.holdGiven);
    batch.held.clear();
    batch.keep.clear();
    loadplan_status_t status;
    {
      nb::gil_scoped_release release;
      status = loadplan_transfer_update(t, in.data(), in.size(),
                                        reinterpret_cast<void *>(stream));
    }
    checkTransfer(status);
  }

  /// Collective: fails the update on every rank with this rank's error.
  void fail(uint32_t code, const std::string &message) {
    loadplan_transfer_t *t = get();
    loadplan_status_t status;
    {
      nb::gil_scoped_release release;
      status =
          loadplan_transfer_fail(t, code, message.data(), message.size());
    }
    checkTransfer(status);
  }

  /// Colocated, between updates: closes this rank's mappings of other
  /// ranks' memory (loadplan_transfer_release_mappings).
  void releaseMappings() {
    loadplan_transfer_t *t = get();
    loadplan_status_t status;
    {
      nb::gil_scoped_release release;
      status = loadplan_transfer_release_mappings(t);
    }
    checkTransfer(status);
  }

  nb::dict stats() const {
    loadplan_transfer_stats_t s;
    checkTransfer(loadplan_transfer_stats(get(), &s));
    nb::dict out;
    out["bytes_sent"] = s.bytes_sent;
    out["bytes_received"] = s.bytes_received;
    out["bytes_local"] = s.bytes_local;
    out["bytes_in_place"] = s.bytes_in_place;
    out["bytes_staged"] = s.bytes_staged;
    out["bytes_packed"] = s.bytes_packed;
    out["messages_sent"] = s.messages_sent;
    out["messages_received"] = s.messages_received;
    out["rounds"] = s.rounds;
    out["updates"] = s.updates;
    out["seconds"] = s.seconds;
    out["probe_seconds"] = s.probe_seconds;
    out["probe_bytes"] = s.probe_bytes;
    out["mappings"] = s.mappings;
    return out;
  }

private:
  std::vector<LayoutTuple> layoutTuples;
  std::vector<FallbackTuple> fallbackTuples;
  std::vector<loadplan_target_layout_t> cLayouts;
  std::vector<loadplan_fallback_buffer_t> cFallbacks;
};

} // namespace

void loadplan_python::defineTransfer(nb::module_ &m) {
  nb::dict engines, backends;
  for (uint32_t e = 0; const char *name = loadplan_engine_name(e); ++e)
    engines[name] = e;
  for (uint32_t b = 0; const char *name = loadplan_backend_name(b); ++b)
    backends[name] = b;
  m.attr("ENGINES") = engines;
  m.attr("BACKENDS") = backends;
  m.attr("DEFAULT_STAGING_CAP") = LOADPLAN_DEFAULT_STAGING_CAP;
  m.attr("DEFAULT_JOIN_BELOW") = LOADPLAN_DEFAULT_JOIN_BELOW;

  m.def(
      "backend_available",
      [](uint32_t backend) {
        int32_t available = 0;
        checkTransfer(loadplan_backend_available(backend, &available));
        return available != 0;
      },
      nb::arg("backend"),
      "Whether a backend code (BACKENDS) can run in this process.");
  m.def(
      "nccl_library",
      []() {
        const char *path = nullptr;
        checkTransfer(loadplan_nccl_library(&path));
        return std::string(path);
      },
      "The path of the libnccl.so.2 the NCCL backend uses (no GPU needed).");
  m.def(
      "nccl_unique_id",
      []() {
        uint8_t id[LOADPLAN_NCCL_UNIQUE_ID_BYTES];
        checkTransfer(loadplan_nccl_unique_id(id));
        return nb::bytes(reinterpret_cast<const char *>(id), sizeof(id));
      },
      "A fresh NCCL unique id (128 bytes) for one rank to hand to the others.");

  nb::class_<Comm>(m, "Comm", "A communicator of the runtime's transfers")
      .def_static("gloo", &Comm::gloo, nb::arg("rank"), nb::arg("size"),
                  nb::arg("hostname"), nb::arg("set"), nb::arg("get"),
                  nb::arg("prefix"), nb::arg("timeout_ms"),
                  "Collective: connects `size` ranks over TCP, meeting "
                  "through set(key, value) and get(key, timeout_ms).")
      .def_static("nccl", &Comm::nccl, nb::arg("rank"), nb::arg("size"),
                  nb::arg("unique_id"), nb::arg("device"),
                  nb::arg("timeout_ms"),
                  "Collective: an NCCL communicator on a CUDA device.")
      .def("close", &Comm::close, "Drops this reference now.");

  nb::class_<Schedule>(m, "Schedule", "A transfer schedule")
      .def_static("build", &Schedule::build, nb::arg("engine"),
                  nb::arg("world_size"), nb::arg("tensors"),
                  nb::arg("senders"), nb::arg("receivers"),
                  nb::arg("join_below") = 0, nb::arg("sequential") = false,
                  "The schedule of an engine code for tensors (name, dtype, "
                  "shape), senders (comm_rank, staging_cap, holdings of "
                  "(tensor, starts, stops)) and receivers (comm_rank, "
                  "staging_cap, atomic, plan); pieces under join_below "
                  "bytes (0: the default) travel together, and rounds "
                  "overlap unless sequential.")
      .def_static("agree", &Schedule::agree, nb::arg("rank"),
                  nb::arg("world_size"), nb::arg("num_senders"),
                  nb::arg("engine"), nb::arg("set"), nb::arg("get"),
                  nb::arg("prefix"), nb::arg("timeout_ms"),
                  nb::arg("join_below") = 0, nb::arg("sequential") = false,
                  nb::arg("sender").none() = nb::none(),
                  nb::arg("receiver").none() = nb::none(),
                  nb::arg("refusal").none() = nb::none(),
                  "Collective over a store: the schedule rank 0 builds from "
                  "every rank's offer, a sender's (staging_cap, tensors, "
                  "holdings), a receiver's (staging_cap, atomic, plan, "
                  "plan_bytes), or a refusing rank's message (then it "
                  "raises on every rank).")
      .def_static("from_bytes", &Schedule::fromBytes, nb::arg("data"),
                  "Parses and checks schedule bytes.")
      .def("to_bytes", &Schedule::toBytes)
      .def("summary", &Schedule::summary)
      .def("text", &Schedule::text, nb::arg("pieces") = true);

  nb::class_<SendBatch>(m, "SendBatch", "What a sender holds, read per update")
      .def(nb::init<const std::vector<TensorTuple> &, uint32_t, std::string>(),
           nb::arg("expected"), nb::arg("rank"), nb::arg("device"),
           "expected: (name, dtype, shape) of each held box, in the order sent; "
           "rank and device (torch's spelling) for the messages.")
      .def("read", &SendBatch::read, nb::arg("given"), nb::arg("device_type"),
           nb::arg("device_index"),
           "Reads a dict name -> tensor of exactly the held names, as "
           "expected; raises ValueError naming what is not. Writes nothing.")
      .def("read_pairs", &SendBatch::readPairs, nb::arg("pairs"), nb::arg("device_type"),
           nb::arg("device_index"),
           "Reads an iterable of (name, tensor) pairs as read() reads a dict; "
           "names not held are passed over. What the iterable raises goes "
           "through, with source_failed set.")
      .def("unshared", &SendBatch::unshared,
           "Colocated: the last read's tensors whose bytes are not in shared "
           "memory (empty when all are).")
      .def("refresh", &SendBatch::refresh, nb::arg("device_type"), nb::arg("device_index"),
           "Reads the last read's tensors again (after share_memory_() moved some).")
      .def_ro("source_failed", &SendBatch::sourceFailed,
              "Whether the last read failed in the iterable it was given.");

  nb::class_<Transfer>(m, "Transfer", "One rank's transfer engine")
      .def(nb::init<Comm &, Schedule &, Plan *, const std::vector<LayoutTuple> &,
                    const std::vector<FallbackTuple> &, uint32_t, int32_t, bool,
                    bool, int32_t>(),
           nb::arg("comm"), nb::arg("schedule"), nb::arg("plan").none(),
           nb::arg("layouts"), nb::arg("fallbacks"), nb::arg("num_threads"),
           nb::arg("debug_fail_round"), nb::arg("link_probe") = false,
           nb::arg("colocated") = false, nb::arg("colocated_device") = -1,
           "Collective: this rank's engine; a receiver gives its plan, its "
           "target layouts and a buffer per fallback name, a sender None "
           "and empty lists; link_probe times the update's bytes as one "
           "message per pair of ranks (stats' probe_seconds); colocated: "
           "receivers read the senders' shared memory in place (CPU) or "
           "their CUDA memory through CUDA IPC (colocated_device: the CUDA "
           "device, -1 for CPU memory).")
      .def("update", &Transfer::update, nb::arg("held"), nb::arg("stream") = 0,
           "Collective: one update; a sender passes every tensor it holds "
           "as (name, data, dtype, shape).")
      .def("update_batch", &Transfer::updateBatch, nb::arg("batch"), nb::arg("stream") = 0,
           "Collective: one update of what a SendBatch read.")
      .def("fail", &Transfer::fail, nb::arg("code"), nb::arg("message"),
           "Collective: fails the update on every rank with this error.")
      .def("stats", &Transfer::stats, "Of the last update on this rank.")
      .def("release_mappings", &Transfer::releaseMappings,
           "Colocated, between updates, not collective: closes this rank's "
           "mappings of other ranks' memory; the next update maps what the "
           "senders' tables name again.")
      .def("close", &Transfer::close, "Releases the engine now.");
}
