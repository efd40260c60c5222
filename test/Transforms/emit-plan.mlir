// RUN: loadplan-opt --loadplan-emit-plan-json=%t.json %s -o /dev/null
// RUN: FileCheck %s --input-file=%t.json
// RUN: loadplan-opt --loadplan-report %s -o /dev/null 2>&1 | FileCheck %s --check-prefix=REPORT
// RUN: loadplan-opt --loadplan-emit-plan=%t.plan %s -o /dev/null
// RUN: head -c 8 %t.plan | FileCheck %s --check-prefix=MAGIC

// The plan of a compiled module: per name its kind, boxes and writes, as
// JSON, as a report, and as the binary plan file.

module {
  loadplan.storage @s_kv size 256
  loadplan.storage @s_scale size 16
  loadplan.target @kv module "attn.kv_proj" tensor "weight" storage @s_kv byte_offset 0 stride [8, 1] : tensor<16x8xbf16>
  loadplan.target @scale module "attn.kv_proj" tensor "weight_scale" storage @s_scale byte_offset 0 stride [1] : tensor<4xf32>
  // KV-head replication: one box, two writes.
  loadplan.checkpoint "k_proj.weight" : tensor<8x8xbf16> (%w) {
    loadplan.write @kv box <[4, 8], [0, 8]> region <offset = 0, shape = [4, 8], stride = [8, 1]>
    loadplan.write @kv box <[4, 8], [0, 8]> region <offset = 32, shape = [4, 8], stride = [8, 1]>
  }
  loadplan.checkpoint "v_proj.weight" : tensor<8x8xbf16> (%w) {
    loadplan.write @kv box <[0, 4], [0, 8]> region <offset = 64, shape = [4, 8], stride = [1, 4]>
  }
  loadplan.checkpoint "k_proj.weight_scale" : tensor<f32> (%w) {
    loadplan.fallback "its loader reads its values (aten._local_scalar_dense)" stop
  }
  loadplan.checkpoint "v_proj.weight_scale" : tensor<f32> (%w) {
    loadplan.fallback "its loader reads its values (aten._local_scalar_dense)" stop
  }
  loadplan.checkpoint "q_proj.bias" : tensor<4xbf16> (%w) {
    loadplan.fallback "casts bfloat16 to float32 at copy_ (send it as float32 to make it direct)"
    loadplan.copy %w to @scale <offset = 0, shape = [4], stride = [1]> as f32 : tensor<4xbf16>
  }
  // Another rank's expert: this rank needs none of it.
  loadplan.checkpoint "experts.7.w2" : tensor<4x4xbf16> (%w) {
  }
}

// CHECK:      "version": 4,
// CHECK-NEXT: "fingerprint": "{{[0-9a-f]{16}"}},
// CHECK-NEXT: "targets": [
// CHECK-NEXT:   {
// CHECK-NEXT:     "module": "attn.kv_proj",
// CHECK-NEXT:     "tensor": "weight",
// CHECK-NEXT:     "storage": 0,
// CHECK-NEXT:     "byte_offset": 0,
// CHECK-NEXT:     "shape": [
// CHECK-NEXT:       16,
// CHECK-NEXT:       8
// CHECK-NEXT:     ],
// CHECK-NEXT:     "stride": [
// CHECK-NEXT:       8,
// CHECK-NEXT:       1
// CHECK-NEXT:     ],
// CHECK-NEXT:     "dtype": "bfloat16"
// CHECK-NEXT:   },
// CHECK-NEXT:   {
// CHECK-NEXT:     "module": "attn.kv_proj",
// CHECK-NEXT:     "tensor": "weight_scale",
// CHECK-NEXT:     "storage": 1,
// CHECK:          "dtype": "float32"
// CHECK-NEXT:   }
// CHECK-NEXT: ],
// CHECK-NEXT: "entries": {

// One box for the two writes of the same box.
// CHECK-NEXT:   "k_proj.weight": {
// CHECK-NEXT:     "kind": "direct",
// CHECK-NEXT:     "dtype": "bfloat16",
// CHECK-NEXT:     "shape": [
// CHECK-NEXT:       8,
// CHECK-NEXT:       8
// CHECK-NEXT:     ],
// CHECK-NEXT:     "reason": null,
// CHECK-NEXT:     "boxes": [
// CHECK-NEXT:       [
// CHECK-NEXT:         [
// CHECK-NEXT:           4,
// CHECK-NEXT:           8
// CHECK-NEXT:         ],
// CHECK-NEXT:         [
// CHECK-NEXT:           0,
// CHECK-NEXT:           8
// CHECK-NEXT:         ]
// CHECK-NEXT:       ]
// CHECK-NEXT:     ],
// CHECK-NEXT:     "writes": [
// CHECK-NEXT:       {
// CHECK-NEXT:         "target": 0,
// CHECK-NEXT:         "box": [
// CHECK:              "region": {
// CHECK-NEXT:           "offset": 0,
// CHECK:            {
// CHECK-NEXT:         "target": 0,
// CHECK-NEXT:         "box": [
// CHECK-NEXT:           [
// CHECK-NEXT:             4,
// CHECK-NEXT:             8
// CHECK-NEXT:           ],
// CHECK:              "region": {
// CHECK-NEXT:           "offset": 32,
// CHECK-NEXT:           "shape": [
// CHECK-NEXT:             4,
// CHECK-NEXT:             8
// CHECK-NEXT:           ],
// CHECK-NEXT:           "stride": [
// CHECK-NEXT:             8,
// CHECK-NEXT:             1
// CHECK-NEXT:           ]
// CHECK-NEXT:         }
// CHECK-NEXT:       }
// CHECK-NEXT:     ]
// CHECK-NEXT:   },

// CHECK-NEXT:   "v_proj.weight": {
// CHECK-NEXT:     "kind": "direct",
// CHECK:            "region": {
// CHECK-NEXT:         "offset": 64,
// CHECK-NEXT:         "shape": [
// CHECK-NEXT:           4,
// CHECK-NEXT:           8
// CHECK-NEXT:         ],
// CHECK-NEXT:         "stride": [
// CHECK-NEXT:           1,
// CHECK-NEXT:           4
// CHECK-NEXT:         ]

// A fallback needs the whole tensor and writes nothing directly.
// CHECK:        "k_proj.weight_scale": {
// CHECK-NEXT:     "kind": "fallback",
// CHECK-NEXT:     "dtype": "float32",
// CHECK-NEXT:     "shape": [],
// CHECK-NEXT:     "reason": "its loader reads its values (aten._local_scalar_dense)",
// CHECK-NEXT:     "boxes": [
// CHECK-NEXT:       []
// CHECK-NEXT:     ],
// CHECK-NEXT:     "writes": []
// CHECK-NEXT:   },
// CHECK:        "q_proj.bias": {
// CHECK-NEXT:     "kind": "fallback",
// CHECK-NEXT:     "dtype": "bfloat16",
// CHECK-NEXT:     "shape": [
// CHECK-NEXT:       4
// CHECK-NEXT:     ],
// CHECK-NEXT:     "reason": "casts bfloat16 to float32 at copy_ (send it as float32 to make it direct)",
// CHECK-NEXT:     "boxes": [
// CHECK-NEXT:       [
// CHECK-NEXT:         [
// CHECK-NEXT:           0,
// CHECK-NEXT:           4
// CHECK-NEXT:         ]
// CHECK-NEXT:       ]
// CHECK-NEXT:     ],
// CHECK-NEXT:     "writes": []
// CHECK-NEXT:   },

// Unneeded: no boxes, no writes; the engine need not send it.
// CHECK-NEXT:   "experts.7.w2": {
// CHECK-NEXT:     "kind": "unneeded",
// CHECK-NEXT:     "dtype": "bfloat16",
// CHECK-NEXT:     "shape": [
// CHECK-NEXT:       4,
// CHECK-NEXT:       4
// CHECK-NEXT:     ],
// CHECK-NEXT:     "reason": null,
// CHECK-NEXT:     "boxes": [],
// CHECK-NEXT:     "writes": []
// CHECK-NEXT:   }
// CHECK-NEXT: },

// CHECK-NEXT: "stats": {
// CHECK-NEXT:   "names": 6,
// CHECK-NEXT:   "direct": 2,
// CHECK-NEXT:   "fallback": 3,
// CHECK-NEXT:   "unneeded": 1,
// CHECK-NEXT:   "direct_bytes": 128,
// CHECK-NEXT:   "fallback_bytes": 16,
// CHECK-NEXT:   "writes": 3,
// CHECK-NEXT:   "targets": 2
// CHECK-NEXT: }

// Fallbacks grouped by reason, then the totals.
// REPORT:      load plan: 2 fallback names, e.g. ['k_proj.weight_scale', 'v_proj.weight_scale']: its loader reads its values (aten._local_scalar_dense)
// REPORT-NEXT: load plan: 1 fallback names, e.g. ['q_proj.bias']: casts bfloat16 to float32 at copy_ (send it as float32 to make it direct)
// REPORT-NEXT: load plan: 6 names: 2 direct (0.0 MiB), 3 fallback (0.0 MiB), 1 not needed on this rank; compiled in {{[0-9]+\.[0-9]+}} s

// MAGIC: LOADPLAN

// Errors: what no plan can hold, a plan file without a name, a file that
// cannot be written.
// RUN: loadplan-opt --loadplan-emit-plan-json=- --split-input-file --verify-diagnostics %S/Inputs/emit-plan-errors.mlir -o /dev/null
// RUN: ! loadplan-opt --loadplan-emit-plan= %s -o /dev/null 2> %t.nofile
// RUN: FileCheck %s --check-prefix=NOFILE --input-file=%t.nofile
// RUN: ! loadplan-opt --loadplan-emit-plan=%t.missing/plan.bin %s -o /dev/null 2> %t.nowrite
// RUN: FileCheck %s --check-prefix=NOWRITE --input-file=%t.nowrite
// NOFILE: error: --loadplan-emit-plan needs a file (--loadplan-emit-plan=FILE)
// NOWRITE: error: cannot write the plan to '{{.*}}.missing/plan.bin':
