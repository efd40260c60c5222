//===- loadplan-opt.cpp - loadplan optimizer driver -----------------------===//
//
// Parses loadplan IR, runs the passes named on the command line, and prints
// the result: the tool users run to see why a name is not direct.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanDialect.h"
#include "loadplan/Transforms/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

/// `--loadplan-emit-plan=FILE` and `--loadplan-emit-plan-json=FILE` are
/// short for the passes' `file=FILE` option: the file is what users mean.
static std::string expandFileFlag(llvm::StringRef arg) {
  for (llvm::StringRef flag :
       {"loadplan-emit-plan-json=", "loadplan-emit-plan="}) {
    llvm::StringRef rest = arg.ltrim('-');
    if (arg.starts_with("-") && rest.consume_front(flag) &&
        !rest.contains('='))
      return ("--" + flag + "file=" + rest).str();
  }
  return arg.str();
}

int main(int argc, char **argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (std::string &arg : args)
    arg = expandFileFlag(arg);
  std::vector<char *> argvExpanded;
  for (std::string &arg : args)
    argvExpanded.push_back(arg.data());
  argvExpanded.push_back(nullptr);
  argv = argvExpanded.data();

  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  mlir::loadplan::registerLoadPlanPasses();
  mlir::loadplan::registerLoadPlanPipeline();

  mlir::DialectRegistry registry;
  registry.insert<mlir::loadplan::LoadPlanDialect>();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "loadplan optimizer driver\n", registry));
}
