//===- Transport.h - Point-to-point byte transports --------------*- C++ -*-===//
//
// What an engine needs of a communication library: post a group of sends
// and receives of byte ranges at once and wait for all of them, swap a
// small record with every other rank (the engines' agreements), and
// memory and copies on the transport's device. Gloo (CPU memory over TCP)
// and NCCL (CUDA memory) implement it.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_TRANSFER_TRANSPORT_H
#define LOADPLAN_RUNTIME_TRANSFER_TRANSPORT_H

#include "loadplan/transfer.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace loadplan::transfer {

/// One send or receive of `bytes` bytes at `data`. Gloo matches a send and
/// a receive by (peer, tag); NCCL by their order between two ranks, which
/// the engines keep equal on both sides.
struct Op {
  bool send;
  int peer;
  void *data;
  size_t bytes;
  uint64_t tag;
};

/// Tags at and above this are the agreements'; messages use the index of
/// their first piece.
constexpr uint64_t kAgreementTag = uint64_t(1) << 62;
/// The link probe's chunks: this plus their index.
constexpr uint64_t kProbeTag = uint64_t(1) << 61;
/// The tag of the records a transport swaps to set up its PeerWatch.
constexpr uint64_t kWatchTag = kAgreementTag - 1;

/// What a transport says when a peer's connection ended, as every
/// connection of a process that dies does: closed (the peer's end shut) or
/// reset (it shut with bytes unread). A rank that is alive and fails an
/// update says why instead (Engine::agree).
inline std::string closedBy(int peer) {
  return "rank " + std::to_string(peer) +
         " is gone: its connection closed (it exited or was killed)";
}
inline std::string resetBy(int peer) {
  return "rank " + std::to_string(peer) +
         " is gone: its connection was reset (it exited or was killed)";
}

class Transport {
public:
  Transport(int rank, int size) : rank(rank), size(size) {}
  virtual ~Transport() = default;

  const int rank, size;

  virtual uint32_t backend() const = 0;
  virtual loadplan_device_t device() const = 0;
  /// Whether ops with this rank as the peer are allowed; if not, an engine
  /// copies its own pieces with copy().
  virtual bool selfOps() const = 0;

  /// Ops that start() posted and finish() waits for.
  class Posted {
  public:
    virtual ~Posted() = default;
  };

  /// Posts every op at once; the caller may work meanwhile (pack the next
  /// round, scatter the last) and then calls finish(), before it starts
  /// anything else on this transport. The ops' memory stays untouched by
  /// the caller until then.
  virtual std::unique_ptr<Posted> start(const std::vector<Op> &ops,
                                        void *stream) = 0;
  /// Returns when every op of `posted` completed. Throws a StatusError
  /// (IO_ERROR for Gloo, DEVICE_ERROR for NCCL) when one fails, when a
  /// peer is seen gone meanwhile (an update needs every rank) or when the
  /// timeout passes; the transport is then closed (failed()). start()
  /// throws the same when posting fails.
  virtual void finish(Posted &posted) = 0;

  /// start() and finish().
  void run(const std::vector<Op> &ops, void *stream) {
    std::unique_ptr<Posted> posted = start(ops, stream);
    finish(*posted);
  }

  /// Sends `bytes` bytes at `mine` to every other rank and receives each
  /// one's into all + peer * bytes (and its own at all + rank * bytes).
  /// Never throws for a peer: errors[peer] says why that peer's record did
  /// not come (empty when it did). Not cut short for a peer gone: with
  /// Gloo only that peer's record fails and the ones still alive hear from
  /// each other; NCCL, one group for all, loses every record when one
  /// fails.
  virtual void exchange(const void *mine, size_t bytes, void *all, uint64_t tag,
                        std::vector<std::string> &errors) = 0;

  /// Throws INVALID_UPDATE when `data` is not memory the transport can
  /// send from (NCCL: memory of its device); `what` names it.
  virtual void checkMemory(const void *data,
                           const std::function<std::string()> &what) {
    (void)data;
    (void)what;
  }

  /// Memory of the transport's device, for staging; released by release().
  virtual void *allocate(size_t bytes) = 0;
  virtual void release(void *p) = 0;
  /// Copies within the device's memory (ordered on `stream`).
  virtual void copy(void *dst, const void *src, size_t bytes, void *stream) = 0;
  /// Waits for `stream` (a no-op on the CPU).
  virtual void synchronize(void *stream) = 0;

  bool failed() const { return failure_.load(); }
  std::string failure() const { return failureText; }

protected:
  /// Marks the transport closed for good, remembering why.
  void markFailed(const std::string &why) {
    if (!failure_.exchange(true))
      failureText = why;
  }

private:
  std::atomic<bool> failure_{false};
  std::string failureText;
};

#if LOADPLAN_HAVE_GLOO
std::unique_ptr<Transport> makeGlooTransport(int rank, int size,
                                             const loadplan_gloo_options_t &options);
#endif

/// Whether NCCL can run here: the library loads and a GPU is present;
/// otherwise `why` says what is missing.
bool ncclAvailable(std::string &why);
/// The path of the libnccl.so.2 the transport uses, loading it if not yet
/// loaded (no GPU needed), alive as long as the process; fails UNAVAILABLE
/// saying where it looked.
const char *ncclLibrary();
void makeNcclUniqueId(uint8_t out[LOADPLAN_NCCL_UNIQUE_ID_BYTES]);
std::unique_ptr<Transport> makeNcclTransport(int rank, int size,
                                             const uint8_t *id, int device,
                                             int64_t timeoutMs);

} // namespace loadplan::transfer

#endif // LOADPLAN_RUNTIME_TRANSFER_TRANSPORT_H
