//===- PeerWatch.h - Noticing peers whose process ended ----------*- C++ -*-===//
//
// One TCP connection to each watched peer, on which nothing is sent after a
// hello: however a process ends (it exits, crashes, is killed), the kernel
// closes its sockets, and the other end of each reads end of file, or a
// reset, at once. A thread polls the connections and reports each peer
// gone. Transports watch where their own connections do not tell them in
// time: a Gloo wait does not end when a peer's socket closes with bytes in
// flight, nor for a peer the op does not involve; NCCL's transports within
// a host (P2P, shared memory) have no connection to lose.
//
// A peer that hangs, or a host that vanishes without closing anything, is
// still noticed only by the transport's timeout.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_TRANSFER_PEERWATCH_H
#define LOADPLAN_RUNTIME_TRANSFER_PEERWATCH_H

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace loadplan::transfer {

class PeerWatch {
public:
  /// What a rank tells the others so that they can connect to it: where it
  /// listens, and the host it runs on (its kernel and network namespace:
  /// whose loopback is its loopback).
  struct Record {
    char magic[8];
    int32_t rank;
    uint16_t family;
    uint16_t port; // network byte order
    uint8_t address[16];
    char host[64];
  };

  /// Listens on `address` (its port is ignored: any free one), which every
  /// watched peer must reach. Throws IO_ERROR.
  PeerWatch(int rank, int size, const sockaddr_storage &address);
  /// Stops watching; the peers see this rank gone.
  ~PeerWatch();

  PeerWatch(const PeerWatch &) = delete;
  PeerWatch &operator=(const PeerWatch &) = delete;

  const Record &record() const { return mine; }

  /// Connects to every peer of `records` (indexed by rank), or with
  /// `sameHost` only to those on this host, then watches them: `onGone(peer)`
  /// runs on the watch's thread for each one whose connection ends. Throws
  /// IO_ERROR when a peer does not connect within `timeout`.
  void start(const std::vector<Record> &records, bool sameHost,
             std::chrono::milliseconds timeout,
             std::function<void(int)> onGone = nullptr);

  /// The first peer noticed gone, or -1.
  int first() const { return firstGone.load(); }
  /// Why `peer` is gone ("rank 1 is gone: its connection closed ..."); "" while it is not.
  std::string why(int peer) const;

private:
  void close();
  void watch();
  void gone(int peer, const std::string &why);

  const int rank, size;
  Record mine{};
  int listener = -1;
  /// Per rank: the connection to it, -1 where none.
  std::vector<int> sockets;
  /// Written to by the destructor to stop the watch's thread.
  int wake[2] = {-1, -1};
  std::thread thread;
  std::function<void(int)> onGone;
  std::atomic<int> firstGone{-1};
  mutable std::mutex mutex;
  std::vector<std::string> reasons;
};

} // namespace loadplan::transfer

#endif // LOADPLAN_RUNTIME_TRANSFER_PEERWATCH_H
