//===- schedule_seeds.cpp - Seed schedules for the schedule fuzzer --------===//
//
// Usage: loadplan-schedule-seeds OUT_DIR PLAN...
//
// Writes, for each plan file, the schedules loadplan_schedule_build makes
// for it with each engine: a sender (rank 0) that holds every tensor whole
// and a receiver (rank 1) with the plan, staged in place and atomic; with
// small pieces joined into messages and rounds overlapping (the defaults),
// and with every piece a message of its own, rounds in turn.
//
//===----------------------------------------------------------------------===//

#include "loadplan/runtime.h"
#include "loadplan/transfer.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

static bool ok(loadplan_status_t status) {
  if (!status)
    return true;
  std::fprintf(stderr, "schedule-seeds: %s\n", loadplan_status_message(status));
  loadplan_status_free(status);
  return false;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR PLAN...\n", argv[0]);
    return 2;
  }
  int written = 0;
  for (int i = 2; i < argc; ++i) {
    loadplan_plan_t *plan = nullptr;
    if (!ok(loadplan_plan_open_file(argv[i], &plan)))
      continue;
    loadplan_plan_summary_t summary;
    std::vector<loadplan_checkpoint_tensor_t> tensors;
    std::vector<loadplan_holding_t> holdings;
    if (ok(loadplan_plan_summary(plan, &summary)))
      for (uint32_t e = 0; e < summary.num_entries; ++e) {
        loadplan_entry_info_t info;
        if (!ok(loadplan_plan_entry(plan, e, &info)))
          continue;
        tensors.push_back(
            {info.name, info.name_size, info.dtype, info.rank, info.shape});
        holdings.push_back(
            {static_cast<uint32_t>(tensors.size() - 1), nullptr, nullptr});
      }
    std::string base = argv[i];
    base = base.substr(base.find_last_of('/') + 1);
    for (uint32_t engine = 0; engine < LOADPLAN_ENGINE_COUNT_; ++engine)
      for (uint32_t atomic = 0; atomic <= 1; ++atomic)
      for (uint32_t alone = 0; alone <= 1; ++alone) {
        loadplan_sender_spec_t sender = {0, 0, holdings.data(),
                                         holdings.size()};
        loadplan_receiver_spec_t receiver = {1, 0, atomic, plan};
        loadplan_schedule_spec_t spec = {
            engine,  2, tensors.data(), tensors.size(),
            &sender, 1, &receiver,      1, alone ? 1u : 0u, alone};
        loadplan_schedule_t *schedule = nullptr;
        const void *bytes;
        size_t size;
        if (!ok(loadplan_schedule_build(&spec, &schedule)))
          continue;
        if (ok(loadplan_schedule_bytes(schedule, &bytes, &size))) {
          std::string out = std::string(argv[1]) + "/" + base + "." +
                            std::to_string(engine) + std::to_string(atomic) +
                            std::to_string(alone);
          std::ofstream(out, std::ios::binary)
              .write(static_cast<const char *>(bytes), size);
          ++written;
        }
        loadplan_schedule_release(schedule);
      }
    loadplan_plan_release(plan);
  }
  std::fprintf(stderr, "schedule-seeds: %d schedules\n", written);
  return 0;
}
