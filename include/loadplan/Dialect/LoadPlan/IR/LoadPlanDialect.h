//===- LoadPlanDialect.h - loadplan dialect ---------------------*- C++ -*-===//

#ifndef LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANDIALECT_H
#define LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANDIALECT_H

#include "mlir/IR/Dialect.h"

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanOpsDialect.h.inc"

#endif // LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANDIALECT_H
