//===- Passes.td - loadplan passes -------------------------*- tablegen -*-===//
//
// The stages of the load-plan pipeline, in order: fold views, reduce copies
// to boxes, detect fallbacks, merge writes, detect overlaps, check coverage,
// emit the plan.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_TRANSFORMS_PASSES_TD
#define LOADPLAN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def ExpandGroups : Pass<"loadplan-expand-groups", "::mlir::ModuleOp"> {
  let summary = "Make each member of a checkpoint a checkpoint of its own";
  let description = [{
    Replaces every `loadplan.checkpoint` with members by one checkpoint per
    name: the member's is the block with its copies and writes moved by the
    member's shift. The checkpoints are then in arrival order. No stage
    needs it (each handles members itself, and expands the module where a
    name's outcome depends on the others); it shows a module name by name.
  }];
  let dependentDialects = ["::mlir::loadplan::LoadPlanDialect"];
}

def FoldViews : Pass<"loadplan-fold-views", "::mlir::ModuleOp"> {
  let summary = "Fold view chains into strided layouts of the checkpoint tensor";
  let description = [{
    Rewrites every chain of view ops on an incoming tensor into one
    `loadplan.as_strided` of the incoming tensor: the offset, shape and
    strides of the view in the contiguous checkpoint tensor. `clone` keeps
    its input's layout (it carries the same elements). A reshape that no
    strides express (it would copy a non-contiguous view) becomes a
    `loadplan.apply` of the op, so a copy from it falls back with a reason.
  }];
  let dependentDialects = ["::mlir::loadplan::LoadPlanDialect"];
  let statistics = [
    Statistic<"numFolded", "folded-views", "Number of view ops folded">,
    Statistic<"numUnfoldable", "unfoldable-views",
              "Number of views that are not strided layouts">,
  ];
}

def ToBoxes : Pass<"loadplan-to-boxes", "::mlir::ModuleOp"> {
  let summary = "Reduce each copy to a box of the checkpoint tensor and a region";
  let description = [{
    Replaces each `loadplan.copy` whose source is a strided layout of the
    incoming tensor with a `loadplan.write`: the box of the checkpoint
    tensor it copies and the region of the target its elements go to, in
    elements of the dtype written. A copy across dtypes, or of a
    `loadplan.convert` chain, is a write that converts (`as DTYPE`) where
    the executors do that conversion (bf16, f16, f32, f8E4M3FN, f8E5M2) and
    the chain rounds as one conversion. Dims of the copy that span several
    checkpoint dims (a flatten) are split. A copy that is not a copy of a
    box (a step slice, a broadcast, a cast no write does, a destination
    viewed with another element size, a source without a layout) gets a
    `loadplan.fallback` with the reason before it and stays, so later
    stages still see the bytes it writes. Copies of no element vanish. A
    copy through a transform (`transform "marlin_w4"`) is a transforming
    write of its source's box, its destination the region as it is, where
    the source is a box of the 2-d checkpoint tensor in row-major order
    (rows along its dim 0, columns along its dim 1); otherwise it falls
    back.
  }];
  let dependentDialects = ["::mlir::loadplan::LoadPlanDialect"];
  let statistics = [
    Statistic<"numWrites", "writes", "Number of copies reduced to writes">,
    Statistic<"numConverting", "converting-copies",
              "Number of those copies that convert elements">,
    Statistic<"numTransforming", "transforming-copies",
              "Number of those copies that write through a transform">,
    Statistic<"numRefused", "refused-copies",
              "Number of copies that are not copies of a box">,
  ];
}

def DetectFallbacks : Pass<"loadplan-detect-fallbacks", "::mlir::ModuleOp"> {
  let summary = "Turn recorded events into each name's fallback reason";
  let description = [{
    Gives each checkpoint at most one `loadplan.fallback`, with the reason
    of its first event in program order: a value read or an op that fails
    on meta (these stop the loader: the name's writes are dropped), an op
    that is not a view, a cast no write converts, an in-place write, a copy
    into a tensor that is not a target, a refused copy. A `loadplan.read_target` makes the
    last name written into that target's storage a fallback (or, when none
    wrote it yet, the name being loaded). Errors: a name declared twice, and
    fallback names whose own loader writes nothing ("lonely": their loader
    combines several checkpoint tensors).
  }];
  let dependentDialects = ["::mlir::loadplan::LoadPlanDialect"];
  let statistics = [
    Statistic<"numFallbacks", "fallbacks", "Number of fallback names">,
  ];
}

def MergeWrites : Pass<"loadplan-merge-writes", "::mlir::ModuleOp"> {
  let summary = "Merge writes of one name that continue one another";
  let description = [{
    Two writes of one name into one target merge when their boxes differ in
    exactly one dim, where the second continues the first, and the
    destination continues with the same stride there (a per-expert or
    per-row loop becomes one write).
  }];
  let statistics = [
    Statistic<"numMerged", "merged-writes", "Number of writes merged away">,
  ];
}

def DetectOverlaps : Pass<"loadplan-detect-overlaps", "::mlir::ModuleOp"> {
  let summary = "Make names whose writes share bytes fall back";
  let description = [{
    Computes the byte runs of every write and of every refused copy, per
    storage, and sweeps them in order: names whose bytes meet another
    name's fall back ("writes overlap with 'x'"), since direct writes land
    in any order. A write with more runs than `max-runs` counts as its
    covering span.
  }];
  let options = [
    Option<"maxRuns", "max-runs", "int64_t", /*default=*/"4096",
           "Runs per write past which its covering span is used">,
  ];
  let statistics = [
    Statistic<"numOverlapping", "overlapping-names",
              "Number of names made fallbacks by overlaps">,
  ];
}

def CheckCoverage : Pass<"loadplan-check-coverage", "::mlir::ModuleOp"> {
  let summary = "Report target bytes that nothing writes";
  let description = [{
    Emits a remark for each target with bytes that no direct write, no
    fallback name's copy and no constant write covers, with the first gap;
    the engine uses this to refuse incomplete metadata.
  }];
  let options = [
    Option<"maxRuns", "max-runs", "int64_t", /*default=*/"4096",
           "Runs per write past which its covering span is used">,
  ];
  let statistics = [
    Statistic<"numUncoveredBytes", "uncovered-bytes",
              "Number of target bytes nothing writes">,
    Statistic<"numUncoveredTargets", "uncovered-targets",
              "Number of targets with bytes nothing writes">,
  ];
}

def EmitPlan : Pass<"loadplan-emit-plan", "::mlir::ModuleOp"> {
  let summary = "Write the plan as a binary plan file";
  let description = [{
    Writes the plan of the module to `file` in the runtime's binary format
    (runtime/include/loadplan/plan_format.h): for every checkpoint its kind
    (`direct`, `fallback`, `unneeded`), dtype, shape, reason, boxes and
    writes; the storages and targets; and the fingerprint of the target
    layout. `loadplan-opt --loadplan-emit-plan=FILE` is short for
    `--loadplan-emit-plan=file=FILE`.
  }];
  let options = [
    Option<"file", "file", "std::string", /*default=*/"\"\"",
           "Write the binary plan to this file">,
  ];
}

def EmitPlanJson : Pass<"loadplan-emit-plan-json", "::mlir::ModuleOp"> {
  let summary = "Write the plan as JSON";
  let description = [{
    The same plan as `--loadplan-emit-plan`, as JSON for humans and tests:
    `{"version", "fingerprint", "targets": [...], "entries": {NAME: {"kind",
    "dtype", "shape", "reason", "boxes", "writes"}}, "stats": {...}}`.
    `-` writes to stdout.
  }];
  let options = [
    Option<"file", "file", "std::string", /*default=*/"\"-\"",
           "Write the JSON plan to this file ('-': stdout)">,
  ];
}

def Report : Pass<"loadplan-report", "::mlir::ModuleOp"> {
  let summary = "Print the plan's report";
  let description = [{
    Prints, to stderr, the count and MiB of each kind, the fallbacks
    grouped by reason with up to 3 example names, and the compile time.
  }];
}

#endif // LOADPLAN_TRANSFORMS_PASSES_TD
