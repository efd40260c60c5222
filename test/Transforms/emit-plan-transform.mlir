// RUN: loadplan-opt --loadplan-pipeline --loadplan-emit-plan-json=%t.json %s | FileCheck %s --check-prefix=IR
// RUN: FileCheck %s --input-file=%t.json
// RUN: loadplan-opt --loadplan-pipeline --loadplan-report %s -o /dev/null 2>&1 | FileCheck %s --check-prefix=REPORT

// Transforming writes through the pipeline: a Marlin MoE layer's gate rows
// at tensor parallelism 2, rank 0 (96 of 192 rows: one tile of 64 rows and
// two subtiles of 16, so two writes that continue one another in the box
// but not in the transform's output), padded to 128 rows. Merging leaves
// them apart; the plan records their transform.

module {
  loadplan.storage @s size 8192
  loadplan.target @w13 module "experts" tensor "w13_weight_packed" storage @s byte_offset 0 stride [512, 1] : tensor<4x512xi32>
  loadplan.checkpoint "experts.0.gate_proj.weight_packed" : tensor<192x8xi32> (%w) {
    loadplan.write @w13 box <[0, 64], [0, 8]> region <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> transform "marlin_w4"
    loadplan.write @w13 box <[64, 96], [0, 8]> region <offset = 128, shape = [4, 2, 32], stride = [512, 1, 4]> transform "marlin_w4"
  }
  loadplan.checkpoint "experts.0.up_proj.weight_packed" : tensor<192x8xi32> (%w) {
    loadplan.write @w13 box <[0, 64], [0, 8]> region <offset = 256, shape = [4, 4, 32], stride = [512, 1, 4]> transform "marlin_w4"
    loadplan.write @w13 box <[64, 96], [0, 8]> region <offset = 384, shape = [4, 2, 32], stride = [512, 1, 4]> transform "marlin_w4"
  }
}

// IR-LABEL: loadplan.checkpoint "experts.0.gate_proj.weight_packed"
// IR-NEXT:    loadplan.write @w13 box <[0, 64], [0, 8]> region <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> transform "marlin_w4"
// IR-NEXT:    loadplan.write @w13 box <[64, 96], [0, 8]> region <offset = 128, shape = [4, 2, 32], stride = [512, 1, 4]> transform "marlin_w4"
// IR-NEXT:  }

// CHECK:      "experts.0.gate_proj.weight_packed": {
// CHECK-NEXT:   "kind": "direct",
// CHECK-NEXT:   "dtype": "int32",
// CHECK:        "writes": [
// CHECK-NEXT:     {
// CHECK-NEXT:       "target": 0,
// CHECK-NEXT:       "box": [
// CHECK:            "transform": "marlin_w4",
// CHECK-NEXT:       "region": {
// CHECK-NEXT:         "offset": 0,

// Coverage counts the words the transforms write: what no name writes is
// exactly the padding, rows 96 to 128 of each half (subtiles 2 and 3 of the
// second tile: 2 x 32 words in each of 4 rows, per half), the first of it
// at word 130 (lane 0 of subtile 2).
// REPORT: remark: target 'experts.w13_weight_packed' has 2048 bytes no name writes (first gap: bytes [520, 528) of storage @s)
// REPORT: load plan: 2 names: 2 direct
