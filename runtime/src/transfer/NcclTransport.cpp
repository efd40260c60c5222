//===- NcclTransport.cpp - The CUDA transport over NCCL -----------*- C++ -*-===//
//
// Built with the CUDA toolkit and nccl.h; libnccl.so.2 is opened with dlopen
// on first use (the one torch already loaded, else the nvidia-nccl package
// beside loadplan's own files, else the linker's search: ncclCandidates), so
// the runtime still loads on machines without NCCL. Every
// entry point asks cudaGetDeviceCount first, which fails cleanly without a
// GPU. Sends and receives go in one ncclGroupStart/ncclGroupEnd on the
// caller's stream; the wait polls the stream and the communicator's async
// error against a deadline and aborts the communicator when it passes, as a
// watchdog would. NCCL reports a peer that dies only where a network
// connection to it breaks (its socket and IB transports: an async error);
// between ranks of one host (P2P, shared memory) nothing breaks and its
// kernels wait on. So the transport watches the peers of its host itself
// (a PeerWatch over loopback), and the wait aborts once one is gone.
//
//===----------------------------------------------------------------------===//

#include "Colocation.h"
#include "Transport.h"
#include "../Status.h"
#include "../cuda/CudaCheck.h"
#include "PeerWatch.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <unistd.h>
#include <netinet/in.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

using namespace loadplan;
using namespace loadplan::transfer;

namespace {

/// The NCCL calls we make, looked up by name.
struct Nccl {
  ncclResult_t (*getUniqueId)(ncclUniqueId *);
  ncclResult_t (*commInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*commDestroy)(ncclComm_t);
  ncclResult_t (*commAbort)(ncclComm_t);
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t *);
  const char *(*getErrorString)(ncclResult_t);
  ncclResult_t (*groupStart)();
  ncclResult_t (*groupEnd)();
  ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t,
                       cudaStream_t);
  ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t,
                       cudaStream_t);
};

/// Where libnccl.so.2 is looked for, in order; the first that loads is used.
///  1. $LOADPLAN_NCCL_LIBRARY, when set: that file and no other.
///  2. The one already in the process (torch's CUDA build loads the
///     nvidia-nccl package's at import).
///  3. The nvidia-nccl package beside this library, as pip installs it:
///     <site-packages>/nvidia/nccl/lib, seen from loadplan/ (the Python
///     module) or loadplan/lib/ (the runtime's library in the wheel).
///  4. The dynamic linker's search (LD_LIBRARY_PATH, ld.so.cache).
///  5. The one found at build time, for a build from source.
std::vector<std::string> ncclCandidates() {
  std::vector<std::string> found;
  Dl_info self{};
  if (dladdr(reinterpret_cast<void *>(&ncclCandidates), &self) && self.dli_fname) {
    std::string dir = self.dli_fname;
    size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? "." : dir.substr(0, slash);
    for (const char *up : {"/..", "/../.."})
      found.push_back(dir + up + "/nvidia/nccl/lib/libnccl.so.2");
  }
  found.push_back("libnccl.so.2");
#ifdef LOADPLAN_NCCL_LIBRARY
  found.push_back(LOADPLAN_NCCL_LIBRARY);
#endif
  return found;
}

/// The path of a library dlopen returned.
std::string loadedPath(void *lib, const std::string &fallback) {
  struct link_map *map = nullptr;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name &&
      *map->l_name) {
    char real[PATH_MAX];
    if (realpath(map->l_name, real))
      return real;
    return map->l_name;
  }
  return fallback;
}

/// The file loadNccl loaded; written once, inside its call_once.
std::string ncclPath;

/// Loads libnccl once; nullptr (and `why`) when it cannot.
const Nccl *loadNccl(std::string &why) {
  static std::once_flag once;
  static Nccl nccl;
  static const Nccl *loaded = nullptr;
  static std::string error;
  std::call_once(once, [] {
    std::string &where = ncclPath;
    void *lib = nullptr;
    std::string tried;
    auto open = [&](const std::string &file, int flags) {
      if (lib)
        return;
      lib = dlopen(file.c_str(), flags);
      if (lib) {
        where = loadedPath(lib, file);
      } else if (!(flags & RTLD_NOLOAD)) {
        const char *e = dlerror();
        tried += concat("\n  ", file, ": ", e ? e : "not found");
      }
    };
    if (const char *env = std::getenv("LOADPLAN_NCCL_LIBRARY"); env && *env) {
      open(env, RTLD_NOW | RTLD_LOCAL);
      if (!lib) {
        error = concat("cannot load LOADPLAN_NCCL_LIBRARY:", tried);
        return;
      }
    }
    open("libnccl.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    for (const std::string &file : ncclCandidates()) {
      // A package path that does not exist is no news: only say what
      // failed to load.
      if (file.find('/') != std::string::npos && access(file.c_str(), F_OK) != 0)
        continue;
      open(file, RTLD_NOW | RTLD_LOCAL);
    }
    if (!lib) {
      error = concat("cannot load libnccl.so.2 (set LOADPLAN_NCCL_LIBRARY, or "
                     "install the nvidia-nccl package torch uses):",
                     tried.empty() ? std::string(" not found") : tried);
      return;
    }
    bool ok = true;
    auto get = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && ok) {
        ok = false;
        error = concat(where, " lacks ", name);
      }
    };
    get(nccl.getUniqueId, "ncclGetUniqueId");
    get(nccl.commInitRank, "ncclCommInitRank");
    get(nccl.commDestroy, "ncclCommDestroy");
    get(nccl.commAbort, "ncclCommAbort");
    get(nccl.commGetAsyncError, "ncclCommGetAsyncError");
    get(nccl.getErrorString, "ncclGetErrorString");
    get(nccl.groupStart, "ncclGroupStart");
    get(nccl.groupEnd, "ncclGroupEnd");
    get(nccl.send, "ncclSend");
    get(nccl.recv, "ncclRecv");
    if (ok)
      loaded = &nccl;
  });
  why = error;
  return loaded;
}

int deviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

const Nccl &requireNccl() {
  std::string why;
  const Nccl *nccl = loadNccl(why);
  if (!nccl)
    fail(LOADPLAN_STATUS_UNAVAILABLE, "nccl: ", why);
  if (deviceCount() == 0)
    fail(LOADPLAN_STATUS_UNAVAILABLE, "nccl: no CUDA device");
  return *nccl;
}

using Clock = std::chrono::steady_clock;

/// How long a wait goes on after a peer is gone before it aborts: a peer
/// that finished its part and closed at once may be gone before this
/// rank's last kernel of the same exchange completes.
constexpr std::chrono::milliseconds kGoneGrace(250);

class NcclTransport final : public Transport {
public:
  NcclTransport(int rank, int size, const uint8_t *id, int device,
                int64_t timeoutMs)
      : Transport(rank, size), nccl(requireNccl()), deviceIndex(device),
        timeout(timeoutMs > 0 ? timeoutMs : 60000) {
    if (device < 0 || device >= deviceCount())
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "nccl: CUDA device ", device,
           " of ", deviceCount());
    memory = makeCudaMemory(device);
    DeviceGuard guard(device);
    ncclUniqueId unique;
    std::memcpy(unique.internal, id, sizeof unique.internal);
    check(nccl.commInitRank(&comm, size, unique, rank), "ncclCommInitRank");
    try {
      checkCuda(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking),
                "cudaStreamCreate");
      startWatch();
    } catch (...) {
      // No destructor runs for a constructor that throws.
      watch.reset();
      cudaFree(records);
      if (side)
        cudaStreamDestroy(side);
      if (comm)
        nccl.commAbort(comm);
      throw;
    }
  }

  ~NcclTransport() override {
    watch.reset();
    int current = -1;
    cudaGetDevice(&current);
    cudaSetDevice(deviceIndex);
    if (side)
      cudaStreamDestroy(side);
    cudaFree(records);
    if (comm)
      (failed() ? nccl.commAbort : nccl.commDestroy)(comm);
    if (current >= 0)
      cudaSetDevice(current);
  }

  uint32_t backend() const override { return LOADPLAN_BACKEND_NCCL; }
  loadplan_device_t device() const override {
    return {LOADPLAN_DEVICE_CUDA, deviceIndex};
  }
  bool selfOps() const override { return true; }

  /// Posted ops: their group is on `stream`.
  struct NcclPosted final : Posted {
    cudaStream_t stream;
  };

  std::unique_ptr<Posted> start(const std::vector<Op> &ops,
                                void *stream) override {
    checkOpen();
    DeviceGuard guard(deviceIndex);
    auto posted = std::make_unique<NcclPosted>();
    posted->stream = static_cast<cudaStream_t>(stream);
    post(ops, posted->stream);
    return posted;
  }

  void finish(Posted &posted) override {
    DeviceGuard guard(deviceIndex);
    waitFor(static_cast<NcclPosted &>(posted).stream);
  }

  void exchange(const void *mine, size_t bytes, void *all, uint64_t,
                std::vector<std::string> &errors) override {
    errors.assign(size, "");
    auto *out = static_cast<uint8_t *>(all);
    std::memcpy(out + size_t(rank) * bytes, mine, bytes);
    std::string error;
    if (failed()) {
      error = "the communicator failed earlier: " + failure();
    } else {
      try {
        DeviceGuard guard(deviceIndex);
        size_t total = bytes * size_t(size);
        if (recordBytes < total) {
          cudaFree(records);
          records = nullptr;
          checkCuda(cudaMalloc(&records, total), "cudaMalloc");
          recordBytes = total;
        }
        uint8_t *dev = static_cast<uint8_t *>(records);
        checkCuda(cudaMemcpyAsync(dev + size_t(rank) * bytes, mine, bytes,
                                  cudaMemcpyHostToDevice, side),
                  "cudaMemcpyAsync");
        std::vector<Op> ops;
        for (int peer = 0; peer < size; ++peer) {
          if (peer == rank)
            continue;
          ops.push_back({true, peer, dev + size_t(rank) * bytes, bytes, 0});
          ops.push_back({false, peer, dev + size_t(peer) * bytes, bytes, 0});
        }
        post(ops, side);
        waitFor(side);
        checkCuda(cudaMemcpyAsync(out, dev, total, cudaMemcpyDeviceToHost, side),
                  "cudaMemcpyAsync");
        checkCuda(cudaStreamSynchronize(side), "cudaStreamSynchronize");
        std::memcpy(out + size_t(rank) * bytes, mine, bytes);
        return;
      } catch (const StatusError &e) {
        error = e.message;
      }
    }
    // NCCL does not say which peer failed: all of them may have.
    for (int peer = 0; peer < size; ++peer)
      if (peer != rank)
        errors[peer] = error;
  }

  void checkMemory(const void *data,
                   const std::function<std::string()> &what) override {
    cudaPointerAttributes a;
    checkCuda(cudaPointerGetAttributes(&a, data), "cudaPointerGetAttributes");
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
      fail(LOADPLAN_STATUS_INVALID_UPDATE, what(),
           " is not CUDA device memory; NCCL sends from the device");
    if (a.type == cudaMemoryTypeDevice && a.device != deviceIndex)
      fail(LOADPLAN_STATUS_INVALID_UPDATE, what(), " is on CUDA device ",
           a.device, " but the communicator is on device ", deviceIndex);
  }

  void *allocate(size_t bytes) override { return memory->allocate(bytes); }
  void release(void *p) override { memory->release(p); }
  void copy(void *dst, const void *src, size_t bytes, void *stream) override {
    memory->copy(dst, src, bytes, stream);
  }
  void synchronize(void *stream) override { memory->synchronize(stream); }

private:
  void check(ncclResult_t result, const char *what) {
    if (result != ncclSuccess && result != ncclInProgress)
      fail(LOADPLAN_STATUS_DEVICE_ERROR, "nccl: ", what, " failed: ",
           nccl.getErrorString(result));
  }

  void checkOpen() const {
    if (failed())
      fail(LOADPLAN_STATUS_DEVICE_ERROR,
           "nccl: the communicator failed earlier and was aborted (",
           failure(), "); make a new one");
  }

  /// Watches the peers on this host over loopback: the records saying
  /// where each listens go through NCCL itself.
  void startWatch() {
    sockaddr_storage loopback{};
    auto &in = reinterpret_cast<sockaddr_in &>(loopback);
    in.sin_family = AF_INET;
    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    watch = std::make_unique<PeerWatch>(rank, size, loopback);
    std::vector<PeerWatch::Record> all(size);
    std::vector<std::string> errors;
    exchange(&watch->record(), sizeof(PeerWatch::Record), all.data(), kWatchTag,
             errors);
    for (int peer = 0; peer < size; ++peer)
      if (!errors[peer].empty())
        fail(LOADPLAN_STATUS_DEVICE_ERROR, "nccl: rank ", rank,
             " could not swap where it listens with rank ", peer, ": ",
             errors[peer]);
    watch->start(all, /*sameHost=*/true, timeout);
  }

  /// Aborts the communicator for good and throws `message`.
  [[noreturn]] void abort(const std::string &message) {
    markFailed(message);
    nccl.commAbort(comm);
    comm = nullptr;
    fail(LOADPLAN_STATUS_DEVICE_ERROR, "nccl: ", message);
  }

  void post(const std::vector<Op> &ops, cudaStream_t stream) {
    check(nccl.groupStart(), "ncclGroupStart");
    ncclResult_t result = ncclSuccess;
    for (const Op &op : ops) {
      result = op.send ? nccl.send(op.data, op.bytes, ncclUint8, op.peer, comm,
                                   stream)
                       : nccl.recv(op.data, op.bytes, ncclUint8, op.peer, comm,
                                   stream);
      if (result != ncclSuccess)
        break;
    }
    ncclResult_t end = nccl.groupEnd();
    if (result != ncclSuccess || (end != ncclSuccess && end != ncclInProgress))
      abort(concat("posting ", ops.size(), " sends and receives failed: ",
                   nccl.getErrorString(result != ncclSuccess ? result : end)));
  }

  void waitFor(cudaStream_t stream) {
    auto deadline = Clock::now() + timeout;
    std::optional<Clock::time_point> goneAt;
    while (true) {
      cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess)
        return;
      if (q != cudaErrorNotReady) {
        cudaGetLastError();
        abort(concat("the stream failed: ", cudaGetErrorString(q)));
      }
      ncclResult_t async = ncclSuccess;
      nccl.commGetAsyncError(comm, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        abort(concat("asynchronous error: ", nccl.getErrorString(async)));
      if (int peer = watch ? watch->first() : -1; peer >= 0) {
        if (!goneAt)
          goneAt = Clock::now();
        else if (Clock::now() - *goneAt > kGoneGrace)
          abort(watch->why(peer));
      }
      if (Clock::now() > deadline)
        abort(concat("the transfer did not finish within ", timeout.count(),
                     " ms (a peer is gone or stuck)"));
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  const Nccl &nccl;
  int deviceIndex;
  /// The device's memory and copies.
  std::unique_ptr<DataMemory> memory;
  std::chrono::milliseconds timeout;
  ncclComm_t comm = nullptr;
  cudaStream_t side = nullptr;
  void *records = nullptr;
  size_t recordBytes = 0;
  std::unique_ptr<PeerWatch> watch;
};

} // namespace

bool loadplan::transfer::ncclAvailable(std::string &why) {
  if (!loadNccl(why))
    return false;
  if (deviceCount() == 0) {
    why = "no CUDA device";
    return false;
  }
  return true;
}

const char *loadplan::transfer::ncclLibrary() {
  std::string why;
  if (!loadNccl(why))
    fail(LOADPLAN_STATUS_UNAVAILABLE, "nccl: ", why);
  return ncclPath.c_str();
}

void loadplan::transfer::makeNcclUniqueId(uint8_t out[LOADPLAN_NCCL_UNIQUE_ID_BYTES]) {
  const Nccl &nccl = requireNccl();
  ncclUniqueId id;
  ncclResult_t result = nccl.getUniqueId(&id);
  if (result != ncclSuccess)
    fail(LOADPLAN_STATUS_DEVICE_ERROR, "nccl: ncclGetUniqueId failed: ",
         nccl.getErrorString(result));
  static_assert(sizeof id.internal == LOADPLAN_NCCL_UNIQUE_ID_BYTES,
                "NCCL's unique id size changed");
  std::memcpy(out, id.internal, LOADPLAN_NCCL_UNIQUE_ID_BYTES);
}

std::unique_ptr<Transport>
loadplan::transfer::makeNcclTransport(int rank, int size, const uint8_t *id,
                                      int device, int64_t timeoutMs) {
  return std::make_unique<NcclTransport>(rank, size, id, device, timeoutMs);
}
