//===- ApplyBench.cpp - bench/apply_cpp: CPU apply vs memcpy ----*- C++ -*-===//
//
// A Llama-3-8B-shaped update at TP=2, rank 0 (real shapes; --layers=N
// decoder layers plus the embedding and lm_head, 2 by default so that it
// moves about 1.4 GiB and fits a small machine), applied by the CPU
// executor from full checkpoint tensors and from packed boxes, against
// memcpy of the same bytes from the same sources into the same storages
// (the physical limit), each with 1 and with all hardware threads; medians
// of 5 randomly interleaved repetitions. Ratios come from one run; the last
// line is
//   ratio_vs_memcpy=A ratio_vs_memcpy_boxes=B
// (apply bandwidth over the best memcpy bandwidth, full tensors and boxes).
// --plan=int4-experts measures Kimi-K2's int4 experts on Marlin instead
// (--layers=N: N experts, 8 by default, about 22 MB each), every byte
// written through the marlin_w4 transform: the ratios are then the
// transform's bandwidth over memcpy's of the same bytes.
//
//===----------------------------------------------------------------------===//

#include "ModelPlans.h"

#include "../src/host/ThreadPool.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <thread>

using namespace loadplan;
using namespace loadplan::testing;

namespace {

[[noreturn]] void die(loadplan_status_t status, const char *what) {
  std::fprintf(stderr, "apply_cpp: %s: %s\n", what,
               loadplan_status_message(status));
  std::exit(1);
}

/// The plan, live memory, sources and one binding per thread count.
struct Setup {
  explicit Setup(TestPlan built) : plan(std::move(built)), memory(plan) {
    std::vector<uint8_t> bytes = plan.bytes();
    if (loadplan_status_t s =
            loadplan_plan_open_bytes(bytes.data(), bytes.size(), &handle))
      die(s, "opening the plan");
    loadplan_plan_summary_t summary;
    loadplan_plan_summary(handle, &summary);
    moved = summary.direct_bytes;
    names = summary.num_direct;
    // Full checkpoint tensors back to back (twice the moved bytes at TP=2).
    // A packed box is as large as its part of the tensor, so each box
    // source is the start of its tensor: both forms and the memcpy baseline
    // read the same arena, and nothing else needs memory.
    size_t total = 0;
    for (const TestEntry &e : plan.entries)
      total += size_t(product(e.shape)) * loadplan_dtype_size(e.dtype);
    arena.assign(total, 0xa5);
    size_t at = 0;
    for (const TestEntry &e : plan.entries) {
      uint8_t *tensor = arena.data() + at;
      tensorArgs.push_back({e.name.data(), e.name.size(), tensor, e.dtype,
                            uint32_t(e.shape.size()), e.shape.data()});
      const TestBox &b = e.boxes[0];
      boxArgs.push_back({e.name.data(), e.name.size(), tensor, e.dtype,
                         uint32_t(e.shape.size()), b.lo.data(),
                         b.hi.data()});
      // The memcpy baseline: the box's bytes from the same place into the
      // same storage, contiguous, in 1 MiB pieces over the same pool.
      size_t item = loadplan_dtype_size(e.dtype);
      size_t n = size_t(product(b.extents())) * item;
      const TestTarget &t = plan.targets[e.writes[0].target];
      uint8_t *dst = memory.base(t.storage) + e.writes[0].offset * item;
      for (size_t k = 0; k < n; k += size_t(1) << 20)
        pieces.push_back({dst + k, tensor + k, std::min(n - k, size_t(1) << 20)});
      at += size_t(product(e.shape)) * item;
    }
  }
  ~Setup() {
    bindings.clear();
    loadplan_plan_release(handle);
  }

  loadplan_binding_t *binding(unsigned threads) {
    auto &b = bindings[threads];
    if (!b) {
      std::vector<loadplan_target_layout_t> layouts = memory.layouts();
      loadplan_bind_options_t options;
      loadplan_bind_options_init(&options);
      options.num_threads = threads;
      loadplan_binding_t *raw = nullptr;
      if (loadplan_status_t s = loadplan_bind(handle, layouts.data(),
                                              layouts.size(), &options, &raw))
        die(s, "binding");
      b.reset(raw);
    }
    return b.get();
  }

  struct Piece {
    uint8_t *dst;
    const uint8_t *src;
    size_t size;
  };
  struct BindingDeleter {
    void operator()(loadplan_binding_t *b) const { loadplan_binding_release(b); }
  };

  TestPlan plan;
  Memory memory;
  loadplan_plan_t *handle = nullptr;
  uint64_t moved = 0;
  uint32_t names = 0;
  std::vector<uint8_t> arena;
  std::vector<loadplan_box_t> boxArgs;
  std::vector<loadplan_tensor_t> tensorArgs;
  std::vector<Piece> pieces;
  std::map<unsigned, std::unique_ptr<loadplan_binding_t, BindingDeleter>>
      bindings;
};

Setup *setup = nullptr;

void memcpyBench(benchmark::State &state) {
  ThreadPool pool(unsigned(state.range(0)));
  auto task = [&](size_t i) {
    const Setup::Piece &p = setup->pieces[i];
    std::memcpy(p.dst, p.src, p.size);
  };
  for (auto _ : state)
    pool.forEach(setup->pieces.size(), task);
  state.SetBytesProcessed(int64_t(state.iterations() * setup->moved));
}

void applyBoxesBench(benchmark::State &state) {
  loadplan_binding_t *b = setup->binding(unsigned(state.range(0)));
  for (auto _ : state)
    if (loadplan_status_t s = loadplan_apply_boxes(
            b, setup->boxArgs.data(), setup->boxArgs.size(), nullptr))
      die(s, "applying boxes");
  state.SetBytesProcessed(int64_t(state.iterations() * setup->moved));
}

void applyTensorsBench(benchmark::State &state) {
  loadplan_binding_t *b = setup->binding(unsigned(state.range(0)));
  for (auto _ : state)
    if (loadplan_status_t s = loadplan_apply_tensors(
            b, setup->tensorArgs.data(), setup->tensorArgs.size(), nullptr))
      die(s, "applying tensors");
  state.SetBytesProcessed(int64_t(state.iterations() * setup->moved));
}

/// Prints as usual and keeps each benchmark's time per iteration: the
/// median over repetitions where there are several.
class Recorder : public benchmark::ConsoleReporter {
public:
  void ReportRuns(const std::vector<Run> &runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run &run : runs) {
      if (run.error_occurred)
        continue;
      bool median = run.run_type == Run::RT_Aggregate &&
                    run.aggregate_name == "median";
      if (run.run_type == Run::RT_Aggregate && !median)
        continue;
      std::string name = run.run_name.str();
      if (median || !medians.count(name))
        seconds[name] = run.GetAdjustedRealTime() /
                        benchmark::GetTimeUnitMultiplier(run.time_unit);
      if (median)
        medians.insert(name);
    }
  }
  std::map<std::string, double> seconds;
  std::set<std::string> medians;
};

} // namespace

int main(int argc, char **argv) {
  int layers = -1;
  bool int4Experts = false;
  // Other processes share the machine's memory bandwidth: by default run
  // each benchmark 5 times, interleaved at random, and compare medians.
  std::string repetitions = "--benchmark_repetitions=5";
  std::string interleave = "--benchmark_enable_random_interleaving=true";
  std::string aggregates = "--benchmark_report_aggregates_only=true";
  std::vector<char *> args = {argv[0], repetitions.data(), interleave.data(),
                              aggregates.data()};
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--layers=", 9) == 0)
      layers = std::max(0, std::atoi(argv[i] + 9));
    else if (std::strcmp(argv[i], "--plan=int4-experts") == 0)
      int4Experts = true;
    else if (std::strcmp(argv[i], "--plan=llama") == 0)
      int4Experts = false;
    else
      args.push_back(argv[i]); // later flags override the defaults
  }
  int count = int(args.size());
  benchmark::Initialize(&count, args.data());
  if (layers < 0)
    layers = int4Experts ? 8 : 2;
  if (int4Experts)
    layers = std::max(1, layers); // experts
  Setup state(int4Experts ? int4ExpertsPlan(layers) : llamaPlan(layers, 2, 0));
  setup = &state;
  unsigned most = std::max(1u, std::thread::hardware_concurrency());
  std::vector<unsigned> threads = {1};
  if (most > 1)
    threads.push_back(most);
  for (const char *name : {"memcpy", "apply_boxes", "apply_tensors"})
    for (unsigned t : threads) {
      auto *fn = std::strcmp(name, "memcpy") == 0        ? memcpyBench
                 : std::strcmp(name, "apply_boxes") == 0 ? applyBoxesBench
                                                         : applyTensorsBench;
      benchmark::RegisterBenchmark(name, fn)
          ->Arg(t)
          ->ArgName("threads")
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.5)
          ->UseRealTime();
    }
  if (int4Experts)
    std::printf("apply_cpp: Kimi-K2 int4 experts on Marlin (marlin_w4), %d "
                "experts: %u names, %.2f GiB moved per update\n",
                layers, state.names, double(state.moved) / (1 << 30));
  else
    std::printf("apply_cpp: Llama-3-8B TP=2 rank 0, %d decoder layers + "
                "embedding + lm_head: %u names, %.2f GiB moved per update\n",
                layers, state.names, double(state.moved) / (1 << 30));
  Recorder recorder;
  benchmark::RunSpecifiedBenchmarks(&recorder);
  benchmark::Shutdown();

  auto time = [&](const char *name, unsigned t) {
    // Run names go on with "/min_time:...".
    std::string prefix = std::string(name) + "/threads:" + std::to_string(t) + "/";
    for (const auto &[run, seconds] : recorder.seconds)
      if (run.compare(0, prefix.size(), prefix) == 0)
        return seconds;
    return 0.0;
  };
  auto gbps = [&](double seconds) {
    return seconds > 0 ? double(state.moved) / seconds / 1e9 : 0.0;
  };
  double bestMemcpy = 0;
  for (unsigned t : threads)
    bestMemcpy = std::max(bestMemcpy, gbps(time("memcpy", t)));
  double bestBoxes = 0, bestTensors = 0;
  for (unsigned t : threads) {
    std::printf("threads=%u memcpy=%.2f GB/s apply_boxes=%.2f GB/s "
                "apply_tensors=%.2f GB/s\n",
                t, gbps(time("memcpy", t)), gbps(time("apply_boxes", t)),
                gbps(time("apply_tensors", t)));
    bestBoxes = std::max(bestBoxes, gbps(time("apply_boxes", t)));
    bestTensors = std::max(bestTensors, gbps(time("apply_tensors", t)));
  }
  if (bestMemcpy <= 0) {
    std::printf("no memcpy run (filtered out?): no ratio\n");
    return 0;
  }
  std::printf("ratio_vs_memcpy=%.3f ratio_vs_memcpy_boxes=%.3f\n",
              bestTensors / bestMemcpy, bestBoxes / bestMemcpy);
  return 0;
}
