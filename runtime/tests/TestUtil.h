//===- TestUtil.h - Shared helpers of the runtime tests ----------*- C++ -*-===//
//
// Handles that free themselves, status matchers, a sample plan, a generator
// of random plans with strided destinations, and the reference: a plain
// element-by-element application of a plan that the executors must match
// byte for byte.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_TESTS_TESTUTIL_H
#define LOADPLAN_RUNTIME_TESTS_TESTUTIL_H

#include "PlanWriter.h"
#include "loadplan/convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <string>

namespace loadplan::testing {

struct StatusDeleter {
  void operator()(loadplan_status_handle_t *s) const { loadplan_status_free(s); }
};
struct PlanDeleter {
  void operator()(loadplan_plan_t *p) const { loadplan_plan_release(p); }
};
struct BindingDeleter {
  void operator()(loadplan_binding_t *b) const { loadplan_binding_release(b); }
};
using Status = std::unique_ptr<loadplan_status_handle_t, StatusDeleter>;
using PlanPtr = std::unique_ptr<loadplan_plan_t, PlanDeleter>;
using BindingPtr = std::unique_ptr<loadplan_binding_t, BindingDeleter>;

/// Passes when `status` is OK; shows the message otherwise.
inline ::testing::AssertionResult isOk(loadplan_status_t raw) {
  Status status(raw);
  if (!status)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << loadplan_status_code_name(loadplan_status_code(status.get()))
         << ": " << loadplan_status_message(status.get());
}

/// Passes when `status` has `code` and its message contains `text`.
inline ::testing::AssertionResult isError(loadplan_status_t raw,
                                          loadplan_status_code_t code,
                                          const std::string &text) {
  Status status(raw);
  if (!status)
    return ::testing::AssertionFailure() << "succeeded, expected "
                                         << loadplan_status_code_name(code);
  std::string message = loadplan_status_message(status.get());
  if (loadplan_status_code(status.get()) != code ||
      message.find(text) == std::string::npos)
    return ::testing::AssertionFailure()
           << "got " << loadplan_status_code_name(loadplan_status_code(status.get()))
           << ": \"" << message << "\", expected "
           << loadplan_status_code_name(code) << " with \"" << text << "\"";
  return ::testing::AssertionSuccess() << message;
}

inline PlanPtr openPlan(const TestPlan &plan) {
  std::vector<uint8_t> bytes = plan.bytes();
  loadplan_plan_t *raw = nullptr;
  EXPECT_TRUE(isOk(loadplan_plan_open_bytes(bytes.data(), bytes.size(), &raw)));
  return PlanPtr(raw);
}

inline BindingPtr bindPlan(loadplan_plan_t *plan, Memory &memory,
                           uint32_t threads = 1) {
  std::vector<loadplan_target_layout_t> layouts = memory.layouts();
  loadplan_bind_options_t options;
  loadplan_bind_options_init(&options);
  options.num_threads = threads;
  loadplan_binding_t *raw = nullptr;
  EXPECT_TRUE(isOk(
      loadplan_bind(plan, layouts.data(), layouts.size(), &options, &raw)));
  return BindingPtr(raw);
}

inline void fillRandom(std::vector<uint8_t> &bytes, std::mt19937_64 &rng) {
  for (uint8_t &b : bytes)
    b = uint8_t(rng());
}

/// Incoming data for one update: each direct name's full tensor and its
/// boxes packed, plus the argument arrays of both apply calls.
struct Update {
  std::map<std::string, std::vector<uint8_t>> tensors;
  std::vector<std::vector<uint8_t>> boxData; // parallel to boxArgs
  std::vector<loadplan_tensor_t> tensorArgs;
  std::vector<loadplan_box_t> boxArgs;
};

/// Packs box `box` of entry `e` out of its full tensor.
inline std::vector<uint8_t> packBox(const TestEntry &e, const TestBox &box,
                                    const std::vector<uint8_t> &tensor) {
  size_t item = loadplan_dtype_size(e.dtype);
  std::vector<int64_t> extents = box.extents(), strides = rowMajor(e.shape);
  int64_t n = product(extents);
  std::vector<uint8_t> out(size_t(n) * item);
  std::vector<int64_t> index(extents.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, at = 0;
    for (size_t k = extents.size(); k-- > 0;) {
      at += (rest % extents[k] + box.lo[k]) * strides[k];
      rest /= extents[k];
    }
    std::memcpy(out.data() + i * item, tensor.data() + at * item, item);
  }
  return out;
}

/// Random data for the direct names `names` of `plan` (all of them when
/// empty), as full tensors and as boxes.
inline Update makeUpdate(const TestPlan &plan, std::mt19937_64 &rng,
                         const std::vector<std::string> &names = {}) {
  Update u;
  for (const TestEntry &e : plan.entries) {
    if (e.kind != LOADPLAN_KIND_DIRECT)
      continue;
    if (!names.empty() &&
        std::find(names.begin(), names.end(), e.name) == names.end())
      continue;
    std::vector<uint8_t> &t = u.tensors[e.name];
    t.resize(size_t(product(e.shape)) * loadplan_dtype_size(e.dtype));
    fillRandom(t, rng);
    for (const TestBox &b : e.boxes)
      u.boxData.push_back(packBox(e, b, t));
  }
  size_t next = 0;
  for (const TestEntry &e : plan.entries) {
    auto it = u.tensors.find(e.name);
    if (e.kind != LOADPLAN_KIND_DIRECT || it == u.tensors.end())
      continue;
    u.tensorArgs.push_back({e.name.data(), e.name.size(), it->second.data(),
                            e.dtype, uint32_t(e.shape.size()), e.shape.data()});
    for (const TestBox &b : e.boxes)
      u.boxArgs.push_back({e.name.data(), e.name.size(),
                           u.boxData[next++].data(), e.dtype,
                           uint32_t(e.shape.size()), b.lo.data(),
                           b.hi.data()});
  }
  return u;
}

/// The reference: every element of every write of the names in `update`,
/// Transforming write `w` (MARLIN_W4) of `box` from the row-major int32
/// tensor `src` (element strides `strides`) into `target`, value by value
/// from the layout's definition (where each 4-bit value of the box lands),
/// not from transform.h's word-by-word code.
inline void applyMarlinW4Reference(const TestWrite &w, const TestBox &box,
                                   const std::vector<int64_t> &strides,
                                   const uint8_t *src, uint8_t *target) {
  std::vector<int64_t> extents = box.extents();
  int64_t atomRows = extents[0] / 16;
  for (int64_t n = 0; n < extents[0]; ++n)
    for (int64_t k = 0; k < extents[1] * 8; ++k) {
      uint32_t word;
      std::memcpy(&word,
                  src + 4 * ((box.lo[0] + n) * strides[0] +
                             (box.lo[1] + k / 8) * strides[1]),
                  4);
      uint32_t value = (word >> (4 * (k % 8))) & 0xF;
      int64_t t = k / 16, h = k % 16 / 8, r = k % 8 / 2, s = k % 2;
      int64_t q = n / 16, b = n % 16 / 8, c = n % 8;
      int64_t index = (t * atomRows + q) * 32 + 4 * c + r;
      int64_t dst = w.offset;
      for (size_t d = w.shape.size(); d-- > 0;) {
        dst += index % w.shape[d] * w.stride[d];
        index /= w.shape[d];
      }
      uint32_t out;
      std::memcpy(&out, target + 4 * dst, 4);
      int shift = int(4 * (4 * s + 2 * b + h));
      out = (out & ~(0xFu << shift)) | (value << shift);
      std::memcpy(target + 4 * dst, &out, 4);
    }
}

/// one at a time, straight from the definitions in plan_format.h.
inline void applyReference(const TestPlan &plan, Memory &memory,
                           const Update &update) {
  for (const TestEntry &e : plan.entries) {
    auto it = update.tensors.find(e.name);
    if (e.kind != LOADPLAN_KIND_DIRECT || it == update.tensors.end())
      continue;
    size_t item = loadplan_dtype_size(e.dtype);
    std::vector<int64_t> strides = rowMajor(e.shape);
    for (const TestWrite &w : e.writes) {
      size_t dstItem = loadplan_dtype_size(loadplan_format::writtenDtype(e.dtype, w));
      const TestBox &box = e.boxes[w.box];
      std::vector<int64_t> extents = box.extents();
      const TestTarget &t = plan.targets[w.target];
      uint8_t *target = memory.base(t.storage) + t.byteOffset;
      int64_t n = product(extents);
      if (w.transform) {
        applyMarlinW4Reference(w, box, strides, it->second.data(), target);
        continue;
      }
      for (int64_t i = 0; i < n; ++i) {
        int64_t rest = i, src = 0;
        for (size_t k = extents.size(); k-- > 0;) {
          src += (rest % extents[k] + box.lo[k]) * strides[k];
          rest /= extents[k];
        }
        rest = i;
        int64_t dst = w.offset;
        for (size_t k = w.shape.size(); k-- > 0;) {
          dst += (rest % w.shape[k]) * w.stride[k];
          rest /= w.shape[k];
        }
        if (w.convertTo)
          loadplan_convert::convertElement(target + dst * dstItem, w.convertTo,
                                           it->second.data() + src * item,
                                           e.dtype);
        else
          std::memcpy(target + dst * item, it->second.data() + src * item, item);
      }
    }
  }
}

/// Live memory after `update` is applied to `before` by the reference.
inline std::vector<std::vector<uint8_t>>
referenceAfter(const TestPlan &plan, const std::vector<std::vector<uint8_t>> &before,
               const Update &update) {
  Memory memory(plan);
  memory.storages = before;
  applyReference(plan, memory, update);
  return memory.storages;
}

/// Random live memory for a plan, a random update of `names` (all direct
/// names when empty) and the memory the reference makes of them.
struct Scenario {
  Scenario(const TestPlan &plan, std::mt19937_64 &rng,
           const std::vector<std::string> &names = {})
      : memory(plan) {
    for (auto &s : memory.storages)
      fillRandom(s, rng);
    update = makeUpdate(plan, rng, names);
    expected = referenceAfter(plan, memory.storages, update);
  }
  Memory memory;
  Update update;
  std::vector<std::vector<uint8_t>> expected;
};

/// A small Llama-like plan: q/k into a fused qkv target, an o_proj slice
/// of columns, a transposed weight, a norm written twice (replicated), one
/// fallback and one unneeded name. All bf16.
inline TestPlan samplePlan() {
  TestPlan p;
  constexpr uint32_t bf16 = LOADPLAN_DTYPE_BFLOAT16;
  p.storageSizes = {12 * 8 * 2, 8 * 4 * 2, 6 * 4 * 2, 2 * 8 * 2 + 16};
  uint32_t qkv = p.addTarget({"layers.0.attn.qkv", "weight", 0, 0, bf16,
                              {12, 8}, {8, 1}});
  uint32_t o = p.addTarget({"layers.0.attn.o", "weight", 1, 0, bf16,
                            {8, 4}, {4, 1}});
  uint32_t t = p.addTarget({"layers.0.mlp.w", "weight", 2, 0, bf16,
                            {6, 4}, {4, 1}});
  uint32_t n0 = p.addTarget({"layers.0.norm", "weight", 3, 0, bf16, {8}, {1}});
  uint32_t n1 = p.addTarget({"layers.0.norm2", "weight", 3, 16, bf16, {8}, {1}});
  // q rows 8..16 of [16, 8] into qkv rows 0..8; k rows 4..8 of [8, 8] into
  // qkv rows 8..12.
  p.entries.push_back({"q", LOADPLAN_KIND_DIRECT, bf16, {16, 8}, std::nullopt,
                       {{{8, 0}, {16, 8}}}, {{qkv, 0, 0, {8, 8}, {8, 1}}}});
  p.entries.push_back({"k", LOADPLAN_KIND_DIRECT, bf16, {8, 8}, std::nullopt,
                       {{{4, 0}, {8, 8}}}, {{qkv, 0, 64, {4, 8}, {8, 1}}}});
  // o: columns 4..8 of [8, 8].
  p.entries.push_back({"o", LOADPLAN_KIND_DIRECT, bf16, {8, 8}, std::nullopt,
                       {{{0, 4}, {8, 8}}}, {{o, 0, 0, {8, 4}, {4, 1}}}});
  // w: P.copy_(W.t()) with W [4, 6] and P [6, 4].
  p.entries.push_back({"w", LOADPLAN_KIND_DIRECT, bf16, {4, 6}, std::nullopt,
                       {{{0, 0}, {4, 6}}}, {{t, 0, 0, {4, 6}, {1, 4}}}});
  // norm: one box, two destinations.
  p.entries.push_back({"norm", LOADPLAN_KIND_DIRECT, bf16, {8}, std::nullopt,
                       {{{0}, {8}}},
                       {{n0, 0, 0, {8}, {1}}, {n1, 0, 0, {8}, {1}}}});
  p.entries.push_back({"scale", LOADPLAN_KIND_FALLBACK, bf16, {1},
                       std::string("reads a value (.item())"),
                       {{{0}, {1}}}, {}});
  p.entries.push_back({"other_rank", LOADPLAN_KIND_UNNEEDED, bf16, {4, 4},
                       std::nullopt, {}, {}});
  return p;
}

/// Converting writes of every shape an executor treats apart: contiguous
/// (one run), a column block (rows), transposed (runs of one element),
/// split, and a box written twice (plainly and converting).
inline TestPlan convertingPlan() {
  TestPlan p;
  constexpr uint32_t bf16 = LOADPLAN_DTYPE_BFLOAT16, f32 = LOADPLAN_DTYPE_FLOAT32,
                     f16 = LOADPLAN_DTYPE_FLOAT16,
                     e4m3 = LOADPLAN_DTYPE_FLOAT8_E4M3FN,
                     e5m2 = LOADPLAN_DTYPE_FLOAT8_E5M2;
  p.storageSizes = {4 * 3000, 64 * 40, 2 * 4 * 6 + 8, 2 * 64};
  uint32_t bias = p.addTarget({"m", "bias", 0, 0, f32, {3000}, {1}});
  uint32_t q = p.addTarget({"m", "q", 1, 0, e4m3, {64, 40}, {40, 1}});
  uint32_t t = p.addTarget({"m", "t", 2, 0, f16, {6, 4}, {4, 1}});
  uint32_t n = p.addTarget({"m", "n", 3, 0, bf16, {64}, {1}});
  p.entries.push_back({"bias", LOADPLAN_KIND_DIRECT, bf16, {3000}, std::nullopt,
                       {{{0}, {3000}}}, {{bias, 0, 0, {3000}, {1}, f32}}});
  // Columns 20..60 of [64, 64] f32 into e4m3 [64, 40].
  p.entries.push_back({"q", LOADPLAN_KIND_DIRECT, f32, {64, 64}, std::nullopt,
                       {{{0, 20}, {64, 60}}}, {{q, 0, 0, {64, 40}, {40, 1}, e4m3}}});
  // P.copy_(W.t()): e5m2 [4, 6] into f16 [6, 4].
  p.entries.push_back({"t", LOADPLAN_KIND_DIRECT, e5m2, {4, 6}, std::nullopt,
                       {{{0, 0}, {4, 6}}}, {{t, 0, 0, {4, 6}, {1, 4}, f16}}});
  // f16 [32] into bf16, split [4, 8], and the same box again copied
  // plainly into the second half of the storage.
  p.entries.push_back({"n", LOADPLAN_KIND_DIRECT, f16, {32}, std::nullopt,
                       {{{0}, {32}}},
                       {{n, 0, 0, {4, 8}, {8, 1}, bf16},
                        {n, 0, 32, {32}, {1}}}});
  return p;
}


/// Transforming writes (MARLIN_W4) as vLLM's Marlin MoE layers take them at
/// tensor parallelism 2, rank 0: an expert's gate and up [192, 8] (N = 192
/// rows, K = 64) whose 96 rows this rank holds, padded to 128, in the
/// repacked w13 [4, 512] (gate then up, 256 words each); its down [64, 24]
/// (K = 192) whose 12 words this rank holds, padded to 16, in w2 [8, 128]
/// (rows 6 and 7: the padding, never written). 96 rows are one tile of 64
/// and two subtiles of 16: two writes, the tile's region split [4, 1, 4,
/// 32]. Next to them, a plain int32 copy.
inline TestPlan transformingPlan() {
  TestPlan p;
  constexpr uint32_t i32 = LOADPLAN_DTYPE_INT32;
  constexpr uint32_t marlin = LOADPLAN_TRANSFORM_MARLIN_W4;
  p.storageSizes = {4 * 4 * 512, 4 * 8 * 128, 4 * 2};
  uint32_t w13 = p.addTarget({"experts", "w13_weight_packed", 0, 0, i32,
                              {4, 512}, {512, 1}});
  uint32_t w2 = p.addTarget({"experts", "w2_weight_packed", 1, 0, i32,
                             {8, 128}, {128, 1}});
  uint32_t shape = p.addTarget({"experts", "w2_weight_shape", 2, 0, i32,
                                {2}, {1}});
  for (int64_t half = 0; half < 2; ++half)
    p.entries.push_back(
        {half ? "up_proj" : "gate_proj", LOADPLAN_KIND_DIRECT, i32, {192, 8},
         std::nullopt, {{{0, 0}, {64, 8}}, {{64, 0}, {96, 8}}},
         {{w13, 0, 256 * half, {4, 1, 4, 32}, {512, 128, 1, 4}, 0, marlin},
          {w13, 1, 256 * half + 128, {4, 2, 32}, {512, 1, 4}, 0, marlin}}});
  p.entries.push_back({"down_proj", LOADPLAN_KIND_DIRECT, i32, {64, 24},
                       std::nullopt, {{{0, 0}, {64, 12}}},
                       {{w2, 0, 0, {6, 4, 32}, {128, 1, 4}, 0, marlin}}});
  p.entries.push_back({"down_shape", LOADPLAN_KIND_DIRECT, i32, {2},
                       std::nullopt, {{{0}, {2}}}, {{shape, 0, 0, {2}, {1}}}});
  return p;
}

/// Random plans: entries of rank 1 to 3 and dtypes of 1 to 8 bytes, with
/// several boxes each going to one or two destinations whose dims are split
/// and permuted (transposed) and padded; plus fused targets that several
/// names fill column block by column block (interleaved destinations).
class RandomPlanBuilder {
public:
  explicit RandomPlanBuilder(uint64_t seed) : rng(seed) {}

  TestPlan build(int numEntries, int64_t maxDim) {
    TestPlan p;
    p.storageSizes.assign(3, 0);
    for (int i = 0; i < numEntries; ++i)
      addEntry(p, "e" + std::to_string(i), maxDim);
    addFused(p, "fused", maxDim);
    // Slack at the end of each storage: bytes nobody writes.
    for (uint64_t &s : p.storageSizes)
      s += pick(0, 64);
    return p;
  }

  /// One large entry whose copies need several pieces per thread.
  TestPlan buildLarge(int64_t rows, int64_t cols) {
    TestPlan p;
    p.storageSizes.assign(2, 0);
    TestEntry e{"big", LOADPLAN_KIND_DIRECT, LOADPLAN_DTYPE_FLOAT32,
                {rows, cols}, std::nullopt, {}, {}};
    // Rows [1, rows - 1) contiguous; and all of it transposed.
    e.boxes.push_back({{1, 0}, {rows - 1, cols}});
    e.boxes.push_back({{0, 0}, {rows, cols}});
    uint32_t a = place(p, 0, 4, (rows - 2) * cols);
    e.writes.push_back({a, 0, 0, {rows - 2, cols}, {cols, 1}});
    uint32_t b = place(p, 1, 4, rows * cols);
    e.writes.push_back({b, 1, 0, {rows, cols}, {1, rows}});
    p.entries.push_back(e);
    return p;
  }

  std::mt19937_64 rng;

private:
  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }

  /// A new target of `elements` elements at the end of `storage`.
  uint32_t place(TestPlan &p, uint32_t storage, size_t item, int64_t elements) {
    uint64_t &end = p.storageSizes[storage];
    end = (end + item - 1) / item * item + item * pick(0, 3);
    uint32_t dtype = item == 1   ? LOADPLAN_DTYPE_UINT8
                     : item == 2 ? LOADPLAN_DTYPE_BFLOAT16
                     : item == 4 ? LOADPLAN_DTYPE_FLOAT32
                                 : LOADPLAN_DTYPE_FLOAT64;
    uint32_t index = p.addTarget({"m" + std::to_string(p.targets.size()), "w",
                                  storage, end, dtype, {elements}, {1}});
    end += uint64_t(elements) * item;
    return index;
  }

  void addEntry(TestPlan &p, const std::string &name, int64_t maxDim) {
    static const uint32_t dtypes[] = {LOADPLAN_DTYPE_UINT8,
                                      LOADPLAN_DTYPE_BFLOAT16,
                                      LOADPLAN_DTYPE_FLOAT32,
                                      LOADPLAN_DTYPE_FLOAT64};
    TestEntry e;
    e.name = name;
    e.dtype = dtypes[pick(0, 3)];
    size_t item = loadplan_dtype_size(e.dtype);
    int rank = int(pick(1, 3));
    for (int k = 0; k < rank; ++k)
      e.shape.push_back(pick(1, maxDim));
    int numBoxes = int(pick(1, 3));
    for (int b = 0; b < numBoxes; ++b) {
      TestBox box;
      for (int k = 0; k < rank; ++k) {
        int64_t start = pick(0, e.shape[k] - 1);
        box.lo.push_back(start);
        box.hi.push_back(pick(start + 1, e.shape[k]));
      }
      bool seen = false;
      for (const TestBox &other : e.boxes)
        seen |= other.lo == box.lo && other.hi == box.hi;
      if (seen)
        continue;
      e.boxes.push_back(box);
      for (int n = int(pick(1, 2)); n > 0; --n)
        e.writes.push_back(stridedWrite(p, uint32_t(e.boxes.size() - 1), box,
                                        item));
    }
    p.entries.push_back(e);
  }

  /// A write of `box` into a fresh target: dims split where they divide,
  /// laid out in a random order with random padding.
  TestWrite stridedWrite(TestPlan &p, uint32_t boxIndex, const TestBox &box,
                         size_t item) {
    std::vector<int64_t> shape;
    for (int64_t extent : box.extents()) {
      std::vector<int64_t> divisors;
      for (int64_t d = 2; d < extent; ++d)
        if (extent % d == 0)
          divisors.push_back(d);
      if (!divisors.empty() && pick(0, 1)) {
        int64_t d = divisors[pick(0, int64_t(divisors.size()) - 1)];
        shape.push_back(extent / d);
        shape.push_back(d);
      } else {
        shape.push_back(extent);
      }
    }
    // Memory order of the dims, innermost first.
    std::vector<size_t> order(shape.size());
    std::iota(order.rbegin(), order.rend(), 0);
    if (pick(0, 2))
      std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> stride(shape.size());
    int64_t footprint = 1;
    for (size_t k : order) {
      stride[k] = footprint;
      footprint = footprint * shape[k] + (pick(0, 2) ? 0 : pick(1, 3));
    }
    int64_t offset = pick(0, 2);
    uint32_t storage = uint32_t(pick(0, 2));
    uint32_t target = place(p, storage, item, offset + footprint);
    return {target, boxIndex, offset, shape, stride};
  }

  /// Names that fill one [rows, cols * n] target column block by column
  /// block: their destinations interleave row by row.
  void addFused(TestPlan &p, const std::string &prefix, int64_t maxDim) {
    int64_t rows = pick(1, maxDim), cols = pick(1, maxDim);
    int n = int(pick(2, 3));
    uint32_t storage = uint32_t(pick(0, 2));
    uint64_t &end = p.storageSizes[storage];
    end = (end + 3) / 4 * 4;
    uint32_t target = p.addTarget({prefix, "w", storage, end,
                                   LOADPLAN_DTYPE_FLOAT32,
                                   {rows, cols * n}, {cols * n, 1}});
    end += uint64_t(rows * cols * n) * 4;
    for (int i = 0; i < n; ++i) {
      TestEntry e{prefix + std::to_string(i), LOADPLAN_KIND_DIRECT,
                  LOADPLAN_DTYPE_FLOAT32, {rows, cols}, std::nullopt,
                  {{{0, 0}, {rows, cols}}}, {}};
      e.writes.push_back({target, 0, i * cols, {rows, cols}, {cols * n, 1}});
      p.entries.push_back(e);
    }
  }
};

} // namespace loadplan::testing

#endif // LOADPLAN_RUNTIME_TESTS_TESTUTIL_H
