//===- RecordOps.h - The ops front ends record as integers ------*- C++ -*-===//
//
// Both front ends, the capture (python/loadplan/capture/trace.py) and the
// torch.export importer (lib/Import), record the ops that make up nearly
// every loader, the view ops and copy_, as tuples of integers; the record
// builder (RecordBuilder.h) makes the dialect's ops of them, and the IR text
// of a record is what MLIR's printer prints of that op. This list is the
// one table of their codes: a code is the op's index here, and Python reads
// it as loadplan._native.RECORD_OPS. Which aten op becomes which records is
// AtenViews.h.
//
// Each op is X(name, ints) with ints as kRecordOpInts says. An entry is
// (code, fields...):
//   view ops   result, input, input type, result type, then the op's ints:
//     slice      dim, start, end, step
//     select     dim, index
//     transpose  dim0, dim1
//     permute    dims...
//     unsqueeze  dim
//     squeeze    dims...
//     flatten    start_dim, end_dim
//     unflatten  dim
//     as_strided offset, stride... (the shape is the result type's)
//     the others none
//   copy       source, source type, target index, dtype code, offset,
//              shape..., stride...
// Values count from 0 in their checkpoint's block; -1 is the incoming
// tensor. Types index the records' type table. Plain C++: the importer's
// LibTorch side includes it too.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RECORDS_RECORDOPS_H
#define LOADPLAN_RECORDS_RECORDOPS_H

#define LOADPLAN_RECORD_OPS(X)                                                 \
  X(slice, 4)                                                                  \
  X(select, 2)                                                                 \
  X(transpose, 2)                                                              \
  X(permute, kAnyInts)                                                         \
  X(unsqueeze, 1)                                                              \
  X(squeeze, kAnyInts)                                                         \
  X(flatten, 2)                                                                \
  X(unflatten, 1)                                                              \
  X(as_strided, kRankPlusOne)                                                  \
  X(view, 0)                                                                   \
  X(reshape, 0)                                                                \
  X(expand, 0)                                                                 \
  X(convert, 0)                                                                \
  X(alias, 0)                                                                  \
  X(clone, 0)                                                                  \
  X(copy, kAnyInts)

namespace mlir::loadplan {

/// How many ints a view op takes after its types: kAnyInts for a list of
/// dims, kRankPlusOne for an offset and a stride per result dim.
inline constexpr int kAnyInts = -1, kRankPlusOne = -2;

enum class RecordOp : int {
#define LOADPLAN_RECORD_OP_ENUM_(name, ints) name,
  LOADPLAN_RECORD_OPS(LOADPLAN_RECORD_OP_ENUM_)
#undef LOADPLAN_RECORD_OP_ENUM_
      count
};

inline constexpr const char *kRecordOpNames[] = {
#define LOADPLAN_RECORD_OP_NAME_(name, ints) #name,
    LOADPLAN_RECORD_OPS(LOADPLAN_RECORD_OP_NAME_)
#undef LOADPLAN_RECORD_OP_NAME_
};

inline constexpr int kRecordOpInts[] = {
#define LOADPLAN_RECORD_OP_INTS_(name, ints) ints,
    LOADPLAN_RECORD_OPS(LOADPLAN_RECORD_OP_INTS_)
#undef LOADPLAN_RECORD_OP_INTS_
};

} // namespace mlir::loadplan

#endif // LOADPLAN_RECORDS_RECORDOPS_H
