// REQUIRES: torch-python
// The bundled Llama-style model's loader, exported with the installed torch
// at TP=2 for rank 1, imported by loadplan-translate and compiled by the
// pipeline: its plan is the capture path's (every entry compared).
// RUN: %loadplan_python -c "import loadplan; from loadplan.examples import llama; m, metas = llama.make(1, 2); loadplan.export_loader(m, metas, '%t.pt2'); open('%t.capture.json', 'w').write(loadplan.plan_loads(llama.make(1, 2)[0], metas).json)"
// RUN: loadplan-translate --import-torch-export %t.pt2 | FileCheck %s
// RUN: loadplan-translate --import-torch-export %t.pt2 | loadplan-opt --loadplan-pipeline --loadplan-emit-plan-json=%t.export.json | FileCheck %s --check-prefix=PLAN
// RUN: %loadplan_python -c "import json, sys; a, b = (json.load(open(f)) for f in sys.argv[1:]); assert a['entries'] == b['entries'] and a['targets'] == b['targets'], 'plans differ'" %t.capture.json %t.export.json

// Tied embeddings: lm_head.weight is embed_tokens.weight, one target.
// CHECK: loadplan.target @t0 module "model.embed_tokens" tensor "weight" storage @s0 byte_offset 0 stride [32, 1] : tensor<64x32xbf16>
// CHECK: loadplan.target @t1 module "model.layers.0.self_attn.qkv_proj" tensor "weight"
// CHECK-NOT: module "lm_head"

// The vocab-parallel embedding: rank 1's rows, then its padding zeroed.
// CHECK-LABEL: loadplan.checkpoint "model.embed_tokens.weight"
// CHECK-NEXT: %[[E:.*]] = loadplan.slice %w dim 0 start 64 end 100 step 1
// CHECK-NEXT: loadplan.copy %[[E]] to @t0 <offset = 0, shape = [36, 32], stride = [32, 1]> as bf16
// CHECK-NEXT: loadplan.constant_write "aten.fill_" @t0 <offset = 1152, shape = [28, 32], stride = [32, 1]> as bf16

// KV head 1 of 2 into the fused qkv_proj, after the 16 query rows.
// CHECK-LABEL: loadplan.checkpoint "model.layers.0.self_attn.k_proj.weight"
// CHECK-NEXT: %[[K:.*]] = loadplan.slice %w dim 0 start 8 end 16 step 1 : tensor<16x32xbf16> -> tensor<8x32xbf16>
// CHECK-NEXT: loadplan.copy %[[K]] to @t1 <offset = 512, shape = [8, 32], stride = [32, 1]> as bf16

// CHECK-LABEL: loadplan.checkpoint "lm_head.weight"
// CHECK-NEXT: }

// PLAN-LABEL: loadplan.checkpoint "model.layers.0.self_attn.k_proj.weight"
// PLAN-NEXT: loadplan.write @t1 box <[8, 16], [0, 32]> region <offset = 512, shape = [8, 32], stride = [32, 1]>
// PLAN-LABEL: loadplan.checkpoint "model.layers.0.mlp.down_proj.weight"
// PLAN-NEXT: loadplan.write @t{{[0-9]+}} box <[0, 32], [32, 64]> region <offset = 0, shape = [32, 32], stride = [32, 1]>
