//===- Compile.h - Run the load-plan pipeline in process --------*- C++ -*-===//
//
// The MLIR side of the Python module: parse captured IR text, run the
// pipeline, and read the plan off the result. Kept free of Python and of
// exceptions so it builds with LLVM's flags.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_PYTHON_COMPILE_H
#define LOADPLAN_PYTHON_COMPILE_H

#include "loadplan/Records/RecordedModule.h"
#include "loadplan/format/PlanFile.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
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
  /// The compiled module, when asked for (printRecords: the built one).
  std::string compiledIR;
};

/// Compiles captured loadplan IR. `sourceName` names the buffer in
/// diagnostics; `printIR` and `printJson` ask for the compiled module and
/// the JSON plan.
CompileResult compile(const std::string &ir, const std::string &sourceName,
                      bool printIR, bool printJson);

/// Compiles a capture's records: the module is built in memory
/// (loadplan/Records/RecordBuilder.h), verified, and compiled as compile()
/// compiles parsed IR.
CompileResult compileRecords(const mlir::loadplan::RecordedModule &records,
                             const std::string &sourceName, bool printIR,
                             bool printJson);

/// A capture's records as IR text: what MLIR's printer prints of the module
/// they build (no members, no op left out), unverified, for people and
/// loadplan-opt. `ok` false with `errors` for records that do not build.
CompileResult printRecords(const mlir::loadplan::RecordedModule &records,
                           const std::string &sourceName);

/// nullptr where the module has the compiler; else why it cannot compile
/// (built with LOADPLAN_BUILD_COMPILER=OFF: compile() fails with this
/// message).
const char *compilerMissing();

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_COMPILE_H
