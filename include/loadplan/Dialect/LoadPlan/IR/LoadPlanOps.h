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

namespace mlir {
namespace loadplan {
/// The plan format's code of transform `name` (LOADPLAN_TRANSFORMS):
/// LOADPLAN_TRANSFORM_NONE without a name, and for an unknown one.
uint32_t getTransformCode(std::optional<StringRef> name);
} // namespace loadplan
} // namespace mlir

#endif // LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANOPS_H
