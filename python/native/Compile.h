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
  /// The compiled module, when asked for.
  std::string compiledIR;
};

/// Compiles captured loadplan IR. `sourceName` names the buffer in
/// diagnostics; `printIR` and `printJson` ask for the compiled module and
/// the JSON plan.
CompileResult compile(const std::string &ir, const std::string &sourceName,
                      bool printIR, bool printJson);

/// One capture as records (RecordOps.h): the text of the module's storages
/// and targets and of every checkpoint whose ops are not all records, and
/// the records of the others.
struct CapturedRecords {
  /// `module { storages, targets, text checkpoints in arrival order }`.
  std::string text;
  /// The type table: each type's shape and dtype code.
  std::vector<std::vector<int64_t>> typeShapes;
  std::vector<uint32_t> typeDtypes;
  /// Each checkpoint in arrival order: built from `ops[begin, end)` (each
  /// entry its length, then its code and fields), or, when `type` is -1,
  /// the next checkpoint of `text`.
  struct Checkpoint {
    /// The caller's bytes (a Python str's UTF-8, which lives as long as the
    /// str): the compile only reads them, and copying 50,000 names into
    /// strings to free them again cost a few milliseconds.
    std::string_view name;
    int64_t type = -1;
    size_t begin = 0, end = 0;
  };
  std::vector<Checkpoint> checkpoints;
  std::vector<int64_t> ops;
};

/// Compiles a capture's records: the module is built in memory (the
/// records' checkpoints are never text), verified, and compiled as
/// compile() compiles parsed IR.
CompileResult compileRecords(const CapturedRecords &records,
                             const std::string &sourceName, bool printIR,
                             bool printJson);

/// nullptr where the module has the compiler; else why it cannot compile
/// (built with LOADPLAN_BUILD_COMPILER=OFF: compile() fails with this
/// message).
const char *compilerMissing();

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_COMPILE_H
