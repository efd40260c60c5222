//===- BadInputTest.cpp - The runtime's bad-input tables --------*- C++ -*-===//
//
// Two tables, one row per malformed input and the exact status it gets:
// plan bytes and files the reader must refuse, and binds and update batches
// a bound plan must refuse. Every row runs next to live memory bound to the
// sample plan and filled with a pattern, and checks that not one byte of it
// changed, and that the binding still applies a good update afterwards.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <functional>
#include <unistd.h>

using namespace loadplan::testing;

namespace {

/// The sample plan with a second box of "q" written to a storage of its
/// own, so that a box batch can lack a box.
TestPlan tablePlan() {
  TestPlan p = samplePlan();
  p.storageSizes.push_back(8 * 2);
  uint32_t t = p.addTarget(
      {"layers.0.extra", "weight", 4, 0, LOADPLAN_DTYPE_BFLOAT16, {8}, {1}});
  p.entries[0].boxes.push_back({{0, 0}, {1, 8}});
  p.entries[0].writes.push_back({t, 1, 0, {1, 8}, {8, 1}});
  return p;
}

/// Live memory bound to the table plan: every byte a function of its place,
/// so that a stray write of any byte shows.
struct Live {
  Live() {
    for (size_t s = 0; s < memory.storages.size(); ++s)
      for (size_t i = 0; i < memory.storages[s].size(); ++i)
        memory.storages[s][i] = uint8_t(0xA5 ^ (i * 7 + s * 31));
    pattern = memory.storages;
    plan = openPlan(sample);
    binding = bindPlan(plan.get(), memory);
    update = makeUpdate(sample, rng);
  }

  /// Passes when `status` is `code` with exactly `message` (or a message
  /// that starts with it: `prefixOnly`, for messages with addresses),
  /// memory is the pattern still, and a good update then writes what the
  /// reference writes.
  ::testing::AssertionResult refused(loadplan_status_t raw,
                                     loadplan_status_code_t code,
                                     const std::string &message,
                                     bool prefixOnly = false) {
    Status status(raw);
    if (!status)
      return ::testing::AssertionFailure()
             << "succeeded, expected " << loadplan_status_code_name(code);
    loadplan_status_code_t got = loadplan_status_code(status.get());
    std::string text = loadplan_status_message(status.get());
    if (got != code ||
        (prefixOnly ? text.rfind(message, 0) != 0 : text != message))
      return ::testing::AssertionFailure()
             << "got " << loadplan_status_code_name(got) << ": \"" << text
             << "\"\nexpected " << loadplan_status_code_name(code) << ": \""
             << message << "\"";
    if (memory.storages != pattern)
      return ::testing::AssertionFailure() << "live memory changed";
    if (Status again{loadplan_apply_tensors(binding.get(),
                                            update.tensorArgs.data(),
                                            update.tensorArgs.size(), nullptr)})
      return ::testing::AssertionFailure()
             << "a good update failed after the refusal: "
             << loadplan_status_message(again.get());
    if (memory.storages != referenceAfter(sample, pattern, update))
      return ::testing::AssertionFailure()
             << "a good update after the refusal wrote the wrong bytes";
    return ::testing::AssertionSuccess();
  }

  TestPlan sample = tablePlan();
  Memory memory{sample};
  std::vector<std::vector<uint8_t>> pattern;
  PlanPtr plan;
  BindingPtr binding;
  std::mt19937_64 rng{5};
  Update update;
};

//===----------------------------------------------------------------------===//
// The plan reader
//===----------------------------------------------------------------------===//

struct PlanCase {
  std::string name;
  /// Opens the malformed input.
  std::function<loadplan_status_t(loadplan_plan_t **)> open;
  loadplan_status_code_t code;
  std::string message;
};

std::function<loadplan_status_t(loadplan_plan_t **)>
openBytes(std::function<std::vector<uint8_t>()> make) {
  return [make](loadplan_plan_t **out) {
    std::vector<uint8_t> bytes = make();
    return loadplan_plan_open_bytes(bytes.data(), bytes.size(), out);
  };
}

/// The table plan's bytes, edited.
std::function<loadplan_status_t(loadplan_plan_t **)>
bytesOf(std::function<void(std::vector<uint8_t> &)> edit) {
  return openBytes([edit] {
    std::vector<uint8_t> bytes = tablePlan().bytes();
    edit(bytes);
    return bytes;
  });
}

/// The table plan's payload, edited, behind a header that matches it.
std::function<loadplan_status_t(loadplan_plan_t **)>
payloadOf(std::function<void(std::vector<uint8_t> &)> edit) {
  return openBytes([edit] {
    TestPlan p = tablePlan();
    std::vector<uint8_t> payload = p.payload();
    edit(payload);
    return TestPlan::frame(payload, p.fingerprint());
  });
}

/// The table plan, edited (the header follows: checksum and fingerprint).
std::function<loadplan_status_t(loadplan_plan_t **)>
planOf(std::function<void(TestPlan &)> edit) {
  return openBytes([edit] {
    TestPlan p = tablePlan();
    edit(p);
    return p.bytes();
  });
}

/// A file of `make`'s bytes (no file when `make` is empty), opened by path.
std::function<loadplan_status_t(loadplan_plan_t **)>
fileOf(std::function<std::vector<uint8_t>()> make, const std::string &path) {
  return [make, path](loadplan_plan_t **out) {
    std::remove(path.c_str());
    if (make) {
      std::vector<uint8_t> bytes = make();
      FILE *f = std::fopen(path.c_str(), "wb");
      std::fwrite(bytes.data(), 1, bytes.size(), f);
      std::fclose(f);
    }
    loadplan_status_t status = loadplan_plan_open_file(path.c_str(), out);
    std::remove(path.c_str());
    return status;
  };
}

std::string tempPath(const char *name) {
  return ::testing::TempDir() + "loadplan_bad_" + std::to_string(getpid()) +
         "_" + name;
}

constexpr auto kInvalidPlan = LOADPLAN_STATUS_INVALID_PLAN;

std::vector<PlanCase> planCases() {
  const std::string file = tempPath("plan"), dir = ::testing::TempDir();
  return {
      // The header.
      {"Empty", bytesOf([](auto &b) { b.clear(); }), kInvalidPlan,
       "plan is truncated: 0 bytes, but the header alone takes 40"},
      {"TruncatedHeader", bytesOf([](auto &b) { b.resize(39); }), kInvalidPlan,
       "plan is truncated: 39 bytes, but the header alone takes 40"},
      {"BadMagic", bytesOf([](auto &b) { b[7] = 'X'; }), kInvalidPlan,
       "not a plan file: the magic is not \"LOADPLAN\""},
      {"BadVersion",
       bytesOf([](auto &b) { storeU32(b.data() + FileHeader::kVersionAt, 5); }),
       kInvalidPlan,
       "plan format version 5 is not supported (this runtime reads version "
       "4)"},
      {"OldVersion",
       bytesOf([](auto &b) { storeU32(b.data() + FileHeader::kVersionAt, 2); }),
       kInvalidPlan,
       "plan format version 2 is not supported (this runtime reads version "
       "4); the plan was written by an older compiler: compile it again"},
      {"BadHeaderSize", bytesOf([](auto &b) {
         storeU32(b.data() + FileHeader::kHeaderSizeAt, 32);
       }),
       kInvalidPlan, "header size is 32, not 40"},
      {"TruncatedPayload", bytesOf([](auto &b) { b.pop_back(); }), kInvalidPlan,
       "plan is truncated: the header announces a payload of 1367 bytes but "
       "1366 follow"},
      {"BytesAfterPayload", bytesOf([](auto &b) { b.push_back(0); }),
       kInvalidPlan, "1 bytes follow the payload the header announces"},
      {"ChecksumMismatch", bytesOf([](auto &b) { b[60] ^= 1; }), kInvalidPlan,
       "checksum mismatch: the header says 0x0f0af5a8f89f4560 but the payload "
       "hashes to 0xed22cf9ee1788958 (the file is damaged)"},
      {"FingerprintNotOfTargets",
       bytesOf([](auto &b) { b[FileHeader::kFingerprintAt] ^= 1; }),
       kInvalidPlan,
       "the header's fingerprint 0x970b7991387f1d20 is not that of the plan's "
       "own targets (0x970b7991387f1d21)"},
      // Counts and sizes.
      {"PayloadCutBeforeItsTargets", payloadOf([](auto &b) { b.resize(100); }),
       kInvalidPlan,
       "plan is truncated: 6 targets need at least 168 bytes but 52 are left "
       "at byte 88"},
      {"PayloadCutInAnEntry", payloadOf([](auto &b) { b.resize(716); }),
       kInvalidPlan,
       "plan is truncated: entry 1 dtype at byte 756 needs 4 bytes but 0 are "
       "left"},
      {"HugeStorageCount", payloadOf([](auto &b) { storeU32(b.data(), ~0u); }),
       kInvalidPlan,
       "plan is truncated: 4294967295 storages need at least 34359738360 "
       "bytes but 1363 are left at byte 44"},
      {"StorageOf2To63Bytes",
       planOf([](TestPlan &p) { p.storageSizes[1] = uint64_t(1) << 63; }),
       kInvalidPlan, "storage 1 has 9223372036854775808 bytes, more than 2^63"},
      {"BytesAfterTheLastEntry", payloadOf([](auto &b) { b.push_back(0); }),
       kInvalidPlan,
       "1 bytes after the last entry at byte 1407 are not part of the format"},
      // Targets.
      {"TargetStorageOutOfRange",
       planOf([](TestPlan &p) { p.targets[1].storage = 9; }), kInvalidPlan,
       "target 1 ('layers.0.attn.o.weight'): storage index 9 is out of range "
       "(the plan has 5 storages)"},
      {"TargetUnknownDtype",
       planOf([](TestPlan &p) { p.targets[0].dtype = 99; }), kInvalidPlan,
       "target 0 ('layers.0.attn.qkv.weight'): unknown dtype code 99"},
      {"TargetNegativeStride", planOf([](TestPlan &p) {
         p.targets[2].stride = {-4, 1};
       }),
       kInvalidPlan,
       "target 2 ('layers.0.mlp.w.weight'): negative size or stride (shape "
       "[6, 4], stride [-4, 1])"},
      {"TargetPastItsStorage",
       planOf([](TestPlan &p) { p.targets[4].byteOffset = 40; }), kInvalidPlan,
       "target 4 ('layers.0.norm2.weight'): its bytes (byte offset 40, shape "
       "[8], stride [1]) do not fit in storage 3 of 48 bytes"},
      {"TargetRankTooLarge", planOf([](TestPlan &p) {
         p.targets[3].shape.assign(65, 1);
         p.targets[3].stride.assign(65, 1);
       }),
       kInvalidPlan,
       "target 3 ('layers.0.norm.weight'): rank 65 is more than 64"},
      // Entries.
      {"EntryNameWithNul",
       planOf([](TestPlan &p) { p.entries[6].name = std::string("a\0b", 3); }),
       kInvalidPlan, "entry 6 ('a\\x00b'): the name holds a NUL byte"},
      {"EntryUnknownKind", planOf([](TestPlan &p) { p.entries[1].kind = 3; }),
       kInvalidPlan, "entry 1 ('k'): unknown kind 3"},
      {"EntryUnknownDtype",
       planOf([](TestPlan &p) { p.entries[2].dtype = LOADPLAN_DTYPE_COUNT_; }),
       kInvalidPlan, "entry 2 ('o'): unknown dtype code 21"},
      {"EntryNegativeShape", planOf([](TestPlan &p) {
         p.entries[6].shape = {4, -4};
       }),
       kInvalidPlan,
       "entry 6 ('other_rank'): shape [4, -4] is negative or has more than "
       "2^63 bytes"},
      {"EntryOf2To63Bytes", planOf([](TestPlan &p) {
         p.entries[6].shape = {int64_t(1) << 31, int64_t(1) << 31};
       }),
       kInvalidPlan,
       "entry 6 ('other_rank'): shape [2147483648, 2147483648] is negative or "
       "has more than 2^63 bytes"},
      {"EntryRankTooLarge",
       planOf([](TestPlan &p) { p.entries[6].shape.assign(65, 1); }),
       kInvalidPlan, "entry 6 ('other_rank'): rank 65 is more than 64"},
      {"BadHasReason", payloadOf([](auto &b) {
         // The has_reason byte of "other_rank", the last entry: after its
         // name, kind, dtype, rank and shape.
         TestPlan p = tablePlan();
         p.entries.pop_back();
         b[p.payload().size() + 4 + 10 + 1 + 4 + 4 + 16] = 2;
       }),
       kInvalidPlan, "entry 6 ('other_rank'): has_reason is 2, not 0 or 1"},
      {"ZeroDimTensorWithTwoBoxes", planOf([](TestPlan &p) {
         p.entries[5].shape = {};
         p.entries[5].boxes = {{}, {}};
       }),
       kInvalidPlan, "entry 5 ('scale'): a 0-d tensor cannot have 2 boxes"},
      {"BoxOutsideTheTensor",
       planOf([](TestPlan &p) { p.entries[0].boxes[0].hi[0] = 17; }),
       kInvalidPlan,
       "entry 0 ('q'): box 0 dim 0 is [8, 17), not inside [0, 16)"},
      {"BoxListedTwice", planOf([](TestPlan &p) {
         p.entries[4].boxes.push_back(p.entries[4].boxes[0]);
         p.entries[4].writes[1].box = 1;
       }),
       kInvalidPlan, "entry 'norm' lists box [(0, 8)] twice (boxes 0 and 1)"},
      {"NameTwice", planOf([](TestPlan &p) { p.entries[6].name = "q"; }),
       kInvalidPlan, "entry 'q' appears twice (entries 0 and 6)"},
      {"DirectWithoutWrites",
       planOf([](TestPlan &p) { p.entries[3].writes.clear(); }), kInvalidPlan,
       "entry 'w' is direct but has no writes"},
      {"FallbackWithWrites", planOf([](TestPlan &p) {
         p.entries[5].writes.push_back({2, 0, 0, {1}, {1}});
       }),
       kInvalidPlan, "entry 'scale' is a fallback but has 1 writes"},
      {"UnneededWithWrites", planOf([](TestPlan &p) {
         p.entries[6].boxes = {{{0, 0}, {1, 1}}};
         p.entries[6].writes.push_back({2, 0, 0, {1}, {1}});
       }),
       kInvalidPlan, "entry 'other_rank' is unneeded but has 1 writes"},
      {"BoxWrittenNowhere",
       planOf([](TestPlan &p) { p.entries[0].writes.pop_back(); }),
       kInvalidPlan, "entry 'q': box 1 [(0, 1), (0, 8)] is written nowhere"},
      // Writes.
      {"WriteTargetOutOfRange",
       planOf([](TestPlan &p) { p.entries[2].writes[0].target = 6; }),
       kInvalidPlan,
       "write 0 of 'o': target index 6 is out of range (the plan has 6 "
       "targets)"},
      {"WriteBoxOutOfRange",
       planOf([](TestPlan &p) { p.entries[4].writes[1].box = 1; }),
       kInvalidPlan,
       "write 1 of 'norm': box index 1 is out of range ('norm' has 1 boxes)"},
      {"RegionRankTooLarge", planOf([](TestPlan &p) {
         p.entries[4].writes[0].shape.assign(65, 1);
         p.entries[4].writes[0].stride.assign(65, 1);
       }),
       kInvalidPlan,
       "entry 4 ('norm') write 0: region rank 65 is more than 64"},
      {"RegionNegativeStride", planOf([](TestPlan &p) {
         p.entries[2].writes[0].stride = {4, -1};
       }),
       kInvalidPlan,
       "write 0 of 'o': negative size or stride in its region (shape [8, 4], "
       "stride [4, -1])"},
      {"RegionOfAnotherSize", planOf([](TestPlan &p) {
         p.entries[2].writes[0].shape = {8, 3};
       }),
       kInvalidPlan,
       "write 0 of 'o': region shape [8, 3] does not hold the 32 elements of "
       "box [(0, 8), (4, 8)]"},
      {"RegionNotASplitOfItsBox", planOf([](TestPlan &p) {
         p.entries[2].writes[0].shape = {4, 8};
         p.entries[2].writes[0].stride = {8, 1};
       }),
       kInvalidPlan,
       "write 0 of 'o': region shape [4, 8] is not the box shape [8, 4] with "
       "dims split"},
      {"RegionPastItsStorage",
       planOf([](TestPlan &p) { p.entries[1].writes[0].offset = 72; }),
       kInvalidPlan,
       "write 0 of 'k': region (offset 72, shape [4, 8], stride [8, 1]) lies "
       "outside storage 0 of 192 bytes (target 0 "
       "('layers.0.attn.qkv.weight') starts at byte 0)"},
      {"RegionBeforeItsStorage",
       planOf([](TestPlan &p) { p.entries[1].writes[0].offset = -1; }),
       kInvalidPlan,
       "write 0 of 'k': region (offset -1, shape [4, 8], stride [8, 1]) lies "
       "outside storage 0 of 192 bytes (target 0 "
       "('layers.0.attn.qkv.weight') starts at byte 0)"},
      {"RegionOffsetOverflows", planOf([](TestPlan &p) {
         p.entries[1].writes[0].offset = INT64_MAX / 2;
       }),
       kInvalidPlan,
       "write 0 of 'k': region (offset 4611686018427387903, shape [4, 8], "
       "stride [8, 1]) lies outside storage 0 of 192 bytes (target 0 "
       "('layers.0.attn.qkv.weight') starts at byte 0)"},
      {"RegionWritesAByteTwice", planOf([](TestPlan &p) {
         p.entries[2].writes[0].stride = {2, 1};
       }),
       kInvalidPlan,
       "write 0 of 'o': region dims overlap or interleave (shape [8, 4], "
       "stride [2, 1]), so it would write some bytes twice or out of order"},
      {"OverlappingDestinations",
       planOf([](TestPlan &p) { p.entries[1].writes[0].offset = 56; }),
       kInvalidPlan,
       "destinations overlap: write 0 of 'k' and write 0 of 'q' both write "
       "byte 112 of storage 0"},
      {"OverlappingTargets",
       planOf([](TestPlan &p) { p.targets[4].byteOffset = 14; }), kInvalidPlan,
       "destinations overlap: write 1 of 'norm' and write 0 of 'norm' both "
       "write byte 14 of storage 3"},
      // Arguments and files.
      {"NullData",
       [](loadplan_plan_t **out) {
         return loadplan_plan_open_bytes(nullptr, 40, out);
       },
       LOADPLAN_STATUS_INVALID_ARGUMENT, "data is NULL"},
      {"NullOut",
       [](loadplan_plan_t **) {
         std::vector<uint8_t> bytes = tablePlan().bytes();
         return loadplan_plan_open_bytes(bytes.data(), bytes.size(), nullptr);
       },
       LOADPLAN_STATUS_INVALID_ARGUMENT, "out_plan is NULL"},
      {"NullPath",
       [](loadplan_plan_t **out) {
         return loadplan_plan_open_file(nullptr, out);
       },
       LOADPLAN_STATUS_INVALID_ARGUMENT, "path is NULL"},
      {"MissingFile", fileOf(nullptr, file), LOADPLAN_STATUS_NOT_FOUND,
       "cannot open plan file '" + file + "': No such file or directory"},
      {"DirectoryForAFile",
       [dir](loadplan_plan_t **out) {
         return loadplan_plan_open_file(dir.c_str(), out);
       },
       LOADPLAN_STATUS_IO_ERROR, "cannot read plan file '" + dir + "'"},
      {"DamagedFile",
       fileOf(
           [] {
             std::vector<uint8_t> bytes = tablePlan().bytes();
             bytes[0] = 'l';
             return bytes;
           },
           file),
       kInvalidPlan, file + ": not a plan file: the magic is not \"LOADPLAN\""},
  };
}

void PrintTo(const PlanCase &c, std::ostream *os) { *os << c.name; }

class PlanReader : public ::testing::TestWithParam<PlanCase> {};

TEST_P(PlanReader, RefusesWithItsStatusAndWritesNothing) {
  const PlanCase &c = GetParam();
  Live live;
  loadplan_plan_t *raw = nullptr;
  loadplan_status_t status = c.open(&raw);
  PlanPtr opened(raw);
  EXPECT_TRUE(live.refused(status, c.code, c.message));
  EXPECT_EQ(opened, nullptr) << "a refused open gave a plan handle";
}

INSTANTIATE_TEST_SUITE_P(BadInput, PlanReader, ::testing::ValuesIn(planCases()),
                         [](const ::testing::TestParamInfo<PlanCase> &info) {
                           return info.param.name;
                         });

//===----------------------------------------------------------------------===//
// Binding and applying
//===----------------------------------------------------------------------===//

struct UpdateCase {
  std::string name;
  std::function<loadplan_status_t(Live &)> call;
  loadplan_status_code_t code;
  std::string message;
  bool prefixOnly = false;
};

/// A bind of the live memory's layouts as `edit` leaves them.
std::function<loadplan_status_t(Live &)>
bindWith(std::function<void(Live &, std::vector<loadplan_target_layout_t> &,
                            loadplan_bind_options_t &)>
             edit) {
  return [edit](Live &live) {
    std::vector<loadplan_target_layout_t> layouts = live.memory.layouts();
    loadplan_bind_options_t options;
    loadplan_bind_options_init(&options);
    options.num_threads = 1;
    edit(live, layouts, options);
    loadplan_binding_t *raw = nullptr;
    loadplan_status_t status = loadplan_bind(live.plan.get(), layouts.data(),
                                             layouts.size(), &options, &raw);
    BindingPtr drop(raw);
    if (raw)
      ADD_FAILURE() << "a refused bind gave a binding";
    return status;
  };
}

/// The good full-tensor batch, edited, applied.
std::function<loadplan_status_t(Live &)>
tensorsWith(std::function<void(std::vector<loadplan_tensor_t> &)> edit) {
  return [edit](Live &live) {
    std::vector<loadplan_tensor_t> batch = live.update.tensorArgs;
    edit(batch);
    return loadplan_apply_tensors(live.binding.get(), batch.data(),
                                  batch.size(), nullptr);
  };
}

/// The good box batch, edited, applied.
std::function<loadplan_status_t(Live &)>
boxesWith(std::function<void(std::vector<loadplan_box_t> &)> edit) {
  return [edit](Live &live) {
    std::vector<loadplan_box_t> batch = live.update.boxArgs;
    edit(batch);
    return loadplan_apply_boxes(live.binding.get(), batch.data(), batch.size(),
                                nullptr);
  };
}

/// The input of `batch` named `name`.
template <typename Input>
Input &named(std::vector<Input> &batch, const std::string &name) {
  for (Input &in : batch)
    if (std::string(in.name, in.name_size) == name)
      return in;
  ADD_FAILURE() << "no input " << name;
  return batch.front();
}

// Inputs the rows add; static, so that pointers to them outlive the row.
const int64_t kShape44[] = {4, 4}, kShape1[] = {1}, kShape64[] = {6, 4};
const int64_t kStart0[] = {0}, kStop1[] = {1}, kStart00[] = {0, 0},
              kStop88[] = {8, 8};
const uint16_t kData[16] = {};

constexpr auto kInvalidUpdate = LOADPLAN_STATUS_INVALID_UPDATE;
constexpr auto kInvalidArgument = LOADPLAN_STATUS_INVALID_ARGUMENT;
constexpr auto kMismatch = LOADPLAN_STATUS_FINGERPRINT_MISMATCH;

const std::string kOtherLayout =
    "; the plan was made for another layout (its fingerprint is "
    "0x970b7991387f1d21, this layout's ";

std::vector<UpdateCase> updateCases() {
  using Layouts = std::vector<loadplan_target_layout_t>;
  using Options = loadplan_bind_options_t;
  return {
      // Binding.
      {"BindTooFewLayouts",
       bindWith([](Live &, Layouts &l, Options &) { l.pop_back(); }), kMismatch,
       "the plan has 6 targets but 5 layouts were given"},
      {"BindWrongDtype", bindWith([](Live &, Layouts &l, Options &) {
         l[0].dtype = LOADPLAN_DTYPE_FLOAT16;
       }),
       kMismatch,
       "target 0 ('layers.0.attn.qkv.weight') has dtype float16 but the plan "
       "expects bfloat16" +
           kOtherLayout + "0x146bbb6c297845ba)"},
      {"BindWrongShape",
       bindWith([](Live &, Layouts &l, Options &) { l[1].shape = kShape44; }),
       kMismatch,
       "target 1 ('layers.0.attn.o.weight') has shape [4, 4] but the plan "
       "expects [8, 4]" +
           kOtherLayout + "0x5271f20efb55d7fd)"},
      {"BindWrongStride",
       bindWith([](Live &, Layouts &l, Options &) { l[2].stride = kShape64; }),
       kMismatch,
       "target 2 ('layers.0.mlp.w.weight') has stride [6, 4] but the plan "
       "expects [4, 1]" +
           kOtherLayout + "0x9aa8c7c67630cf18)"},
      {"BindWrongByteOffset", bindWith([](Live &live, Layouts &l, Options &) {
         l[4].byte_offset = 18;
         l[4].data = live.memory.base(3) + 18;
       }),
       kMismatch,
       "target 4 ('layers.0.norm2.weight') has byte offset 18 but the plan "
       "expects 16" +
           kOtherLayout + "0x7fb0d33921627eef)"},
      {"BindStorageTooSmall",
       bindWith([](Live &, Layouts &l, Options &) { l[0].storage_size = 100; }),
       kMismatch,
       "target 0 ('layers.0.attn.qkv.weight'): its storage has 100 bytes but "
       "the plan was made for 192"},
      {"BindSharedStorageSplit",
       bindWith([](Live &live, Layouts &l, Options &) {
         l[4].data = live.memory.base(2) + 16; // norm2 apart from norm
       }),
       kMismatch,
       "target 4 ('layers.0.norm2.weight') and target 3 share storage 3 in "
       "the plan but are bound to different storages (starting at ",
       /*prefixOnly=*/true},
      {"BindStoragesOverlap", bindWith([](Live &live, Layouts &l, Options &) {
         l[1].data = live.memory.base(0) + 64;
       }),
       kMismatch,
       "storages 0 and 1 (of targets 0 and 1) overlap in memory but the plan "
       "holds them apart"},
      {"BindNullData",
       bindWith([](Live &, Layouts &l, Options &) { l[0].data = nullptr; }),
       kInvalidArgument, "target 0 ('layers.0.attn.qkv.weight'): data is NULL"},
      {"BindDataBelowItsOffset", bindWith([](Live &, Layouts &l, Options &) {
         l[4].data = reinterpret_cast<void *>(8);
       }),
       kInvalidArgument,
       "target 4 ('layers.0.norm2.weight'): data 0x8 is below its byte offset "
       "16"},
      {"BindNullShape",
       bindWith([](Live &, Layouts &l, Options &) { l[2].shape = nullptr; }),
       kInvalidArgument, "layout 2: shape or stride is NULL"},
      {"BindRankTooLarge",
       bindWith([](Live &, Layouts &l, Options &) { l[2].rank = 1000; }),
       kInvalidArgument, "layout 2: rank 1000 is more than 64"},
      {"BindNullLayouts",
       [](Live &live) {
         loadplan_binding_t *raw = nullptr;
         return loadplan_bind(live.plan.get(), nullptr, 6, nullptr, &raw);
       },
       kInvalidArgument, "layouts is NULL"},
      {"BindNullPlan",
       [](Live &live) {
         Layouts l = live.memory.layouts();
         loadplan_binding_t *raw = nullptr;
         return loadplan_bind(nullptr, l.data(), l.size(), nullptr, &raw);
       },
       kInvalidArgument, "plan is NULL"},
      {"BindNullOut",
       [](Live &live) {
         Layouts l = live.memory.layouts();
         return loadplan_bind(live.plan.get(), l.data(), l.size(), nullptr,
                              nullptr);
       },
       kInvalidArgument, "out_binding is NULL"},
      {"BindUnknownDevice",
       bindWith([](Live &, Layouts &, Options &o) { o.device.type = 7; }),
       kInvalidArgument, "unknown device type 7"},
      {"BindCpuDeviceIndex",
       bindWith([](Live &, Layouts &, Options &o) { o.device.index = 1; }),
       kInvalidArgument, "CPU device index must be 0, not 1"},
      {"BindTooManyThreads",
       bindWith([](Live &, Layouts &, Options &o) { o.num_threads = 5000; }),
       kInvalidArgument, "num_threads 5000 is more than 4096"},
      {"CheckLayoutMismatch",
       [](Live &live) {
         Layouts l = live.memory.layouts();
         l[2].stride = kShape64;
         return loadplan_plan_check_layout(live.plan.get(), l.data(), l.size());
       },
       kMismatch,
       "target 2 ('layers.0.mlp.w.weight') has stride [6, 4] but the plan "
       "expects [4, 1]" +
           kOtherLayout + "0x9aa8c7c67630cf18)"},
      // Full tensors: a good batch with one bad input.
      {"TensorUnknownName", tensorsWith([](auto &b) {
         b.push_back(b[0]);
         b.back().name = "nope";
         b.back().name_size = 4;
       }),
       kInvalidUpdate, "tensor 5 ('nope'): no such name in the plan"},
      {"TensorEmptyName", tensorsWith([](auto &b) { b[2].name_size = 0; }),
       kInvalidUpdate, "tensor 2 (''): no such name in the plan"},
      {"TensorFallbackName", tensorsWith([](auto &b) {
         b.push_back({"scale", 5, kData, LOADPLAN_DTYPE_BFLOAT16, 1, kShape1});
       }),
       kInvalidUpdate,
       "tensor 5 ('scale') is a fallback (reads a value (.item())); send it "
       "through the model's loader"},
      {"TensorUnneededName", tensorsWith([](auto &b) {
         b.push_back(
             {"other_rank", 10, kData, LOADPLAN_DTYPE_BFLOAT16, 2, kShape44});
       }),
       kInvalidUpdate,
       "tensor 5 ('other_rank') is not needed on this rank; do not send it"},
      {"TensorWrongDtype", tensorsWith([](auto &b) {
         named(b, "w").dtype = LOADPLAN_DTYPE_FLOAT16;
       }),
       kInvalidUpdate,
       "tensor 3 ('w') has dtype float16 but the plan expects bfloat16"},
      {"TensorUnknownDtype",
       tensorsWith([](auto &b) { named(b, "w").dtype = 99; }), kInvalidUpdate,
       "tensor 3 ('w') has dtype code 99 (no such dtype) but the plan expects "
       "bfloat16"},
      {"TensorWrongShape",
       tensorsWith([](auto &b) { named(b, "w").shape = kShape64; }),
       kInvalidUpdate,
       "tensor 3 ('w') has shape [6, 4] but the plan expects [4, 6]"},
      {"TensorWrongRank", tensorsWith([](auto &b) {
         named(b, "norm").rank = 2;
         named(b, "norm").shape = kShape44;
       }),
       kInvalidUpdate,
       "tensor 4 ('norm') has shape [4, 4] but the plan expects [8]"},
      {"TensorHugeRank",
       tensorsWith([](auto &b) { named(b, "norm").rank = ~0u; }),
       kInvalidUpdate,
       "tensor 4 ('norm') has rank 4294967295 but the plan expects rank 1"},
      {"TensorSentTwice",
       tensorsWith([](auto &b) { b.push_back(named(b, "o")); }), kInvalidUpdate,
       "tensor 5 ('o') is sent twice (also as tensor 2)"},
      {"TensorNullData",
       tensorsWith([](auto &b) { named(b, "k").data = nullptr; }),
       kInvalidArgument, "tensor 1 ('k'): data is NULL"},
      {"TensorNullName", tensorsWith([](auto &b) { b[1].name = nullptr; }),
       kInvalidArgument, "tensor 1: name is NULL"},
      {"TensorNullShape",
       tensorsWith([](auto &b) { named(b, "k").shape = nullptr; }),
       kInvalidArgument, "tensor 1 ('k'): shape is NULL"},
      {"TensorsNull",
       [](Live &live) {
         return loadplan_apply_tensors(live.binding.get(), nullptr, 2, nullptr);
       },
       kInvalidArgument, "tensors is NULL"},
      {"TensorsNullBinding",
       [](Live &live) {
         return loadplan_apply_tensors(nullptr, live.update.tensorArgs.data(),
                                       live.update.tensorArgs.size(), nullptr);
       },
       kInvalidArgument, "binding is NULL"},
      {"TensorsStreamOnTheCpu",
       [](Live &live) {
         int stream = 0;
         return loadplan_apply_tensors(live.binding.get(),
                                       live.update.tensorArgs.data(),
                                       live.update.tensorArgs.size(), &stream);
       },
       kInvalidArgument, "stream must be NULL for a CPU binding"},
      // Boxes.
      {"BoxUnknownName", boxesWith([](auto &b) {
         b.back().name = "qq";
         b.back().name_size = 2;
       }),
       kInvalidUpdate, "box 5 ('qq'): no such name in the plan"},
      {"BoxFallbackName", boxesWith([](auto &b) {
         b.push_back(
             {"scale", 5, kData, LOADPLAN_DTYPE_BFLOAT16, 1, kStart0, kStop1});
       }),
       kInvalidUpdate,
       "box 6 ('scale') is a fallback (reads a value (.item())); send it "
       "through the model's loader"},
      {"BoxWrongDtype",
       boxesWith([](auto &b) { b.back().dtype = LOADPLAN_DTYPE_FLOAT32; }),
       kInvalidUpdate,
       "box 5 ('norm') has dtype float32 but the plan expects bfloat16"},
      {"BoxWrongRank", boxesWith([](auto &b) { b[0].rank = 1; }),
       kInvalidUpdate,
       "box 0 ('q') has rank 1 but the plan's tensor has rank 2"},
      {"BoxNotInThePlan", boxesWith([](auto &b) {
         b[0].starts = kStart00;
         b[0].stops = kStop88;
       }),
       kInvalidUpdate,
       "box 0 ('q'): box [(0, 8), (0, 8)] is not one of the 2 boxes the plan "
       "needs"},
      {"BoxSentTwice", boxesWith([](auto &b) { b.push_back(b[2]); }),
       kInvalidUpdate, "box 6 ('k'): box 0 is sent twice (also as box 2)"},
      {"BoxMissing", boxesWith([](auto &b) { b.erase(b.begin() + 1); }),
       kInvalidUpdate,
       "box 0 ('q'): the batch lacks box 1 [(0, 1), (0, 8)] of 'q' (it sends "
       "1 of its 2 boxes)"},
      {"BoxNullData", boxesWith([](auto &b) { b[3].data = nullptr; }),
       kInvalidArgument, "box 3 ('o'): data is NULL"},
      {"BoxNullStarts", boxesWith([](auto &b) { b[3].starts = nullptr; }),
       kInvalidArgument, "box 3 ('o'): starts or stops is NULL"},
      {"BoxesNull",
       [](Live &live) {
         return loadplan_apply_boxes(live.binding.get(), nullptr, 1, nullptr);
       },
       kInvalidArgument, "boxes is NULL"},
  };
}

void PrintTo(const UpdateCase &c, std::ostream *os) { *os << c.name; }

class BindAndApply : public ::testing::TestWithParam<UpdateCase> {};

TEST_P(BindAndApply, RefusesWithItsStatusAndWritesNothing) {
  const UpdateCase &c = GetParam();
  Live live;
  EXPECT_TRUE(live.refused(c.call(live), c.code, c.message, c.prefixOnly));
}

INSTANTIATE_TEST_SUITE_P(BadInput, BindAndApply,
                         ::testing::ValuesIn(updateCases()),
                         [](const ::testing::TestParamInfo<UpdateCase> &info) {
                           return info.param.name;
                         });

} // namespace
