//===- ExecutorTest.cpp - Executors against the reference -------*- C++ -*-===//
//
// Random plans with strided destinations (split, transposed, padded,
// interleaved) are applied by the CPU executor with 1 to N threads, from
// full tensors and from boxes, and by the CUDA kernel's code run on the CPU;
// each must leave memory exactly as the element-by-element reference does.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "../src/Copies.h"
#include "../src/Status.h"
#include "../src/cuda/DeviceCopy.h"
#include "../src/host/HostExecutor.h"

#include <thread>

using namespace loadplan;
using namespace loadplan::testing;

namespace {

/// Applies `update` to fresh random memory through the C API and through
/// the reference, and compares.
void checkAgainstReference(const TestPlan &p, uint32_t threads,
                           SourceForm form, std::mt19937_64 &rng,
                           const std::vector<std::string> &names = {}) {
  PlanPtr plan = openPlan(p);
  ASSERT_TRUE(plan);
  Scenario scenario(p, rng, names);
  Memory &memory = scenario.memory;
  const Update &u = scenario.update;
  BindingPtr binding = bindPlan(plan.get(), memory, threads);
  ASSERT_TRUE(binding);
  if (form == SourceForm::Tensor)
    ASSERT_TRUE(isOk(loadplan_apply_tensors(
        binding.get(), u.tensorArgs.data(), u.tensorArgs.size(), nullptr)));
  else
    ASSERT_TRUE(isOk(loadplan_apply_boxes(binding.get(), u.boxArgs.data(),
                                          u.boxArgs.size(), nullptr)));
  for (size_t s = 0; s < memory.storages.size(); ++s)
    ASSERT_EQ(memory.storages[s], scenario.expected[s]) << "storage " << s;
}

uint32_t maxThreads() {
  return std::max(4u, std::min(16u, std::thread::hardware_concurrency()));
}

TEST(Executor, RandomPlansAllThreadCounts) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    RandomPlanBuilder builder(seed);
    TestPlan p = builder.build(8, 9);
    for (uint32_t threads : {1u, 2u, 3u, maxThreads()})
      for (SourceForm form : {SourceForm::Tensor, SourceForm::Box}) {
        SCOPED_TRACE(::testing::Message()
                     << "seed " << seed << ", " << threads << " threads, "
                     << (form == SourceForm::Tensor ? "tensors" : "boxes"));
        checkAgainstReference(p, threads, form, builder.rng);
      }
  }
}

TEST(Executor, RandomPlansSomeNames) {
  for (uint64_t seed = 100; seed < 110; ++seed) {
    RandomPlanBuilder builder(seed);
    TestPlan p = builder.build(8, 7);
    std::vector<std::string> names;
    for (const TestEntry &e : p.entries)
      if (builder.rng() % 2)
        names.push_back(e.name);
    if (names.empty())
      names.push_back(p.entries[0].name);
    checkAgainstReference(p, 3, SourceForm::Box, builder.rng, names);
    checkAgainstReference(p, 3, SourceForm::Tensor, builder.rng, names);
  }
}

// Several megabytes: copies are cut into pieces, rows of the contiguous
// write span pieces, and the transposed write runs element by element.
TEST(Executor, LargeCopiesArePiecedAndShared) {
  RandomPlanBuilder builder(5);
  TestPlan p = builder.buildLarge(1031, 517);
  for (uint32_t threads : {1u, 2u, maxThreads()})
    for (SourceForm form : {SourceForm::Tensor, SourceForm::Box})
      checkAgainstReference(p, threads, form, builder.rng);
}

// DESIGN.md's "0-dim -> (1,) copy": a scalar into a one-element target,
// next to a per-tensor scale written into every slot of a target.
TEST(Executor, ScalarsAndReplicatedScales) {
  TestPlan p;
  p.storageSizes = {4, 4 * 4};
  p.addTarget({"layer", "bias", 0, 0, LOADPLAN_DTYPE_FLOAT32, {1}, {1}});
  p.addTarget({"experts", "scale", 1, 0, LOADPLAN_DTYPE_FLOAT32, {4}, {1}});
  p.entries.push_back({"bias", LOADPLAN_KIND_DIRECT, LOADPLAN_DTYPE_FLOAT32,
                       {}, std::nullopt, {{{}, {}}}, {{0, 0, 0, {1}, {1}}}});
  TestEntry scale{"scale", LOADPLAN_KIND_DIRECT, LOADPLAN_DTYPE_FLOAT32,
                  {1}, std::nullopt, {{{0}, {1}}}, {}};
  for (int64_t slot = 0; slot < 4; ++slot)
    scale.writes.push_back({1, 0, slot, {}, {}});
  p.entries.push_back(scale);
  std::mt19937_64 rng(1);
  for (SourceForm form : {SourceForm::Tensor, SourceForm::Box})
    checkAgainstReference(p, 2, form, rng);
}

TEST(Executor, RepeatedUpdatesReuseTheBinding) {
  RandomPlanBuilder builder(9);
  TestPlan p = builder.build(6, 8);
  PlanPtr plan = openPlan(p);
  Memory memory(p);
  BindingPtr binding = bindPlan(plan.get(), memory, 3);
  for (int round = 0; round < 5; ++round) {
    Update u = makeUpdate(p, builder.rng);
    auto expected = referenceAfter(p, memory.storages, u);
    if (round % 2)
      ASSERT_TRUE(isOk(loadplan_apply_boxes(binding.get(), u.boxArgs.data(),
                                            u.boxArgs.size(), nullptr)));
    else
      ASSERT_TRUE(isOk(loadplan_apply_tensors(binding.get(),
                                              u.tensorArgs.data(),
                                              u.tensorArgs.size(), nullptr)));
    ASSERT_EQ(memory.storages, expected) << "round " << round;
  }
}

//===----------------------------------------------------------------------===//
// Internals: dims, pieces and the device code on the CPU
//===----------------------------------------------------------------------===//

TEST(Copies, MergeDims) {
  // A contiguous [4, 6] float box into a contiguous region: one run.
  std::vector<ByteDim> dims = {{4, 24, 24}, {6, 4, 4}};
  EXPECT_EQ(mergeDims(dims, 4), 96);
  EXPECT_TRUE(dims.empty());
  // Rows of a column block: rows stay, columns are the run.
  dims = {{4, 24, 32}, {6, 4, 4}};
  EXPECT_EQ(mergeDims(dims, 4), 24);
  ASSERT_EQ(dims.size(), 1u);
  EXPECT_EQ(dims[0].size, 4);
  // Transposed: no run, destination-contiguous dim innermost.
  dims = {{4, 24, 4}, {6, 4, 16}};
  EXPECT_EQ(mergeDims(dims, 4), 4);
  ASSERT_EQ(dims.size(), 2u);
  EXPECT_EQ(dims[1].dstStride, 4);
  EXPECT_EQ(dims[1].srcStride, 24);
  // Unit dims vanish; an empty dim empties the copy.
  dims = {{1, 0, 0}, {5, 2, 2}};
  EXPECT_EQ(mergeDims(dims, 2), 10);
  dims = {{0, 2, 2}, {5, 2, 2}};
  EXPECT_EQ(mergeDims(dims, 2), 0);
}

/// The host copies of `p` bound to `memory`.
Copies copiesOf(const Plan &plan, Memory &memory, SourceForm form) {
  std::vector<uint8_t *> bases;
  for (auto &s : memory.storages)
    bases.push_back(s.data());
  return buildCopies(plan, form, bases);
}

std::unique_ptr<Plan> parse(const TestPlan &p) {
  std::vector<uint8_t> bytes = p.bytes();
  return parsePlan(bytes.data(), bytes.size());
}

/// The source of copy `c` in `u`: the entry's tensor or the box's bytes.
const uint8_t *sourceOf(const Plan &plan, const Update &u, const Copy &c,
                        SourceForm form) {
  const Entry &e = plan.entries[c.entry];
  if (form == SourceForm::Tensor)
    return u.tensors.at(e.name).data();
  for (const loadplan_box_t &b : u.boxArgs) {
    if (std::string(b.name, b.name_size) != e.name)
      continue;
    const Box &box = e.boxes[c.box - plan.firstBox[c.entry]];
    bool same = true;
    for (uint32_t k = 0; k < e.rank(); ++k)
      same = same && b.starts[k] == box.lo[k] && b.stops[k] == box.hi[k];
    if (same)
      return static_cast<const uint8_t *>(b.data);
  }
  ADD_FAILURE() << "no source for a copy of " << e.name;
  return nullptr;
}

// Tiny and odd piece sizes force every path of copyPiece: partial rows,
// pieces that start mid-row, whole rows through the odometer; each also
// with non-temporal stores (streamRun 1: every run of every copy, at any
// alignment; 64: only runs of whole cache lines or more).
TEST(Pieces, AnyPieceSizeCopiesTheSameBytes) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    RandomPlanBuilder builder(seed);
    TestPlan p =
        seed == 12 ? builder.buildLarge(301, 257) : builder.build(8, 9);
    std::unique_ptr<Plan> plan = parse(p);
    for (int64_t pieceBytes : {1, 3, 16, 40, 1000, 100000}) {
      for (int64_t streamRun : {0, 1, 64}) {
        for (SourceForm form : {SourceForm::Tensor, SourceForm::Box}) {
          Scenario scenario(p, builder.rng);
          Memory &memory = scenario.memory;
          const Update &u = scenario.update;
          Copies copies = copiesOf(*plan, memory, form);
          std::vector<Piece> pieces;
          std::vector<uint32_t> entryBegin;
          cutPieces(copies, pieceBytes, pieces, entryBegin);
          for (const Piece &piece : pieces) {
            const Copy &c = copies.copies[piece.copy];
            ASSERT_LE(piece.end - piece.begin, std::max(pieceBytes, c.run));
            copyPiece(c, copies.dimsOf(c), sourceOf(*plan, u, c, form),
                      piece.begin, piece.end, streamRun);
          }
          ASSERT_EQ(memory.storages, scenario.expected)
              << "seed " << seed << ", pieces of " << pieceBytes
              << ", streamRun " << streamRun;
        }
      }
    }
  }
}

/// Runs a device program on the CPU exactly as the kernel would: every
/// chunk of the batch, every thread of its block. `misalign` shifts every
/// source by that many bytes (the kernel must narrow its accesses).
void emulateDevice(const Plan &plan, Memory &memory, const Update &u,
                   SourceForm form, size_t misalign) {
  Copies copies = copiesOf(plan, memory, form);
  DeviceProgram program = buildDeviceProgram(copies);
  // Misaligned copies of the sources.
  std::vector<std::vector<uint8_t>> shifted;
  std::vector<DeviceActive> active;
  uint64_t chunks = 0;
  for (uint32_t k = 0; k < copies.copies.size(); ++k) {
    const Copy &c = copies.copies[k];
    const uint8_t *src = sourceOf(plan, u, c, form);
    const Entry &e = plan.entries[c.entry];
    size_t bytes = form == SourceForm::Tensor
                       ? size_t(e.numElements()) * loadplan_dtype_size(e.dtype)
                       : size_t(e.boxes[c.box - plan.firstBox[c.entry]].volume()) *
                             loadplan_dtype_size(e.dtype);
    shifted.emplace_back(bytes + misalign);
    std::memcpy(shifted.back().data() + misalign, src, bytes);
    active.push_back({chunks,
                      reinterpret_cast<uint64_t>(shifted.back().data() + misalign),
                      k, 0});
    chunks += program.chunks[k];
  }
  for (uint64_t chunk = 0; chunk < chunks; ++chunk)
    for (unsigned t = 0; t < kDeviceBlockThreads; ++t)
      runBlock(program.copies.data(), active.data(), uint32_t(active.size()),
               chunk, t, kDeviceBlockThreads);
}

TEST(DeviceCode, KernelArithmeticMatchesTheReference) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    RandomPlanBuilder builder(seed);
    TestPlan p = seed == 12 ? builder.buildLarge(301, 257) : builder.build(8, 9);
    std::unique_ptr<Plan> plan = parse(p);
    for (size_t misalign : {0, 1, 2, 4, 8})
      for (SourceForm form : {SourceForm::Tensor, SourceForm::Box}) {
        Scenario scenario(p, builder.rng);
        misalignedDeviceAccesses = 0;
        emulateDevice(*plan, scenario.memory, scenario.update, form, misalign);
        ASSERT_EQ(scenario.memory.storages, scenario.expected)
            << "seed " << seed << ", misaligned by " << misalign;
        ASSERT_EQ(misalignedDeviceAccesses, 0u)
            << "seed " << seed << ", misaligned by " << misalign;
      }
  }
}

TEST(Executor, ConvertingAndTransformingWrites) {
  std::mt19937_64 rng(7);
  for (const TestPlan &p : {convertingPlan(), transformingPlan()})
    for (uint32_t threads : {1u, 3u})
      for (SourceForm form : {SourceForm::Tensor, SourceForm::Box})
        checkAgainstReference(p, threads, form, rng);
}

/// Cuts the copies of `p` into pieces of each of `pieceSizes` bytes and
/// runs the pieces one by one: each must be whole granules of its copy (a
/// converted element, a transform's atom), and memory as the reference
/// leaves it.
void checkPiecesAreWholeGranules(const TestPlan &p, uint64_t seed,
                                 std::initializer_list<int64_t> pieceSizes) {
  std::unique_ptr<Plan> plan = parse(p);
  std::mt19937_64 rng(seed);
  for (int64_t pieceBytes : pieceSizes)
    for (SourceForm form : {SourceForm::Tensor, SourceForm::Box}) {
      Scenario scenario(p, rng);
      Copies copies = copiesOf(*plan, scenario.memory, form);
      std::vector<Piece> pieces;
      std::vector<uint32_t> entryBegin;
      cutPieces(copies, pieceBytes, pieces, entryBegin);
      for (const Piece &piece : pieces) {
        const Copy &c = copies.copies[piece.copy];
        ASSERT_EQ(piece.begin % c.granule(), 0);
        ASSERT_EQ(piece.end % c.granule(), 0);
        copyPiece(c, copies.dimsOf(c), sourceOf(*plan, scenario.update, c, form),
                  piece.begin, piece.end, 0);
      }
      ASSERT_EQ(scenario.memory.storages, scenario.expected)
          << "pieces of " << pieceBytes;
    }
}

TEST(Pieces, ConvertingCopiesAreCutBetweenElements) {
  checkPiecesAreWholeGranules(convertingPlan(), 8, {1, 3, 6, 1000});
}

/// Runs the device code on the CPU for `p`'s writes with sources shifted
/// by each of `misaligns` bytes: memory as the reference leaves it, and no
/// access the GPU would fault on.
void checkDeviceCode(const TestPlan &p, uint64_t seed,
                     std::initializer_list<size_t> misaligns) {
  std::unique_ptr<Plan> plan = parse(p);
  std::mt19937_64 rng(seed);
  for (size_t misalign : misaligns)
    for (SourceForm form : {SourceForm::Tensor, SourceForm::Box}) {
      Scenario scenario(p, rng);
      misalignedDeviceAccesses = 0;
      emulateDevice(*plan, scenario.memory, scenario.update, form, misalign);
      ASSERT_EQ(scenario.memory.storages, scenario.expected)
          << "misaligned by " << misalign;
      ASSERT_EQ(misalignedDeviceAccesses, 0u);
    }
}

TEST(DeviceCode, ConvertingWritesMatchTheReference) {
  checkDeviceCode(convertingPlan(), 9, {0, 1, 2});
}

// One atom, worked by hand from the layout: row 8b + c, word h of the
// source holds, in nibble 2r + s, the value that lands in nibble 4s + 2b +
// h of lane 4c + r.
TEST(Executor, TransformingWriteOfOneAtom) {
  TestPlan p;
  p.storageSizes = {4 * 32};
  p.addTarget({"m", "w", 0, 0, LOADPLAN_DTYPE_INT32, {32}, {1}});
  p.entries.push_back({"w", LOADPLAN_KIND_DIRECT, LOADPLAN_DTYPE_INT32,
                       {16, 2}, std::nullopt, {{{0, 0}, {16, 2}}},
                       {{0, 0, 0, {32}, {1}, 0, LOADPLAN_TRANSFORM_MARLIN_W4}}});
  std::mt19937 rng(3);
  uint32_t src[32]; // [16 rows][2 words]
  for (uint32_t &word : src)
    word = rng();
  PlanPtr plan = openPlan(p);
  ASSERT_TRUE(plan);
  Memory memory(p);
  BindingPtr binding = bindPlan(plan.get(), memory);
  int64_t shape[2] = {16, 2};
  loadplan_tensor_t t{"w", 1, src, LOADPLAN_DTYPE_INT32, 2, shape};
  ASSERT_TRUE(isOk(loadplan_apply_tensors(binding.get(), &t, 1, nullptr)));
  uint32_t out[32];
  std::memcpy(out, memory.storages[0].data(), sizeof out);
  for (uint32_t c = 0; c < 8; ++c)
    for (uint32_t r = 0; r < 4; ++r)
      for (uint32_t s2 = 0; s2 < 2; ++s2)
        for (uint32_t b = 0; b < 2; ++b)
          for (uint32_t h = 0; h < 2; ++h)
            EXPECT_EQ(out[4 * c + r] >> (4 * (4 * s2 + 2 * b + h)) & 0xF,
                      src[2 * (8 * b + c) + h] >> (4 * (2 * r + s2)) & 0xF)
                << "lane " << 4 * c + r << ", nibble " << 4 * s2 + 2 * b + h;
}

TEST(Pieces, TransformingCopiesAreCutBetweenAtoms) {
  TestPlan p = transformingPlan();
  std::unique_ptr<Plan> plan = parse(p);
  Memory memory(p);
  Copies copies = copiesOf(*plan, memory, SourceForm::Box);
  EXPECT_EQ(copies.copies[0].granule(), 128); // 32 words
  checkPiecesAreWholeGranules(p, 12, {1, 100, 128, 1000});
}

// int32 sources are 4-aligned wherever they come from.
TEST(DeviceCode, TransformingWritesMatchTheReference) {
  checkDeviceCode(transformingPlan(), 13, {0, 4});
}

TEST(DeviceCode, RefusesCopiesWithTooManyDims) {
  // A [2]*7 tensor written fully transposed: no two dims merge, 7 remain.
  TestPlan p;
  p.storageSizes = {128 * 4};
  std::vector<int64_t> shape(7, 2), stride;
  for (int k = 0; k < 7; ++k)
    stride.push_back(int64_t(1) << k);
  p.addTarget({"t", "w", 0, 0, LOADPLAN_DTYPE_FLOAT32, {128}, {1}});
  p.entries.push_back({"a", LOADPLAN_KIND_DIRECT, LOADPLAN_DTYPE_FLOAT32,
                       shape, std::nullopt,
                       {{std::vector<int64_t>(7, 0), shape}},
                       {{0, 0, 0, shape, stride}}});
  std::unique_ptr<Plan> plan = parse(p);
  Memory memory(p);
  Copies copies = copiesOf(*plan, memory, SourceForm::Tensor);
  ASSERT_EQ(copies.copies[0].numDims, 7u);
  try {
    buildDeviceProgram(copies);
    ADD_FAILURE() << "accepted a copy of 7 dims";
  } catch (const StatusError &e) {
    EXPECT_EQ(e.code, LOADPLAN_STATUS_UNAVAILABLE);
    EXPECT_NE(e.message.find("needs 7 dims after merging"), std::string::npos)
        << e.message;
  }
  // The CPU executor has no such limit.
  std::mt19937_64 rng(2);
  checkAgainstReference(p, 2, SourceForm::Tensor, rng);
}

TEST(DeviceCode, WidestAccessThatFits) {
  TestPlan p;
  p.storageSizes = {4096};
  p.addTarget({"t", "w", 0, 0, LOADPLAN_DTYPE_FLOAT32, {32, 32}, {32, 1}});
  // Rows of 16 floats at a 64-byte pitch: 16-byte accesses.
  p.entries.push_back({"a", LOADPLAN_KIND_DIRECT, LOADPLAN_DTYPE_FLOAT32,
                       {32, 16}, std::nullopt, {{{0, 0}, {32, 16}}},
                       {{0, 0, 0, {32, 16}, {32, 1}}}});
  // Rows of 3 floats: 4-byte accesses.
  p.entries.push_back({"b", LOADPLAN_KIND_DIRECT, LOADPLAN_DTYPE_FLOAT32,
                       {32, 3}, std::nullopt, {{{0, 0}, {32, 3}}},
                       {{0, 0, 16, {32, 3}, {32, 1}}}});
  std::unique_ptr<Plan> plan = parse(p);
  Memory memory(p);
  Copies copies = copiesOf(*plan, memory, SourceForm::Box);
  DeviceProgram program = buildDeviceProgram(copies);
  ASSERT_EQ(program.copies.size(), 2u);
  EXPECT_EQ(program.copies[0].unit, 16);
  EXPECT_EQ(program.copies[0].run, 64);
  EXPECT_EQ(program.copies[1].unit, 4);
  EXPECT_EQ(program.chunks[0], 1u);
}

} // namespace
