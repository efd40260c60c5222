//===- TorchExportReader.h - Read a torch.export loader --------*- C++ -*-===//
//
// The LibTorch side of the torch.export importer. It is compiled apart from
// the MLIR side (C++20 and exceptions, as LibTorch's headers need), so this
// interface holds standard types only: the archive's bytes in, the loader
// as records and IR text (loadplan/Records/RecordedModule.h) or an error
// message out.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_LIB_IMPORT_TORCHEXPORTREADER_H
#define LOADPLAN_LIB_IMPORT_TORCHEXPORTREADER_H

#include "loadplan/Records/RecordedModule.h"

#include <string>
#include <string_view>

namespace mlir::loadplan::torch_export {

/// What reading an archive gave: the loader as the capture records one, or
/// the reason there is none.
struct ReadResult {
  bool ok = false;
  RecordedModule records;
  std::string error;
};

/// Reads the `.pt2` archive in `bytes` with LibTorch's archive reader and
/// its generated export schema, and records the loader it holds. Never
/// throws.
ReadResult readTorchExport(std::string_view bytes) noexcept;

} // namespace mlir::loadplan::torch_export

#endif // LOADPLAN_LIB_IMPORT_TORCHEXPORTREADER_H
