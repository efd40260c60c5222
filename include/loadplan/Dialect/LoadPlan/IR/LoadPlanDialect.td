//===- LoadPlanDialect.td - loadplan dialect definition ----*- tablegen -*-===//
//
// The loadplan dialect: a weight loader captured as view and copy ops on
// data-free checkpoint tensors, and the load plan the passes reduce it to.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANDIALECT_TD
#define LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANDIALECT_TD

include "mlir/IR/OpBase.td"

def LoadPlan_Dialect : Dialect {
  let name = "loadplan";
  let cppNamespace = "::mlir::loadplan";
  let summary = "A weight loader as view/copy ops, and the load plan it reduces to";
  let description = [{
    The `loadplan` dialect captures what a model's `load_weights` does with
    each incoming checkpoint tensor: the views it takes (`slice`, `select`,
    `transpose`, `view`, ...), the `copy` of a view into a live tensor (a
    *target*), and every event that makes a name impossible to write
    directly (a value read, a cast, an op that is not a view, a read of a
    target, ...).

    The module holds `loadplan.storage` and `loadplan.target` declarations
    and one `loadplan.checkpoint` per declared checkpoint name, in arrival
    order; the block of a checkpoint holds its loader's ops. Values are
    builtin ranked tensors: their shape and element type are the torch
    tensor's shape and dtype, and view ops follow torch's shape rules.

    The passes fold view chains into strided layouts (`loadplan.as_strided`
    on the checkpoint argument), reduce copies to `loadplan.write` ops (a box
    of the checkpoint tensor and a region of the target), turn events into
    `loadplan.fallback` ops with a reason, and emit the plan.
  }];
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

class LoadPlan_Op<string mnemonic, list<Trait> traits = []>
    : Op<LoadPlan_Dialect, mnemonic, traits>;

#endif // LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANDIALECT_TD
