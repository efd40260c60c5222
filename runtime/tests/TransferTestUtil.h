//===- TransferTestUtil.h - Schedules and layouts for transfer tests -*- C++ -*-===//
//
// Declarations of checkpoint tensors, sender holdings and receiver plans
// that turn into a loadplan_schedule_spec_t, handles that free themselves,
// the shardings the tests use (row shards, column shards, replicas), and
// ranks as forked processes, one of which may die.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_TESTS_TRANSFERTESTUTIL_H
#define LOADPLAN_RUNTIME_TESTS_TRANSFERTESTUTIL_H

#include "TestUtil.h"
#include "loadplan/transfer.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <functional>
#include <thread>

namespace loadplan::testing {

struct ScheduleDeleter {
  void operator()(loadplan_schedule_t *s) const { loadplan_schedule_release(s); }
};
struct CommDeleter {
  void operator()(loadplan_comm_t *c) const { loadplan_comm_release(c); }
};
struct TransferDeleter {
  void operator()(loadplan_transfer_t *t) const { loadplan_transfer_release(t); }
};
using SchedulePtr = std::unique_ptr<loadplan_schedule_t, ScheduleDeleter>;
using CommPtr = std::unique_ptr<loadplan_comm_t, CommDeleter>;
using TransferPtr = std::unique_ptr<loadplan_transfer_t, TransferDeleter>;

struct TensorDecl {
  std::string name;
  uint32_t dtype = LOADPLAN_DTYPE_BFLOAT16;
  std::vector<int64_t> shape;
  int64_t bytes() const {
    return product(shape) * int64_t(loadplan_dtype_size(dtype));
  }
};

/// A box a sender holds; an empty one: the whole tensor.
struct HoldingDecl {
  uint32_t tensor = 0;
  TestBox box;
};

struct SenderDecl {
  int32_t rank = 0;
  uint64_t cap = 0;
  std::vector<HoldingDecl> holdings;
};

struct ReceiverDecl {
  int32_t rank = 0;
  uint64_t cap = 0;
  bool atomic = false;
  const loadplan_plan_t *plan = nullptr;
};

struct ScheduleDecl {
  uint32_t engine = LOADPLAN_ENGINE_M_TO_N;
  int32_t world = 1;
  std::vector<TensorDecl> tensors;
  std::vector<SenderDecl> senders;
  std::vector<ReceiverDecl> receivers;
  /// loadplan_schedule_spec_t's (0: the defaults: small pieces joined,
  /// rounds overlapping).
  uint64_t joinBelow = 0;
  bool sequential = false;

  loadplan_status_t build(loadplan_schedule_t **out) const {
    std::vector<loadplan_checkpoint_tensor_t> ts;
    for (const TensorDecl &t : tensors)
      ts.push_back({t.name.data(), t.name.size(), t.dtype,
                    uint32_t(t.shape.size()), t.shape.data()});
    std::vector<std::vector<loadplan_holding_t>> holdings(senders.size());
    std::vector<loadplan_sender_spec_t> ss;
    for (size_t i = 0; i < senders.size(); ++i) {
      for (const HoldingDecl &h : senders[i].holdings)
        holdings[i].push_back(
            {h.tensor, h.box.lo.empty() ? nullptr : h.box.lo.data(),
             h.box.hi.empty() ? nullptr : h.box.hi.data()});
      ss.push_back({senders[i].rank, senders[i].cap, holdings[i].data(),
                    holdings[i].size()});
    }
    std::vector<loadplan_receiver_spec_t> rs;
    for (const ReceiverDecl &r : receivers)
      rs.push_back({r.rank, r.cap, r.atomic, r.plan});
    loadplan_schedule_spec_t spec{engine,    world,     ts.data(), ts.size(),
                                  ss.data(), ss.size(), rs.data(), rs.size(),
                                  joinBelow, sequential};
    return loadplan_schedule_build(&spec, out);
  }

  SchedulePtr make() const {
    loadplan_schedule_t *raw = nullptr;
    EXPECT_TRUE(isOk(build(&raw)));
    return SchedulePtr(raw);
  }
};

/// The status's message, freeing it; "" for success.
inline std::string take(loadplan_status_t s) {
  if (!s)
    return "";
  std::string m = std::string(loadplan_status_code_name(loadplan_status_code(s))) +
                  ": " + loadplan_status_message(s);
  loadplan_status_free(s);
  return m;
}

/// Runs body(rank) in `n` forked processes. Each must return "" (success)
/// and exit within `seconds`; what a rank returns otherwise is reported.
inline ::testing::AssertionResult
runRanks(int n, const std::function<std::string(int)> &body, int seconds = 60) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      std::string error;
      try {
        error = body(rank);
      } catch (const std::exception &e) {
        error = e.what();
      }
      if (!error.empty())
        std::fprintf(stderr, "rank %d: %s\n", rank, error.c_str());
      std::fflush(stderr);
      _exit(error.empty() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::vector<int> status(n, -1);
  int left = n;
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (int rank = 0; rank < n; ++rank) {
      if (status[rank] != -1)
        continue;
      int s = 0;
      if (waitpid(pids[rank], &s, WNOHANG) == pids[rank]) {
        status[rank] = s;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto result = ::testing::AssertionSuccess();
  bool ok = true;
  std::string why;
  for (int rank = 0; rank < n; ++rank) {
    if (status[rank] == -1) {
      kill(pids[rank], SIGKILL);
      waitpid(pids[rank], nullptr, 0);
      ok = false;
      why += " rank " + std::to_string(rank) + " timed out;";
    } else if (!WIFEXITED(status[rank]) || WEXITSTATUS(status[rank]) != 0) {
      ok = false;
      why += " rank " + std::to_string(rank) + " failed (see its stderr);";
    }
  }
  if (ok)
    return result;
  return ::testing::AssertionFailure() << why;
}

/// A T in memory that every process forked after this call shares.
template <typename T> T *sharedAcrossFork() {
  void *p = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw std::runtime_error("mmap failed");
  return new (p) T;
}

/// steady_clock in nanoseconds: CLOCK_MONOTONIC, one clock for every
/// process of the machine.
inline int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Runs `body` in a forked child, which must die in it (`body` kills it,
/// by SIGKILL or `_exit(exitCode)`); "" when it did, else what happened.
inline std::string inDyingChild(const std::function<std::string()> &body,
                                int exitCode) {
  pid_t child = fork();
  if (child == 0) {
    std::string e = body();
    std::fprintf(stderr, "the dying child lived on: %s\n", e.c_str());
    std::fflush(stderr);
    _exit(1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  if ((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ||
      (WIFEXITED(status) && WEXITSTATUS(status) == exitCode))
    return "";
  return "the dying child ended otherwise (status " + std::to_string(status) +
         ")";
}

/// The checkpoint tensors of a plan's entries (all kinds).
inline std::vector<TensorDecl> tensorsOf(const TestPlan &plan) {
  std::vector<TensorDecl> out;
  for (const TestEntry &e : plan.entries)
    out.push_back({e.name, e.dtype, e.shape});
  return out;
}

/// Rows [start, stop) of part `index` of `count` along `dim`, as
/// torch.chunk cuts: ceil(n / count) per part, the last ones short or
/// empty.
inline std::pair<int64_t, int64_t> chunkOf(int64_t n, int64_t count,
                                           int64_t index) {
  int64_t size = (n + count - 1) / count;
  return {std::min(n, index * size), std::min(n, (index + 1) * size)};
}

/// What sender `index` of `count` holds when every tensor is cut along
/// `dim` (tensors of lower rank, or too short to cut, are replicated).
inline std::vector<HoldingDecl> shardsOf(const std::vector<TensorDecl> &tensors,
                                         int64_t count, int64_t index,
                                         size_t dim = 0) {
  std::vector<HoldingDecl> out;
  for (uint32_t t = 0; t < tensors.size(); ++t) {
    const std::vector<int64_t> &shape = tensors[t].shape;
    if (shape.size() <= dim || shape[dim] < count) {
      out.push_back({t, {}});
      continue;
    }
    auto [a, b] = chunkOf(shape[dim], count, index);
    if (a == b)
      continue;
    TestBox box{std::vector<int64_t>(shape.size(), 0), shape};
    box.lo[dim] = a;
    box.hi[dim] = b;
    out.push_back({t, box});
  }
  return out;
}

/// Every tensor whole (a full replica).
inline std::vector<HoldingDecl> wholeOf(const std::vector<TensorDecl> &tensors) {
  std::vector<HoldingDecl> out;
  for (uint32_t t = 0; t < tensors.size(); ++t)
    out.push_back({t, {}});
  return out;
}

/// A schedule of `engine` in which comm rank `sender` holds every tensor
/// of `tensors` whole and comm rank `receiver` (the same or another, of
/// `world`) receives by `plan`, both with staging cap `cap`.
inline ScheduleDecl wholeToOne(const std::vector<TensorDecl> &tensors, uint32_t engine,
                               int sender, int receiver, int world, uint64_t cap,
                               bool atomic, const loadplan_plan_t *plan) {
  ScheduleDecl decl;
  decl.engine = engine;
  decl.world = world;
  decl.tensors = tensors;
  decl.senders.push_back({sender, cap, wholeOf(tensors)});
  decl.receivers.push_back({receiver, cap, atomic, plan});
  return decl;
}

inline loadplan_schedule_summary_t summaryOf(const loadplan_schedule_t *s) {
  loadplan_schedule_summary_t out{};
  EXPECT_TRUE(isOk(loadplan_schedule_summary(s, &out)));
  return out;
}

inline std::vector<uint8_t> bytesOf(const loadplan_schedule_t *s) {
  const void *data = nullptr;
  size_t size = 0;
  EXPECT_TRUE(isOk(loadplan_schedule_bytes(s, &data, &size)));
  auto *p = static_cast<const uint8_t *>(data);
  return std::vector<uint8_t>(p, p + size);
}

/// What a plan needs, as its summary counts it: direct boxes and fallbacks.
inline uint64_t neededBytes(const loadplan_plan_t *plan) {
  loadplan_plan_summary_t s{};
  EXPECT_TRUE(isOk(loadplan_plan_summary(plan, &s)));
  return s.direct_bytes + s.fallback_bytes;
}

/// Receivers of a TP=`tp` Llama-like layer: for rank r, a column-parallel
/// weight "qkv" [16, 8] (rows), a row-parallel "o" [8, 16] (columns), a
/// replicated "norm" [8] going to two places, a fallback "scale" [1] and
/// "expert.<e>" [4, 4] whole on the rank that owns expert e (unneeded on
/// the others).
inline TestPlan tpPlan(int64_t tp, int64_t r, int64_t experts = 4) {
  constexpr uint32_t bf16 = LOADPLAN_DTYPE_BFLOAT16;
  TestPlan p;
  int64_t rows = 16 / tp, cols = 16 / tp;
  int64_t mine = experts / tp;
  p.storageSizes = {uint64_t(rows * 8 * 2), uint64_t(8 * cols * 2), 2 * 8 * 2,
                    uint64_t(mine * 16 * 2)};
  uint32_t qkv = p.addTarget({"attn.qkv", "weight", 0, 0, bf16, {rows, 8}, {8, 1}});
  uint32_t o = p.addTarget({"attn.o", "weight", 1, 0, bf16, {8, cols}, {cols, 1}});
  uint32_t n0 = p.addTarget({"norm", "weight", 2, 0, bf16, {8}, {1}});
  uint32_t n1 = p.addTarget({"norm2", "weight", 2, 16, bf16, {8}, {1}});
  uint32_t w = p.addTarget({"experts", "w", 3, 0, bf16, {mine, 4, 4}, {16, 4, 1}});
  p.entries.push_back({"qkv", LOADPLAN_KIND_DIRECT, bf16, {16, 8}, std::nullopt,
                       {{{r * rows, 0}, {(r + 1) * rows, 8}}},
                       {{qkv, 0, 0, {rows, 8}, {8, 1}}}});
  p.entries.push_back({"o", LOADPLAN_KIND_DIRECT, bf16, {8, 16}, std::nullopt,
                       {{{0, r * cols}, {8, (r + 1) * cols}}},
                       {{o, 0, 0, {8, cols}, {cols, 1}}}});
  p.entries.push_back({"norm", LOADPLAN_KIND_DIRECT, bf16, {8}, std::nullopt,
                       {{{0}, {8}}},
                       {{n0, 0, 0, {8}, {1}}, {n1, 0, 0, {8}, {1}}}});
  p.entries.push_back({"scale", LOADPLAN_KIND_FALLBACK, bf16, {1},
                       std::string("reads a value"), {{{0}, {1}}}, {}});
  for (int64_t e = 0; e < experts; ++e) {
    std::string name = "expert." + std::to_string(e);
    if (e / mine != r) {
      p.entries.push_back({name, LOADPLAN_KIND_UNNEEDED, bf16, {4, 4},
                           std::nullopt, {}, {}});
      continue;
    }
    p.entries.push_back({name, LOADPLAN_KIND_DIRECT, bf16, {4, 4}, std::nullopt,
                         {{{0, 0}, {4, 4}}},
                         {{w, 0, (e % mine) * 16, {4, 4}, {4, 1}}}});
  }
  return p;
}

/// Adds two converting names to a TP=`tp` receiver's plan `p`: "bias32",
/// bf16 [16] whose rank-r rows land converted in an f32 target (a
/// column-parallel bias kept in fp32), and "w8", f32 [8, 16] whose rank-r
/// column block lands converted into an fp8 (e4m3fn) target, transposed.
/// What moves is the bf16 and f32 bytes.
inline void addConvertingNames(TestPlan &p, int64_t tp, int64_t r) {
  constexpr uint32_t bf16 = LOADPLAN_DTYPE_BFLOAT16, f32 = LOADPLAN_DTYPE_FLOAT32,
                     e4m3 = LOADPLAN_DTYPE_FLOAT8_E4M3FN;
  int64_t rows = 16 / tp;
  uint32_t storage = uint32_t(p.storageSizes.size());
  p.storageSizes.push_back(uint64_t(rows * 4 + 8 * rows));
  uint32_t b = p.addTarget({"bias32", "bias", storage, 0, f32, {rows}, {1}});
  uint32_t w = p.addTarget({"w8", "weight", storage, uint64_t(rows * 4), e4m3,
                            {rows, 8}, {8, 1}});
  p.entries.push_back({"bias32", LOADPLAN_KIND_DIRECT, bf16, {16}, std::nullopt,
                       {{{r * rows}, {(r + 1) * rows}}},
                       {{b, 0, 0, {rows}, {1}, f32}}});
  p.entries.push_back({"w8", LOADPLAN_KIND_DIRECT, f32, {8, 16}, std::nullopt,
                       {{{0, r * rows}, {8, (r + 1) * rows}}},
                       {{w, 0, 0, {8, rows}, {1, 8}, e4m3}}});
}

/// Adds a Marlin 4-bit MoE expert to a TP=`tp` receiver's plan `p`, its
/// writes transforming (plan_format.h's marlin_w4, as vLLM lays out int4
/// experts for Marlin): "marlin.gate" and "marlin.up", int32 [192, 8]
/// (K = 64), whose rank-r rows (192 / tp, whole subtiles of 16) land,
/// padded to whole tiles of 64, gate then up in w13; "marlin.down", int32
/// [64, 24] (K = 192), whose rank-r words of K land in w2. A box of whole
/// tiles is one write, the subtiles after them another.
inline void addTransformingNames(TestPlan &p, int64_t tp, int64_t r) {
  constexpr uint32_t i32 = LOADPLAN_DTYPE_INT32;
  const int64_t n = 192, words = 8, h = 64;
  int64_t s = n / tp, padded = (s + 63) / 64 * 64;
  int64_t w13Words = 4 * 4 * padded, w2Words = padded / 16 * 2 * h;
  uint32_t storage = uint32_t(p.storageSizes.size());
  p.storageSizes.push_back(uint64_t(4 * (w13Words + w2Words)));
  uint32_t w13 = p.addTarget({"marlin", "w13", storage, 0, i32, {4, 4 * padded},
                              {4 * padded, 1}});
  uint32_t w2 = p.addTarget({"marlin", "w2", storage, uint64_t(4 * w13Words),
                             i32, {padded / 16, 2 * h}, {2 * h, 1}});
  // Box `box` into rows [row0, ...) (a tile's first) of a repack of
  // `rowStride` words per row of K.
  auto place = [](TestEntry &e, uint32_t target, int64_t rowStride,
                  int64_t row0, int64_t lo0, int64_t hi0, int64_t lo1,
                  int64_t hi1) {
    int64_t tiles = (hi0 - lo0) / 64, rest = (hi0 - lo0) % 64 / 16;
    int64_t kTiles = (hi1 - lo1) / 2;
    if (tiles) {
      e.writes.push_back({target, uint32_t(e.boxes.size()), row0 / 64 * 128,
                          {kTiles, tiles, 4, 32}, {rowStride, 128, 1, 4}, 0,
                          LOADPLAN_TRANSFORM_MARLIN_W4});
      e.boxes.push_back({{lo0, lo1}, {lo0 + 64 * tiles, hi1}});
    }
    if (rest) {
      e.writes.push_back({target, uint32_t(e.boxes.size()),
                          (row0 + 64 * tiles) / 64 * 128, {kTiles, rest, 32},
                          {rowStride, 1, 4}, 0, LOADPLAN_TRANSFORM_MARLIN_W4});
      e.boxes.push_back({{lo0 + 64 * tiles, lo1}, {hi0, hi1}});
    }
  };
  for (int64_t half = 0; half < 2; ++half) {
    TestEntry e{half ? "marlin.up" : "marlin.gate", LOADPLAN_KIND_DIRECT, i32,
                {n, words}, std::nullopt, {}, {}};
    place(e, w13, 4 * padded, half * padded, r * s, (r + 1) * s, 0, words);
    p.entries.push_back(e);
  }
  TestEntry down{"marlin.down", LOADPLAN_KIND_DIRECT, i32, {h, n / 8},
                 std::nullopt, {}, {}};
  place(down, w2, 2 * h, 0, 0, h, r * s / 8, (r + 1) * s / 8);
  p.entries.push_back(down);
}

/// Adds "big" [rows, cols] float32 to a TP=`tp` receiver's plan `p`:
/// rank r needs the column block [r * cols / tp, (r + 1) * cols / tp), in
/// a storage of its own. From row shards, every piece of it is packed, so a
/// small cap spreads an update over many rounds.
inline void addBigWeight(TestPlan &p, int64_t tp, int64_t r, int64_t rows,
                         int64_t cols) {
  constexpr uint32_t f32 = LOADPLAN_DTYPE_FLOAT32;
  int64_t mine = cols / tp;
  uint32_t storage = uint32_t(p.storageSizes.size());
  p.storageSizes.push_back(uint64_t(rows * mine * 4));
  uint32_t t =
      p.addTarget({"big", "weight", storage, 0, f32, {rows, mine}, {mine, 1}});
  p.entries.push_back({"big", LOADPLAN_KIND_DIRECT, f32, {rows, cols},
                       std::nullopt, {{{0, r * mine}, {rows, (r + 1) * mine}}},
                       {{t, 0, 0, {rows, mine}, {mine, 1}}}});
}

} // namespace loadplan::testing

#endif // LOADPLAN_RUNTIME_TESTS_TRANSFERTESTUTIL_H
