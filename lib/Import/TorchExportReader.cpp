//===- TorchExportReader.cpp - Read a torch.export loader -------*- C++ -*-===//
//
// The entry of the LibTorch side: opens the archive, imports its program,
// and turns every exception (ours with the user's message, LibTorch's and
// nlohmann_json's for what their readers refuse) into the error of the
// interface, which never throws.
//
//===----------------------------------------------------------------------===//

#include "TorchExportReader.h"

#include "Archive.h"
#include "ImportError.h"
#include "Importer.h"

#include <c10/util/Exception.h>

#include <nlohmann/json.hpp>

#include <exception>
#include <optional>

using namespace mlir::loadplan::torch_export;

static ReadResult readArchive(std::string_view bytes) {
  Archive archive(bytes);
  std::string record = archive.programRecord();
  schema::ExportedProgram program = archive.readProgram(record);
  // Which parameters and buffers were saved as one tensor.
  std::optional<schema::PayloadConfig> weights =
      archive.readWeightsConfig(record);
  ReadResult result;
  result.records =
      importProgram(program, weights ? &*weights : nullptr, archive);
  result.ok = true;
  return result;
}

ReadResult mlir::loadplan::torch_export::readTorchExport(
    std::string_view bytes) noexcept {
  ReadResult result;
  try {
    return readArchive(bytes);
  } catch (const ImportError &e) {
    result.error = e.what();
  } catch (const c10::Error &e) {
    result.error =
        "malformed program: " + firstLine(e.what_without_backtrace());
  } catch (const nlohmann::json::exception &e) {
    result.error = "malformed program: " + firstLine(e.what());
  } catch (const std::exception &e) {
    result.error = "malformed program: " + firstLine(e.what());
  } catch (...) {
    result.error = "malformed program";
  }
  return result;
}
