//===- LoadPlanOps.h - loadplan operations ----------------------*- C++ -*-===//

#ifndef LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANOPS_H
#define LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANOPS_H

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanAttrs.h"
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir {
namespace loadplan {
class CheckpointOp;
} // namespace loadplan
} // namespace mlir

#define GET_OP_CLASSES
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanOps.h.inc"

#endif // LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANOPS_H
