//===- Report.h - What a plan says, in a few lines -------------*- C++ -*-===//
//
// The one report of a plan: the compiler prints it after compiling, and the
// runtime gives it for a plan file it reads back, so that an engine logs
// the same lines either way.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_FORMAT_REPORT_H
#define LOADPLAN_FORMAT_REPORT_H

#include "loadplan/format/PlanFile.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace loadplan_format {

/// What this rank moves for `entry`: its boxes in its dtype (for a fallback
/// the whole tensor), in bytes, saturating at INT64_MAX.
int64_t neededBytes(const PlanEntry &entry);

/// `a + b`, or INT64_MAX where that overflows.
int64_t addSaturated(int64_t a, int64_t b);

/// The report: a line per fallback reason with its count and up to three
/// names, then counts and MiB per kind, ending with `how` ("compiled in
/// 0.004 s", "loaded from plan.bin"). Every line ends in a newline.
std::string planReport(const Plan &plan, std::string_view how);

} // namespace loadplan_format

#endif // LOADPLAN_FORMAT_REPORT_H
