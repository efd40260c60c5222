//===- PlanJsonTest.cpp - The plan's JSON as llvm::json wrote it -*- C++ -*-===//
//
// The plan's JSON is the runtime format library's (loadplan/format/
// PlanJson.h), which has no LLVM; the compiler printed it with llvm::json
// before, and every byte must stay as it was. The structure is the lit
// tests' (test/Transforms/emit-plan.mlir); here are the strings, which
// llvm::json escapes and repairs in its own way, chosen and random (quotes,
// control characters, UTF-8, bytes that are not UTF-8), and integers at
// their limits.
//
//===----------------------------------------------------------------------===//

#include "loadplan/format/PlanJson.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <cstdint>
#include <limits>
#include <random>
#include <string>

namespace {

/// `text` as llvm::json writes a string value or an attribute key: bytes
/// that are not UTF-8 repaired first (without the assertion a build with
/// assertions would stop at).
std::string llvmJsonString(const std::string &text) {
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::json::OStream(os).value(llvm::json::isUTF8(text)
                                    ? text
                                    : llvm::json::fixUTF8(text));
  return out;
}

std::string formatJsonString(const std::string &text) {
  std::string out;
  loadplan_format::appendJsonString(out, text);
  return out;
}

TEST(PlanJson, ChosenStringsAsLlvmJsonWritesThem) {
  const char *texts[] = {
      "",
      "model.layers.0.self_attn.qkv_proj.weight",
      "q\"uo\\te",
      "tab\tnl\ncr\rnul",
      "\x01\x1f\x7f",
      "ünï€😀",
      "\xff",
      "bad\xc3(",
      "\xe0\x80\x80",      // overlong
      "\xed\xa0\x80",      // a surrogate
      "\xf4\x90\x80\x80",  // past U+10FFFF
      "\xf0\x9f\x98",      // cut short
      "\xc0\xaf\xc1\xbf",  // overlong two-byte forms
      "\xf5\x80\x80\x80",  // no such lead byte
      "\xe1\x80",          // cut short
  };
  for (const char *text : texts)
    EXPECT_EQ(formatJsonString(text), llvmJsonString(text)) << text;
  std::string withNul("a\0b", 3);
  EXPECT_EQ(formatJsonString(withNul), llvmJsonString(withNul));
}

TEST(PlanJson, RandomBytesAsLlvmJsonWritesThem) {
  // Bytes where UTF-8's rules change, so that every path is taken often.
  const uint8_t pool[] = {0x00, 0x09, 0x0a, 0x0d, 0x1f, 0x20, '"',  '\\',
                          'a',  0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf,
                          0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec, 0xed,
                          0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xff};
  std::mt19937_64 rng(42);
  for (int i = 0; i < 50000; ++i) {
    std::string text(rng() % 12, '\0');
    for (char &c : text)
      c = char(pool[rng() % sizeof pool]);
    ASSERT_EQ(formatJsonString(text), llvmJsonString(text));
  }
}

TEST(PlanJson, IntegersAtTheirLimits) {
  loadplan_format::Plan plan;
  plan.storageSizes = {1};
  loadplan_format::PlanTarget t;
  t.byteOffset = std::numeric_limits<uint64_t>::max();
  t.shape = {std::numeric_limits<int64_t>::min()};
  t.stride = {std::numeric_limits<int64_t>::max()};
  plan.targets.push_back(t);
  std::string json = loadplan_format::planJson(plan);
  auto llvmJson = [](const llvm::json::Value &v) {
    std::string out;
    llvm::raw_string_ostream os(out);
    llvm::json::OStream(os).value(v);
    return out;
  };
  EXPECT_NE(json.find("\"byte_offset\": " +
                      llvmJson(std::numeric_limits<uint64_t>::max())),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(llvmJson(std::numeric_limits<int64_t>::min())),
            std::string::npos);
  EXPECT_NE(json.find(llvmJson(std::numeric_limits<int64_t>::max())),
            std::string::npos);
  // An empty array and object print as llvm::json prints them.
  EXPECT_NE(json.find("\"entries\": {}"), std::string::npos) << json;
}

} // namespace
