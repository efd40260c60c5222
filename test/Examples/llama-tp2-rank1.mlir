// The bundled example compiles to the hand-checked plan: each shard of the
// fused qkv and gate_up parameters is one box of its checkpoint tensor,
// written at its offset in the fused parameter.

// RUN: loadplan-opt %loadplan_src/examples/llama_tp2_rank1.mlir | loadplan-opt | FileCheck %s --check-prefix=ROUNDTRIP
// RUN: loadplan-opt --loadplan-pipeline --loadplan-emit-plan-json=%t.json %loadplan_src/examples/llama_tp2_rank1.mlir -o /dev/null
// RUN: FileCheck %s --input-file=%t.json

// ROUNDTRIP-LABEL: loadplan.checkpoint "model.layers.0.self_attn.q_proj.weight"
// ROUNDTRIP: loadplan.slice %w dim 0 start 8 end 16 step 1

// CHECK:      "version": 4,
// CHECK:      "targets": [
// CHECK:          "module": "model.layers.0.self_attn.qkv_proj",
// CHECK-NEXT:     "tensor": "weight",
// CHECK-NEXT:     "storage": 0,
// CHECK-NEXT:     "byte_offset": 0,
// CHECK:      "entries": {
// CHECK-NEXT:   "model.layers.0.self_attn.q_proj.weight": {
// CHECK-NEXT:     "kind": "direct",
// CHECK-NEXT:     "dtype": "bfloat16",
// CHECK:          "reason": null,
// rank 1 of 2 holds heads 2..3 of q: rows 8..16, at the start of qkv.
// CHECK:          "boxes": [
// CHECK-NEXT:       [
// CHECK-NEXT:         [
// CHECK-NEXT:           8,
// CHECK-NEXT:           16
// CHECK-NEXT:         ],
// CHECK-NEXT:         [
// CHECK-NEXT:           0,
// CHECK-NEXT:           16
// CHECK-NEXT:         ]
// CHECK-NEXT:       ]
// CHECK-NEXT:     ],
// CHECK:              "target": 0,
// CHECK:              "region": {
// CHECK-NEXT:           "offset": 0,
// k_proj: KV head 1 (rows 4..8) goes after the 8 q rows: offset 8 * 16.
// CHECK:        "model.layers.0.self_attn.k_proj.weight": {
// CHECK:          "kind": "direct",
// CHECK:            "offset": 128,
// CHECK:        "model.layers.0.self_attn.v_proj.weight": {
// CHECK:            "offset": 192,
// o_proj is row-parallel: columns 8..16 of each row.
// CHECK:        "model.layers.0.self_attn.o_proj.weight": {
// CHECK:          "boxes": [
// CHECK-NEXT:       [
// CHECK-NEXT:         [
// CHECK-NEXT:           0,
// CHECK-NEXT:           16
// CHECK-NEXT:         ],
// CHECK-NEXT:         [
// CHECK-NEXT:           8,
// CHECK-NEXT:           16
// CHECK-NEXT:         ]
// CHECK:        "model.layers.0.mlp.up_proj.weight": {
// CHECK:            "offset": 256,
// CHECK:      "stats": {
// CHECK-NEXT:   "names": 9,
// CHECK-NEXT:   "direct": 9,
// CHECK-NEXT:   "fallback": 0,
// CHECK-NEXT:   "unneeded": 0,
