//===- RecordedModule.h - A loader as a front end records it ----*- C++ -*-===//
//
// What both front ends hand the compiler: the capture (through
// loadplan._native.compile_records and records_ir) and the torch.export
// importer (lib/Import, whose LibTorch side fills it). The declarations are
// IR text; each checkpoint is a list of items, nearly all records
// (RecordOps.h), the few others lines of IR text for ops that are no
// record (`apply`, `value_read`, `constant_write`, ...), which name the
// block's values as the records number them (%w, %0, %1, ...).
// RecordBuilder.h makes the module of it. Plain C++: the importer's
// LibTorch side includes it too.
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
  /// `module { storages, targets }`.
  std::string text;
  /// The type table: each type's shape and dtype code.
  std::vector<std::vector<int64_t>> typeShapes;
  std::vector<uint32_t> typeDtypes;
  /// Each checkpoint in arrival order, with its items `ops[begin, end)`.
  struct Checkpoint {
    /// The name's bytes, which the front end holds for as long as this
    /// does: a Python str's UTF-8 (copying 50,000 names into strings to
    /// free them again cost a few milliseconds), or `nameStorage`.
    std::string_view name;
    /// Its type, an index into the type table.
    int64_t type = 0;
    size_t begin = 0, end = 0;
  };
  std::vector<Checkpoint> checkpoints;
  /// The items, one after another: a record is its length n > 0, then its
  /// n ints (code and fields); a line of text is 0, then its index in
  /// `lines`.
  std::vector<int64_t> ops;
  std::vector<std::string> lines;
  /// Names a front end does not hold itself (the importer's); a deque, so
  /// that the views of earlier ones stay valid as it grows.
  std::deque<std::string> nameStorage;
};

} // namespace mlir::loadplan

#endif // LOADPLAN_RECORDS_RECORDEDMODULE_H
