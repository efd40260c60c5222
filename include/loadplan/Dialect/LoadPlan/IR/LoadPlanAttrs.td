//===- LoadPlanAttrs.td - loadplan attributes --------------*- tablegen -*-===//
//
// Layouts, boxes and regions: the integer geometry of a load plan.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANATTRS_TD
#define LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANATTRS_TD

include "loadplan/Dialect/LoadPlan/IR/LoadPlanDialect.td"
include "mlir/IR/AttrTypeBase.td"

class LoadPlan_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<LoadPlan_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def LoadPlan_LayoutAttr : LoadPlan_Attr<"Layout", "layout"> {
  let summary = "A strided layout: as_strided arguments in elements";
  let description = [{
    `offset`, `shape` and `stride` as torch's `as_strided` takes them, in
    elements of the tensor's dtype. Element `(i0, ..., in)` sits at
    `offset + sum(ik * stride[k])`. Strides may be 0 (a broadcast), never
    negative.

    ```mlir
    #loadplan.layout<offset = 32, shape = [4, 8], stride = [8, 1]>
    ```
  }];
  let parameters = (ins "int64_t":$offset,
                        ArrayRefParameter<"int64_t">:$shape,
                        ArrayRefParameter<"int64_t">:$stride);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Number of elements the layout addresses.
    int64_t getNumElements() const;
    /// One past the largest element index the layout reaches, relative to
    /// its start (0 when it addresses no element).
    int64_t getExtent() const;
  }];
}

def LoadPlan_BoxAttr : LoadPlan_Attr<"Box", "box"> {
  let summary = "A box of a checkpoint tensor: one [start, stop) per dim";
  let description = [{
    The part of a checkpoint tensor a write copies, one half-open range per
    dim of the checkpoint tensor's own (contiguous) shape.

    ```mlir
    #loadplan.box<[0, 4], [0, 6]>
    ```
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$starts,
                        ArrayRefParameter<"int64_t">:$stops);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Number of dims of the box.
    unsigned getRank() const { return getStarts().size(); }
    /// Number of checkpoint elements in the box.
    int64_t getNumElements() const;
  }];
}

def LoadPlan_RegionAttr : LoadPlan_Attr<"Region", "region"> {
  let summary = "A strided destination region relative to a target";
  let description = [{
    `as_strided` arguments relative to the start of a target, in elements
    of the checkpoint tensor's dtype. Its shape is the shape of the write's
    box, possibly with dims split. Every element is written once: a dim of
    more than one element has a positive stride.

    ```mlir
    #loadplan.region<offset = 0, shape = [4, 6], stride = [1, 4]>
    ```
  }];
  let parameters = (ins "int64_t":$offset,
                        ArrayRefParameter<"int64_t">:$shape,
                        ArrayRefParameter<"int64_t">:$stride);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Number of elements the region addresses.
    int64_t getNumElements() const;
    /// One past the largest element index the region reaches.
    int64_t getExtent() const;
  }];
}

#endif // LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANATTRS_TD
