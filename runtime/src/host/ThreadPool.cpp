//===- ThreadPool.cpp - Persistent workers for the CPU executor --*- C++ -*-===//

#include "ThreadPool.h"

#include <algorithm>

using namespace loadplan;

ThreadPool::ThreadPool(unsigned numThreads) {
  for (unsigned i = 1; i < numThreads; ++i)
    workers.emplace_back([this] { work(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  wake.notify_all();
  for (std::thread &t : workers)
    t.join();
}

void ThreadPool::drain() {
  for (size_t begin;
       (begin = next.fetch_add(grain, std::memory_order_relaxed)) < count;) {
    size_t end = std::min(begin + grain, count);
    for (size_t i = begin; i < end; ++i)
      fn(context, i);
  }
}

void ThreadPool::work() {
  uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] { return stopping || generation != seen; });
      if (stopping)
        return;
      seen = generation;
    }
    drain();
    // Every worker checks in for every job, so none can miss one or still
    // be reading this job's fields when the next one is set up.
    std::lock_guard<std::mutex> lock(mutex);
    if (--busy == 0)
      done.notify_one();
  }
}

void ThreadPool::run(size_t n, void (*f)(void *, size_t), void *ctx) {
  if (workers.empty() || n <= 1) {
    for (size_t i = 0; i < n; ++i)
      f(ctx, i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    fn = f;
    context = ctx;
    count = n;
    grain = std::max<size_t>(1, n / (size() * kRunsPerThread));
    next.store(0, std::memory_order_relaxed);
    busy = static_cast<unsigned>(workers.size());
    ++generation;
  }
  wake.notify_all();
  drain();
  std::unique_lock<std::mutex> lock(mutex);
  done.wait(lock, [&] { return busy == 0; });
}
