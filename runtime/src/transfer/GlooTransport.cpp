//===- GlooTransport.cpp - The CPU transport over Gloo's TCP pairs -*- C++ -*-===//
//
// A full mesh of TCP pairs (gloo::rendezvous::Context) connected through a
// file store or the caller's store. Sends and receives are Gloo's unbound
// buffers: all are posted, then waited for one by one against one deadline.
// Gloo throws gloo::IoException when a wait times out, and fails the ops
// still queued on a pair whose socket closes; but a wait on an op whose
// bytes were moving, or on another peer, would last until the timeout. So a
// PeerWatch, connected over the pairs, watches every peer too and ends the
// wait of an update as soon as any is gone. Any failure closes the
// transport, since a receive still posted may yet write into its buffer:
// the buffers of failed ops are kept until the transport is destroyed.
//
//===----------------------------------------------------------------------===//

#include "Transport.h"
#include "../Status.h"
#include "PeerWatch.h"

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
#include <string_view>

using namespace loadplan;
using namespace loadplan::transfer;

namespace {

using Clock = std::chrono::steady_clock;
using UnboundBuffer = gloo::transport::UnboundBuffer;
using Buffer = std::unique_ptr<UnboundBuffer>;

/// Gloo's message without the "[file:line] " it starts with.
std::string glooText(const std::exception &e) {
  std::string_view text = e.what();
  while (!text.empty() && text[0] == '[') {
    size_t end = text.find("] ");
    if (end == std::string_view::npos)
      break;
    text.remove_prefix(end + 2);
  }
  return std::string(text);
}

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
      if (n == LOADPLAN_STORE_PEER_GONE)
        throw std::runtime_error("a rank of the transfer is gone (waiting for "
                                 "key " + key + ")");
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
      // The address Gloo listens on, where the watch listens too.
      attr = gloo::transport::tcp::CreateDeviceAttr(attr);
    } catch (const std::exception &e) {
      fail(LOADPLAN_STATUS_IO_ERROR, "gloo: rank ", rank, " of ", size,
           " could not connect: ", e.what());
    }
    startWatch(attr.ai_addr);
  }

  ~GlooTransport() override {
    // The watch first: its thread aborts waits.
    watch.reset();
    // Buffers of failed ops before the pairs they may still be queued on.
    graveyard.clear();
    context.reset();
    tcpDevice.reset();
  }

  uint32_t backend() const override { return LOADPLAN_BACKEND_GLOO; }
  loadplan_device_t device() const override { return {LOADPLAN_DEVICE_CPU, 0}; }
  bool selfOps() const override { return false; }

  /// Posted ops and their buffers; buffers of ops never waited for are
  /// kept until the transport goes (a receive may yet land in them).
  struct GlooPosted final : Posted {
    GlooTransport *transport;
    std::vector<Op> ops;
    std::vector<Buffer> buffers;
    ~GlooPosted() override { transport->bury(buffers); }
  };

  std::unique_ptr<Posted> start(const std::vector<Op> &ops, void *) override {
    checkOpen();
    auto posted = std::make_unique<GlooPosted>();
    posted->transport = this;
    posted->ops = ops;
    posted->buffers.reserve(ops.size());
    std::string error;
    for (size_t i = 0; i < ops.size() && error.empty(); ++i)
      post(ops[i], posted->buffers.emplace_back(), error);
    if (!error.empty())
      failWith(error);
    return posted;
  }

  void finish(Posted &base) override {
    auto &posted = static_cast<GlooPosted &>(base);
    std::string error;
    auto deadline = Clock::now() + timeout;
    for (size_t i = 0; i < posted.buffers.size() && error.empty(); ++i)
      waitInUpdate(posted.ops[i], *posted.buffers[i], deadline, error);
    if (!error.empty())
      failWith(error); // the buffers go to the graveyard with `posted`
    posted.buffers.clear();
  }

  void exchange(const void *mine, size_t bytes, void *all, uint64_t tag,
                std::vector<std::string> &errors) override {
    errors.assign(size, "");
    auto *out = static_cast<uint8_t *>(all);
    std::memcpy(out + size_t(rank) * bytes, mine, bytes);
    // One op per peer and direction; a peer's failure costs only its ops
    // (and they are not cut short for another peer gone). Even after a
    // failure: the peers still alive should hear why.
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
      std::string error;
      posted[i] = post(ops[i], buffers[i], error);
      if (!posted[i] && errors[ops[i].peer].empty())
        errors[ops[i].peer] = error;
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
          markFailed(errors[peer]);
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

  /// Closes the transport for good with `error` and throws it.
  [[noreturn]] void failWith(const std::string &error) {
    markFailed(error);
    fail(LOADPLAN_STATUS_IO_ERROR, "gloo: ", error);
  }

  /// Connects a PeerWatch to every peer: each listens where Gloo does and
  /// tells the others where over the pairs just connected.
  void startWatch(const sockaddr_storage &address) {
    watch = std::make_unique<PeerWatch>(rank, size, address);
    std::vector<PeerWatch::Record> records(size);
    std::vector<std::string> errors;
    exchange(&watch->record(), sizeof(PeerWatch::Record), records.data(),
             kWatchTag, errors);
    for (int peer = 0; peer < size; ++peer)
      if (!errors[peer].empty())
        fail(LOADPLAN_STATUS_IO_ERROR, "gloo: rank ", rank, " of ", size,
             " could not connect: rank ", peer, ": ", errors[peer]);
    watch->start(records, /*sameHost=*/false, timeout,
                 [this](int) { abortUpdateWait(); });
  }

  /// Posts `op` into a new `buffer`; false (and `error`) if Gloo refused.
  bool post(const Op &op, Buffer &buffer, std::string &error) {
    try {
      buffer = context->createUnboundBuffer(op.data, op.bytes);
      if (op.send)
        buffer->send(op.peer, op.tag);
      else
        buffer->recv(op.peer, op.tag);
      return true;
    } catch (const std::exception &e) {
      error = failureOf(op, e);
      return false;
    }
  }

  /// Waits for `op` until `deadline`; false (and `error`) if it failed.
  bool wait(const Op &op, UnboundBuffer &buffer, Clock::time_point deadline,
            std::string &error) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() < 1)
      left = std::chrono::milliseconds(1);
    try {
      if (op.send ? buffer.waitSend(left) : buffer.waitRecv(left))
        return true;
      error = concat(describe(op), " was aborted");
    } catch (const std::exception &e) {
      error = failureOf(op, e);
    }
    return false;
  }

  /// wait() for an op of an update, which also ends (false) as soon as the
  /// watch sees any peer gone: then the update cannot succeed, and the op
  /// may never complete (Gloo leaves it be when its bytes were moving).
  bool waitInUpdate(const Op &op, UnboundBuffer &buffer,
                    Clock::time_point deadline, std::string &error) {
    {
      std::lock_guard<std::mutex> lock(waitMutex);
      if (int peer = watch->first(); peer >= 0) {
        error = concat(watch->why(peer), " (before ", describe(op), ")");
        return false;
      }
      waiting = {&buffer, op.send};
    }
    bool done = wait(op, buffer, deadline, error);
    std::lock_guard<std::mutex> lock(waitMutex);
    waiting = {};
    if (int peer = watch->first(); !done && peer >= 0)
      error = concat(watch->why(peer), " (while ", describe(op), ")");
    return done;
  }

  /// On the watch's thread, for a peer gone: ends the wait of an update in
  /// progress, whichever peer its op is with.
  void abortUpdateWait() {
    std::lock_guard<std::mutex> lock(waitMutex);
    if (waiting.buffer && waiting.send)
      waiting.buffer->abortWaitSend();
    else if (waiting.buffer)
      waiting.buffer->abortWaitRecv();
  }

  static std::string describe(const Op &op) {
    return concat(op.send ? "sending " : "receiving ", op.bytes, " bytes ",
                  op.send ? "to" : "from", " rank ", op.peer);
  }

  /// Why Gloo failed `op` with `e`: its peer's end closed or reset, in the
  /// watch's words whichever of the two saw it first, or Gloo's message.
  std::string failureOf(const Op &op, const std::exception &e) {
    std::string why = watch ? watch->why(op.peer) : "";
    std::string text = glooText(e);
    if (why.empty() &&
        text.find("Connection closed by peer") != std::string::npos)
      why = closedBy(op.peer);
    if (why.empty() &&
        text.find("Connection reset by peer") != std::string::npos)
      why = resetBy(op.peer);
    return why.empty() ? concat(describe(op), " failed: ", text)
                       : concat(why, " (while ", describe(op), ")");
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
  /// The buffer an update waits for, which the watch's thread aborts.
  std::mutex waitMutex;
  struct Waiting {
    UnboundBuffer *buffer = nullptr;
    bool send = false;
  } waiting;
  /// After what its thread uses, so that it goes first.
  std::unique_ptr<PeerWatch> watch;
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
