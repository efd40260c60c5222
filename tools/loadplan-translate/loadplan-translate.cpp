//===- loadplan-translate.cpp - loadplan translation driver ---------------===//
//
// Translates other forms of a loader into loadplan IR:
// `--import-torch-export file.pt2` reads a loader exported with torch.export
// (loadplan.export_loader) and prints the IR capture would have recorded,
// for loadplan-opt's pipeline.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Import/TorchExport.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

#include <cstdlib>

int main(int argc, char **argv) {
  mlir::loadplan::registerImportTorchExport();
  return mlir::succeeded(mlir::mlirTranslateMain(
             argc, argv, "loadplan translation driver\n"))
             ? EXIT_SUCCESS
             : EXIT_FAILURE;
}
