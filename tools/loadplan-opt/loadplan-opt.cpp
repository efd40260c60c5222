//===- loadplan-opt.cpp - loadplan optimizer driver -----------------------===//
//
// Parses loadplan IR, runs the passes named on the command line, and prints
// the result: the tool users run to see why a name is not direct. With
// --no-output it runs the passes for what they write (a plan file, its JSON,
// the report, remarks) and prints no IR.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanDialect.h"
#include "loadplan/Transforms/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

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

static llvm::cl::opt<bool> noOutput(
    "no-output",
    llvm::cl::desc("Print no IR: run the passes only for what they write "
                   "(--loadplan-pipeline=plan=FILE, the report, remarks)"),
    llvm::cl::init(false));

namespace {
/// Erases the module's body after the pipeline, so that there is nothing to
/// print. Printing a large module, even to /dev/null, costs about a fifth of
/// a compile (bench/plan_scale); its ops are freed here instead of at exit.
struct DropIRPass
    : public mlir::PassWrapper<DropIRPass, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(DropIRPass)
  llvm::StringRef getArgument() const override { return "drop-ir"; }
  llvm::StringRef getDescription() const override {
    return "Erase the module's body (--no-output)";
  }
  void runOnOperation() override { getOperation().getBody()->clear(); }
};
} // namespace

/// MlirOptMain with the pipeline the command line names, then DropIRPass.
static mlir::LogicalResult runWithoutOutput(llvm::StringRef inputFilename,
                                            llvm::StringRef outputFilename,
                                            mlir::DialectRegistry &registry) {
  if (outputFilename != "-") {
    llvm::errs() << "loadplan-opt: --no-output prints nothing; drop -o "
                 << outputFilename << "\n";
    return mlir::failure();
  }
  mlir::MlirOptMainConfig config =
      mlir::MlirOptMainConfig::createFromCLOptions();
  mlir::MlirOptMainConfig named = config;
  config.setPassPipelineSetupFn([named](mlir::PassManager &pm) {
    if (mlir::failed(named.setupPassPipeline(pm)))
      return mlir::failure();
    pm.addPass(std::make_unique<DropIRPass>());
    return mlir::success();
  });
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input =
      mlir::openInputFile(inputFilename, &error);
  if (!input) {
    llvm::errs() << error << "\n";
    return mlir::failure();
  }
  llvm::raw_null_ostream nothing;
  return mlir::MlirOptMain(nothing, std::move(input), registry, config);
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
  auto [inputFilename, outputFilename] = mlir::registerAndParseCLIOptions(
      argc, argv, "loadplan optimizer driver\n", registry);
  if (noOutput) {
    llvm::InitLLVM initLLVM(argc, argv);
    return mlir::asMainReturnCode(
        runWithoutOutput(inputFilename, outputFilename, registry));
  }
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, inputFilename, outputFilename, registry));
}
