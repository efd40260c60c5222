//===- ConvertTest.cpp - Element conversions against torch's bits -*- C++ -*-===//
//
// The conversions of converting writes (loadplan/convert.h) against bit
// patterns torch 2.14's CPU Tensor.to() gives: NaN, infinities, subnormals,
// values past fp8's range, negative zero, ties (rounding to even). The
// Python tests compare every bf16/f16/fp8 pattern and a large f32 sample
// with torch itself; these pin the cases down without it. Then plans with
// converting writes: refused where no executor converts.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "loadplan/convert.h"

using namespace loadplan::testing;
using loadplan_convert::convertElement;
using loadplan_convert::isConvertible;

namespace {

constexpr uint32_t BF16 = LOADPLAN_DTYPE_BFLOAT16, F16 = LOADPLAN_DTYPE_FLOAT16,
                   F32 = LOADPLAN_DTYPE_FLOAT32,
                   E4M3 = LOADPLAN_DTYPE_FLOAT8_E4M3FN,
                   E5M2 = LOADPLAN_DTYPE_FLOAT8_E5M2;

uint32_t convert(uint32_t from, uint32_t to, uint32_t code) {
  uint8_t in[4] = {}, out[4] = {};
  std::memcpy(in, &code, 4);
  convertElement(out, to, in, from);
  uint32_t result = 0;
  std::memcpy(&result, out, 4);
  return result;
}

struct Case {
  uint32_t from, to, in, out;
  const char *what;
};

TEST(Convert, TorchBitPatterns) {
  const Case cases[] = {
      // float32 -> bfloat16: round to nearest, ties to even.
      {F32, BF16, 0x3f800000, 0x3f80, "1.0"},
      {F32, BF16, 0x3f808000, 0x3f80, "tie down to even"},
      {F32, BF16, 0x3f818000, 0x3f82, "tie up to even"},
      {F32, BF16, 0x3f808001, 0x3f81, "just past the tie"},
      {F32, BF16, 0x80000000, 0x8000, "-0"},
      {F32, BF16, 0x7f800000, 0x7f80, "inf"},
      {F32, BF16, 0xff800000, 0xff80, "-inf"},
      {F32, BF16, 0x7f7fffff, 0x7f80, "f32 max rounds to inf"},
      {F32, BF16, 0x00000001, 0x0000, "smallest f32 subnormal"},
      {F32, BF16, 0x00018000, 0x0002, "subnormal tie up to even"},
      {F32, BF16, 0x7fc00000, 0xffff, "NaN from f32"},
      {F32, BF16, 0xffc00001, 0xffff, "-NaN from f32"},
      // float32 -> float16.
      {F32, F16, 0x477fe000, 0x7bff, "65504, f16 max"},
      {F32, F16, 0x477ff000, 0x7c00, "65520 ties to inf"},
      {F32, F16, 0x477fefff, 0x7bff, "just below the tie"},
      {F32, F16, 0x33800000, 0x0001, "2^-24, smallest subnormal"},
      {F32, F16, 0x33000000, 0x0000, "2^-25 ties to 0"},
      {F32, F16, 0x33000001, 0x0001, "just past 2^-25"},
      {F32, F16, 0x80000000, 0x8000, "-0"},
      {F32, F16, 0xff800000, 0xfc00, "-inf"},
      {F32, F16, 0x7fc00000, 0x7e00, "NaN"},
      {F32, F16, 0xff812345, 0xfe09, "-NaN keeps its top payload, quiet"},
      // float32 -> float8_e4m3fn: no inf; saturates.
      {F32, E4M3, 0x43e00000, 0x7e, "448, max"},
      {F32, E4M3, 0x43e80000, 0x7e, "464 (tie toward NaN's code) saturates"},
      {F32, E4M3, 0x43f00000, 0x7e, "480 saturates"},
      {F32, E4M3, 0x49742400, 0x7e, "1e6 saturates"},
      {F32, E4M3, 0x7f800000, 0x7e, "inf saturates"},
      {F32, E4M3, 0xff800000, 0xfe, "-inf saturates"},
      {F32, E4M3, 0x7fc00000, 0x7f, "NaN"},
      {F32, E4M3, 0xffc00000, 0xff, "-NaN"},
      {F32, E4M3, 0x3b000000, 0x01, "2^-9, smallest subnormal"},
      {F32, E4M3, 0x3a800000, 0x00, "2^-10 ties to 0"},
      {F32, E4M3, 0x3b400000, 0x02, "1.5 * 2^-9 ties to 2 * 2^-9"},
      {F32, E4M3, 0x80000000, 0x80, "-0"},
      {F32, E4M3, 0x3f880000, 0x38, "1.0625 ties down to 1"},
      {F32, E4M3, 0x3f980000, 0x3a, "1.1875 ties up to 1.25"},
      // float32 -> float8_e5m2: has inf.
      {F32, E5M2, 0x47600000, 0x7b, "57344, max"},
      {F32, E5M2, 0x47700000, 0x7c, "61440 ties to inf"},
      {F32, E5M2, 0x47800000, 0x7c, "65536 is inf"},
      {F32, E5M2, 0x7f800000, 0x7c, "inf"},
      {F32, E5M2, 0xff800000, 0xfc, "-inf"},
      {F32, E5M2, 0x7fc00000, 0x7f, "NaN"},
      {F32, E5M2, 0x37800000, 0x01, "2^-16, smallest subnormal"},
      {F32, E5M2, 0x37000000, 0x00, "2^-17 ties to 0"},
      // Widening: exact; NaN as torch widens it.
      {BF16, F32, 0x7f81, 0x7f810000, "bf16 NaN keeps its bits"},
      {BF16, F32, 0x0001, 0x00010000, "bf16 subnormal"},
      // (float16 to float32 is no write's, but widens on the way to others.)
      {F16, F32, 0x0001, 0x33800000, "f16 subnormal"},
      {F16, F32, 0xfc00, 0xff800000, "-inf"},
      {F16, F32, 0x7c01, 0x7fc02000, "f16 NaN widens quiet"},
      {E4M3, F32, 0x7f, 0x7ff00000, "e4m3fn NaN"},
      {E4M3, F32, 0x01, 0x3b000000, "e4m3fn subnormal"},
      {E4M3, F32, 0x7e, 0x43e00000, "448"},
      {E5M2, F32, 0x7d, 0x7fe00000, "e5m2 NaN widens quiet"},
      {E5M2, F32, 0x7c, 0x7f800000, "e5m2 inf"},
      // Between the narrow types: through float32, rounding once.
      {BF16, F16, 0x7f81, 0x7e08, "bf16 NaN to f16"},
      {BF16, F16, 0x4780, 0x7c00, "65536 to inf"},
      {F16, BF16, 0x7c01, 0x7fc0, "NaN from f16"},
      {F16, BF16, 0x3c01, 0x3f80, "1 + 2^-10 rounds to 1"},
      {BF16, E4M3, 0x43e8, 0x7e, "464 saturates"},
      {BF16, E4M3, 0xff80, 0xfe, "-inf saturates"},
      {E5M2, E4M3, 0x7c, 0x7e, "inf saturates"},
      {E4M3, E5M2, 0x7f, 0x7f, "NaN"},
      {E4M3, BF16, 0xff, 0x7fc0, "-NaN from e4m3fn"},
      {E4M3, F16, 0xff, 0xff80, "-NaN from e4m3fn to f16"},
      {E5M2, F16, 0x7d, 0x7f00, "e5m2 NaN to f16"},
  };
  for (const Case &c : cases)
    EXPECT_EQ(convert(c.from, c.to, c.in), c.out)
        << loadplan_dtype_name(c.from) << " -> " << loadplan_dtype_name(c.to)
        << ": " << c.what << " (0x" << std::hex << c.in << ")";
}

TEST(Convert, WidenThenNarrowIsExact) {
  // Every bf16, f16 and fp8 value goes to f32 and back unchanged, NaN aside.
  for (uint32_t from : {BF16, F16, E4M3, E5M2}) {
    uint32_t n = loadplan_dtype_size(from) == 1 ? 256 : 65536;
    for (uint32_t x = 0; x < n; ++x) {
      uint32_t wide = convert(from, F32, x);
      if ((wide & 0x7fffffff) > 0x7f800000)
        continue;
      ASSERT_EQ(convert(F32, from, wide), x)
          << loadplan_dtype_name(from) << " 0x" << std::hex << x;
    }
  }
}

TEST(Convert, WhichPairs) {
  EXPECT_TRUE(isConvertible(BF16, F32));
  EXPECT_TRUE(isConvertible(F32, E4M3));
  EXPECT_TRUE(isConvertible(E5M2, E4M3));
  EXPECT_FALSE(isConvertible(BF16, BF16));
  // torch widens a float16 NaN to other bits in a tensor's tail.
  EXPECT_FALSE(isConvertible(F16, F32));
  EXPECT_TRUE(isConvertible(F16, BF16));
  EXPECT_TRUE(isConvertible(F32, F16));
  EXPECT_FALSE(isConvertible(BF16, LOADPLAN_DTYPE_FLOAT64));
  EXPECT_FALSE(isConvertible(LOADPLAN_DTYPE_INT8, F32));
  EXPECT_FALSE(isConvertible(F32, LOADPLAN_DTYPE_FLOAT8_E4M3FNUZ));
}

/// One bf16 [8] entry written into an f32 target, converting.
TestPlan convertingPlan(uint32_t convertTo) {
  TestPlan p;
  p.storageSizes = {64};
  uint32_t t = p.addTarget({"m", "bias", 0, 0, F32, {8}, {1}});
  p.entries.push_back({"bias", LOADPLAN_KIND_DIRECT, BF16, {8}, std::nullopt,
                       {{{0}, {8}}}, {{t, 0, 0, {8}, {1}, convertTo}}});
  return p;
}

TEST(ConvertingPlan, OpensAndReportsTheDtypeWritten) {
  PlanPtr plan = openPlan(convertingPlan(F32));
  ASSERT_TRUE(plan);
  loadplan_write_info_t w;
  ASSERT_TRUE(isOk(loadplan_plan_write(plan.get(), 0, 0, &w)));
  EXPECT_EQ(w.dtype, F32);
  loadplan_entry_info_t e;
  ASSERT_TRUE(isOk(loadplan_plan_entry(plan.get(), 0, &e)));
  EXPECT_EQ(e.dtype, BF16); // what is sent
}

TEST(ConvertingPlan, RefusesAConversionNoExecutorDoes) {
  for (uint32_t to : {BF16, uint32_t(LOADPLAN_DTYPE_FLOAT64),
                      uint32_t(LOADPLAN_DTYPE_INT32), 99u}) {
    std::vector<uint8_t> bytes = convertingPlan(to).bytes();
    loadplan_plan_t *raw = nullptr;
    EXPECT_TRUE(isError(loadplan_plan_open_bytes(bytes.data(), bytes.size(), &raw),
                        LOADPLAN_STATUS_INVALID_PLAN,
                        "write 0 of 'bias': converts bfloat16 to "))
        << to;
    EXPECT_EQ(raw, nullptr);
  }
}

TEST(ConvertingPlan, RegionBytesAreOfTheDtypeWritten) {
  // 8 f32 elements take 32 bytes: a 16-byte storage cannot hold them.
  TestPlan p = convertingPlan(F32);
  p.storageSizes = {16};
  p.targets[0].shape = {4};
  std::vector<uint8_t> bytes = p.bytes();
  loadplan_plan_t *raw = nullptr;
  EXPECT_TRUE(isError(loadplan_plan_open_bytes(bytes.data(), bytes.size(), &raw),
                      LOADPLAN_STATUS_INVALID_PLAN, "lies outside storage 0"));
}

TEST(ConvertingPlan, AppliesAndRefusesTheWrongDtype) {
  TestPlan p = convertingPlan(F32);
  PlanPtr plan = openPlan(p);
  Memory memory(p);
  BindingPtr binding = bindPlan(plan.get(), memory);
  // 1, -2, 0.5, NaN, inf, -0, 3, 2^-133 (a bf16 subnormal).
  uint16_t src[8] = {0x3f80, 0xc000, 0x3f00, 0x7fc1, 0x7f80, 0x8000, 0x4040, 0x0001};
  int64_t shape[1] = {8};
  loadplan_tensor_t t{"bias", 4, src, F32, 1, shape};
  std::vector<uint8_t> before = memory.storages[0];
  // Sent as the parameter's dtype: refused, nothing written.
  EXPECT_TRUE(isError(loadplan_apply_tensors(binding.get(), &t, 1, nullptr),
                      LOADPLAN_STATUS_INVALID_UPDATE, "bfloat16"));
  EXPECT_EQ(memory.storages[0], before);
  t.dtype = BF16;
  ASSERT_TRUE(isOk(loadplan_apply_tensors(binding.get(), &t, 1, nullptr)));
  uint32_t out[8];
  std::memcpy(out, memory.storages[0].data(), 32);
  const uint32_t expected[8] = {0x3f800000, 0xc0000000, 0x3f000000,
                                0x7fc10000, 0x7f800000, 0x80000000,
                                0x40400000, 0x00010000};
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(out[i], expected[i]) << i;
}

} // namespace
