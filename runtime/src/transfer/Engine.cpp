//===- Engine.cpp - One rank's runner of a transfer schedule -----*- C++ -*-===//

#include "Engine.h"
#include "../Status.h"
#include "../host/HostExecutor.h"
#include "loadplan/format/ByteIO.h"
#if LOADPLAN_HAVE_CUDA
#include "../cuda/CudaExecutor.h"
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

using namespace loadplan;
using namespace loadplan::transfer;
using loadplan_format::hex64;

namespace {

/// What ranks swap in an agreement.
struct Record {
  uint32_t code;
  uint32_t size;
  uint64_t check;
  char text[496];
};
static_assert(sizeof(Record) == 512, "records are 512 bytes");

enum Phase : uint64_t { kCreate = 0, kValidate = 1, kCommit = 2 };

/// Adds an entry to a derived plan: a tensor of `shape` whose boxes `parts`
/// (relative to the tensor) land in their regions.
uint32_t addEntry(Plan &plan, const Tensor &t, const std::vector<int64_t> &shape,
                  const std::vector<Part> &parts) {
  Entry e;
  e.name = t.name;
  e.kind = LOADPLAN_KIND_DIRECT;
  e.dtype = t.dtype;
  e.shape = shape;
  plan.firstBox.push_back(plan.numBoxes);
  for (const Part &p : parts) {
    Write w;
    w.target = p.target;
    w.box = static_cast<uint32_t>(e.boxes.size());
    e.boxes.push_back(p.box);
    w.offset = p.region.offset;
    w.shape = p.region.shape;
    w.stride = p.region.stride;
    w.convertTo = p.convertTo;
    e.writes.push_back(std::move(w));
  }
  plan.numBoxes += static_cast<uint32_t>(e.boxes.size());
  plan.numWrites += e.writes.size();
  plan.entries.push_back(std::move(e));
  return static_cast<uint32_t>(plan.entries.size() - 1);
}

/// `box` moved so that `origin` is at zero.
Box relative(const Box &box, const Box &origin) {
  Box out = box;
  for (uint32_t k = 0; k < box.rank(); ++k) {
    out.lo[k] -= origin.lo[k];
    out.hi[k] -= origin.lo[k];
  }
  return out;
}

std::string describeEntry(const void *context, uint32_t entry, uint32_t) {
  const Plan &plan = *static_cast<const Plan *>(context);
  return concat("a piece of ", quote(plan.entries[entry].name));
}

/// Staging memory of the transport's device, released with it.
struct Staging {
  Transport *transport = nullptr;
  uint8_t *data = nullptr;
  void allocate(Transport &t, uint64_t bytes) {
    transport = &t;
    data = static_cast<uint8_t *>(t.allocate(bytes));
  }
  ~Staging() {
    if (data)
      transport->release(data);
  }
};

} // namespace

struct Engine::Sends {
  std::unordered_map<std::string_view, uint32_t> holdingByName;
  /// Per holding: its data in the current update.
  std::vector<const uint8_t *> source;
  /// The packing plan: per entry, a piece packed into staging.
  Plan plan;
  std::unique_ptr<Executor> executor;
  Staging staging;
  std::vector<int64_t> entryOfPiece;
  std::vector<uint32_t> holdingOfEntry;
  std::vector<const uint8_t *> entrySource;
  std::vector<uint32_t> active;
};

struct Engine::Receives {
  bool atomic = false;
  /// The scatter plan: per entry, a staged piece.
  Plan plan;
  std::unique_ptr<Executor> executor;
  Staging staging;
  std::vector<int64_t> entryOfPiece;
  /// Per piece landing in place: where.
  std::vector<uint8_t *> destination;
  std::vector<const uint8_t *> entrySource;
  std::vector<uint32_t> all, active;
};

Engine::Engine(loadplan_comm_t &comm, const Schedule &schedule,
               const loadplan_receiver_args_t *receiver,
               const loadplan_transfer_options_t &options)
    : comm(comm), transport(*comm.transport), schedule(schedule),
      me(uint32_t(transport.rank)) {
  std::optional<StatusError> local;
  try {
    setUp(receiver, options);
  } catch (const StatusError &e) {
    local = e;
  } catch (const std::bad_alloc &) {
    local = StatusError(LOADPLAN_STATUS_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception &e) {
    local = StatusError(LOADPLAN_STATUS_INTERNAL, e.what());
  }
  agree(local, kCreate, schedule.checksum);
}

Engine::~Engine() = default;

std::string Engine::roleOf(uint32_t rank) const {
  std::string role;
  for (uint32_t i = 0; i < schedule.senders.size(); ++i)
    if (schedule.senders[i].commRank == rank)
      role = concat("sender ", i);
  for (uint32_t i = 0; i < schedule.receivers.size(); ++i)
    if (schedule.receivers[i].commRank == rank)
      role += concat(role.empty() ? "" : ", ", "receiver ", i);
  return role.empty() ? "" : " (" + role + ")";
}

void Engine::setUp(const loadplan_receiver_args_t *receiver,
                   const loadplan_transfer_options_t &options) {
  if (uint32_t(transport.size) != schedule.worldSize)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "the communicator has ",
         transport.size, " ranks but the schedule was made for ",
         schedule.worldSize);
  for (uint32_t i = 0; i < schedule.senders.size(); ++i)
    if (schedule.senders[i].commRank == me)
      senderIndex = i;
  for (uint32_t i = 0; i < schedule.receivers.size(); ++i)
    if (schedule.receivers[i].commRank == me)
      receiverIndex = i;
  if (receiverIndex >= 0 && !receiver)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "rank ", me, " is receiver ",
         receiverIndex, " of the schedule but brings no receiver arguments");
  if (receiverIndex < 0 && receiver)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "rank ", me,
         " brings receiver arguments but is no receiver of the schedule");
  failRound = options.debug_fail_round;
  roundPieces.resize(schedule.numRounds);
  for (uint32_t i = 0; i < schedule.pieces.size(); ++i) {
    const Piece &p = schedule.pieces[i];
    if (int64_t(p.sender) == senderIndex || int64_t(p.receiver) == receiverIndex)
      roundPieces[p.round].push_back(i);
  }
  if (senderIndex >= 0)
    setUpSender(options.num_threads);
  if (receiverIndex >= 0)
    setUpReceiver(*receiver);
}

std::unique_ptr<Executor> Engine::makeExecutor(const Plan &plan,
                                               const std::vector<uint8_t *> &bases,
                                               uint32_t threads) {
  loadplan_device_t device = transport.device();
  if (device.type == LOADPLAN_DEVICE_CPU) {
    if (!threads)
      threads = std::max(1u, std::thread::hardware_concurrency());
    return makeHostExecutor(plan, bases, threads);
  }
#if LOADPLAN_HAVE_CUDA
  return makeCudaExecutor(plan, bases, device.index);
#else
  fail(LOADPLAN_STATUS_UNAVAILABLE, "this runtime was built without CUDA");
#endif
}

void Engine::setUpSender(uint32_t threads) {
  sends = std::make_unique<Sends>();
  const Sender &x = schedule.senders[senderIndex];
  for (uint32_t h = 0; h < x.holdings.size(); ++h)
    sends->holdingByName[schedule.tensors[x.holdings[h].tensor].name] = h;
  sends->source.assign(x.holdings.size(), nullptr);
  Plan &plan = sends->plan;
  uint64_t bytes = std::max<uint64_t>(x.stagingBytes, 1);
  plan.storageSizes = {bytes};
  Target staging;
  staging.tensor = "<staging>";
  staging.dtype = LOADPLAN_DTYPE_UINT8;
  staging.shape = {int64_t(bytes)};
  staging.stride = {1};
  plan.targets.push_back(staging);
  sends->entryOfPiece.assign(schedule.pieces.size(), -1);
  std::vector<Part> parts(1);
  for (uint32_t i = 0; i < schedule.pieces.size(); ++i) {
    const Piece &p = schedule.pieces[i];
    if (int64_t(p.sender) != senderIndex || !(p.flags & LOADPLAN_PIECE_PACKED))
      continue;
    const Holding &h = x.holdings[p.holding];
    const Tensor &t = schedule.tensors[h.tensor];
    Part &part = parts[0];
    part.box = relative(p.box, h.box);
    part.target = 0;
    part.region.shape = p.box.extents();
    part.region.stride = contiguousStrides(part.region.shape);
    part.region.offset = int64_t(p.sendOffset) / t.itemSize();
    sends->entryOfPiece[i] = addEntry(plan, t, h.box.extents(), parts);
    sends->holdingOfEntry.push_back(p.holding);
  }
  sends->entrySource.assign(plan.entries.size(), nullptr);
  if (plan.entries.empty())
    return;
  sends->staging.allocate(transport, x.stagingBytes);
  sends->executor = makeExecutor(plan, {sends->staging.data}, threads);
}

void Engine::setUpReceiver(const loadplan_receiver_args_t &args) {
  receives = std::make_unique<Receives>();
  const Receiver &r = schedule.receivers[receiverIndex];
  receives->atomic = r.atomic;
  if (!args.plan || !args.plan->plan)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "the receiver's plan is NULL");
  const Plan &plan = *args.plan->plan;
  if (plan.fingerprint != r.planFingerprint)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "receiver ", receiverIndex,
         ": the plan (fingerprint ", hex64(plan.fingerprint),
         ") is not the one the schedule was made for (fingerprint ",
         hex64(r.planFingerprint), "); build the schedule again");
  // The same layout with other entries, boxes or writes: another rank's
  // plan, say. Naming one fingerprint twice would not say what differs.
  if (planDigest(plan) != r.planDigest)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "receiver ", receiverIndex,
         ": the plan is not the one the schedule was made for: both are of "
         "layout ", hex64(plan.fingerprint),
         " but their entries, boxes or writes differ (a plan of another "
         "rank?); build the schedule again");

  // The binding's checks (fingerprint, storage structure, device memory)
  // are the runtime's; the engine needs only the storage bases.
  loadplan_bind_options_t bind;
  loadplan_bind_options_init(&bind);
  bind.device = transport.device();
  bind.num_threads = 1;
  loadplan_binding_t *binding = nullptr;
  if (loadplan_status_t status = loadplan_bind(args.plan, args.layouts,
                                               args.num_layouts, &bind, &binding)) {
    StatusError e(loadplan_status_code(status), loadplan_status_message(status));
    loadplan_status_free(status);
    throw e;
  }
  loadplan_binding_release(binding);
  std::vector<uint8_t *> bases(plan.storageSizes.size(), nullptr);
  for (size_t i = 0; i < args.num_layouts; ++i) {
    const loadplan_target_layout_t &l = args.layouts[i];
    uint32_t s = plan.targets[i].storage;
    if (!bases[s] && l.data)
      bases[s] = static_cast<uint8_t *>(l.data) - l.byte_offset;
  }

  // Fallback buffers: one per fallback entry whose tensor comes.
  std::vector<bool> needed(plan.entries.size(), false);
  Landing landing(plan, schedule.tensors);
  for (const Need &n : r.needs) {
    auto it = plan.byName.find(schedule.tensors[n.tensor].name);
    if (it != plan.byName.end() &&
        plan.entries[it->second].kind == LOADPLAN_KIND_FALLBACK)
      needed[it->second] = true;
  }
  if (args.num_fallbacks && !args.fallbacks)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "fallbacks is NULL");
  const std::vector<uint32_t> &fallbacks = plan.byKind[LOADPLAN_KIND_FALLBACK];
  std::vector<uint8_t *> fallbackData(fallbacks.size(), nullptr);
  for (size_t i = 0; i < args.num_fallbacks; ++i) {
    const loadplan_fallback_buffer_t &f = args.fallbacks[i];
    std::string_view name(f.name ? f.name : "", f.name ? f.name_size : 0);
    auto it = plan.byName.find(name);
    if (it == plan.byName.end() ||
        plan.entries[it->second].kind != LOADPLAN_KIND_FALLBACK)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "fallback buffer ", i, " (",
           quote(name), ") is not for a fallback name of the plan");
    const Entry &e = plan.entries[it->second];
    uint64_t bytes = uint64_t(e.numElements()) * loadplan_dtype_size(e.dtype);
    uint32_t k = landing.fallbackTarget(it->second) - landing.numPlanTargets();
    if (fallbackData[k])
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "fallback buffer ", i, " (",
           quote(name), ") comes twice");
    if (!f.data || f.size_bytes != bytes)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "fallback buffer ", i, " (",
           quote(name), ") has ", f.size_bytes, " bytes at ", f.data,
           " but the tensor takes ", bytes);
    fallbackData[k] = static_cast<uint8_t *>(f.data);
  }
  // The scatter plan: the plan's targets, then one per fallback buffer.
  Plan &scatter = receives->plan;
  scatter.storageSizes = plan.storageSizes;
  scatter.targets = plan.targets;
  for (uint32_t k = 0; k < fallbacks.size(); ++k) {
    const Entry &e = plan.entries[fallbacks[k]];
    if (needed[fallbacks[k]] && !fallbackData[k])
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "no fallback buffer for ",
           quote(e.name), ", which this rank receives whole for its loader");
    uint64_t bytes = uint64_t(e.numElements()) * loadplan_dtype_size(e.dtype);
    Target t;
    t.tensor = e.name;
    t.storage = uint32_t(scatter.storageSizes.size());
    t.dtype = e.dtype;
    t.shape = e.shape;
    t.stride = contiguousStrides(e.shape);
    scatter.storageSizes.push_back(bytes);
    scatter.targets.push_back(std::move(t));
    bases.push_back(fallbackData[k]);
  }
  auto targetData = [&](uint32_t target) {
    const Target &t = scatter.targets[target];
    return bases[t.storage] + t.byteOffset;
  };

  receives->entryOfPiece.assign(schedule.pieces.size(), -1);
  receives->destination.assign(schedule.pieces.size(), nullptr);
  std::vector<Part> parts;
  std::vector<uint64_t> stagedAt;
  for (uint32_t i = 0; i < schedule.pieces.size(); ++i) {
    const Piece &p = schedule.pieces[i];
    if (int64_t(p.receiver) != receiverIndex)
      continue;
    const Need &need = r.needs[p.need];
    const Tensor &t = schedule.tensors[need.tensor];
    parts.clear();
    uint32_t target = 0;
    bool inPlace = landing.land(need, p.box, parts, target);
    if (!(p.flags & LOADPLAN_PIECE_STAGED)) {
      if (!inPlace)
        fail(LOADPLAN_STATUS_INVALID_PLAN, "schedule piece ", i, " of ",
             quote(t.name), " lands in place but its destination in the plan "
             "is not one contiguous run");
      receives->destination[i] =
          targetData(target) + parts[0].region.offset * t.itemSize();
      continue;
    }
    if (parts.empty())
      continue; // FULL: bytes this rank does not need
    for (Part &part : parts)
      part.box = relative(part.box, p.box);
    receives->entryOfPiece[i] = addEntry(scatter, t, p.box.extents(), parts);
    receives->all.push_back(uint32_t(receives->entryOfPiece[i]));
    stagedAt.push_back(p.recvOffset);
  }
  if (r.stagingBytes)
    receives->staging.allocate(transport, r.stagingBytes);
  for (uint64_t offset : stagedAt)
    receives->entrySource.push_back(receives->staging.data + offset);
  if (!scatter.entries.empty())
    receives->executor = makeExecutor(scatter, bases, args.num_threads);
}

void Engine::agree(const std::optional<StatusError> &local, uint64_t phase,
                   uint64_t check) {
  Record mine{};
  mine.check = check;
  if (local) {
    mine.code = local->code;
    std::string text = local->message.substr(0, sizeof mine.text - 1);
    mine.size = uint32_t(text.size());
    std::memcpy(mine.text, text.data(), text.size());
  }
  std::vector<Record> all(size_t(transport.size));
  std::vector<std::string> errors;
  transport.exchange(&mine, sizeof mine, all.data(), kAgreementTag + phase,
                     errors);
  // The first rank that reports an error; then a rank out of step; then a
  // rank that could not be reached.
  for (uint32_t p = 0; p < all.size(); ++p)
    if (errors[p].empty() && all[p].code != LOADPLAN_STATUS_OK) {
      auto code = static_cast<loadplan_status_code_t>(all[p].code);
      if (code > LOADPLAN_STATUS_INTERNAL)
        code = LOADPLAN_STATUS_INTERNAL;
      // Before any byte moves a rank refuses (its inputs); after, it fails.
      const char *did = phase == kCreate     ? " refused the set-up: "
                        : phase == kValidate ? " refused the update: "
                                             : " failed the update: ";
      throw StatusError(code,
                        concat("rank ", p, roleOf(p), did,
                               std::string(all[p].text,
                                           std::min<size_t>(all[p].size,
                                                            sizeof all[p].text))));
    }
  for (uint32_t p = 0; p < all.size(); ++p)
    if (errors[p].empty() && all[p].check != check)
      throw StatusError(
          LOADPLAN_STATUS_INVALID_ARGUMENT,
          phase == kCreate
              ? concat("rank ", p, roleOf(p), " holds schedule ",
                       hex64(all[p].check), " but rank ", me, " holds ",
                       hex64(check), "; every rank must build the same one")
              : concat("rank ", p, roleOf(p), " is at update ", all[p].check,
                       " but rank ", me, " at update ", check));
  for (uint32_t p = 0; p < all.size(); ++p)
    if (!errors[p].empty())
      throw StatusError(transport.backend() == LOADPLAN_BACKEND_GLOO
                            ? LOADPLAN_STATUS_IO_ERROR
                            : LOADPLAN_STATUS_DEVICE_ERROR,
                        concat("rank ", p, roleOf(p),
                               " could not be reached: ", errors[p]));
}

void Engine::checkHeld(const loadplan_held_tensor_t *held, size_t numHeld) {
  if (!sends) {
    if (numHeld)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "rank ", me,
           " is no sender of the schedule but passes ", numHeld, " tensors");
    return;
  }
  if (numHeld && !held)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "held is NULL");
  const Sender &x = schedule.senders[senderIndex];
  std::fill(sends->source.begin(), sends->source.end(), nullptr);
  for (size_t i = 0; i < numHeld; ++i) {
    const loadplan_held_tensor_t &in = held[i];
    std::string_view name(in.name ? in.name : "", in.name ? in.name_size : 0);
    std::string label = concat("held tensor ", i, " (", quote(name), ")");
    auto it = sends->holdingByName.find(name);
    if (it == sends->holdingByName.end())
      fail(LOADPLAN_STATUS_INVALID_UPDATE, label, " is not held by sender ",
           senderIndex, " in the schedule");
    const Holding &h = x.holdings[it->second];
    const Tensor &t = schedule.tensors[h.tensor];
    if (sends->source[it->second])
      fail(LOADPLAN_STATUS_INVALID_UPDATE, label, " comes twice");
    std::vector<int64_t> extents = h.box.extents();
    std::vector<int64_t> shape;
    if (in.rank <= kMaxRank && (in.shape || !in.rank))
      shape.assign(in.shape, in.shape + in.rank);
    if (in.dtype != t.dtype || shape != extents || in.rank != extents.size())
      fail(LOADPLAN_STATUS_INVALID_UPDATE, label, " is ", dtypeText(in.dtype),
           " ", shape, " but sender ",
           senderIndex, " holds box ", boxText(h.box), " of it: ",
           loadplan_dtype_name(t.dtype), " ", extents);
    if (!in.data)
      fail(LOADPLAN_STATUS_INVALID_UPDATE, label, ": data is NULL");
    transport.checkMemory(in.data, label);
    sends->source[it->second] = static_cast<const uint8_t *>(in.data);
  }
  for (uint32_t h = 0; h < x.holdings.size(); ++h)
    if (!sends->source[h])
      fail(LOADPLAN_STATUS_INVALID_UPDATE, "the update lacks ",
           quote(schedule.tensors[x.holdings[h].tensor].name), " (box ",
           boxText(x.holdings[h].box), "), which sender ", senderIndex,
           " holds in the schedule");
  for (size_t e = 0; e < sends->entrySource.size(); ++e)
    sends->entrySource[e] = sends->source[sends->holdingOfEntry[e]];
}

void Engine::scatter(const std::vector<uint32_t> &entries, void *stream) {
  if (entries.empty())
    return;
  std::vector<const uint8_t *> noBoxes(receives->plan.numBoxes, nullptr);
  Batch batch{SourceForm::Tensor, entries.data(), entries.size(),
              receives->entrySource.data(), noBoxes.data(), describeEntry,
              &receives->plan};
  receives->executor->checkSources(batch);
  receives->executor->run(batch, stream);
}

void Engine::runRounds(void *stream, std::optional<StatusError> &local) {
  auto keep = [&](const StatusError &e) {
    if (!local)
      local = e;
  };
  std::vector<Op> ops;
  struct LocalCopy {
    uint8_t *dst;
    const uint8_t *src;
    uint64_t bytes;
  };
  std::vector<LocalCopy> copies;
  for (uint32_t round = 0; round < roundPieces.size(); ++round) {
    const std::vector<uint32_t> &list = roundPieces[round];
    if (int32_t(round) == failRound) {
      failRound = -1;
      keep(StatusError(LOADPLAN_STATUS_INTERNAL,
                       concat("debug_fail_round: this rank failed on purpose "
                              "at round ", round)));
    }
    if (list.empty())
      continue;
    ++stats.rounds;
    // Pack what this rank sends from staging.
    if (sends && sends->executor) {
      sends->active.clear();
      for (uint32_t i : list)
        if (sends->entryOfPiece[i] >= 0)
          sends->active.push_back(uint32_t(sends->entryOfPiece[i]));
      if (!sends->active.empty() && !local) {
        std::vector<const uint8_t *> noBoxes(sends->plan.numBoxes, nullptr);
        Batch batch{SourceForm::Tensor, sends->active.data(),
                    sends->active.size(), sends->entrySource.data(),
                    noBoxes.data(), describeEntry, &sends->plan};
        try {
          sends->executor->checkSources(batch);
          sends->executor->run(batch, stream);
        } catch (const StatusError &e) {
          keep(e);
        }
      }
    }
    ops.clear();
    copies.clear();
    for (uint32_t i : list) {
      const Piece &p = schedule.pieces[i];
      uint64_t bytes = schedule.pieceBytes(p);
      bool isSender = int64_t(p.sender) == senderIndex;
      bool isReceiver = int64_t(p.receiver) == receiverIndex;
      const uint8_t *src = nullptr;
      uint8_t *dst = nullptr;
      if (isSender) {
        src = p.flags & LOADPLAN_PIECE_PACKED
                  ? sends->staging.data + p.sendOffset
                  : sends->source[p.holding] + p.sendOffset;
        if (p.flags & LOADPLAN_PIECE_PACKED)
          stats.bytes_packed += bytes;
      }
      if (isReceiver) {
        bool staged = p.flags & LOADPLAN_PIECE_STAGED;
        dst = staged ? receives->staging.data + p.recvOffset
                     : receives->destination[i];
        (staged ? stats.bytes_staged : stats.bytes_in_place) += bytes;
      }
      if (isSender && isReceiver) {
        stats.bytes_local += bytes;
        if (transport.selfOps()) {
          ops.push_back({true, int(me), const_cast<uint8_t *>(src), bytes, i});
          ops.push_back({false, int(me), dst, bytes, i});
        } else {
          copies.push_back({dst, src, bytes});
        }
      } else if (isSender) {
        stats.bytes_sent += bytes;
        ++stats.messages_sent;
        ops.push_back({true, int(schedule.receivers[p.receiver].commRank),
                       const_cast<uint8_t *>(src), bytes, i});
      } else {
        stats.bytes_received += bytes;
        ++stats.messages_received;
        ops.push_back({false, int(schedule.senders[p.sender].commRank), dst,
                       bytes, i});
      }
    }
    try {
      for (const LocalCopy &c : copies)
        transport.copy(c.dst, c.src, c.bytes, stream);
      transport.run(ops, stream);
    } catch (const StatusError &e) {
      keep(e);
      if (transport.failed())
        return; // peers may be gone: the agreement says what happened
    }
    // Scatter what was staged, unless all waits for the agreement.
    if (receives && receives->executor && !receives->atomic) {
      receives->active.clear();
      for (uint32_t i : list)
        if (receives->entryOfPiece[i] >= 0)
          receives->active.push_back(uint32_t(receives->entryOfPiece[i]));
      try {
        scatter(receives->active, stream);
      } catch (const StatusError &e) {
        keep(e);
      }
    }
  }
  if (failRound >= int32_t(roundPieces.size())) {
    failRound = -1;
    keep(StatusError(LOADPLAN_STATUS_INTERNAL,
                     "debug_fail_round: this rank failed on purpose after the "
                     "last round"));
  }
  try {
    transport.synchronize(stream);
  } catch (const StatusError &e) {
    keep(e);
  }
}

void Engine::update(const loadplan_held_tensor_t *held, size_t numHeld,
                    void *stream) {
  auto start = std::chrono::steady_clock::now();
  uint32_t updates = stats.updates;
  stats = {};
  stats.updates = updates;
  uint64_t sequence = uint64_t(updates) + failedUpdates + 1;
  std::optional<StatusError> local;
  try {
    checkHeld(held, numHeld);
  } catch (const StatusError &e) {
    local = e;
  }
  try {
    agree(local, kValidate, sequence);
    runRounds(stream, local);
    agree(local, kCommit, sequence);
    if (receives && receives->atomic && receives->executor) {
      scatter(receives->all, stream);
      transport.synchronize(stream);
    }
  } catch (...) {
    ++failedUpdates;
    throw;
  }
  ++stats.updates;
  stats.seconds = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - start)
                      .count();
}

void Engine::failUpdate(const StatusError &error) {
  uint64_t sequence = uint64_t(stats.updates) + failedUpdates + 1;
  ++failedUpdates;
  agree(error, kValidate, sequence);
  throw error; // not reached: the agreement throws the first error
}
