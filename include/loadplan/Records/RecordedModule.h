//===- RecordedModule.h - A loader as a front end records it ----*- C++ -*-===//
//
// What both front ends hand the compiler: the capture (through
// loadplan._native.compile_records and records_ir) and the torch.export
// importer (lib/Import, whose LibTorch side fills it): records
// (RecordOps.h) of the storages and targets, and of each checkpoint's ops,
// with the tables of types and strings they index. No IR text: the module
// RecordBuilder.h makes of it is the only spelling of the IR, as MLIR's
// printer prints it. Plain C++: the importer's LibTorch side includes it
// too.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RECORDS_RECORDEDMODULE_H
#define LOADPLAN_RECORDS_RECORDEDMODULE_H

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace mlir::loadplan {

struct RecordedModule {
  /// The storage and target records, encoded as `ops` is.
  std::vector<int64_t> declarations;
  /// The type table: each type's shape and dtype code.
  std::vector<std::vector<int64_t>> typeShapes;
  std::vector<uint32_t> typeDtypes;
  /// The string table: op names, reasons, checkpoint names an apply
  /// combined, targets' module and tensor names. Views of bytes the front
  /// end holds, as the checkpoints' names are.
  std::vector<std::string_view> strings;
  /// Each checkpoint in arrival order, with its items `ops[begin, end)`.
  struct Checkpoint {
    /// The name's bytes, which the front end holds for as long as this
    /// does: a Python str's UTF-8 (copying 50,000 names into strings to
    /// free them again cost a few milliseconds), or `stringStorage`.
    std::string_view name;
    /// Its type, an index into the type table.
    int64_t type = 0;
    size_t begin = 0, end = 0;
  };
  std::vector<Checkpoint> checkpoints;
  /// The records, one after another: each is its length n > 0, then its n
  /// ints (code and fields).
  std::vector<int64_t> ops;
  /// Names and strings a front end does not hold itself (the importer's);
  /// a deque, so that the views of earlier ones stay valid as it grows.
  std::deque<std::string> stringStorage;
};

} // namespace mlir::loadplan

#endif // LOADPLAN_RECORDS_RECORDEDMODULE_H
