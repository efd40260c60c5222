//===- PlanJson.h - A plan as JSON ------------------------------*- C++ -*-===//
//
// The one JSON form of a plan, for people and tests: loadplan-opt writes it
// (--loadplan-emit-plan-json) for a plan it compiled, and the runtime gives
// it for a plan file it reads back (loadplan_plan_json, LoadPlan.json), so
// that a plan prints the same either way. Plain C++17, no LLVM: the text is
// what llvm::json::OStream with two-space indents wrote when the compiler
// printed it, byte for byte.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_FORMAT_PLANJSON_H
#define LOADPLAN_FORMAT_PLANJSON_H

#include "loadplan/format/PlanFile.h"

#include <string>
#include <string_view>

namespace loadplan_format {

/// `plan` as JSON: its version and fingerprint, its targets, every name (a
/// member as an entry of its own, as in the file) with its kind, dtype,
/// shape, reason, boxes and writes, and counts; ending in a newline.
std::string planJson(const Plan &plan);

/// Appends `text` as a JSON string, as llvm::json writes one: `"` and `\`
/// escaped, control characters as \t, \n, \r or \u00XX, UTF-8 as it is, and
/// each maximal ill-formed subsequence of bytes that are not UTF-8 as
/// U+FFFD (Unicode's recommended replacement).
void appendJsonString(std::string &out, std::string_view text);

} // namespace loadplan_format

#endif // LOADPLAN_FORMAT_PLANJSON_H
