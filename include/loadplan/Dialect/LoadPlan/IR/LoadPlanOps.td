//===- LoadPlanOps.td - loadplan operations ----------------*- tablegen -*-===//
//
// Declarations (storages, targets, checkpoint tensors), the torch view ops a
// loader applies to an incoming tensor, its copies into targets, the events
// that make a name a fallback, and the plan ops the passes produce.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANOPS_TD
#define LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANOPS_TD

include "loadplan/Dialect/LoadPlan/IR/LoadPlanDialect.td"
include "loadplan/Dialect/LoadPlan/IR/LoadPlanAttrs.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

// A trace: the value of an incoming checkpoint tensor or a view of one. Its
// element count and contiguous strides fit in int64_t, so that index
// arithmetic on its shape cannot overflow.
def LoadPlan_Trace : Type<
    And<[StaticShapeTensorOf<[AnyType]>.predicate,
         CPred<"::mlir::loadplan::fitsInt64("
               "::llvm::cast<::mlir::ShapedType>($_self).getShape())">]>,
    "statically shaped tensor of fewer than 2^63 elements",
    "::mlir::TensorType">;

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

def LoadPlan_StorageOp : LoadPlan_Op<"storage", [Symbol, HasParent<"ModuleOp">]> {
  let summary = "A live storage that targets view";
  let description = [{
    One storage of the live model (a torch `UntypedStorage`), `size` bytes
    long. Several targets may view one storage (a fused or flattened
    parameter buffer).

    ```mlir
    loadplan.storage @s0 size 1024
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, I64Attr:$size);
  let assemblyFormat = "$sym_name `size` $size attr-dict";
  let hasVerifier = 1;
}

def LoadPlan_TargetOp : LoadPlan_Op<"target", [
    Symbol, HasParent<"ModuleOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "A live tensor a loader may write";
  let description = [{
    A parameter or loadable buffer of the live model: its module path and
    tensor name, the storage it views, its byte offset in that storage, and
    its shape, strides (in elements) and dtype (the element type of `type`).

    ```mlir
    loadplan.target @t0 module "layers.0.self_attn.qkv_proj" tensor "weight"
        storage @s0 byte_offset 0 stride [8, 1] : tensor<32x8xbf16>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$module,
                       StrAttr:$tensor, FlatSymbolRefAttr:$storage,
                       I64Attr:$byte_offset, DenseI64ArrayAttr:$stride,
                       TypeAttrOf<LoadPlan_Trace>:$type);
  let assemblyFormat = [{
    $sym_name `module` $module `tensor` $tensor `storage` $storage
    `byte_offset` $byte_offset `stride` $stride `:` $type attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The target's tensor type (shape and dtype).
    RankedTensorType getTensorType() {
      return ::llvm::cast<RankedTensorType>(getType());
    }
    /// Bytes per element of the target's dtype.
    int64_t getItemSize();
    /// Number of bytes from the target's first byte to one past its last.
    int64_t getByteExtent();
  }];
}

def LoadPlan_CheckpointOp : LoadPlan_Op<"checkpoint", [
    HasParent<"ModuleOp">, IsolatedFromAbove, NoTerminator, SingleBlock,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "A declared checkpoint tensor and its loader's ops";
  let description = [{
    One checkpoint name as the trainer sends it, with its shape and dtype
    (`type`). The block argument is the incoming tensor, contiguous; the
    block holds what the loader did with it, in order. Checkpoints appear in
    arrival order, which decides who wrote a storage last.

    ```mlir
    loadplan.checkpoint "layers.0.self_attn.k_proj.weight" : tensor<8x8xbf16> (%w) {
      loadplan.copy %w to @t0 <offset = 128, shape = [8, 8], stride = [8, 1]> as bf16
          : tensor<8x8xbf16>
    }
    ```

    A checkpoint with `members` stands for several names of the same type
    whose loaders did the same, each into other bytes of the same targets
    (a layer's experts): member `"n" at P moved S` is the name `n`, which
    arrives at position `P`, and whose copies and writes are the block's
    moved by `S` bytes (a whole number of each one's elements). Positions
    count every name of the module in arrival order: members take the ones
    they give, and the checkpoints themselves the others, in module order.
    The block then holds only views, copies, writes and fallbacks, which
    stand for every member alike; `--loadplan-expand-groups` makes each
    member a checkpoint of its own.

    ```mlir
    loadplan.checkpoint "experts.0.w" : tensor<8xbf16> (%w)
        members ["experts.1.w" at 2 moved 16, "experts.2.w" at 4 moved 32] {
      loadplan.copy %w to @t0 <offset = 0, shape = [8], stride = [1]> as bf16
          : tensor<8xbf16>
    }
    ```
  }];
  // The name is a property, not a StringAttr: at 50,000 names, uniquing
  // each in the context's string table cost about 10 ms of a 0.15 s
  // compile, and no other op refers to a checkpoint by its attribute.
  // Members are properties for the same reason.
  let arguments = (ins StringProp:$name, TypeAttrOf<LoadPlan_Trace>:$type,
                       ArrayProp<StringProp>:$member_names,
                       IntArrayProp<I64Prop>:$member_positions,
                       IntArrayProp<I64Prop>:$member_shifts);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins "StringRef":$name, "RankedTensorType":$type)>];
  let extraClassDeclaration = [{
    /// The checkpoint tensor's type (shape and dtype).
    RankedTensorType getTensorType() {
      return ::llvm::cast<RankedTensorType>(getType());
    }
    /// The incoming tensor.
    BlockArgument getIncoming() { return getBody().front().getArgument(0); }
    Block &getBlock() { return getBody().front(); }
    /// Whether the op stands for members besides its own name.
    bool hasMembers() { return !getMemberNames().empty(); }
    /// How many names the op stands for: its own and its members'.
    size_t getNumNames() { return 1 + getMemberNames().size(); }
    /// Name `i` of getNumNames(): 0 is the op's own, i > 0 member i - 1.
    StringRef getNameAt(size_t i) {
      return i == 0 ? getName() : StringRef(getMemberNames()[i - 1]);
    }
    /// The bytes name `i`'s copies and writes are moved by.
    int64_t getShiftAt(size_t i) {
      return i == 0 ? 0 : getMemberShifts()[i - 1];
    }
    /// The least and greatest shift of its names (0 for the op's own).
    std::pair<int64_t, int64_t> getShiftRange();
  }];
}

//===----------------------------------------------------------------------===//
// View ops: torch views of an incoming tensor
//===----------------------------------------------------------------------===//

class LoadPlan_ViewOp<string mnemonic, list<Trait> traits = []>
    : LoadPlan_Op<mnemonic, !listconcat(traits, [Pure])> {
  let results = (outs LoadPlan_Trace:$result);
  let hasVerifier = 1;
}

def LoadPlan_SliceOp : LoadPlan_ViewOp<"slice"> {
  let summary = "aten.slice: a range of one dim, with a step";
  let description = [{
    `input[..., start:end:step, ...]` along `dim`, with torch's clamping:
    negative `start`/`end` count from the end, both are clamped to the dim,
    and a full slice has `end` = INT64_MAX. `step` is positive.

    ```mlir
    %1 = loadplan.slice %0 dim 0 start 8 end 16 step 1
        : tensor<24x8xbf16> -> tensor<8x8xbf16>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input, I64Attr:$dim, I64Attr:$start,
                       I64Attr:$end, I64Attr:$step);
  let assemblyFormat = [{
    $input `dim` $dim `start` $start `end` $end `step` $step attr-dict
    `:` type($input) `->` type($result)
  }];
}

def LoadPlan_SelectOp : LoadPlan_ViewOp<"select"> {
  let summary = "aten.select: one index of a dim, which is removed";
  let description = [{
    `input[..., index, ...]` along `dim`; a negative `index` counts from the
    end.

    ```mlir
    %1 = loadplan.select %0 dim 0 index 3 : tensor<8x16x4xbf16> -> tensor<16x4xbf16>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input, I64Attr:$dim, I64Attr:$index);
  let assemblyFormat = [{
    $input `dim` $dim `index` $index attr-dict `:` type($input) `->` type($result)
  }];
}

def LoadPlan_ViewShapeOp : LoadPlan_ViewOp<"view"> {
  let summary = "aten.view: the same elements in another shape, without a copy";
  let description = [{
    torch's `view`: the result has the same number of elements; it must be
    expressible with strides of the input (checked by
    `--loadplan-fold-views`, which knows the input's strides).

    ```mlir
    %1 = loadplan.view %0 : tensor<4x6xbf16> -> tensor<24xbf16>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def LoadPlan_ReshapeOp : LoadPlan_ViewOp<"reshape"> {
  let summary = "aten.reshape: the same elements in another shape";
  let description = [{
    torch's `reshape`: a view when the input's strides allow it, a copy
    otherwise. A reshape that would copy is not a strided layout of the
    checkpoint tensor; `--loadplan-fold-views` records it as a fallback.

    ```mlir
    %1 = loadplan.reshape %0 : tensor<4x6xbf16> -> tensor<2x12xbf16>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def LoadPlan_TransposeOp : LoadPlan_ViewOp<"transpose"> {
  let summary = "aten.transpose / aten.t: swap two dims";
  let description = [{
    Swaps `dim0` and `dim1` (negative dims count from the end). The
    capture records `t()` of a 2-d tensor as `transpose` of dims 0 and 1.

    ```mlir
    %1 = loadplan.transpose %0 dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input, I64Attr:$dim0, I64Attr:$dim1);
  let assemblyFormat = [{
    $input `dim0` $dim0 `dim1` $dim1 attr-dict `:` type($input) `->` type($result)
  }];
}

def LoadPlan_PermuteOp : LoadPlan_ViewOp<"permute"> {
  let summary = "aten.permute: reorder the dims";
  let description = [{
    Result dim `k` is input dim `dims[k]`; `dims` is a permutation.

    ```mlir
    %1 = loadplan.permute %0 dims [0, 2, 1] : tensor<4x6x8xbf16> -> tensor<4x8x6xbf16>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input, DenseI64ArrayAttr:$dims);
  let assemblyFormat = [{
    $input `dims` $dims attr-dict `:` type($input) `->` type($result)
  }];
}

def LoadPlan_ExpandOp : LoadPlan_ViewOp<"expand"> {
  let summary = "aten.expand: broadcast size-1 dims and add leading dims";
  let description = [{
    torch's `expand` to the result shape: new dims are added in front, and
    only dims of size 1 change size. The result repeats elements (stride 0).

    ```mlir
    %1 = loadplan.expand %0 : tensor<1x8xbf16> -> tensor<4x8xbf16>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def LoadPlan_UnsqueezeOp : LoadPlan_ViewOp<"unsqueeze"> {
  let summary = "aten.unsqueeze: insert a dim of size 1";
  let description = [{
    Inserts a dim of size 1 at `dim` (in `[-rank-1, rank]`).

    ```mlir
    %1 = loadplan.unsqueeze %0 dim 0 : tensor<8xbf16> -> tensor<1x8xbf16>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input, I64Attr:$dim);
  let assemblyFormat = [{
    $input `dim` $dim attr-dict `:` type($input) `->` type($result)
  }];
}

def LoadPlan_SqueezeOp : LoadPlan_ViewOp<"squeeze"> {
  let summary = "aten.squeeze: remove dims of size 1";
  let description = [{
    Removes the listed dims that have size 1 (others stay, as in torch);
    with no dims listed, removes every dim of size 1.

    ```mlir
    %1 = loadplan.squeeze %0 dims [0] : tensor<1x8xbf16> -> tensor<8xbf16>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input, DenseI64ArrayAttr:$dims);
  let assemblyFormat = [{
    $input `dims` $dims attr-dict `:` type($input) `->` type($result)
  }];
}

def LoadPlan_FlattenOp : LoadPlan_ViewOp<"flatten"> {
  let summary = "aten.flatten: merge a range of dims into one";
  let description = [{
    Merges dims `start_dim` to `end_dim` (inclusive) into one.

    ```mlir
    %1 = loadplan.flatten %0 start_dim 0 end_dim 1 : tensor<4x6x2xbf16> -> tensor<24x2xbf16>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input, I64Attr:$start_dim,
                       I64Attr:$end_dim);
  let assemblyFormat = [{
    $input `start_dim` $start_dim `end_dim` $end_dim attr-dict
    `:` type($input) `->` type($result)
  }];
}

def LoadPlan_UnflattenOp : LoadPlan_ViewOp<"unflatten"> {
  let summary = "aten.unflatten: split one dim into several";
  let description = [{
    Splits `dim` into the result's dims `dim` .. `dim + n - 1`, whose
    product is the input dim's size.

    ```mlir
    %1 = loadplan.unflatten %0 dim 0 : tensor<24x2xbf16> -> tensor<4x6x2xbf16>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input, I64Attr:$dim);
  let assemblyFormat = [{
    $input `dim` $dim attr-dict `:` type($input) `->` type($result)
  }];
}

def LoadPlan_AsStridedOp : LoadPlan_ViewOp<"as_strided"> {
  let summary = "aten.as_strided: a strided layout of the input's elements";
  let description = [{
    torch's `as_strided`: a layout of the input's storage, with an absolute
    offset (the capture records torch's default offset explicitly).
    `--loadplan-fold-views` rewrites every view chain into one `as_strided`
    of the incoming tensor, whose storage is the contiguous checkpoint
    tensor.

    ```mlir
    %1 = loadplan.as_strided %w <offset = 8, shape = [6, 4], stride = [1, 6]>
        : tensor<4x6xbf16> -> tensor<6x4xbf16>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input, LoadPlan_LayoutAttr:$layout);
  let assemblyFormat = [{
    $input $layout attr-dict `:` type($input) `->` type($result)
  }];
}

def LoadPlan_AliasOp : LoadPlan_ViewOp<"alias", [AllTypesMatch<["input", "result"]>]> {
  let summary = "aten.alias / aten.detach: the same tensor";
  let description = [{
    ```mlir
    %1 = loadplan.alias %0 : tensor<4x6xbf16>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def LoadPlan_CloneOp : LoadPlan_ViewOp<"clone", [AllTypesMatch<["input", "result"]>]> {
  let summary = "clone / contiguous / same-dtype _to_copy: same elements, new memory";
  let description = [{
    A copy that keeps every element in place: `clone()`, `contiguous()` and
    a `.to()` that does not change the dtype. A later `copy` from it is as
    direct as one from its input.

    ```mlir
    %1 = loadplan.clone %0 : tensor<6x4xbf16>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def LoadPlan_CatOp : LoadPlan_Op<"cat", [Pure]> {
  let summary = "aten.cat / aten.stack of traces of one name";
  let description = [{
    `torch.cat(inputs, dim)`: the inputs one after another along `dim`
    (non-negative), every other dim the same, all one dtype, all views of
    the same incoming tensor. The capture records `torch.stack(inputs, dim)`
    as `cat` of each input unsqueezed at `dim`. A copy from it is a copy of
    each input into its part of the destination; `--loadplan-fold-views`
    moves the views of a `cat` onto its inputs where the result is still a
    `cat`.

    ```mlir
    %3 = loadplan.cat (%0, %1, %2) dim 0 : (tensor<4x8xbf16>, tensor<2x8xbf16>, tensor<2x8xbf16>) -> tensor<8x8xbf16>
    ```
  }];
  let arguments = (ins Variadic<LoadPlan_Trace>:$inputs, I64Attr:$dim);
  let results = (outs LoadPlan_Trace:$result);
  let assemblyFormat = [{
    `(` $inputs `)` `dim` $dim attr-dict `:` functional-type($inputs, $result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Copies and fallback events
//===----------------------------------------------------------------------===//

class LoadPlan_EventOp<string mnemonic, list<Trait> traits = []>
    : LoadPlan_Op<mnemonic, !listconcat(traits,
          [HasParent<"CheckpointOp">])>;

def LoadPlan_CopyOp : LoadPlan_EventOp<"copy", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "dest.copy_(src) from a trace into a target";
  let description = [{
    The loader's `dest.copy_(src)` where `dest` views target `target`:
    `dest` is the layout relative to the target's first byte, in elements
    of `dest`'s dtype `dtype` (which may differ from the target's, as for
    `param.view(torch.uint8)`). torch broadcasts `src` to `dest`'s shape.

    `transform NAME` (one of the plan format's LOADPLAN_TRANSFORMS, as on
    `loadplan.write`) writes `src` through the transform: an engine's
    processing that lays out each atom of a 2-d tensor as its kernel reads
    it (Marlin's 4-bit repack for "marlin_w4"). `src` is then 2-d, of the
    transform's element type, and whole atoms (its rows and columns
    multiples of the atom's), `dtype` is that element type (a transforming
    copy does not convert), and `dest` splits the transform's output of
    `src` (for "marlin_w4" and `src` [R, C]: [C / 2, R / 16, 32], atom
    columns, atom rows, words) instead of `src`'s shape, with as many
    elements as `src`. `--loadplan-to-boxes` makes it a transforming write
    where `src` is a box of the checkpoint tensor in row-major order.

    ```mlir
    loadplan.copy %1 to @t0 <offset = 0, shape = [6, 4], stride = [4, 1]> as bf16
        : tensor<6x4xbf16>
    loadplan.copy %w to @t1 <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32
        transform "marlin_w4" : tensor<64x8xi32>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$src, FlatSymbolRefAttr:$target,
                       LoadPlan_LayoutAttr:$dest, TypeAttr:$dtype,
                       OptionalAttr<StrAttr>:$transform);
  let assemblyFormat = [{
    $src `to` $target $dest `as` $dtype (`transform` $transform^)? attr-dict
    `:` type($src)
  }];
  let extraClassDeclaration = [{
    /// The plan format's code of `transform`, as WriteOp's.
    uint32_t getTransformCode();
  }];
  let hasVerifier = 1;
}

def LoadPlan_ValueReadOp : LoadPlan_EventOp<"value_read"> {
  let summary = "The loader read a trace's values (.item(), tolist(), ...)";
  let description = [{
    A value read stops the loader: the name falls back and what it wrote
    before is dropped.

    ```mlir
    loadplan.value_read %w op "aten._local_scalar_dense" : tensor<bf16>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input, StrAttr:$op);
  let assemblyFormat = "$input `op` $op attr-dict `:` type($input)";
}

def LoadPlan_ApplyOp : LoadPlan_EventOp<"apply"> {
  let summary = "An op that is not a view, applied to traces";
  let description = [{
    Any other torch op on a trace (arithmetic, cat, an in-place op on the
    incoming tensor, ...), run on meta tensors during capture. Its results
    are traces without a layout: a copy from them is not a copy of
    checkpoint bytes. `names` lists other checkpoint names whose traces were
    arguments too (a loader that combines several incoming tensors).

    ```mlir
    %1 = loadplan.apply "aten.mul.Tensor" (%w) : (tensor<8xbf16>) -> tensor<8xbf16>
    ```
  }];
  let arguments = (ins StrAttr:$op, Variadic<LoadPlan_Trace>:$inputs,
                       OptionalAttr<StrArrayAttr>:$names,
                       OptionalAttr<StrAttr>:$reason);
  let results = (outs Variadic<LoadPlan_Trace>:$results);
  let assemblyFormat = [{
    $op `(` $inputs `)` attr-dict `:` functional-type($inputs, $results)
  }];
}

def LoadPlan_MetaFailureOp : LoadPlan_EventOp<"meta_failure"> {
  let summary = "An op on a trace that fails on meta tensors";
  let description = [{
    The op cannot run without data, so the loader stopped: the name falls
    back and what it wrote before is dropped.

    ```mlir
    loadplan.meta_failure "aten.nonzero" (%w) : tensor<8xbf16>
    ```
  }];
  let arguments = (ins StrAttr:$op, Variadic<LoadPlan_Trace>:$inputs);
  let assemblyFormat = "$op `(` $inputs `)` attr-dict `:` type($inputs)";
}

def LoadPlan_ConvertOp : LoadPlan_EventOp<"convert"> {
  let summary = "A dtype change of a trace (.to(dtype), _to_copy)";
  let description = [{
    The elements of the input converted. A copy of it (or of a chain of
    them) whose input is a strided layout of the checkpoint tensor becomes a
    converting write when the conversion is one the executors do (bf16,
    f16, f32, f8E4M3FN, f8E5M2 into one another) and the chain rounds as
    one conversion would; otherwise the name falls back with a reason that
    says which dtype to send instead.

    ```mlir
    %1 = loadplan.convert %w : tensor<8xbf16> -> tensor<8xf8E4M3FN>
    ```
  }];
  let arguments = (ins LoadPlan_Trace:$input);
  let results = (outs LoadPlan_Trace:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def LoadPlan_InplaceWriteOp : LoadPlan_EventOp<"inplace_write", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "A real tensor written by an op other than copy_ from a trace";
  let description = [{
    For example `param.add_(w)` or `torch.mul(w, 2, out=param)`. `target`
    names the written target, when it is one.

    ```mlir
    loadplan.inplace_write "aten.add_" (%w) into @t0 : tensor<8xbf16>
    ```
  }];
  let arguments = (ins StrAttr:$op, Variadic<LoadPlan_Trace>:$inputs,
                       OptionalAttr<FlatSymbolRefAttr>:$target);
  let assemblyFormat = [{
    $op `(` $inputs `)` (`into` $target^)? attr-dict `:` type($inputs)
  }];
}

def LoadPlan_ReadTargetOp : LoadPlan_EventOp<"read_target", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The loader read a target's values";
  let description = [{
    A real op read a target (`param.copy_(fn(param))`, `torch.equal(param,
    x)`, ...). The direct path would skip that read, so the last name
    written into the target's storage (or, if none, this one) falls back.

    ```mlir
    loadplan.read_target @t0 op "aten.mul.Tensor"
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$target, StrAttr:$op);
  let assemblyFormat = "$target `op` $op attr-dict";
}

def LoadPlan_WriteOtherOp : LoadPlan_EventOp<"write_other"> {
  let summary = "A copy from a trace into a tensor that is not a target";
  let description = [{
    ```mlir
    loadplan.write_other "aten.copy_" (%w) : tensor<8xbf16>
    ```
  }];
  let arguments = (ins StrAttr:$op, Variadic<LoadPlan_Trace>:$inputs);
  let assemblyFormat = "$op `(` $inputs `)` attr-dict `:` type($inputs)";
}

def LoadPlan_ConstantWriteOp : LoadPlan_EventOp<"constant_write", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "A constant written into a target (fill_, zero_)";
  let description = [{
    Happens during planning and stays out of the plan; the bytes count as
    covered for `--loadplan-check-coverage`. `dest` is relative to the
    target's first byte, in elements of `dtype`.

    ```mlir
    loadplan.constant_write "aten.fill_" @t0 <offset = 48, shape = [2, 8], stride = [8, 1]> as bf16
    ```
  }];
  let arguments = (ins StrAttr:$op, FlatSymbolRefAttr:$target,
                       LoadPlan_LayoutAttr:$dest, TypeAttr:$dtype);
  let assemblyFormat = "$op $target $dest `as` $dtype attr-dict";
}

//===----------------------------------------------------------------------===//
// Plan ops
//===----------------------------------------------------------------------===//

def LoadPlan_WriteOp : LoadPlan_EventOp<"write", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "A box of the checkpoint tensor copied into a target region";
  let description = [{
    The elements of `box`, in row-major box order, go to `region` of
    `target` (in elements of the dtype written, relative to the target's
    first byte). Without `as`, the write copies the checkpoint tensor's
    bytes; `as DTYPE` converts each element into DTYPE (bf16, f16, f32,
    f8E4M3FN and f8E5M2 into one another, with torch's rounding: see
    runtime/include/loadplan/convert.h), and the region counts DTYPE
    elements.

    `transform NAME` (one of the plan format's LOADPLAN_TRANSFORMS, for
    example "marlin_w4") writes the box as an engine's kernel lays it out:
    the box is cut into the transform's atoms (rows by columns of a 2-d
    checkpoint tensor of the transform's element type, counted from the
    box's first) and each atom becomes its words; the region receives the
    atoms in row-major order over (atom column, atom row), then each
    atom's words (runtime/include/loadplan/transform.h). A transforming
    write does not convert.

    ```mlir
    loadplan.write @t0 box <[0, 4], [0, 6]> region <offset = 0, shape = [4, 6], stride = [1, 4]>
    loadplan.write @t1 box <[0, 8]> region <offset = 0, shape = [8], stride = [1]> as f32
    loadplan.write @t2 box <[0, 64], [0, 8]> region <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> transform "marlin_w4"
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$target, LoadPlan_BoxAttr:$box,
                       LoadPlan_RegionAttr:$region,
                       OptionalAttr<TypeAttr>:$dtype,
                       OptionalAttr<StrAttr>:$transform);
  let assemblyFormat = [{
    $target `box` $box `region` $region (`as` $dtype^)?
    (`transform` $transform^)? attr-dict
  }];
  let extraClassDeclaration = [{
    /// The element type written: `dtype`, or the checkpoint tensor's.
    ::mlir::Type getWrittenType();
    /// The plan format's code of `transform` (LOADPLAN_TRANSFORM_NONE
    /// without one; 0 too for an unknown name, which the verifier refuses).
    uint32_t getTransformCode();
  }];
  let hasVerifier = 1;
}

def LoadPlan_FallbackOp : LoadPlan_EventOp<"fallback"> {
  let summary = "The name is not a plain copy of checkpoint bytes";
  let description = [{
    The name goes through the model's `load_weights`; `reason` says why, in
    words the user can act on. `stop` marks a reason that stopped the loader
    (its writes are dropped).

    ```mlir
    loadplan.fallback "casts bfloat16 to float64 at copy_ (send it as float64 to make it direct)"
    ```
  }];
  let arguments = (ins StrAttr:$reason, UnitAttr:$stop);
  let assemblyFormat = "$reason (`stop` $stop^)? attr-dict";
}

#endif // LOADPLAN_DIALECT_LOADPLAN_IR_LOADPLANOPS_TD
