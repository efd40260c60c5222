//===- UpdateTest.cpp - Binding and all-or-nothing updates ------*- C++ -*-===//
//
// Binding checks the layout against the plan's fingerprint and the storage
// structure; an update batch is checked whole before anything is written:
// every refused batch below carries good tensors next to the bad one, and
// live memory must come out byte for byte as it went in.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <map>

using namespace loadplan::testing;

namespace {

/// The sample plan bound to random host memory, and a random update.
class UpdateTest : public ::testing::Test {
protected:
  void SetUp() override {
    plan = openPlan(sample);
    for (auto &s : memory.storages)
      fillRandom(s, rng);
    binding = bindPlan(plan.get(), memory, 2);
    update = makeUpdate(sample, rng);
    before = memory.storages;
  }

  loadplan_status_t applyTensors(const std::vector<loadplan_tensor_t> &t) {
    return loadplan_apply_tensors(binding.get(), t.data(), t.size(), nullptr);
  }
  loadplan_status_t applyBoxes(const std::vector<loadplan_box_t> &b) {
    return loadplan_apply_boxes(binding.get(), b.data(), b.size(), nullptr);
  }
  bool untouched() const { return memory.storages == before; }
  /// The tensor argument for `name`.
  loadplan_tensor_t tensor(const std::string &name) const {
    for (const loadplan_tensor_t &t : update.tensorArgs)
      if (std::string(t.name, t.name_size) == name)
        return t;
    ADD_FAILURE() << "no tensor " << name;
    return {};
  }

  TestPlan sample = samplePlan();
  Memory memory{sample};
  std::mt19937_64 rng{11};
  PlanPtr plan;
  BindingPtr binding;
  Update update;
  std::vector<std::vector<uint8_t>> before;
};

TEST_F(UpdateTest, FullTensorsWriteWhatTheReferenceWrites) {
  ASSERT_TRUE(isOk(applyTensors(update.tensorArgs)));
  EXPECT_EQ(memory.storages, referenceAfter(sample, before, update));
  EXPECT_FALSE(untouched());
}

TEST_F(UpdateTest, BoxesWriteWhatTheReferenceWrites) {
  ASSERT_TRUE(isOk(applyBoxes(update.boxArgs)));
  EXPECT_EQ(memory.storages, referenceAfter(sample, before, update));
}

TEST_F(UpdateTest, EmptyBatchWritesNothing) {
  EXPECT_TRUE(isOk(applyTensors({})));
  EXPECT_TRUE(isOk(applyBoxes({})));
  EXPECT_TRUE(untouched());
}

TEST_F(UpdateTest, StatsCountAppliesAndNoLaunchesOnTheCpu) {
  ASSERT_TRUE(isOk(applyTensors(update.tensorArgs)));
  ASSERT_TRUE(isOk(applyBoxes(update.boxArgs)));
  auto twice = update.tensorArgs;
  twice.push_back(twice[0]);
  EXPECT_TRUE(isError(applyTensors(twice), LOADPLAN_STATUS_INVALID_UPDATE,
                      "sent twice"));
  loadplan_binding_stats_t stats;
  ASSERT_TRUE(isOk(loadplan_binding_stats(binding.get(), &stats)));
  EXPECT_EQ(stats.applies, 2u);
  EXPECT_EQ(stats.kernel_launches, 0u);
  EXPECT_EQ(stats.memcpy_calls, 0u);
  EXPECT_TRUE(isError(loadplan_binding_stats(binding.get(), nullptr),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "out_stats is NULL"));
  EXPECT_TRUE(isError(loadplan_binding_stats(nullptr, &stats),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "binding is NULL"));
}

TEST_F(UpdateTest, UnknownName) {
  auto batch = update.tensorArgs;
  batch.push_back(batch[0]);
  batch.back().name = "nope";
  batch.back().name_size = 4;
  EXPECT_TRUE(isError(applyTensors(batch), LOADPLAN_STATUS_INVALID_UPDATE,
                      "tensor 5 ('nope'): no such name in the plan"));
  EXPECT_TRUE(untouched());
  auto boxes = update.boxArgs;
  boxes[2].name = "qq";
  boxes[2].name_size = 2;
  EXPECT_TRUE(isError(applyBoxes(boxes), LOADPLAN_STATUS_INVALID_UPDATE,
                      "box 2 ('qq'): no such name"));
  EXPECT_TRUE(untouched());
}

TEST_F(UpdateTest, FallbackNameSent) {
  auto batch = update.tensorArgs;
  int64_t shape[] = {1};
  uint16_t value = 0;
  batch.push_back({"scale", 5, &value, LOADPLAN_DTYPE_BFLOAT16, 1, shape});
  EXPECT_TRUE(isError(applyTensors(batch), LOADPLAN_STATUS_INVALID_UPDATE,
                      "'scale') is a fallback (reads a value (.item())); send "
                      "it through the model's loader"));
  EXPECT_TRUE(untouched());
  int64_t starts[] = {0}, stops[] = {1};
  auto boxes = update.boxArgs;
  boxes.insert(boxes.begin(),
               {"scale", 5, &value, LOADPLAN_DTYPE_BFLOAT16, 1, starts, stops});
  EXPECT_TRUE(isError(applyBoxes(boxes), LOADPLAN_STATUS_INVALID_UPDATE,
                      "box 0 ('scale') is a fallback"));
  EXPECT_TRUE(untouched());
}

TEST_F(UpdateTest, UnneededNameSent) {
  auto batch = update.tensorArgs;
  int64_t shape[] = {4, 4};
  std::vector<uint16_t> data(16);
  batch.push_back({"other_rank", 10, data.data(), LOADPLAN_DTYPE_BFLOAT16, 2,
                   shape});
  EXPECT_TRUE(isError(applyTensors(batch), LOADPLAN_STATUS_INVALID_UPDATE,
                      "is not needed on this rank"));
  EXPECT_TRUE(untouched());
}

TEST_F(UpdateTest, WrongDtype) {
  auto batch = update.tensorArgs;
  batch[3].dtype = LOADPLAN_DTYPE_FLOAT16;
  EXPECT_TRUE(isError(applyTensors(batch), LOADPLAN_STATUS_INVALID_UPDATE,
                      "tensor 3 ('w') has dtype float16 but the plan expects "
                      "bfloat16"));
  EXPECT_TRUE(untouched());
  auto boxes = update.boxArgs;
  boxes.back().dtype = LOADPLAN_DTYPE_FLOAT32;
  EXPECT_TRUE(isError(applyBoxes(boxes), LOADPLAN_STATUS_INVALID_UPDATE,
                      "has dtype float32 but the plan expects bfloat16"));
  EXPECT_TRUE(untouched());
}

TEST_F(UpdateTest, WrongShape) {
  auto batch = update.tensorArgs;
  int64_t transposed[] = {6, 4};
  batch[3].shape = transposed;
  EXPECT_TRUE(isError(applyTensors(batch), LOADPLAN_STATUS_INVALID_UPDATE,
                      "tensor 3 ('w') has shape [6, 4] but the plan expects "
                      "[4, 6]"));
  EXPECT_TRUE(untouched());
  batch = update.tensorArgs;
  batch[3].rank = 1;
  EXPECT_TRUE(isError(applyTensors(batch), LOADPLAN_STATUS_INVALID_UPDATE,
                      "has shape [4] but the plan expects [4, 6]"));
  EXPECT_TRUE(untouched());
}

TEST_F(UpdateTest, BoxNotInThePlan) {
  auto boxes = update.boxArgs;
  int64_t starts[] = {0, 0}, stops[] = {8, 8};
  boxes[0].starts = starts; // q needs rows 8..16
  boxes[0].stops = stops;
  EXPECT_TRUE(isError(applyBoxes(boxes), LOADPLAN_STATUS_INVALID_UPDATE,
                      "box 0 ('q'): box [(0, 8), (0, 8)] is not one of the 1 "
                      "boxes the plan needs"));
  EXPECT_TRUE(untouched());
  boxes = update.boxArgs;
  boxes[0].rank = 1;
  EXPECT_TRUE(isError(applyBoxes(boxes), LOADPLAN_STATUS_INVALID_UPDATE,
                      "has rank 1 but the plan's tensor has rank 2"));
  EXPECT_TRUE(untouched());
}

TEST_F(UpdateTest, MissingBox) {
  // A two-box entry with only one of them sent.
  TestPlan p = samplePlan();
  p.storageSizes.push_back(4 * 4);
  uint32_t t = p.addTarget({"extra", "w", 4, 0, LOADPLAN_DTYPE_BFLOAT16, {8}, {1}});
  p.entries[0].boxes.push_back({{0, 0}, {1, 8}});
  p.entries[0].writes.push_back({t, 1, 0, {1, 8}, {8, 1}});
  PlanPtr twoBoxes = openPlan(p);
  Memory mem(p);
  fillRandom(mem.storages[0], rng);
  auto snapshot = mem.storages;
  BindingPtr b = bindPlan(twoBoxes.get(), mem);
  Update u = makeUpdate(p, rng);
  auto boxes = u.boxArgs;
  boxes.erase(boxes.begin() + 1); // q's second box
  EXPECT_TRUE(isError(
      loadplan_apply_boxes(b.get(), boxes.data(), boxes.size(), nullptr),
      LOADPLAN_STATUS_INVALID_UPDATE,
      "box 0 ('q'): the batch lacks box 1 [(0, 1), (0, 8)] of 'q' (it sends 1 "
      "of its 2 boxes)"));
  EXPECT_EQ(mem.storages, snapshot);
  EXPECT_TRUE(isOk(loadplan_apply_boxes(b.get(), u.boxArgs.data(),
                                        u.boxArgs.size(), nullptr)));
  EXPECT_EQ(mem.storages, referenceAfter(p, snapshot, u));
}

TEST_F(UpdateTest, DuplicateSource) {
  auto batch = update.tensorArgs;
  batch.push_back(tensor("o"));
  EXPECT_TRUE(isError(applyTensors(batch), LOADPLAN_STATUS_INVALID_UPDATE,
                      "tensor 5 ('o') is sent twice (also as tensor 2)"));
  EXPECT_TRUE(untouched());
  auto boxes = update.boxArgs;
  boxes.push_back(boxes[1]);
  EXPECT_TRUE(isError(applyBoxes(boxes), LOADPLAN_STATUS_INVALID_UPDATE,
                      "box 5 ('k'): box 0 is sent twice (also as box 1)"));
  EXPECT_TRUE(untouched());
}

TEST_F(UpdateTest, NullArguments) {
  auto batch = update.tensorArgs;
  batch[1].data = nullptr;
  EXPECT_TRUE(isError(applyTensors(batch), LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "tensor 1 ('k'): data is NULL"));
  batch = update.tensorArgs;
  batch[1].name = nullptr;
  EXPECT_TRUE(isError(applyTensors(batch), LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "tensor 1: name is NULL"));
  EXPECT_TRUE(isError(loadplan_apply_tensors(binding.get(), nullptr, 2, nullptr),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "tensors is NULL"));
  EXPECT_TRUE(isError(loadplan_apply_boxes(nullptr, nullptr, 0, nullptr),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "binding is NULL"));
  int stream;
  EXPECT_TRUE(isError(loadplan_apply_tensors(binding.get(),
                                             update.tensorArgs.data(), 1,
                                             &stream),
                      LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "stream must be NULL for a CPU binding"));
  EXPECT_TRUE(untouched());
}

/// The plan's index of each entry, by name.
std::map<std::string, uint32_t> entryIndices(loadplan_plan_t *plan) {
  loadplan_plan_summary_t s;
  EXPECT_TRUE(isOk(loadplan_plan_summary(plan, &s)));
  std::map<std::string, uint32_t> out;
  for (uint32_t i = 0; i < s.num_entries; ++i) {
    loadplan_entry_info_t e;
    EXPECT_TRUE(isOk(loadplan_plan_entry(plan, i, &e)));
    out[std::string(e.name, e.name_size)] = i;
  }
  return out;
}

/// `update`'s full tensors as entry indices and data pointers.
std::pair<std::vector<uint32_t>, std::vector<const void *>>
byIndex(const std::map<std::string, uint32_t> &index, const Update &update) {
  std::pair<std::vector<uint32_t>, std::vector<const void *>> out;
  for (const loadplan_tensor_t &t : update.tensorArgs) {
    out.first.push_back(index.at(std::string(t.name, t.name_size)));
    out.second.push_back(t.data);
  }
  return out;
}

TEST_F(UpdateTest, EntriesByIndexWriteWhatTheReferenceWrites) {
  std::map<std::string, uint32_t> index = entryIndices(plan.get());
  auto [entries, data] = byIndex(index, update);
  ASSERT_TRUE(isOk(loadplan_apply_entries(binding.get(), entries.data(),
                                          data.data(), entries.size(), nullptr)));
  EXPECT_EQ(memory.storages, referenceAfter(sample, before, update));
}

TEST_F(UpdateTest, EntriesByIndexAreCheckedWhole) {
  std::map<std::string, uint32_t> index = entryIndices(plan.get());
  auto [entries, data] = byIndex(index, update);
  auto refused = [&](std::vector<uint32_t> e, std::vector<const void *> d,
                     loadplan_status_code_t code, const std::string &text) {
    return isError(loadplan_apply_entries(binding.get(), e.data(), d.data(),
                                          e.size(), nullptr),
                   code, text);
  };
  // Each bad input comes last, after good ones.
  auto with = [](std::vector<uint32_t> v, uint32_t x) {
    v.push_back(x);
    return v;
  };
  auto withData = [](std::vector<const void *> v, const void *x) {
    v.push_back(x);
    return v;
  };
  size_t n = entries.size();
  EXPECT_TRUE(refused(with(entries, 99), withData(data, data[0]),
                      LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "entry " + std::to_string(n) +
                          ": index 99 is not one of the plan's 7 entries"));
  EXPECT_TRUE(refused(with(entries, entries[2]), withData(data, data[2]),
                      LOADPLAN_STATUS_INVALID_UPDATE,
                      "entry " + std::to_string(n) +
                          " ('o') is sent twice (also as entry 2)"));
  EXPECT_TRUE(refused(with(entries, index.at("scale")), withData(data, data[0]),
                      LOADPLAN_STATUS_INVALID_UPDATE, "is a fallback ("));
  EXPECT_TRUE(refused(with(entries, index.at("other_rank")), withData(data, data[0]),
                      LOADPLAN_STATUS_INVALID_UPDATE,
                      "is not needed on this rank; do not send it"));
  std::vector<const void *> null = data;
  null[1] = nullptr;
  EXPECT_TRUE(refused(entries, null, LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "entry 1 ('k'): data is NULL"));
  EXPECT_TRUE(isError(loadplan_apply_entries(binding.get(), nullptr, data.data(),
                                             1, nullptr),
                      LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "entries or data is NULL"));
  EXPECT_TRUE(untouched());
}

TEST_F(UpdateTest, PartialBatchWritesOnlyItsNames) {
  Update some = makeUpdate(sample, rng, {"k", "w"});
  ASSERT_EQ(some.tensorArgs.size(), 2u);
  ASSERT_TRUE(isOk(applyTensors(some.tensorArgs)));
  EXPECT_EQ(memory.storages, referenceAfter(sample, before, some));
}

TEST_F(UpdateTest, RefusedBatchThenGoodBatch) {
  // A refusal leaves no state behind: the marks of the refused batch do not
  // make the next batch's names look like duplicates.
  auto batch = update.tensorArgs;
  batch.push_back(batch[0]);
  EXPECT_TRUE(isError(applyTensors(batch), LOADPLAN_STATUS_INVALID_UPDATE,
                      "sent twice"));
  ASSERT_TRUE(isOk(applyTensors(update.tensorArgs)));
  ASSERT_TRUE(isOk(applyBoxes(update.boxArgs)));
  EXPECT_EQ(memory.storages, referenceAfter(sample, before, update));
}

//===----------------------------------------------------------------------===//
// Binding and the fingerprint
//===----------------------------------------------------------------------===//

class BindTest : public ::testing::Test {
protected:
  loadplan_status_t bind(const std::vector<loadplan_target_layout_t> &layouts,
                         const loadplan_bind_options_t *options = nullptr) {
    loadplan_binding_t *raw = nullptr;
    loadplan_status_t status = loadplan_bind(plan.get(), layouts.data(),
                                             layouts.size(), options, &raw);
    BindingPtr drop(raw);
    if (!status && !raw)
      ADD_FAILURE() << "success without a binding";
    return status;
  }

  TestPlan sample = samplePlan();
  PlanPtr plan = openPlan(sample);
  Memory memory{sample};
};

TEST_F(BindTest, MatchingLayoutBinds) {
  EXPECT_TRUE(isOk(bind(memory.layouts())));
  EXPECT_TRUE(isOk(loadplan_plan_check_layout(plan.get(), memory.layouts().data(),
                                              5)));
  loadplan_binding_t *raw = nullptr;
  auto layouts = memory.layouts();
  ASSERT_TRUE(isOk(loadplan_bind(plan.get(), layouts.data(), layouts.size(),
                                 nullptr, &raw)));
  BindingPtr binding(raw);
  uint32_t threads = 0;
  ASSERT_TRUE(isOk(loadplan_binding_num_threads(binding.get(), &threads)));
  EXPECT_GE(threads, 1u); // all hardware threads by default
}

TEST_F(BindTest, FingerprintMismatchNamesTheField) {
  auto layouts = memory.layouts();
  int64_t transposed[] = {1, 6};
  layouts[2].stride = transposed;
  EXPECT_TRUE(isError(bind(layouts), LOADPLAN_STATUS_FINGERPRINT_MISMATCH,
                      "target 2 ('layers.0.mlp.w.weight') has stride [1, 6] "
                      "but the plan expects [4, 1]; the plan was made for "
                      "another layout"));
  layouts = memory.layouts();
  int64_t shape[] = {6, 5};
  layouts[2].shape = shape;
  EXPECT_TRUE(isError(bind(layouts), LOADPLAN_STATUS_FINGERPRINT_MISMATCH,
                      "has shape [6, 5] but the plan expects [6, 4]"));
  layouts = memory.layouts();
  layouts[0].dtype = LOADPLAN_DTYPE_FLOAT16;
  EXPECT_TRUE(isError(bind(layouts), LOADPLAN_STATUS_FINGERPRINT_MISMATCH,
                      "target 0 ('layers.0.attn.qkv.weight') has dtype "
                      "float16 but the plan expects bfloat16"));
  layouts = memory.layouts();
  layouts[4].byte_offset = 18;
  layouts[4].data = memory.base(3) + 18;
  EXPECT_TRUE(isError(bind(layouts), LOADPLAN_STATUS_FINGERPRINT_MISMATCH,
                      "has byte offset 18 but the plan expects 16"));
  layouts = memory.layouts();
  layouts[1].rank = 1;
  EXPECT_TRUE(isError(bind(layouts), LOADPLAN_STATUS_FINGERPRINT_MISMATCH,
                      "target 1 ('layers.0.attn.o.weight') has shape [8]"));
  layouts.pop_back();
  EXPECT_TRUE(isError(bind(layouts), LOADPLAN_STATUS_FINGERPRINT_MISMATCH,
                      "the plan has 5 targets but 4 layouts were given"));
  layouts = memory.layouts();
  layouts[2].stride = transposed;
  EXPECT_TRUE(isError(loadplan_plan_check_layout(plan.get(), layouts.data(),
                                                 layouts.size()),
                      LOADPLAN_STATUS_FINGERPRINT_MISMATCH, "has stride [1, 6]"));
}

TEST_F(BindTest, StorageStructureMustMatch) {
  // norm and norm2 share storage 3 in the plan.
  std::vector<uint8_t> elsewhere(64);
  auto layouts = memory.layouts();
  layouts[4].data = elsewhere.data() + 16;
  EXPECT_TRUE(isError(bind(layouts), LOADPLAN_STATUS_FINGERPRINT_MISMATCH,
                      "target 4 ('layers.0.norm2.weight') and target 3 share "
                      "storage 3 in the plan but are bound to different "
                      "storages"));
  // qkv's and o's storages are apart in the plan but not in memory.
  layouts = memory.layouts();
  layouts[1].data = memory.base(0) + 64;
  EXPECT_TRUE(isError(bind(layouts), LOADPLAN_STATUS_FINGERPRINT_MISMATCH,
                      "overlap in memory but the plan holds them apart"));
  layouts = memory.layouts();
  layouts[0].storage_size = 100;
  EXPECT_TRUE(isError(bind(layouts), LOADPLAN_STATUS_FINGERPRINT_MISMATCH,
                      "its storage has 100 bytes but the plan was made for 192"));
  layouts = memory.layouts();
  layouts[0].data = nullptr;
  EXPECT_TRUE(isError(bind(layouts), LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "data is NULL"));
}

TEST_F(BindTest, BadOptions) {
  loadplan_bind_options_t options;
  loadplan_bind_options_init(&options);
  options.device.type = 7;
  EXPECT_TRUE(isError(bind(memory.layouts(), &options),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "unknown device type 7"));
  options.device.type = LOADPLAN_DEVICE_CPU;
  options.device.index = 1;
  EXPECT_TRUE(isError(bind(memory.layouts(), &options),
                      LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "CPU device index must be 0"));
  options.device.index = 0;
  options.num_threads = 1000000;
  EXPECT_TRUE(isError(bind(memory.layouts(), &options),
                      LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "num_threads 1000000 is more than 4096"));
}

// A CUDA binding is refused cleanly where CUDA is missing (no toolkit at
// build time, or no device); with a device, host memory is not its memory.
TEST_F(BindTest, CudaBindingOfHostMemory) {
  loadplan_bind_options_t options;
  loadplan_bind_options_init(&options);
  options.device.type = LOADPLAN_DEVICE_CUDA;
  int32_t devices = 0;
  Status status(loadplan_cuda_device_count(&devices));
  if (status) {
    EXPECT_EQ(loadplan_status_code(status.get()), LOADPLAN_STATUS_UNAVAILABLE);
    EXPECT_TRUE(isError(bind(memory.layouts(), &options),
                        LOADPLAN_STATUS_UNAVAILABLE, "built without CUDA"));
  } else if (devices == 0) {
    EXPECT_TRUE(isError(bind(memory.layouts(), &options),
                        LOADPLAN_STATUS_UNAVAILABLE, "no CUDA device"));
  } else {
    EXPECT_TRUE(isError(bind(memory.layouts(), &options),
                        LOADPLAN_STATUS_INVALID_ARGUMENT,
                        "is not memory of CUDA device 0"));
  }
}

} // namespace
