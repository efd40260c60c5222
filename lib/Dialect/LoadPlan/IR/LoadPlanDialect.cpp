//===- LoadPlanDialect.cpp - loadplan dialect -----------------------------===//

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanDialect.h"
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanAttrs.h"
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanOps.h"

using namespace mlir;
using namespace mlir::loadplan;

#include "loadplan/Dialect/LoadPlan/IR/LoadPlanOpsDialect.cpp.inc"

void LoadPlanDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanOps.cpp.inc"
      >();
}
