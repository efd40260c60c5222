//===- RecordOps.h - The ops front ends record as integers ------*- C++ -*-===//
//
// Both front ends, the capture (python/loadplan/capture/trace.py) and the
// torch.export importer (lib/Import), record every op of a loader, and the
// declarations of the targets it writes, as tuples of integers; the record
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
//   copy           source, source type, target, dtype code, offset,
//                  shape..., stride..., then for a copy through a
//                  transform its code (LOADPLAN_TRANSFORMS): an odd count
//                  of fields after the offset says it is there
//   cat            result, result type, dim, inputs...
//   value_read     input, op
//   meta_failure   op, inputs...
//   apply          op, reason (-1: none), input count, inputs...,
//                  name count, names..., then each result's value and type
//   inplace_write  op, target (-1: none), inputs...
//   write_other    op, inputs...
//   read_target    target, op
//   constant_write op, target, dtype code, offset, shape..., stride...
// and the module's declarations, before every checkpoint:
//   storage        size (its symbol is @s<i> for the i-th storage)
//   target         module, tensor, storage, byte offset, type, stride...
//                  (its symbol is @t<i> for the i-th target)
// Values count from 0 in their checkpoint's block; -1 is the incoming
// tensor. Types index the records' type table, and op names (`aten.exp`),
// reasons, the other names an apply combined and the module and tensor
// names of targets index its string table. Plain C++: the importer's
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
  X(copy, kAnyInts)                                                            \
  X(cat, kAnyInts)                                                             \
  X(value_read, 2)                                                             \
  X(meta_failure, kAnyInts)                                                    \
  X(apply, kAnyInts)                                                           \
  X(inplace_write, kAnyInts)                                                   \
  X(write_other, kAnyInts)                                                     \
  X(read_target, 2)                                                            \
  X(constant_write, kAnyInts)                                                  \
  X(storage, 1)                                                                \
  X(target, kAnyInts)

namespace mlir::loadplan {

/// How many ints a view op takes after its types, and how many fields any
/// other op has: kAnyInts for a list, kRankPlusOne for an offset and a
/// stride per result dim.
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

/// Whether `op` is a view op (the ops up to copy): its fields start with
/// result, input, input type, result type.
inline constexpr bool isViewRecord(RecordOp op) { return op < RecordOp::copy; }

/// Whether `op` declares the module's storages and targets: it is in no
/// checkpoint.
inline constexpr bool isDeclarationRecord(RecordOp op) {
  return op == RecordOp::storage || op == RecordOp::target;
}

} // namespace mlir::loadplan

#endif // LOADPLAN_RECORDS_RECORDOPS_H
