//===- Archive.h - The .pt2 archive of a torch.export loader ----*- C++ -*-===//
//
// A `.pt2` archive written by `torch.export.save`, read with LibTorch's own
// zip reader (`caffe2::serialize::PyTorchStreamReader`), and the entries the
// importer takes from it: the program (`models/<name>.json`, deserialized
// with the schema types LibTorch ships) and the weights config that says
// which parameters and buffers were saved as one tensor.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_LIB_IMPORT_ARCHIVE_H
#define LOADPLAN_LIB_IMPORT_ARCHIVE_H

#include <torch/csrc/utils/generated_serialization_types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace caffe2::serialize {
class PyTorchStreamReader;
} // namespace caffe2::serialize

namespace mlir::loadplan::torch_export {

namespace schema = torch::_export;

/// A torch.export archive in memory. Every archive is hostile until
/// checked: each accessor fails (ImportError) with the user's message for
/// an entry that is missing or malformed.
class Archive {
public:
  /// Opens the zip archive in `bytes`, which must outlive it; fails for
  /// input that is no readable zip, or a zip that is no torch.export
  /// archive (no `archive_format` "pt2").
  explicit Archive(std::string_view bytes);
  ~Archive();

  /// Whether the archive has the record `name`.
  bool hasRecord(const std::string &name);
  /// The bytes of the record `name`, which must exist.
  std::string readRecord(const std::string &name);
  /// The size in bytes of the record `name`, which must exist.
  int64_t recordSize(const std::string &name);

  /// The record of the program: `models/model.json` (torch.export.save's
  /// name), else the only `models/*.json`.
  std::string programRecord();
  /// The program in `record`, checked before it is deserialized: the
  /// generated readers default every missing field, so a program without a
  /// graph or of another schema would read as an empty one.
  schema::ExportedProgram readProgram(const std::string &record);
  /// The weights config of the program in `programRecord`
  /// (`data/weights/<name>_weights_config.json`); none where the archive
  /// has none.
  std::optional<schema::PayloadConfig>
  readWeightsConfig(const std::string &programRecord);

private:
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
};

} // namespace mlir::loadplan::torch_export

#endif // LOADPLAN_LIB_IMPORT_ARCHIVE_H
