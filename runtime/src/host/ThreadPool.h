//===- ThreadPool.h - Persistent workers for the CPU executor ----*- C++ -*-===//
//
// Threads are started once per binding and sleep between updates, so an
// apply costs a wake-up, not a thread start per call.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_HOST_THREADPOOL_H
#define LOADPLAN_RUNTIME_HOST_THREADPOOL_H

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace loadplan {

class ThreadPool {
public:
  static constexpr size_t kRunsPerThread = 16;

  /// `numThreads` counts the calling thread: numThreads - 1 workers start.
  explicit ThreadPool(unsigned numThreads);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  unsigned size() const { return static_cast<unsigned>(workers.size()) + 1; }

  /// Calls task(i) for every i in [0, count), spread over the workers and
  /// the caller in runs of consecutive i (about kRunsPerThread per thread);
  /// returns when all calls have returned. Allocates nothing.
  template <typename F> void forEach(size_t count, F &task) {
    run(count, [](void *f, size_t i) { (*static_cast<F *>(f))(i); }, &task);
  }

private:
  void run(size_t count, void (*fn)(void *, size_t), void *context);
  void work();
  void drain();

  std::vector<std::thread> workers;
  std::mutex mutex;
  std::condition_variable wake, done;
  uint64_t generation = 0;
  bool stopping = false;
  unsigned busy = 0;
  // The current job.
  void (*fn)(void *, size_t) = nullptr;
  void *context = nullptr;
  size_t count = 0;
  /// Tasks taken at once: a shared counter bumped once per task costs more
  /// than a small copy when two threads bump it in turn.
  size_t grain = 1;
  std::atomic<size_t> next{0};
};

} // namespace loadplan

#endif // LOADPLAN_RUNTIME_HOST_THREADPOOL_H
