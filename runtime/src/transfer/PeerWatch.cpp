//===- PeerWatch.cpp - Noticing peers whose process ended --------*- C++ -*-===//

#include "PeerWatch.h"
#include "../Status.h"
#include "Transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>

using namespace loadplan;
using namespace loadplan::transfer;

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kMagic[8] = {'L', 'P', 'W', 'A', 'T', 'C', 'H', '1'};

/// What a connecting rank sends first, so that the listening one knows it.
struct Hello {
  char magic[8];
  int32_t rank;
};

[[noreturn]] void ioFail(int rank, const std::string &what, int error) {
  fail(LOADPLAN_STATUS_IO_ERROR, "rank ", rank,
       " cannot watch its peers: ", what,
       error ? concat(": ", std::strerror(error)) : std::string());
}

/// The kernel and network namespace this process runs in: processes of
/// equal identities reach each other at 127.0.0.1. "" when unknown.
std::string hostIdentity() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(boot, id);
  struct stat ns;
  if (id.empty() || stat("/proc/self/ns/net", &ns) != 0)
    return "";
  return concat(id, "/", ns.st_dev, ":", ns.st_ino);
}

socklen_t lengthOf(const sockaddr_storage &a) {
  return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

sockaddr_storage addressOf(const PeerWatch::Record &r) {
  sockaddr_storage a{};
  if (r.family == AF_INET6) {
    auto &in6 = reinterpret_cast<sockaddr_in6 &>(a);
    in6.sin6_family = AF_INET6;
    in6.sin6_port = r.port;
    std::memcpy(&in6.sin6_addr, r.address, sizeof in6.sin6_addr);
  } else {
    auto &in = reinterpret_cast<sockaddr_in &>(a);
    in.sin_family = AF_INET;
    in.sin_port = r.port;
    std::memcpy(&in.sin_addr, r.address, sizeof in.sin_addr);
  }
  return a;
}

/// Waits until `fd` has one of `events`; false once `deadline` passed.
bool await(int fd, short events, Clock::time_point deadline) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - Clock::now())
                    .count();
    if (left <= 0)
      return false;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, int(std::min<int64_t>(left, INT_MAX)));
    if (n > 0)
      return true;
    if (n < 0 && errno != EINTR)
      return false;
  }
}

} // namespace

PeerWatch::PeerWatch(int rank, int size, const sockaddr_storage &address)
    : rank(rank), size(size), sockets(size, -1), reasons(size) {
  try {
    sockaddr_storage a = address;
    if (a.ss_family == AF_INET6)
      reinterpret_cast<sockaddr_in6 &>(a).sin6_port = 0;
    else
      reinterpret_cast<sockaddr_in &>(a).sin_port = 0;
    listener = ::socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0)
      ioFail(rank, "socket", errno);
    socklen_t length = lengthOf(a);
    if (::bind(listener, reinterpret_cast<sockaddr *>(&a), length) != 0 ||
        ::listen(listener, std::max(size, 1)) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr *>(&a), &length) != 0)
      ioFail(rank, "listening", errno);
    if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0)
      ioFail(rank, "pipe", errno);
    std::memcpy(mine.magic, kMagic, sizeof kMagic);
    mine.rank = rank;
    mine.family = a.ss_family;
    if (a.ss_family == AF_INET6) {
      auto &in6 = reinterpret_cast<sockaddr_in6 &>(a);
      mine.port = in6.sin6_port;
      std::memcpy(mine.address, &in6.sin6_addr, sizeof in6.sin6_addr);
    } else {
      auto &in = reinterpret_cast<sockaddr_in &>(a);
      mine.port = in.sin_port;
      std::memcpy(mine.address, &in.sin_addr, sizeof in.sin_addr);
    }
    std::string host = hostIdentity();
    std::memcpy(mine.host, host.data(),
                std::min(host.size(), sizeof mine.host - 1));
  } catch (...) {
    close();
    throw;
  }
}

PeerWatch::~PeerWatch() { close(); }

void PeerWatch::start(const std::vector<Record> &records, bool sameHost,
                      std::chrono::milliseconds timeout,
                      std::function<void(int)> onGone) {
  this->onGone = std::move(onGone);
  auto deadline = Clock::now() + timeout;
  std::vector<bool> watched(size, false);
  int above = 0;
  for (int peer = 0; peer < size; ++peer) {
    const Record &r = records[peer];
    if (peer == rank)
      continue;
    if (std::memcmp(r.magic, kMagic, sizeof kMagic) != 0 || r.rank != peer)
      ioFail(rank, concat("rank ", peer, " sent no watch record"), 0);
    watched[peer] =
        !sameHost || (mine.host[0] &&
                      std::strncmp(r.host, mine.host, sizeof mine.host) == 0);
    above += watched[peer] && peer > rank;
  }
  // Each rank connects to the watched ranks below it (whose listeners are
  // up: they sent their records), then accepts the ones above.
  for (int peer = 0; peer < rank; ++peer) {
    if (!watched[peer])
      continue;
    sockaddr_storage a = addressOf(records[peer]);
    int fd =
        ::socket(a.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
      ioFail(rank, "socket", errno);
    sockets[peer] = fd;
    if (::connect(fd, reinterpret_cast<sockaddr *>(&a), lengthOf(a)) != 0 &&
        errno != EINPROGRESS)
      ioFail(rank, concat("connecting to rank ", peer), errno);
    int error = 0;
    socklen_t length = sizeof error;
    if (!await(fd, POLLOUT, deadline))
      ioFail(rank,
             concat("rank ", peer, " did not accept within ", timeout.count(),
                    " ms"),
             0);
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error)
      ioFail(rank, concat("connecting to rank ", peer), error ? error : errno);
    Hello hello;
    std::memcpy(hello.magic, kMagic, sizeof kMagic);
    hello.rank = rank;
    if (::send(fd, &hello, sizeof hello, MSG_NOSIGNAL) != ssize_t(sizeof hello))
      ioFail(rank, concat("greeting rank ", peer), errno);
  }
  while (above > 0) {
    if (!await(listener, POLLIN, deadline))
      ioFail(rank,
             concat(above, " of the ranks above it did not connect within ",
                    timeout.count(), " ms"),
             0);
    int fd =
        ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED)
        continue;
      ioFail(rank, "accept", errno);
    }
    Hello hello{};
    size_t got = 0;
    while (got < sizeof hello && await(fd, POLLIN, deadline)) {
      ssize_t n = ::recv(fd, reinterpret_cast<char *>(&hello) + got,
                         sizeof hello - got, 0);
      if (n <= 0 && !(n < 0 && (errno == EINTR || errno == EAGAIN)))
        break;
      got += n > 0 ? size_t(n) : 0;
    }
    int peer = hello.rank;
    // Anything else that connects is not a peer: let it go.
    if (got != sizeof hello ||
        std::memcmp(hello.magic, kMagic, sizeof kMagic) || peer <= rank ||
        peer >= size || !watched[peer] || sockets[peer] >= 0) {
      ::close(fd);
      continue;
    }
    sockets[peer] = fd;
    --above;
  }
  ::close(listener);
  listener = -1;
  thread = std::thread([this] { watch(); });
}

std::string PeerWatch::why(int peer) const {
  std::lock_guard<std::mutex> lock(mutex);
  return reasons[peer];
}

void PeerWatch::gone(int peer, const std::string &why) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    reasons[peer] = why;
  }
  int none = -1;
  firstGone.compare_exchange_strong(none, peer);
  if (onGone)
    onGone(peer);
}

void PeerWatch::watch() {
  std::vector<bool> ended(size, false);
  std::vector<pollfd> fds;
  std::vector<int> peers;
  while (true) {
    fds.assign(1, pollfd{wake[0], POLLIN, 0});
    peers.clear();
    for (int peer = 0; peer < size; ++peer)
      if (sockets[peer] >= 0 && !ended[peer]) {
        fds.push_back({sockets[peer], POLLIN, 0});
        peers.push_back(peer);
      }
    int n = ::poll(fds.data(), fds.size(), -1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 || fds[0].revents)
      return; // the destructor
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!fds[i].revents)
        continue;
      int peer = peers[i - 1];
      char bytes[64];
      ssize_t got = ::recv(fds[i].fd, bytes, sizeof bytes, MSG_DONTWAIT);
      if (got > 0)
        continue; // nothing is sent after the hello: stray bytes
      int error = got < 0 ? errno : 0;
      if (error == EAGAIN || error == EWOULDBLOCK || error == EINTR) {
        if (!(fds[i].revents & (POLLERR | POLLHUP)))
          continue;
        error = 0; // hung up with nothing to read
      }
      ended[peer] = true;
      gone(peer, error == 0 ? closedBy(peer)
                 : error == ECONNRESET
                     ? resetBy(peer)
                     : concat("the connection to rank ", peer,
                              " failed: ", std::strerror(error)));
    }
  }
}

void PeerWatch::close() {
  if (thread.joinable()) {
    char byte = 0;
    while (::write(wake[1], &byte, 1) < 0 && errno == EINTR) {
    }
    thread.join();
  }
  for (int &fd : sockets)
    if (fd >= 0) {
      ::close(fd);
      fd = -1;
    }
  for (int *fd : {&listener, &wake[0], &wake[1]})
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
}
