//===- Engine.h - One rank's runner of a transfer schedule -------*- C++ -*-===//
//
// At creation a rank turns its part of the schedule into plain work: for
// each round, the sends (from the held tensor, or from packed staging) and
// the receives (straight into live memory, or into staging), and two
// derived plans that the runtime's executors run: one packing a sender's
// non-contiguous pieces into its staging buffer, one scattering a
// receiver's staged pieces into the live targets and fallback buffers.
//
// An update is: every rank checks its inputs and all agree; the rounds;
// all agree again; then (atomic receivers) the scatter. Each agreement
// swaps a 512-byte record between every pair of ranks, so every rank ends
// with the same verdict and the first failing rank's message.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_TRANSFER_ENGINE_H
#define LOADPLAN_RUNTIME_TRANSFER_ENGINE_H

#include "../Executor.h"
#include "../Status.h"
#include "Schedule.h"
#include "Colocation.h"
#include "Transport.h"

#include <memory>
#include <mutex>
#include <optional>

/// The C handle: a reference-counted transport. Collectives on one
/// communicator run one at a time.
struct loadplan_comm_t {
  std::atomic<int64_t> refs{1};
  std::unique_ptr<loadplan::transfer::Transport> transport;
  std::mutex mutex;
};

namespace loadplan::transfer {

class Engine {
public:
  /// Collective: sets this rank up and agrees with the others that every
  /// rank holds the same schedule and is ready. Throws the first error of
  /// any rank.
  Engine(loadplan_comm_t &comm, const Schedule &schedule,
         const loadplan_receiver_args_t *receiver,
         const loadplan_transfer_options_t &options);
  ~Engine();

  /// Collective: one update (see transfer.h).
  void update(const loadplan_held_tensor_t *held, size_t numHeld, void *stream);
  /// Collective: fails an update on every rank with `error`; throws the
  /// agreed error.
  [[noreturn]] void failUpdate(const StatusError &error);
  /// Colocated, between updates, not collective: closes every mapping of
  /// other ranks' memory; the next update asks every sender for its table.
  void releaseMappings();

  loadplan_transfer_stats_t stats{};
  /// Where the data lives: the transport's device, or for a colocated
  /// transfer of CUDA memory, that device.
  loadplan_device_t dataDevice() const { return memory->device(); }

private:
  struct Sends;
  struct Receives;
  struct Probe;
  struct Colocated;

  void setUp(const loadplan_receiver_args_t *receiver,
             const loadplan_transfer_options_t &options);
  void setUpSender(uint32_t threads);
  void setUpReceiver(const loadplan_receiver_args_t &args);
  /// Sizes and allocates the link probe's scratch memory.
  void setUpProbe();
  /// Colocated: the plan copying each piece from its sender's memory.
  void setUpColocated(const Plan &targets, const std::vector<uint8_t *> &bases,
                      uint32_t threads);
  /// Collective, at creation: every rank's mode and machine; throws when
  /// they do not fit.
  void checkHosts();
  /// Colocated: the tables, the mappings and the copies; `resend`: a
  /// receiver lacks a table, so every sender sends its own.
  void runColocated(void *stream, std::optional<StatusError> &local, bool resend);
  /// Colocated: one timed memcpy of this rank's bytes.
  double probeCopy();
  /// Collective: times the link probe (loadplan_transfer_stats_t).
  void probe();
  /// Collective: one run of the probe; its seconds.
  double probeOnce();
  std::unique_ptr<Executor> makeExecutor(const Plan &plan,
                                         const std::vector<uint8_t *> &bases,
                                         uint32_t threads);
  /// Swaps `local` (an error or none), `check` and `flags` with every
  /// rank; throws the first error, or a mismatch of `check`; returns the
  /// union of every rank's flags.
  uint32_t agree(const std::optional<StatusError> &local, uint64_t phase,
                 uint64_t check, uint32_t flags = 0);
  std::string roleOf(uint32_t rank) const;
  void checkHeld(const loadplan_held_tensor_t *held, size_t numHeld);
  void runRounds(void *stream, std::optional<StatusError> &local);
  /// Packs what this rank sends in `round` into its staging (unless an
  /// error is kept in `local`).
  void pack(uint32_t round, void *stream, std::optional<StatusError> &local);
  /// Posts `round`'s messages (and copies this rank's pieces to itself).
  std::unique_ptr<Transport::Posted> startRound(uint32_t round, void *stream);
  /// Scatters what this rank received into staging in `round`.
  void scatterRound(uint32_t round, void *stream,
                    std::optional<StatusError> &local);
  void scatter(const std::vector<uint32_t> &entries, void *stream);

  loadplan_comm_t &comm;
  Transport &transport;
  const Schedule &schedule;
  uint32_t me;
  int64_t senderIndex = -1, receiverIndex = -1;
  int32_t failRound = -1;
  /// Updates that failed; with stats.updates, the step all ranks agree on.
  uint64_t failedUpdates = 0;
  /// Before the parts whose staging it holds, so it outlives them.
  std::unique_ptr<DataMemory> memory;
  std::unique_ptr<Sends> sends;
  std::unique_ptr<Receives> receives;
  std::unique_ptr<Probe> linkProbe;
  std::unique_ptr<Colocated> co;
  /// Per round: this rank's pieces (as sender or receiver), in order.
  std::vector<std::vector<uint32_t>> roundPieces;
};

} // namespace loadplan::transfer

/// The C handle of an engine; it retains its communicator and schedule.
struct loadplan_transfer_t {
  loadplan_comm_t *comm = nullptr;
  loadplan_schedule_t *schedule = nullptr;
  std::unique_ptr<loadplan::transfer::Engine> engine;
  std::mutex mutex;
};

#endif // LOADPLAN_RUNTIME_TRANSFER_ENGINE_H
