//===- LoadPlanAttrs.h - loadplan attributes --------------------*- C++ -*-===//

#ifndef LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANATTRS_H
#define LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"

#define GET_ATTRDEF_CLASSES
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanAttrs.h.inc"

#endif // LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANATTRS_H
