//===- GlooTransport.cpp - The CPU transport over Gloo's TCP pairs -*- C++ -*-===//
//
// A full mesh of TCP pairs (gloo::rendezvous::Context) connected through a
// file store or the caller's store. Sends and receives are Gloo's unbound
// buffers: all are posted, then waited for one by one against one deadline.
// Gloo throws gloo::IoException when a peer goes away or a wait times out;
// that closes the transport, since a receive still posted may yet write
// into its buffer: the buffers of failed ops are kept until the transport
// is destroyed.
//
//===----------------------------------------------------------------------===//

#include "Transport.h"
#include "../Status.h"

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>

using namespace loadplan;
using namespace loadplan::transfer;

namespace {

using Clock = std::chrono::steady_clock;
using Buffer = std::unique_ptr<gloo::transport::UnboundBuffer>;

/// gloo's Store over the caller's callbacks.
class CallbackStore final : public gloo::rendezvous::Store {
public:
  CallbackStore(const loadplan_store_t &store, int64_t timeoutMs)
      : store(store), timeoutMs(timeoutMs) {}

  void set(const std::string &key, const std::vector<char> &data) override {
    if (store.set(store.context, key.data(), key.size(), data.data(),
                  data.size()) != 0)
      throw std::runtime_error("the store could not set key " + key);
  }

  std::vector<char> get(const std::string &key) override {
    std::vector<char> value(4096);
    while (true) {
      int64_t n = store.get(store.context, key.data(), key.size(),
                            value.data(), value.size(), timeoutMs);
      if (n < 0)
        throw std::runtime_error("the store has no key " + key + " after " +
                                 std::to_string(timeoutMs) + " ms");
      bool fits = size_t(n) <= value.size();
      value.resize(size_t(n));
      if (fits)
        return value;
    }
  }

  void wait(const std::vector<std::string> &keys) override {
    for (const std::string &key : keys)
      get(key);
  }
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &) override {
    wait(keys);
  }

private:
  const loadplan_store_t &store;
  int64_t timeoutMs;
};

class GlooTransport final : public Transport {
public:
  GlooTransport(int rank, int size, const loadplan_gloo_options_t &options)
      : Transport(rank, size),
        timeout(options.timeout_ms > 0 ? options.timeout_ms : 60000) {
    gloo::transport::tcp::attr attr;
    if (options.hostname)
      attr.hostname = options.hostname;
    try {
      tcpDevice = gloo::transport::tcp::CreateDevice(attr);
      context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      context->setTimeout(timeout);
      std::string prefix = options.prefix ? options.prefix : "";
      if (options.store_path) {
        gloo::rendezvous::FileStore files(options.store_path);
        gloo::rendezvous::PrefixStore store(prefix, files);
        context->connectFullMesh(store, tcpDevice);
      } else {
        CallbackStore callbacks(*options.store, timeout.count());
        gloo::rendezvous::PrefixStore store(prefix, callbacks);
        context->connectFullMesh(store, tcpDevice);
      }
    } catch (const std::exception &e) {
      fail(LOADPLAN_STATUS_IO_ERROR, "gloo: rank ", rank, " of ", size,
           " could not connect: ", e.what());
    }
  }

  ~GlooTransport() override {
    // Buffers of failed ops before the pairs they may still be queued on.
    graveyard.clear();
    context.reset();
    tcpDevice.reset();
  }

  uint32_t backend() const override { return LOADPLAN_BACKEND_GLOO; }
  loadplan_device_t device() const override { return {LOADPLAN_DEVICE_CPU, 0}; }
  bool selfOps() const override { return false; }

  void run(const std::vector<Op> &ops, void *) override {
    checkOpen();
    std::vector<Buffer> buffers;
    buffers.reserve(ops.size());
    std::string error;
    try {
      for (const Op &op : ops) {
        buffers.push_back(context->createUnboundBuffer(op.data, op.bytes));
        if (op.send)
          buffers.back()->send(op.peer, op.tag);
        else
          buffers.back()->recv(op.peer, op.tag);
      }
    } catch (const std::exception &e) {
      error = e.what();
    }
    auto deadline = Clock::now() + timeout;
    for (size_t i = 0; i < buffers.size() && error.empty(); ++i)
      if (!wait(ops[i], *buffers[i], deadline, error))
        error = concat(ops[i].send ? "sending " : "receiving ", ops[i].bytes,
                       " bytes ", ops[i].send ? "to" : "from", " rank ",
                       ops[i].peer, " failed: ", error);
    if (error.empty())
      return;
    bury(buffers);
    markFailed(error);
    fail(LOADPLAN_STATUS_IO_ERROR, "gloo: ", error);
  }

  void exchange(const void *mine, size_t bytes, void *all, uint64_t tag,
                std::vector<std::string> &errors) override {
    errors.assign(size, "");
    auto *out = static_cast<uint8_t *>(all);
    std::memcpy(out + size_t(rank) * bytes, mine, bytes);
    // One op per peer and direction; a peer's failure costs only its ops.
    // Even after a failure: the peers still alive should hear why.
    std::vector<Op> ops;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank)
        continue;
      ops.push_back({true, peer, const_cast<void *>(mine), bytes, tag});
      ops.push_back({false, peer, out + size_t(peer) * bytes, bytes, tag});
    }
    // An op Gloo refused (its pair had failed) was never posted: waiting
    // for it would last until the deadline.
    std::vector<Buffer> buffers(ops.size());
    std::vector<bool> posted(ops.size(), false);
    for (size_t i = 0; i < ops.size(); ++i) {
      try {
        buffers[i] = context->createUnboundBuffer(ops[i].data, ops[i].bytes);
        if (ops[i].send)
          buffers[i]->send(ops[i].peer, tag);
        else
          buffers[i]->recv(ops[i].peer, tag);
        posted[i] = true;
      } catch (const std::exception &e) {
        errors[ops[i].peer] = e.what();
      }
    }
    auto deadline = Clock::now() + timeout;
    bool anyFailed = false;
    for (size_t i = 0; i < ops.size(); ++i) {
      std::string &error = errors[ops[i].peer];
      if (posted[i] && error.empty())
        wait(ops[i], *buffers[i], deadline, error);
      anyFailed |= !error.empty();
    }
    if (anyFailed) {
      bury(buffers);
      for (int peer = 0; peer < size; ++peer)
        if (!errors[peer].empty()) {
          markFailed(concat("rank ", peer, ": ", errors[peer]));
          break;
        }
    }
  }

  void *allocate(size_t bytes) override {
    void *p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
    if (!p)
      throw std::bad_alloc();
    return p;
  }
  void release(void *p) override { std::free(p); }
  void copy(void *dst, const void *src, size_t bytes, void *) override {
    std::memcpy(dst, src, bytes);
  }
  void synchronize(void *) override {}

private:
  void checkOpen() const {
    if (failed())
      fail(LOADPLAN_STATUS_IO_ERROR,
           "gloo: the communicator failed earlier and is closed (",
           failure(), "); make a new one");
  }

  /// Waits for `op` until `deadline`; false (and `error`) if it failed.
  bool wait(const Op &op, gloo::transport::UnboundBuffer &buffer,
            Clock::time_point deadline, std::string &error) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() < 1)
      left = std::chrono::milliseconds(1);
    try {
      bool done = op.send ? buffer.waitSend(left) : buffer.waitRecv(left);
      if (!done)
        error = "aborted";
      return done;
    } catch (const std::exception &e) {
      error = e.what();
      return false;
    }
  }

  void bury(std::vector<Buffer> &buffers) {
    std::lock_guard<std::mutex> lock(mutex);
    for (Buffer &b : buffers)
      if (b)
        graveyard.push_back(std::move(b));
  }

  std::chrono::milliseconds timeout;
  std::shared_ptr<gloo::transport::Device> tcpDevice;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::mutex mutex;
  std::vector<Buffer> graveyard;
};

} // namespace

/// Gloo writes to its sockets without MSG_NOSIGNAL: a peer that dies mid-
/// update would kill this process with SIGPIPE instead of failing the update
/// with an I/O error. Ignore SIGPIPE unless the embedding process chose a
/// handler of its own (Python already ignores it).
static void ignoreSigpipeUnlessHandled() {
  struct sigaction current;
  if (sigaction(SIGPIPE, nullptr, &current) == 0 &&
      current.sa_handler == SIG_DFL && !(current.sa_flags & SA_SIGINFO))
    std::signal(SIGPIPE, SIG_IGN);
}

std::unique_ptr<Transport>
loadplan::transfer::makeGlooTransport(int rank, int size,
                                      const loadplan_gloo_options_t &options) {
  ignoreSigpipeUnlessHandled();
  return std::make_unique<GlooTransport>(rank, size, options);
}
