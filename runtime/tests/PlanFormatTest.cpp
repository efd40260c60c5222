//===- PlanFormatTest.cpp - The format library's plan data ------*- C++ -*-===//
//
// The plan's data as the format library has it: the one box type, whose
// bounds live inline up to rank 3 and on the heap beyond; and the one
// description of the payload (PlanFields.h), which a plain reader here
// follows to read back what the encoder wrote from it.
//
//===----------------------------------------------------------------------===//

#include "loadplan/format/Box.h"
#include "loadplan/format/PlanFields.h"
#include "loadplan/format/PlanFile.h"

#include "gtest/gtest.h"

#include <utility>
#include <vector>

using loadplan_format::Box;
using loadplan_format::ByteReader;
using loadplan_format::Dims;
using loadplan_format::Field;
using loadplan_format::Plan;
using loadplan_format::PlanEntry;
using loadplan_format::PlanTarget;
using loadplan_format::PlanWrite;

namespace {

std::vector<int64_t> values(const Dims &d) {
  return std::vector<int64_t>(d.begin(), d.end());
}

TEST(PlanFormat, DimsGrowPastTheInlineOnes) {
  Dims d;
  EXPECT_TRUE(d.empty());
  std::vector<int64_t> want;
  for (int64_t v = 0; v < 70; ++v) { // past kInline, then doubling
    d.push_back(v * 3);
    want.push_back(v * 3);
    ASSERT_EQ(values(d), want);
  }
  d.resize(2);
  EXPECT_EQ(values(d), (std::vector<int64_t>{0, 3}));
  d.resize(4, 7);
  EXPECT_EQ(values(d), (std::vector<int64_t>{0, 3, 7, 7}));
  d.clear();
  EXPECT_TRUE(d.empty());
}

TEST(PlanFormat, DimsCopyAndMoveEitherWay) {
  for (size_t n : {size_t(0), size_t(3), size_t(Dims::kInline), size_t(9)}) {
    std::vector<int64_t> want(n);
    for (size_t k = 0; k < n; ++k)
      want[k] = int64_t(k) - 2;
    Dims a(want);
    Dims copied(a);
    EXPECT_EQ(values(copied), want);
    EXPECT_EQ(copied, a);
    Dims moved(std::move(copied));
    EXPECT_EQ(values(moved), want);
    EXPECT_TRUE(copied.empty());
    // Assigned over values of either kind.
    Dims small{1, 2}, large(std::vector<int64_t>(12, 5));
    small = a;
    large = a;
    EXPECT_EQ(small, a);
    EXPECT_EQ(large, a);
    small = std::move(moved);
    EXPECT_EQ(values(small), want);
    large = Dims(want.data(), want.data() + want.size());
    EXPECT_EQ(values(large), want);
    a = a;
    EXPECT_EQ(values(a), want);
  }
  EXPECT_NE(Dims({1, 2}), Dims({1, 2, 3}));
  EXPECT_NE(Dims({1, 2}), Dims({1, 3}));
}

TEST(PlanFormat, BoxExtentsAndVolume) {
  Box b{{0, 4, 2}, {3, 8, 2}};
  EXPECT_EQ(b.rank(), 3u);
  EXPECT_EQ(b.extents(), (std::vector<int64_t>{3, 4, 0}));
  EXPECT_EQ(b.volume(), 0);
  b.hi[2] = 5;
  EXPECT_EQ(b.volume(), 36);
  EXPECT_EQ(b, (Box{{0, 4, 2}, {3, 8, 5}}));
  EXPECT_EQ(Box{}.volume(), 1); // a 0-d tensor's one element
  // A plan holds tens of thousands: each takes no more than this.
  EXPECT_EQ(sizeof(Box), 64u);
}

/// Reads a payload as PlanFields.h describes it, checking nothing but the
/// bytes' bounds (ByteReader's).
struct FieldReader : loadplan_format::PlanReading<FieldReader, ByteReader> {
  explicit FieldReader(const std::string &payload)
      : PlanReading(reinterpret_cast<const uint8_t *>(payload.data()),
                    payload.size()) {}
};

Plan readBack(const std::string &payload) {
  FieldReader reader(payload);
  Plan plan;
  loadplan_format::visitPlan(reader, plan);
  EXPECT_TRUE(reader.r.ok());
  EXPECT_EQ(reader.r.left(), 0u);
  return plan;
}

void expectSameWrite(const PlanWrite &a, const PlanWrite &b) {
  EXPECT_EQ(a.target, b.target);
  EXPECT_EQ(a.box, b.box);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.stride, b.stride);
  EXPECT_EQ(a.convertTo, b.convertTo);
  EXPECT_EQ(a.transform, b.transform);
}

TEST(PlanFields, ReadBackWhatTheEncoderWrote) {
  constexpr uint32_t bf16 = LOADPLAN_DTYPE_BFLOAT16;
  Plan plan;
  plan.storageSizes = {64, uint64_t(1) << 40};
  plan.targets = {{"layers.0.mlp", "experts.w", 0, 0, bf16, {2, 16}, {16, 1}},
                  {"", "ünï", 1, 8, LOADPLAN_DTYPE_FLOAT32, {}, {}}};
  PlanEntry direct{"e.0", LOADPLAN_KIND_DIRECT, bf16, {4, 2}, std::nullopt,
                   {{{0, 0}, {4, 2}}, {{2, 0}, {4, 1}}},
                   {{0, 0, 0, {8}, {1}},
                    {0, 1, 8, {2}, {1}, LOADPLAN_DTYPE_FLOAT32},
                    {0, 0, 0, {8}, {1}, 0, LOADPLAN_TRANSFORM_MARLIN_W4}}};
  PlanEntry fallback{"scale", LOADPLAN_KIND_FALLBACK, LOADPLAN_DTYPE_FLOAT32,
                     {}, "reads a value", {{}}, {}};
  PlanEntry unneeded{"far", LOADPLAN_KIND_UNNEEDED, bf16, {1, 2, 3, 4, 5, 6},
                     std::nullopt, {}, {}};
  plan.entries = {direct, fallback, unneeded};
  // A member of e.0, 32 bytes on, as the second name.
  plan.members = {{"e.1", 0, 1, 32}};

  Plan back = readBack(loadplan_format::encodePlanPayload(plan));
  EXPECT_EQ(back.storageSizes, plan.storageSizes);
  ASSERT_EQ(back.targets.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const PlanTarget &a = back.targets[i], &b = plan.targets[i];
    EXPECT_EQ(a.module, b.module);
    EXPECT_EQ(a.tensor, b.tensor);
    EXPECT_EQ(a.storage, b.storage);
    EXPECT_EQ(a.byteOffset, b.byteOffset);
    EXPECT_EQ(a.dtype, b.dtype);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.stride, b.stride);
  }
  // The member is an entry of its own, its writes moved by 16 elements.
  ASSERT_EQ(back.entries.size(), 4u);
  EXPECT_TRUE(back.members.empty());
  const char *names[] = {"e.0", "e.1", "scale", "far"};
  const PlanEntry *want[] = {&direct, &direct, &fallback, &unneeded};
  for (size_t i = 0; i < 4; ++i) {
    const PlanEntry &a = back.entries[i], &b = *want[i];
    EXPECT_EQ(a.name, names[i]);
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.dtype, b.dtype);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.reason, b.reason);
    EXPECT_EQ(a.boxes, b.boxes);
    ASSERT_EQ(a.writes.size(), b.writes.size());
    for (size_t w = 0; w < a.writes.size(); ++w) {
      PlanWrite moved = b.writes[w];
      if (i == 1)
        moved.offset = loadplan_format::movedOffset(b.dtype, moved, 32);
      expectSameWrite(a.writes[w], moved);
    }
  }
  EXPECT_EQ(back.entries[1].writes[0].offset, 16);
  EXPECT_EQ(back.entries[1].writes[1].offset, 16); // 32 bytes of float32
  // What was read back encodes to the same bytes.
  EXPECT_EQ(loadplan_format::encodePlanPayload(back),
            loadplan_format::encodePlanPayload(plan));
}

// The least sizes a reader weighs counts with are what the encoder writes
// for an item with every string, rank and count zero.
TEST(PlanFields, LeastBytesAreTheEncoders) {
  auto size = [](const Plan &p) {
    return loadplan_format::encodePlanPayload(p).size();
  };
  Plan empty;
  size_t base = size(empty);
  EXPECT_EQ(base, 12u); // three counts
  Plan p;
  p.storageSizes = {0};
  EXPECT_EQ(size(p) - base, loadplan_format::kStorageBytes);
  p = Plan();
  p.targets.emplace_back();
  EXPECT_EQ(size(p) - base, loadplan_format::kTargetBytes);
  p = Plan();
  p.entries.emplace_back();
  EXPECT_EQ(size(p) - base, loadplan_format::kEntryBytes);
  size_t withEntry = size(p);
  p.entries[0].writes.emplace_back();
  EXPECT_EQ(size(p) - withEntry, loadplan_format::kWriteBytes);
  p.entries[0].writes.clear();
  p.entries[0].shape = {7};
  size_t withRank = size(p);
  p.entries[0].boxes.push_back({{0}, {7}});
  EXPECT_EQ(size(p) - withRank, loadplan_format::kBoxDimBytes);
}

} // namespace
