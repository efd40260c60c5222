//===- Report.cpp - What a plan says, in a few lines -----------*- C++ -*-===//

#include "loadplan/format/Report.h"

#include <cstdio>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <vector>

using namespace loadplan_format;

int64_t loadplan_format::addSaturated(int64_t a, int64_t b) {
  int64_t sum;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<int64_t>::max()
                                            : sum;
}

int64_t loadplan_format::neededBytes(const PlanEntry &entry) {
  int64_t elements = 0;
  for (const Box &b : entry.boxes) // fits: a box lies in its tensor
    elements = addSaturated(elements, b.volume());
  int64_t bytes;
  if (__builtin_mul_overflow(elements,
                             static_cast<int64_t>(loadplan_dtype_size(entry.dtype)),
                             &bytes))
    return std::numeric_limits<int64_t>::max();
  return bytes;
}

static std::string mib(int64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f", static_cast<double>(bytes) / 1048576.0);
  return text;
}

std::string loadplan_format::planReport(const Plan &plan, std::string_view how) {
  int64_t counts[LOADPLAN_KIND_COUNT_] = {}, bytes[LOADPLAN_KIND_COUNT_] = {};
  // Reasons in the order they first appear, each with its names.
  std::vector<std::pair<std::string_view, std::vector<std::string_view>>> byReason;
  std::unordered_map<std::string_view, size_t> reasonIndex;
  forEachName(plan, [&](const PlanEntry &e, std::string_view name, int64_t) {
    if (e.kind < LOADPLAN_KIND_COUNT_) {
      counts[e.kind] += 1;
      bytes[e.kind] = addSaturated(bytes[e.kind], neededBytes(e));
    }
    if (!e.reason)
      return;
    auto [it, inserted] = reasonIndex.try_emplace(*e.reason, byReason.size());
    if (inserted)
      byReason.push_back({*e.reason, {}});
    byReason[it->second].second.push_back(name);
  });
  std::string out;
  for (const auto &[reason, names] : byReason) {
    out += "load plan: " + std::to_string(names.size()) + " fallback names, e.g. [";
    for (size_t i = 0; i < names.size() && i < 3; ++i) {
      out += i ? ", '" : "'";
      out += names[i];
      out += "'";
    }
    out += "]: ";
    out += reason;
    out += "\n";
  }
  out += "load plan: " + std::to_string(plan.numNames()) + " names: " +
         std::to_string(counts[LOADPLAN_KIND_DIRECT]) + " direct (" +
         mib(bytes[LOADPLAN_KIND_DIRECT]) + " MiB), " +
         std::to_string(counts[LOADPLAN_KIND_FALLBACK]) + " fallback (" +
         mib(bytes[LOADPLAN_KIND_FALLBACK]) + " MiB), " +
         std::to_string(counts[LOADPLAN_KIND_UNNEEDED]) +
         " not needed on this rank; ";
  out += how;
  out += "\n";
  return out;
}
