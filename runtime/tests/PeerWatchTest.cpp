//===- PeerWatchTest.cpp - Noticing peers whose process ended ---*- C++ -*-===//
//
// Ranks in forked processes watch each other over loopback as the NCCL
// transport does (the peers of their host only), swapping their records
// through shared memory; then one is killed. Every other rank must see it
// gone, by name, within 2 s, and no one else gone; a rank whose record says
// another host is not connected to (nor waited for) and sees nothing. The
// Gloo transport's use, every peer watched, is TransferTest's.
//
//===----------------------------------------------------------------------===//

#include "../src/transfer/PeerWatch.h"
#include "TransferTestUtil.h"

#include <netinet/in.h>

#include <cstring>

using namespace loadplan::testing;
using loadplan::transfer::PeerWatch;

namespace {

constexpr int kRanks = 4;

/// What the ranks share: their records, how many have reached each step,
/// and when the dying rank died.
struct Board {
  PeerWatch::Record records[kRanks];
  std::atomic<int> posted{0}, started{0}, checked{0};
  std::atomic<int64_t> diedAt{0};
};

sockaddr_storage loopback() {
  sockaddr_storage a{};
  auto &in = reinterpret_cast<sockaddr_in &>(a);
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

/// Waits until `done()` or 10 s passed; false on the latter.
bool await(const std::function<bool()> &done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(PeerWatch, EveryRankOfTheHostSeesAKilledPeerGoneAtOnce) {
  Board *board = sharedAcrossFork<Board>();
  const int dying = 2, elsewhere = 3;
  auto rankMain = [&](int rank) -> std::string {
    PeerWatch watch(rank, kRanks, loopback());
    board->records[rank] = watch.record();
    ++board->posted;
    if (!await([&] { return board->posted == kRanks; }))
      return "the others did not post their records";
    std::vector<PeerWatch::Record> records(board->records,
                                           board->records + kRanks);
    // Rank 3 and the others each take the other side for another host.
    for (int peer = 0; peer < kRanks; ++peer)
      if ((rank == elsewhere) != (peer == elsewhere))
        std::strcpy(records[peer].host, "another host");
    watch.start(records, /*sameHost=*/true, std::chrono::seconds(10));
    ++board->started;
    if (!await([&] { return board->started == kRanks; }))
      return "the others did not start watching";
    if (rank == dying) {
      board->diedAt = nowNs();
      kill(getpid(), SIGKILL);
    }
    std::string error;
    if (rank == elsewhere) {
      await([&] { return board->diedAt != 0; });
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (watch.first() != -1)
        error = "rank 3 watches no one but saw rank " +
                std::to_string(watch.first()) +
                " gone: " + watch.why(watch.first());
    } else if (!await([&] { return watch.first() != -1; })) {
      error = "rank 2's death went unnoticed";
    } else {
      double ms = double(nowNs() - board->diedAt) / 1e6;
      std::string why = watch.why(dying);
      std::fprintf(stderr, "rank %d saw rank 2 gone after %.1f ms: %s\n", rank,
                   ms, why.c_str());
      if (watch.first() != dying)
        error = "the first peer gone is rank " + std::to_string(watch.first());
      else if (why.rfind("rank 2 is gone: its connection ", 0) != 0)
        error = "rank 2 is gone because: " + why;
      else if (ms > 2000)
        error = "rank 2's death was seen after " + std::to_string(ms) + " ms";
      for (int peer = 0; peer < kRanks; ++peer)
        if (peer != rank && peer != dying && !watch.why(peer).empty())
          error = "rank " + std::to_string(peer) +
                  " is gone too: " + watch.why(peer);
    }
    // No one leaves (which its peers would see) before all have looked.
    ++board->checked;
    await([&] { return board->checked == kRanks - 1; });
    return error;
  };
  EXPECT_TRUE(runRanks(
      kRanks,
      [&](int rank) {
        return rank == dying ? inDyingChild([&] { return rankMain(rank); }, 0)
                             : rankMain(rank);
      },
      30));
  munmap(board, sizeof(Board));
}

} // namespace
