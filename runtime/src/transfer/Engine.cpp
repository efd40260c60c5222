//===- Engine.cpp - One rank's runner of a transfer schedule -----*- C++ -*-===//

#include "Engine.h"
#include "../Status.h"
#include "Colocation.h"
#include "SharedMemory.h"
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
  uint32_t flags; // kWantTables
  char text[492];
};

/// A validate record's flag: this receiver lacks the table of a sender it
/// reads from (it released its mappings: loadplan_transfer_release_mappings,
/// or has had none yet), so every sender sends its table.
constexpr uint32_t kWantTables = 1;
static_assert(sizeof(Record) == 512, "records are 512 bytes");

enum Phase : uint64_t { kCreate = 0, kValidate = 1, kCommit = 2, kProbe = 3 };

/// The link probe moves its bytes in chunks of at most this many.
constexpr uint64_t kProbeChunk = uint64_t(64) << 20;

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
    w.transform = p.transform;
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

/// Staging memory of the data's device, released with it.
struct Staging {
  DataMemory *memory = nullptr;
  uint8_t *data = nullptr;
  void allocate(DataMemory &m, uint64_t bytes) {
    memory = &m;
    data = static_cast<uint8_t *>(m.allocate(bytes));
  }
  ~Staging() {
    if (data)
      memory->release(data);
  }
};

/// DataMemory of a transport's own device.
class TransportMemory final : public DataMemory {
public:
  explicit TransportMemory(Transport &t) : t(t) {}
  loadplan_device_t device() const override { return t.device(); }
  void *allocate(size_t bytes) override { return t.allocate(bytes); }
  void release(void *p) override { t.release(p); }
  void copy(void *dst, const void *src, size_t bytes, void *stream) override {
    t.copy(dst, src, bytes, stream);
  }
  void fill(void *dst, int value, size_t bytes) override {
    if (t.device().type != LOADPLAN_DEVICE_CPU)
      fail(LOADPLAN_STATUS_INTERNAL, "filling device memory of a transport");
    std::memset(dst, value, bytes);
  }
  void synchronize(void *stream) override { t.synchronize(stream); }

private:
  Transport &t;
};

} // namespace

std::unique_ptr<DataMemory> loadplan::transfer::transportMemory(Transport &transport) {
  return std::make_unique<TransportMemory>(transport);
}

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

/// The link probe's scratch memory and what it moves (Engine::probe).
struct Engine::Probe {
  /// Per peer rank: bytes this rank sends it, receives from it in an
  /// update (this rank's own: its pieces to itself).
  std::vector<uint64_t> sendBytes, recvBytes;
  /// One chunk to send from, and one chunk per peer to receive into:
  /// peer p's at recvAt[p] in `recv`.
  Staging send, recv;
  std::vector<uint64_t> recvAt;
  /// Colocated: the bytes this rank copies in an update.
  uint64_t copyBytes = 0;
};

/// A colocated rank's state (loadplan_transfer_options_t.colocated).
struct Engine::Colocated {
  /// A sender's: where its holdings lie, and the generation of that table
  /// each receiver has (0: none, or unsure after a failed update).
  std::unique_ptr<Exporter> exporter;
  uint64_t generation = 0, acked = 0;
  /// Comm ranks of the receivers this sender has pieces for (not itself).
  std::vector<uint32_t> receivers;
  /// A receiver's: the senders it has pieces from (not itself), and per
  /// sender index its mapper, the table's generation it holds and where
  /// each holding lies here.
  std::vector<uint32_t> senders;
  std::vector<std::unique_ptr<Mapper>> mappers;
  std::vector<uint64_t> generations;
  std::vector<std::vector<const uint8_t *>> places;
  std::vector<std::vector<uint64_t>> holdingBytes;
  /// Per entry of `plan`: its sender and holding. Non-atomic: each piece
  /// straight from its holding into live memory; atomic: into staging,
  /// scattered once all agreed.
  Plan plan;
  std::unique_ptr<Executor> executor;
  std::vector<uint32_t> entrySender, entryHolding, all;
  std::vector<const uint8_t *> entrySource;
  /// Per piece this rank receives: whether it is from another rank.
  uint64_t bytesFromOthers = 0, bytesFromSelf = 0;
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
  checkHosts();
  if (linkProbe)
    probe();
}

void Engine::checkHosts() {
  HostIdentity mine = hostIdentity(
      !co ? 0 : memory->device().type == LOADPLAN_DEVICE_CPU ? 1 : 2);
  std::vector<HostIdentity> all(size_t(transport.size));
  std::vector<std::string> errors;
  transport.exchange(&mine, sizeof mine, all.data(), kAgreementTag + 4, errors);
  for (uint32_t p = 0; p < all.size(); ++p)
    if (!errors[p].empty())
      fail(transport.backend() == LOADPLAN_BACKEND_GLOO ? LOADPLAN_STATUS_IO_ERROR
                                                        : LOADPLAN_STATUS_DEVICE_ERROR,
           "rank ", p, roleOf(p), " could not be reached: ", errors[p]);
  for (uint32_t p = 0; p < all.size(); ++p)
    if (!all[p].colocated != !all[0].colocated)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "rank ", p, roleOf(p),
           all[p].colocated ? " asks for" : " does not ask for",
           " a colocated transfer but rank 0", roleOf(0),
           all[0].colocated ? " does" : " does not",
           "; every rank gives the same");
  auto memoryOf = [](uint32_t kind) {
    return kind == 2 ? "CUDA memory (colocated_device)" : "CPU memory";
  };
  for (uint32_t p = 0; p < all.size(); ++p)
    if (all[p].colocated != all[0].colocated)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "rank ", p, roleOf(p),
           " asks for a colocated transfer of ", memoryOf(all[p].colocated),
           " but rank 0", roleOf(0), " of ", memoryOf(all[0].colocated),
           "; every rank gives the same");
  if (!co)
    return;
  for (const Piece &piece : schedule.pieces) {
    uint32_t s = schedule.senders[piece.sender].commRank,
             r = schedule.receivers[piece.receiver].commRank;
    const HostIdentity &a = all[s], &b = all[r];
    if (std::memcmp(a.bootId, b.bootId, sizeof a.bootId) ||
        a.pidNamespace != b.pidNamespace)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT,
           "a colocated transfer reads other ranks' memory, but rank ", s,
           roleOf(s), " and rank ", r, roleOf(r),
           std::memcmp(a.bootId, b.bootId, sizeof a.bootId)
               ? " are not on one machine"
               : " are not in one PID namespace");
  }
}

void Engine::setUpProbe() {
  linkProbe = std::make_unique<Probe>();
  Probe &lp = *linkProbe;
  if (co) {
    lp.copyBytes = co->bytesFromOthers + co->bytesFromSelf;
    uint64_t chunk = std::max<uint64_t>(1, std::min(lp.copyBytes, kProbeChunk));
    lp.send.allocate(*memory, chunk);
    lp.recv.allocate(*memory, chunk);
    memory->fill(lp.send.data, 1, chunk);
    return;
  }
  lp.sendBytes.assign(size_t(transport.size), 0);
  lp.recvBytes.assign(size_t(transport.size), 0);
  for (const Piece &p : schedule.pieces) {
    uint64_t bytes = schedule.pieceBytes(p);
    uint32_t from = schedule.senders[p.sender].commRank,
             to = schedule.receivers[p.receiver].commRank;
    if (from == me)
      lp.sendBytes[to] += bytes;
    if (to == me && from != me)
      lp.recvBytes[from] += bytes;
  }
  uint64_t sendChunk = 0, recvTotal = 0;
  lp.recvAt.assign(size_t(transport.size), 0);
  for (size_t peer = 0; peer < lp.sendBytes.size(); ++peer) {
    sendChunk = std::max(sendChunk, std::min(lp.sendBytes[peer], kProbeChunk));
    lp.recvAt[peer] = recvTotal;
    // This rank's own pieces are copied into its slot.
    uint64_t in = peer == me ? lp.sendBytes[peer] : lp.recvBytes[peer];
    recvTotal += std::min(in, kProbeChunk);
  }
  lp.send.allocate(*memory, sendChunk);
  lp.recv.allocate(*memory, recvTotal);
}

void Engine::probe() {
  // The better of two: the first also faults in the scratch memory and
  // warms the connections, which no update pays.
  double best = 0;
  for (int run = 0; run < 2; ++run) {
    double seconds = probeOnce();
    best = run ? std::min(best, seconds) : seconds;
  }
  stats.probe_seconds = best;
}

double Engine::probeCopy() {
  Probe &lp = *linkProbe;
  auto begin = std::chrono::steady_clock::now();
  for (uint64_t at = 0; at < lp.copyBytes; at += kProbeChunk)
    memory->copy(lp.recv.data, lp.send.data,
                 std::min(kProbeChunk, lp.copyBytes - at), nullptr);
  memory->synchronize(nullptr);
  stats.probe_bytes = lp.copyBytes;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
      .count();
}

double Engine::probeOnce() {
  Probe &lp = *linkProbe;
  // Every rank starts together, as an update's rounds do after its
  // agreement.
  agree(std::nullopt, kProbe, schedule.checksum);
  if (co)
    return probeCopy();
  auto begin = std::chrono::steady_clock::now();
  std::vector<Op> ops;
  uint64_t bytes = 0;
  for (int peer = 0; peer < transport.size; ++peer) {
    bool self = uint32_t(peer) == me;
    auto chunks = [&](bool send, uint64_t total) {
      uint64_t tag = kProbeTag;
      for (uint64_t at = 0; at < total; at += kProbeChunk, ++tag) {
        uint64_t n = std::min(kProbeChunk, total - at);
        void *data = send ? static_cast<void *>(lp.send.data)
                          : static_cast<void *>(lp.recv.data + lp.recvAt[peer]);
        if (self && !transport.selfOps()) {
          if (send)
            transport.copy(lp.recv.data + lp.recvAt[peer], lp.send.data, n,
                           nullptr);
          continue;
        }
        ops.push_back({send, peer, data, n, tag});
      }
    };
    chunks(true, lp.sendBytes[peer]);
    bytes += lp.sendBytes[peer];
    if (!self || transport.selfOps())
      chunks(false, self ? lp.sendBytes[peer] : lp.recvBytes[peer]);
    if (!self)
      bytes += lp.recvBytes[peer];
  }
  transport.run(ops, nullptr);
  transport.synchronize(nullptr);
  stats.probe_bytes = bytes;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
      .count();
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
  int32_t cudaDevice = options.colocated ? options.colocated_device : -1;
  if (!options.colocated && options.colocated_device >= 0)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "colocated_device is ",
         options.colocated_device, " but the transfer is not colocated");
  if (options.colocated && transport.device().type != LOADPLAN_DEVICE_CPU)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT,
         "a colocated transfer reads other ranks' memory in place (CPU memory "
         "through shared files, CUDA memory through CUDA IPC with "
         "colocated_device) and runs its tables and agreements over a Gloo "
         "communicator, not NCCL (colocated ranks often share one GPU, which "
         "NCCL refuses)");
  if (cudaDevice >= 0) {
#if LOADPLAN_HAVE_CUDA
    memory = makeCudaMemory(cudaDevice);
#else
    fail(LOADPLAN_STATUS_UNAVAILABLE, "colocated_device is ", cudaDevice,
         " but this runtime was built without CUDA");
#endif
  } else {
    memory = transportMemory(transport);
  }
  if (options.colocated) {
    co = std::make_unique<Colocated>();
#if LOADPLAN_HAVE_CUDA
    if (cudaDevice >= 0) {
      co->exporter = makeCudaIpcExporter(cudaDevice);
      for (size_t s = 0; s < schedule.senders.size(); ++s)
        co->mappers.push_back(makeCudaIpcMapper(cudaDevice));
    }
#endif
    if (!co->exporter) {
      co->exporter = makeSharedExporter();
      for (size_t s = 0; s < schedule.senders.size(); ++s)
        co->mappers.push_back(makeSharedMapper());
    }
    co->generations.assign(schedule.senders.size(), 0);
    co->places.resize(schedule.senders.size());
    co->holdingBytes.resize(schedule.senders.size());
    for (uint32_t s = 0; s < schedule.senders.size(); ++s)
      for (const Holding &h : schedule.senders[s].holdings)
        co->holdingBytes[s].push_back(uint64_t(h.box.volume()) *
                                      uint64_t(schedule.tensors[h.tensor].itemSize()));
    std::vector<bool> toReceiver(schedule.receivers.size(), false),
        fromSender(schedule.senders.size(), false);
    for (const Piece &p : schedule.pieces) {
      bool self = schedule.senders[p.sender].commRank ==
                  schedule.receivers[p.receiver].commRank;
      if (int64_t(p.sender) == senderIndex && !self)
        toReceiver[p.receiver] = true;
      if (int64_t(p.receiver) == receiverIndex && !self)
        fromSender[p.sender] = true;
    }
    for (uint32_t r = 0; r < toReceiver.size(); ++r)
      if (toReceiver[r])
        co->receivers.push_back(schedule.receivers[r].commRank);
    for (uint32_t s = 0; s < fromSender.size(); ++s)
      if (fromSender[s])
        co->senders.push_back(s);
  }
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
  if (options.link_probe)
    setUpProbe();
}

std::unique_ptr<Executor> Engine::makeExecutor(const Plan &plan,
                                               const std::vector<uint8_t *> &bases,
                                               uint32_t threads) {
  loadplan_device_t device = memory->device();
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
  if (co) // receivers read the holdings where they are: nothing to pack
    return;
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
  sends->staging.allocate(*memory, x.stagingBytes);
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
  bind.device = memory->device();
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
  if (co) {
    if (r.atomic) {
      // Pieces are read into staging, as packing writes it.
      Target staging;
      staging.tensor = "<staging>";
      staging.dtype = LOADPLAN_DTYPE_UINT8;
      uint64_t bytes = std::max<uint64_t>(r.stagingBytes, 1);
      staging.shape = {int64_t(bytes)};
      staging.stride = {1};
      co->plan.storageSizes = {bytes};
      co->plan.targets.push_back(staging);
    } else {
      co->plan.storageSizes = scatter.storageSizes;
      co->plan.targets = scatter.targets;
    }
  }
  for (uint32_t i = 0; i < schedule.pieces.size(); ++i) {
    const Piece &p = schedule.pieces[i];
    if (int64_t(p.receiver) != receiverIndex)
      continue;
    const Need &need = r.needs[p.need];
    const Tensor &t = schedule.tensors[need.tensor];
    parts.clear();
    uint32_t target = 0;
    bool inPlace = landing.land(need, p.box, parts, target);
    if (co && !parts.empty()) {
      const Holding &h = schedule.senders[p.sender].holdings[p.holding];
      bool self = schedule.senders[p.sender].commRank == me;
      // What is read: the piece, or (FULL, not staged) only the boxes of
      // it the plan writes.
      uint64_t read = schedule.pieceBytes(p);
      if (schedule.engine == LOADPLAN_ENGINE_FULL && !r.atomic) {
        auto same = [](const Box &a, const Box &b) {
          if (a.rank() != b.rank())
            return false;
          for (uint32_t k = 0; k < a.rank(); ++k)
            if (a.lo[k] != b.lo[k] || a.hi[k] != b.hi[k])
              return false;
          return true;
        };
        read = 0;
        for (size_t i = 0; i < parts.size(); ++i) {
          bool again = false;
          for (size_t j = 0; j < i && !again; ++j)
            again = same(parts[j].box, parts[i].box);
          if (!again)
            read += uint64_t(parts[i].box.volume()) * uint64_t(t.itemSize());
        }
      }
      (self ? co->bytesFromSelf : co->bytesFromOthers) += read;
      std::vector<Part> from = parts;
      if (r.atomic) {
        from.resize(1);
        from[0].box = p.box;
        from[0].target = 0;
        from[0].convertTo = 0;
        from[0].transform = 0;
        from[0].region.shape = p.box.extents();
        from[0].region.stride = contiguousStrides(from[0].region.shape);
        from[0].region.offset = int64_t(p.recvOffset) / t.itemSize();
      }
      for (Part &part : from)
        part.box = relative(part.box, h.box);
      co->all.push_back(addEntry(co->plan, t, h.box.extents(), from));
      co->entrySender.push_back(p.sender);
      co->entryHolding.push_back(p.holding);
    }
    if (!(p.flags & LOADPLAN_PIECE_STAGED)) {
      if (!inPlace)
        fail(LOADPLAN_STATUS_INVALID_PLAN, "schedule piece ", i, " of ",
             quote(t.name), " lands in place but its destination in the plan "
             "is not one contiguous run");
      receives->destination[i] =
          targetData(target) + parts[0].region.offset * t.itemSize();
      // The message arrives as one run: each joined piece's bytes must
      // lie right after the previous piece's (the parser checked that the
      // piece before it is of this message).
      if ((p.flags & LOADPLAN_PIECE_JOINED) &&
          receives->destination[i] != receives->destination[i - 1] +
                                          schedule.pieceBytes(schedule.pieces[i - 1]))
        fail(LOADPLAN_STATUS_INVALID_PLAN, "schedule piece ", i, " of ",
             quote(t.name), " lands in place joined to the piece before it, "
             "but its destination in the plan does not follow that piece's");
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
  if (r.stagingBytes && (!co || r.atomic))
    receives->staging.allocate(*memory, r.stagingBytes);
  for (uint64_t offset : stagedAt)
    receives->entrySource.push_back(receives->staging.data + offset);
  if (!scatter.entries.empty() && (!co || r.atomic))
    receives->executor = makeExecutor(scatter, bases, args.num_threads);
  if (co && !co->plan.entries.empty()) {
    co->entrySource.assign(co->plan.entries.size(), nullptr);
    co->executor = makeExecutor(
        co->plan, r.atomic ? std::vector<uint8_t *>{receives->staging.data} : bases,
        args.num_threads);
  }
}

uint32_t Engine::agree(const std::optional<StatusError> &local, uint64_t phase,
                       uint64_t check, uint32_t flags) {
  Record mine{};
  mine.check = check;
  mine.flags = flags;
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
  uint32_t any = 0;
  for (const Record &r : all)
    any |= r.flags;
  return any;
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
    // The label is made only for a message: at tens of thousands of
    // tensors per update, this loop is an update's fixed cost.
    auto label = [&] { return concat("held tensor ", i, " (", quote(name), ")"); };
    // Tensors passed in the schedule's order of holdings (as the Python
    // binding passes them) are found without the name's hash.
    uint32_t index = uint32_t(i);
    if (i >= x.holdings.size() ||
        schedule.tensors[x.holdings[i].tensor].name != name) {
      auto it = sends->holdingByName.find(name);
      if (it == sends->holdingByName.end())
        fail(LOADPLAN_STATUS_INVALID_UPDATE, label(), " is not held by sender ",
             senderIndex, " in the schedule");
      index = it->second;
    }
    const Holding &h = x.holdings[index];
    const Tensor &t = schedule.tensors[h.tensor];
    if (sends->source[index])
      fail(LOADPLAN_STATUS_INVALID_UPDATE, label(), " comes twice");
    bool same = in.dtype == t.dtype && in.rank == h.box.rank() &&
                in.rank <= kMaxRank && (in.shape || !in.rank);
    for (uint32_t k = 0; same && k < in.rank; ++k)
      same = in.shape[k] == h.box.extent(k);
    if (!same) {
      std::vector<int64_t> shape;
      if (in.rank <= kMaxRank && (in.shape || !in.rank))
        shape.assign(in.shape, in.shape + in.rank);
      fail(LOADPLAN_STATUS_INVALID_UPDATE, label(), " is ", dtypeText(in.dtype),
           " ", shape, " but sender ", senderIndex, " holds box ",
           boxText(h.box), " of it: ", loadplan_dtype_name(t.dtype), " ",
           h.box.extents());
    }
    if (!in.data)
      fail(LOADPLAN_STATUS_INVALID_UPDATE, label(), ": data is NULL");
    transport.checkMemory(in.data, label);
    sends->source[index] = static_cast<const uint8_t *>(in.data);
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

void Engine::pack(uint32_t round, void *stream,
                  std::optional<StatusError> &local) {
  if (!sends || !sends->executor || local)
    return;
  sends->active.clear();
  for (uint32_t i : roundPieces[round])
    if (sends->entryOfPiece[i] >= 0)
      sends->active.push_back(uint32_t(sends->entryOfPiece[i]));
  if (sends->active.empty())
    return;
  std::vector<const uint8_t *> noBoxes(sends->plan.numBoxes, nullptr);
  Batch batch{SourceForm::Tensor, sends->active.data(), sends->active.size(),
              sends->entrySource.data(), noBoxes.data(), describeEntry,
              &sends->plan};
  try {
    sends->executor->checkSources(batch);
    sends->executor->run(batch, stream);
  } catch (const StatusError &e) {
    local = e;
  }
}

std::unique_ptr<Transport::Posted> Engine::startRound(uint32_t round,
                                                      void *stream) {
  std::vector<Op> ops;
  struct LocalCopy {
    uint8_t *dst;
    const uint8_t *src;
    uint64_t bytes;
  };
  std::vector<LocalCopy> copies;
  // Where the message of the piece before starts: a joined piece adds its
  // bytes to it (the parser checked it is the same message).
  size_t sendOp = 0, recvOp = 0, copy = 0;
  uint64_t uncounted = 0; // messages of a rank to itself
  for (uint32_t i : roundPieces[round]) {
    const Piece &p = schedule.pieces[i];
    uint64_t bytes = schedule.pieceBytes(p);
    bool isSender = int64_t(p.sender) == senderIndex;
    bool isReceiver = int64_t(p.receiver) == receiverIndex;
    bool joined = p.flags & LOADPLAN_PIECE_JOINED;
    auto post = [&](bool send, uint32_t peer, const uint8_t *data, size_t &op,
                    uint64_t &messages) {
      if (joined) {
        ops[op].bytes += bytes;
        return;
      }
      ++messages;
      op = ops.size();
      ops.push_back({send, int(peer), const_cast<uint8_t *>(data), bytes, i});
    };
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
        post(true, me, src, sendOp, uncounted);
        post(false, me, dst, recvOp, uncounted);
      } else if (joined) {
        copies[copy].bytes += bytes;
      } else {
        copy = copies.size();
        copies.push_back({dst, src, bytes});
      }
    } else if (isSender) {
      stats.bytes_sent += bytes;
      post(true, schedule.receivers[p.receiver].commRank, src, sendOp,
           stats.messages_sent);
    } else {
      stats.bytes_received += bytes;
      post(false, schedule.senders[p.sender].commRank, dst, recvOp,
           stats.messages_received);
    }
  }
  for (const LocalCopy &c : copies)
    transport.copy(c.dst, c.src, c.bytes, stream);
  return transport.start(ops, stream);
}

void Engine::scatterRound(uint32_t round, void *stream,
                          std::optional<StatusError> &local) {
  // Atomic receivers scatter everything once all agreed.
  if (!receives || !receives->executor || receives->atomic)
    return;
  receives->active.clear();
  for (uint32_t i : roundPieces[round])
    if (receives->entryOfPiece[i] >= 0)
      receives->active.push_back(uint32_t(receives->entryOfPiece[i]));
  try {
    scatter(receives->active, stream);
  } catch (const StatusError &e) {
    if (!local)
      local = e;
  }
}

void Engine::runRounds(void *stream, std::optional<StatusError> &local) {
  auto keep = [&](const StatusError &e) {
    if (!local)
      local = e;
  };
  // The rounds this rank takes part in, in order. With overlap the
  // staging halves alternate with the round's parity, so round r+1 is
  // packed while round r is in flight, and round r scattered while round
  // r+1 is: at most two consecutive rounds use staging at once.
  std::vector<uint32_t> mine;
  for (uint32_t round = 0; round < roundPieces.size(); ++round)
    if (!roundPieces[round].empty())
      mine.push_back(round);
  stats.rounds = uint32_t(mine.size());
  // debug_fail_round: from that round on, as a rank whose copies failed.
  auto pack = [&](uint32_t round) {
    if (failRound >= 0 && round >= uint32_t(failRound)) {
      keep(StatusError(LOADPLAN_STATUS_INTERNAL,
                       concat("debug_fail_round: this rank failed on purpose "
                              "at round ", failRound)));
      failRound = -1;
    }
    this->pack(round, stream, local);
  };
  bool overlap = schedule.overlaps();
  std::unique_ptr<Transport::Posted> posted;
  auto start = [&](size_t k) {
    try {
      posted = startRound(mine[k], stream);
      return true;
    } catch (const StatusError &e) {
      keep(e);
      return !transport.failed();
    }
  };
  auto finish = [&] {
    if (!posted)
      return true;
    try {
      transport.finish(*posted);
      posted.reset();
      return true;
    } catch (const StatusError &e) {
      posted.reset();
      keep(e);
      return !transport.failed();
    }
  };
  if (!mine.empty()) {
    pack(mine[0]);
    if (!start(0))
      return; // peers may be gone: the agreement says what happened
  }
  for (size_t k = 0; k < mine.size(); ++k) {
    bool next = k + 1 < mine.size();
    // Round r+1 may be packed now only into the other staging half: the
    // consecutive round of the schedule, of the other parity.
    bool early = overlap && next && mine[k + 1] == mine[k] + 1;
    if (early)
      pack(mine[k + 1]);
    if (!finish())
      return;
    if (next && !early)
      scatterRound(mine[k], stream, local);
    if (next) {
      if (!early)
        pack(mine[k + 1]);
      if (!start(k + 1))
        return;
    }
    if (!next || early)
      scatterRound(mine[k], stream, local);
  }
  if (failRound >= 0) {
    keep(StatusError(LOADPLAN_STATUS_INTERNAL,
                     failRound < int32_t(roundPieces.size())
                         ? concat("debug_fail_round: this rank failed on "
                                  "purpose at round ", failRound)
                         : std::string("debug_fail_round: this rank failed on "
                                       "purpose after the last round")));
    failRound = -1;
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
  loadplan_transfer_stats_t last = stats;
  stats = {};
  stats.updates = last.updates;
  stats.probe_seconds = last.probe_seconds;
  stats.probe_bytes = last.probe_bytes;
  uint32_t updates = stats.updates;
  uint64_t sequence = uint64_t(updates) + failedUpdates + 1;
  std::optional<StatusError> local;
  try {
    checkHeld(held, numHeld);
    if (co && sends) {
      const Sender &x = schedule.senders[senderIndex];
      if (co->exporter->resolve(sends->source, co->holdingBytes[senderIndex],
                               [&](size_t h) {
            return concat("held tensor ",
                          quote(schedule.tensors[x.holdings[h].tensor].name));
          }))
        ++co->generation;
    }
  } catch (const StatusError &e) {
    local = e;
  }
  try {
    bool wants = co && std::any_of(co->senders.begin(), co->senders.end(),
                                   [&](uint32_t s) { return !co->generations[s]; });
    uint32_t flags = agree(local, kValidate, sequence, wants ? kWantTables : 0);
    if (co) {
      runColocated(stream, local, flags & kWantTables);
    } else {
      runRounds(stream, local);
    }
    agree(local, kCommit, sequence);
    if (receives && receives->atomic && receives->executor) {
      scatter(receives->all, stream);
      memory->synchronize(stream);
    }
  } catch (...) {
    ++failedUpdates;
    if (co) {
      // A sender may be gone, or a receiver lack a table: every receiver
      // unmaps what it mapped, and every sender sends its table again.
      co->acked = 0;
      releaseMappings();
    }
    throw;
  }
  if (co)
    co->acked = co->generation;
  ++stats.updates;
  stats.seconds = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - start)
                      .count();
}

void Engine::runColocated(void *stream, std::optional<StatusError> &local,
                          bool resend) {
  Colocated &c = *co;
  auto keep = [&](const StatusError &e) {
    if (!local)
      local = e;
  };
  // First a header to each receiver this sender has pieces for: the
  // table's generation and size, and whether the table follows (it does
  // only when that receiver may not have it).
  struct Header {
    uint64_t generation, bytes;
    uint32_t follows, pad;
  };
  bool sending = sends && !c.receivers.empty();
  if (sending) {
    // The receivers read the held tensors once they have the header: what
    // the caller wrote to them on `stream` (an optimizer's step on a GPU)
    // lands first.
    try {
      memory->synchronize(stream);
    } catch (const StatusError &e) {
      keep(e);
    }
  }
  Header out{c.generation, sending ? c.exporter->tableBytes().size() : 0,
             sending && (c.acked != c.generation || resend), 0};
  std::vector<Header> in(c.senders.size());
  std::vector<Op> ops;
  uint64_t tag = kAgreementTag - 3; // and the tables: tag + 1 (below kWatchTag)
  if (sends)
    for (uint32_t peer : c.receivers)
      ops.push_back({true, int(peer), &out, sizeof out, tag});
  for (size_t k = 0; k < c.senders.size(); ++k)
    ops.push_back({false, int(schedule.senders[c.senders[k]].commRank), &in[k],
                   sizeof(Header), tag});
  auto run = [&](const std::vector<Op> &batch) {
    try {
      transport.run(batch, stream);
      for (const Op &op : batch)
        ++(op.send ? stats.messages_sent : stats.messages_received);
      return true;
    } catch (const StatusError &e) {
      keep(e);
      return false;
    }
  };
  if (!run(ops))
    return;
  ops.clear();
  std::vector<std::vector<uint8_t>> tables(c.senders.size());
  if (out.follows)
    for (uint32_t peer : c.receivers)
      ops.push_back({true, int(peer),
                     const_cast<uint8_t *>(c.exporter->tableBytes().data()),
                     c.exporter->tableBytes().size(), tag + 1});
  for (size_t k = 0; k < c.senders.size(); ++k) {
    if (!in[k].follows)
      continue;
    if (in[k].bytes > (uint64_t(1) << 32)) {
      keep(StatusError(LOADPLAN_STATUS_INVALID_ARGUMENT,
                       concat(senderLabel(schedule, c.senders[k]),
                              " announces a shared-memory table of ",
                              in[k].bytes, " bytes")));
      return; // its bytes are not received: the transfer is out of step
    }
    tables[k].resize(in[k].bytes);
    ops.push_back({false, int(schedule.senders[c.senders[k]].commRank),
                   tables[k].data(), tables[k].size(), tag + 1});
  }
  if (!run(ops))
    return;
  if (!receives)
    return;
  try {
    for (size_t k = 0; k < c.senders.size(); ++k) {
      uint32_t s = c.senders[k];
      std::string who = senderLabel(schedule, s);
      if (in[k].follows) {
        c.mappers[s]->map(tables[k].data(), tables[k].size(), c.holdingBytes[s],
                          who, c.places[s]);
        c.generations[s] = in[k].generation;
      } else if (c.generations[s] != in[k].generation || !in[k].generation) {
        fail(LOADPLAN_STATUS_INTERNAL, who, " sent no table of generation ",
             in[k].generation, " and this rank holds generation ",
             c.generations[s]);
      }
    }
    if (senderIndex >= 0)
      c.places[senderIndex] = sends->source;
    if (local || !c.executor)
      return;
    for (size_t e = 0; e < c.entrySource.size(); ++e)
      c.entrySource[e] = c.places[c.entrySender[e]][c.entryHolding[e]];
    if (failRound >= 0) {
      failRound = -1;
      fail(LOADPLAN_STATUS_INTERNAL,
           "debug_fail_round: this rank failed on purpose before its copies");
    }
    std::vector<const uint8_t *> noBoxes(c.plan.numBoxes, nullptr);
    Batch batch{SourceForm::Tensor, c.all.data(), c.all.size(),
                c.entrySource.data(), noBoxes.data(), describeEntry, &c.plan};
    batch.peerSources = true; // CUDA IPC mappings of another GPU of the node
    c.executor->checkSources(batch);
    c.executor->run(batch, stream);
    memory->synchronize(stream);
    stats.rounds = 1;
    stats.bytes_received = c.bytesFromOthers;
    stats.bytes_local = c.bytesFromSelf;
    (receives->atomic ? stats.bytes_staged : stats.bytes_in_place) =
        c.bytesFromOthers + c.bytesFromSelf;
  } catch (const StatusError &e) {
    keep(e);
  }
  stats.mappings = 0;
  for (const std::unique_ptr<Mapper> &m : c.mappers)
    stats.mappings += m->count();
}

void Engine::releaseMappings() {
  if (!co)
    return;
  for (std::unique_ptr<Mapper> &m : co->mappers)
    m->release();
  std::fill(co->generations.begin(), co->generations.end(), 0);
  stats.mappings = 0;
}

void Engine::failUpdate(const StatusError &error) {
  uint64_t sequence = uint64_t(stats.updates) + failedUpdates + 1;
  ++failedUpdates;
  agree(error, kValidate, sequence);
  throw error; // not reached: the agreement throws the first error
}
