//===- Archive.cpp - The .pt2 archive of a torch.export loader --*- C++ -*-===//
//
// Nothing is parsed by hand: PyTorchStreamReader opens the zip (its own
// checks reject truncated or non-zip input) and nlohmann_json, through the
// readers of LibTorch's generated schema, the program. What those readers
// do not check (they default every missing field) is checked here first.
//
//===----------------------------------------------------------------------===//

#include "Archive.h"

#include "ImportError.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <exception>
#include <vector>

using namespace mlir::loadplan::torch_export;

/// The major version of the export schema that
/// generated_serialization_types.h describes (torch 2.14:
/// torch/_export/serde/schema.py, SCHEMA_VERSION = (8, 20)). Minor versions
/// only add fields, which the generated readers default.
static constexpr int64_t kSchemaMajor = 8;

namespace {
/// The archive's bytes, for PyTorchStreamReader.
class MemoryReadAdapter final : public caffe2::serialize::ReadAdapterInterface {
public:
  explicit MemoryReadAdapter(std::string_view bytes) : bytes(bytes) {}
  size_t size() const override { return bytes.size(); }
  size_t read(uint64_t pos, void *buf, size_t n,
              const char * /*what*/) const override {
    if (pos >= bytes.size())
      return 0;
    size_t count = std::min<uint64_t>(n, bytes.size() - pos);
    std::memcpy(buf, bytes.data() + pos, count);
    return count;
  }

private:
  std::string_view bytes;
};
} // namespace

Archive::Archive(std::string_view bytes) {
  using caffe2::serialize::PyTorchStreamReader;
  try {
    reader = std::make_unique<PyTorchStreamReader>(
        std::make_shared<MemoryReadAdapter>(bytes));
  } catch (const std::exception &e) {
    fail("not a readable .pt2 archive: " + firstLine(e.what()));
  }
  if (!hasRecord("archive_format") ||
      trim(readRecord("archive_format")) != "pt2")
    fail("not a torch.export archive (no archive_format 'pt2')");
}

Archive::~Archive() = default;

bool Archive::hasRecord(const std::string &name) {
  return reader->hasRecord(name);
}

std::string Archive::readRecord(const std::string &name) {
  auto [data, size] = reader->getRecord(name);
  return std::string(static_cast<const char *>(data.get()), size);
}

int64_t Archive::recordSize(const std::string &name) {
  return static_cast<int64_t>(reader->getRecordSize(name));
}

std::string Archive::programRecord() {
  std::string record = "models/model.json";
  if (hasRecord(record))
    return record;
  std::vector<std::string> models;
  for (const std::string &name : reader->getAllRecords())
    if (name.rfind("models/", 0) == 0 && name.size() > 12 &&
        name.compare(name.size() - 5, 5, ".json") == 0)
      models.push_back(name);
  if (models.empty())
    fail("the archive holds no exported program (no models/*.json)");
  if (models.size() > 1)
    fail("the archive holds " + std::to_string(models.size()) +
         " programs; loadplan-translate reads one");
  return models.front();
}

schema::ExportedProgram Archive::readProgram(const std::string &record) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(readRecord(record));
  } catch (const nlohmann::json::exception &e) {
    fail(record + " is not valid JSON: " + firstLine(e.what()));
  }
  if (!json.is_object())
    fail(record + " is not an exported program");
  if (!json.contains("schema_version") || !json["schema_version"].is_object() ||
      !json["schema_version"].contains("major") ||
      !json["schema_version"]["major"].is_number_integer())
    fail(record + " has no schema version");
  int64_t major = json["schema_version"]["major"].get<int64_t>();
  int64_t minor = json["schema_version"].value("minor", int64_t(0));
  if (major != kSchemaMajor)
    fail("unsupported export schema version " + std::to_string(major) + "." +
         std::to_string(minor) + " (this loadplan-translate reads version " +
         std::to_string(kSchemaMajor) + ".x, torch 2.14's)");
  const nlohmann::json *graph = nullptr;
  if (json.contains("graph_module") && json["graph_module"].is_object() &&
      json["graph_module"].contains("graph"))
    graph = &json["graph_module"]["graph"];
  if (!graph || !graph->is_object() || !graph->contains("nodes") ||
      !graph->contains("tensor_values") ||
      !json["graph_module"].contains("signature"))
    fail(record + " has no graph");
  return json.get<schema::ExportedProgram>();
}

std::optional<schema::PayloadConfig>
Archive::readWeightsConfig(const std::string &programRecord) {
  // models/<name>.json: the weights of <name>.
  std::string model = programRecord.substr(7, programRecord.size() - 12);
  std::string config = "data/weights/" + model + "_weights_config.json";
  if (!hasRecord(config))
    return std::nullopt;
  try {
    return nlohmann::json::parse(readRecord(config))
        .get<schema::PayloadConfig>();
  } catch (const std::exception &e) {
    fail(config + " is malformed: " + firstLine(e.what()));
  }
}
