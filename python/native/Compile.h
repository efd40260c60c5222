//===- Compile.h - Run the load-plan pipeline in process --------*- C++ -*-===//
//
// The MLIR side of the Python module: parse captured IR text, run the
// pipeline, and read the plan off the result. Kept free of Python and of
// exceptions so it builds with LLVM's flags.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_PYTHON_COMPILE_H
#define LOADPLAN_PYTHON_COMPILE_H

#include "loadplan/format/PlanFile.h"

#include <string>
#include <vector>

namespace loadplan_python {

/// What one compilation produced. When `ok` is false, `errors` says why and
/// the other fields are empty.
struct CompileResult {
  bool ok = false;
  /// Error diagnostics with their locations and notes.
  std::vector<std::string> errors;
  /// Remarks and warnings (fallback findings, uncovered target bytes).
  std::vector<std::string> remarks;
  /// The plan as JSON (when asked for), the binary plan file and the report.
  std::string json, plan, report;
  /// The compiled module, when asked for.
  std::string compiledIR;
};

/// Compiles captured loadplan IR. `sourceName` names the buffer in
/// diagnostics; `printIR` and `printJson` ask for the compiled module and
/// the JSON plan.
CompileResult compile(const std::string &ir, const std::string &sourceName,
                      bool printIR, bool printJson);

/// The compiler's JSON of a plan (what --loadplan-emit-plan-json writes).
std::string planJson(const loadplan_format::Plan &plan);

/// nullptr where the module has the compiler; else why it cannot compile
/// (built with LOADPLAN_BUILD_COMPILER=OFF: compile() fails with this
/// message and planJson() is empty).
const char *compilerMissing();

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_COMPILE_H
