// A checkpoint with members: each stage reduces its block once, and the plan
// has one entry per name, in arrival order, as for the module with every
// member a checkpoint of its own.

// RUN: loadplan-opt %s | loadplan-opt | FileCheck %s --check-prefix=ROUNDTRIP
// RUN: loadplan-opt %s --mlir-print-op-generic | loadplan-opt | FileCheck %s --check-prefix=ROUNDTRIP
// RUN: loadplan-opt %s --loadplan-expand-groups | FileCheck %s --check-prefix=EXPAND
// RUN: loadplan-opt %s --loadplan-pipeline | FileCheck %s
// RUN: loadplan-opt %s --loadplan-pipeline="json=%t.grouped.json plan=%t.grouped.plan" -o /dev/null
// RUN: loadplan-opt %s --loadplan-expand-groups | loadplan-opt --loadplan-pipeline="json=%t.expanded.json plan=%t.expanded.plan" -o /dev/null
// RUN: diff %t.grouped.json %t.expanded.json
// RUN: cmp %t.grouped.plan %t.expanded.plan
// RUN: FileCheck %s --check-prefix=JSON --input-file=%t.grouped.json

// Four experts of 2x4 bf16 rows (16 bytes each) in a fused w13 of gate and
// up halves, arriving gate.0, up.0, norm, gate.1, up.1, ...: expert e's
// gate goes to w13[e, 0:2], its up to w13[e, 2:4].
module {
  loadplan.storage @s_w13 size 128
  loadplan.storage @s_norm size 8
  loadplan.target @w13 module "experts" tensor "w13" storage @s_w13 byte_offset 0 stride [16, 4, 1] : tensor<4x4x4xbf16>
  loadplan.target @norm module "norm" tensor "weight" storage @s_norm byte_offset 0 stride [1] : tensor<4xbf16>

  loadplan.checkpoint "gate.0" : tensor<2x4xbf16> (%w)
      members ["gate.1" at 3 moved 32, "gate.2" at 5 moved 64, "gate.3" at 7 moved 96] {
    %0 = loadplan.slice %w dim 0 start 0 end 2 step 1 : tensor<2x4xbf16> -> tensor<2x4xbf16>
    loadplan.copy %0 to @w13 <offset = 0, shape = [2, 4], stride = [4, 1]> as bf16 : tensor<2x4xbf16>
  }
  loadplan.checkpoint "up.0" : tensor<2x4xbf16> (%w)
      members ["up.1" at 4 moved 32, "up.2" at 6 moved 64, "up.3" at 8 moved 96] {
    loadplan.copy %w to @w13 <offset = 8, shape = [2, 4], stride = [4, 1]> as bf16 : tensor<2x4xbf16>
  }
  loadplan.checkpoint "norm" : tensor<4xbf16> (%w) {
    loadplan.copy %w to @norm <offset = 0, shape = [4], stride = [1]> as bf16 : tensor<4xbf16>
  }
}

// ROUNDTRIP: loadplan.checkpoint "gate.0" : tensor<2x4xbf16> (%w) members ["gate.1" at 3 moved 32, "gate.2" at 5 moved 64, "gate.3" at 7 moved 96] {
// ROUNDTRIP: loadplan.checkpoint "up.0" : tensor<2x4xbf16> (%w) members ["up.1" at 4 moved 32, "up.2" at 6 moved 64, "up.3" at 8 moved 96] {
// ROUNDTRIP: loadplan.checkpoint "norm" : tensor<4xbf16> (%w) {

// Expanded, the names are in arrival order, each copy moved by its shift
// in bf16 elements (32 bytes are 16).
// EXPAND-NOT: members
// EXPAND:      loadplan.checkpoint "gate.0"
// EXPAND:        loadplan.copy %0 to @w13 <offset = 0,
// EXPAND:      loadplan.checkpoint "up.0"
// EXPAND-NEXT:   loadplan.copy %w to @w13 <offset = 8,
// EXPAND:      loadplan.checkpoint "norm"
// EXPAND:      loadplan.checkpoint "gate.1"
// EXPAND:        loadplan.copy %0 to @w13 <offset = 16,
// EXPAND:      loadplan.checkpoint "up.1"
// EXPAND-NEXT:   loadplan.copy %w to @w13 <offset = 24,
// EXPAND:      loadplan.checkpoint "gate.2"
// EXPAND:      loadplan.checkpoint "up.2"
// EXPAND:      loadplan.checkpoint "gate.3"
// EXPAND:        loadplan.copy %0 to @w13 <offset = 48,
// EXPAND:      loadplan.checkpoint "up.3"
// EXPAND-NEXT:   loadplan.copy %w to @w13 <offset = 56,

// The pipeline keeps the members and reduces each block once.
// CHECK:      loadplan.checkpoint "gate.0" : tensor<2x4xbf16> (%w) members ["gate.1" at 3 moved 32, "gate.2" at 5 moved 64, "gate.3" at 7 moved 96] {
// CHECK-NEXT:   loadplan.write @w13 box <[0, 2], [0, 4]> region <offset = 0, shape = [2, 4], stride = [4, 1]>
// CHECK-NEXT: }
// CHECK-NEXT: loadplan.checkpoint "up.0" : tensor<2x4xbf16> (%w) members ["up.1" at 4 moved 32, "up.2" at 6 moved 64, "up.3" at 8 moved 96] {
// CHECK-NEXT:   loadplan.write @w13 box <[0, 2], [0, 4]> region <offset = 8, shape = [2, 4], stride = [4, 1]>

// JSON:      "entries": {
// JSON-NEXT:   "gate.0": {
// JSON:          "offset": 0,
// JSON:        "up.0": {
// JSON:          "offset": 8,
// JSON:        "norm": {
// JSON:        "gate.1": {
// JSON:          "offset": 16,
// JSON:        "up.1": {
// JSON:          "offset": 24,
// JSON:        "gate.2": {
// JSON:          "offset": 32,
// JSON:        "up.2": {
// JSON:          "offset": 40,
// JSON:        "gate.3": {
// JSON:          "offset": 48,
// JSON:        "up.3": {
// JSON:          "offset": 56,
// JSON:      "stats": {
// JSON-NEXT:   "names": 9,
// JSON-NEXT:   "direct": 9,
