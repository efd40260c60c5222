//===- NoCompiler.cpp - Compile.h in a module without the compiler -*- C++ -*-===//
//
// loadplan._native built with LOADPLAN_BUILD_COMPILER=OFF, where there is no
// MLIR (a GPU machine): the runtime only. Plans are made where the compiler
// is, saved (LoadPlan.save) and read here (LoadPlan.load).
//
//===----------------------------------------------------------------------===//

#include "Compile.h"

static const char *const kMissing =
    "this loadplan._native was built without the compiler "
    "(LOADPLAN_BUILD_COMPILER=OFF): make the plan where the compiler is, "
    "save it (LoadPlan.save) and read it here (LoadPlan.load)";

const char *loadplan_python::compilerMissing() { return kMissing; }

loadplan_python::CompileResult
loadplan_python::compile(const std::string &, const std::string &, bool,
                         bool) {
  CompileResult result;
  result.errors.push_back(kMissing);
  return result;
}

loadplan_python::CompileResult
loadplan_python::compileRecords(const mlir::loadplan::RecordedModule &,
                                const std::string &, bool, bool) {
  CompileResult result;
  result.errors.push_back(kMissing);
  return result;
}

loadplan_python::CompileResult
loadplan_python::printRecords(const mlir::loadplan::RecordedModule &,
                              const std::string &) {
  CompileResult result;
  result.errors.push_back(kMissing);
  return result;
}
