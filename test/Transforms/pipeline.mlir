// RUN: loadplan-opt --loadplan-pipeline --verify-diagnostics %s | FileCheck %s
// RUN: loadplan-opt --loadplan-pipeline="json=%t.json plan=%t.plan report=true" %s -o /dev/null 2> %t.report
// RUN: FileCheck %s --check-prefix=JSON --input-file=%t.json
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.report
// RUN: head -c 8 %t.plan | FileCheck %s --check-prefix=MAGIC

// One MoE decoder layer at TP=2, rank 1, with 4 experts of which this rank
// holds experts 2 and 3 (EP=2), through the whole pipeline.

module {
  loadplan.storage @s_qkv size 1024
  loadplan.storage @s_w13 size 1024
  loadplan.storage @s_w2 size 512
  loadplan.storage @s_scale size 16
  loadplan.storage @s_gidx size 64
  loadplan.storage @s_pad size 64

  // q: 4 heads of 2, k/v: 1 KV head of 2 replicated on both ranks.
  loadplan.target @qkv module "attn.qkv_proj" tensor "weight" storage @s_qkv byte_offset 0 stride [8, 1] : tensor<8x8xbf16>
  loadplan.target @w13 module "moe.experts" tensor "w13_weight" storage @s_w13 byte_offset 0 stride [64, 8, 1] : tensor<2x8x8xbf16>
  loadplan.target @w2 module "moe.experts" tensor "w2_weight" storage @s_w2 byte_offset 0 stride [32, 4, 1] : tensor<2x8x4xbf16>
  // The scalar loader stops at .item(), before its fill_: nothing known
  // writes k_scale.
  // expected-remark @+1 {{target 'attn.k_scale' has 4 bytes no name writes (first gap: bytes [0, 4) of storage @s_scale)}}
  loadplan.target @scale module "attn" tensor "k_scale" storage @s_scale byte_offset 0 stride [] : tensor<f32>
  loadplan.target @gidx module "moe.experts" tensor "g_idx" storage @s_gidx byte_offset 0 stride [1] : tensor<8xi32>
  // expected-remark @+1 {{target 'norm.weight' has 16 bytes no name writes (first gap: bytes [16, 32) of storage @s_pad)}}
  loadplan.target @norm module "norm" tensor "weight" storage @s_pad byte_offset 0 stride [1] : tensor<16xbf16>

  // Column-parallel q: rows 4..8 of 8.
  loadplan.checkpoint "attn.q_proj.weight" : tensor<8x8xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 4 end 8 step 1 : tensor<8x8xbf16> -> tensor<4x8xbf16>
    loadplan.copy %0 to @qkv <offset = 0, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
  }
  // One KV head on two ranks: the whole of k, narrowed to head 0.
  loadplan.checkpoint "attn.k_proj.weight" : tensor<2x8xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 0 end 2 step 1 : tensor<2x8xbf16> -> tensor<2x8xbf16>
    loadplan.copy %0 to @qkv <offset = 32, shape = [2, 8], stride = [8, 1]> as bf16 : tensor<2x8xbf16>
  }
  loadplan.checkpoint "attn.v_proj.weight" : tensor<2x8xbf16> (%w) {
    loadplan.copy %w to @qkv <offset = 48, shape = [2, 8], stride = [8, 1]> as bf16 : tensor<2x8xbf16>
  }
  // A scalar loader: param.fill_(w.item()).
  loadplan.checkpoint "attn.k_scale" : tensor<f32> (%w) {
    loadplan.value_read %w op "aten._local_scalar_dense" : tensor<f32>
  }
  // Fused experts in the checkpoint, [E, I, H] for w1 and w3: a per-expert
  // loop over this rank's experts, narrowed to this rank's half of I.
  loadplan.checkpoint "moe.experts.w1" : tensor<4x8x8xbf16> (%w) {
    %e2 = loadplan.select %w dim 0 index 2 : tensor<4x8x8xbf16> -> tensor<8x8xbf16>
    %s2 = loadplan.slice %e2 dim 0 start 4 end 8 step 1 : tensor<8x8xbf16> -> tensor<4x8xbf16>
    loadplan.copy %s2 to @w13 <offset = 0, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
    %e3 = loadplan.select %w dim 0 index 3 : tensor<4x8x8xbf16> -> tensor<8x8xbf16>
    %s3 = loadplan.slice %e3 dim 0 start 4 end 8 step 1 : tensor<8x8xbf16> -> tensor<4x8xbf16>
    loadplan.copy %s3 to @w13 <offset = 64, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
  }
  loadplan.checkpoint "moe.experts.w3" : tensor<4x8x8xbf16> (%w) {
    %e2 = loadplan.select %w dim 0 index 2 : tensor<4x8x8xbf16> -> tensor<8x8xbf16>
    %s2 = loadplan.slice %e2 dim 0 start 4 end 8 step 1 : tensor<8x8xbf16> -> tensor<4x8xbf16>
    loadplan.copy %s2 to @w13 <offset = 32, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
    %e3 = loadplan.select %w dim 0 index 3 : tensor<4x8x8xbf16> -> tensor<8x8xbf16>
    %s3 = loadplan.slice %e3 dim 0 start 4 end 8 step 1 : tensor<8x8xbf16> -> tensor<4x8xbf16>
    loadplan.copy %s3 to @w13 <offset = 96, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
  }
  // gpt-oss stores w2 as [E, H, I] and loads w.permute(0, 2, 1).contiguous()
  // of this rank's experts, then narrows H.
  loadplan.checkpoint "moe.experts.w2" : tensor<4x8x8xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 2 end 4 step 1 : tensor<4x8x8xbf16> -> tensor<2x8x8xbf16>
    %1 = loadplan.permute %0 dims [0, 2, 1] : tensor<2x8x8xbf16> -> tensor<2x8x8xbf16>
    %2 = loadplan.clone %1 : tensor<2x8x8xbf16>
    %3 = loadplan.slice %2 dim 1 start 0 end 8 step 1 : tensor<2x8x8xbf16> -> tensor<2x8x8xbf16>
    %4 = loadplan.slice %3 dim 2 start 4 end 8 step 1 : tensor<2x8x8xbf16> -> tensor<2x8x4xbf16>
    loadplan.copy %4 to @w2 <offset = 0, shape = [2, 8, 4], stride = [32, 4, 1]> as bf16 : tensor<2x8x4xbf16>
  }
  // Both w1 and w3 loaders write g_idx.
  loadplan.checkpoint "moe.experts.w1.g_idx" : tensor<8xi32> (%w) {
    loadplan.copy %w to @gidx <offset = 0, shape = [8], stride = [1]> as i32 : tensor<8xi32>
  }
  loadplan.checkpoint "moe.experts.w3.g_idx" : tensor<8xi32> (%w) {
    loadplan.copy %w to @gidx <offset = 0, shape = [8], stride = [1]> as i32 : tensor<8xi32>
  }
  // An fp8 checkpoint of a bf16 parameter.
  loadplan.checkpoint "norm.weight" : tensor<8xf8E4M3FN> (%w) {
    loadplan.copy %w to @norm <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xf8E4M3FN>
  }
  // Another rank's expert bias: this rank needs none of it.
  loadplan.checkpoint "moe.experts.0.bias" : tensor<8xbf16> (%w) {
  }
}

// CHECK-LABEL: loadplan.checkpoint "attn.q_proj.weight"
// CHECK-NEXT:    loadplan.write @qkv box <[4, 8], [0, 8]> region <offset = 0, shape = [4, 8], stride = [8, 1]>
// CHECK-NEXT:  }
// CHECK-LABEL: loadplan.checkpoint "attn.k_proj.weight"
// CHECK-NEXT:    loadplan.write @qkv box <[0, 2], [0, 8]> region <offset = 32,
// CHECK-LABEL: loadplan.checkpoint "attn.k_scale"
// CHECK-NEXT:    loadplan.fallback "its loader reads its values (aten._local_scalar_dense)" stop
// CHECK-NEXT:  }
// The per-expert loop is one write per name.
// CHECK-LABEL: loadplan.checkpoint "moe.experts.w1"
// CHECK-NEXT:    loadplan.write @w13 box <[2, 4], [4, 8], [0, 8]> region <offset = 0, shape = [2, 4, 8], stride = [64, 8, 1]>
// CHECK-NEXT:  }
// CHECK-LABEL: loadplan.checkpoint "moe.experts.w3"
// CHECK-NEXT:    loadplan.write @w13 box <[2, 4], [4, 8], [0, 8]> region <offset = 32, shape = [2, 4, 8], stride = [64, 8, 1]>
// CHECK-NEXT:  }
// CHECK-LABEL: loadplan.checkpoint "moe.experts.w2"
// CHECK-NEXT:    loadplan.write @w2 box <[2, 4], [4, 8], [0, 8]> region <offset = 0, shape = [2, 4, 8], stride = [32, 1, 4]>
// CHECK-NEXT:  }
// CHECK-LABEL: loadplan.checkpoint "moe.experts.w1.g_idx"
// CHECK-NEXT:    loadplan.fallback "writes overlap with 'moe.experts.w3.g_idx'"
// CHECK-LABEL: loadplan.checkpoint "moe.experts.w3.g_idx"
// CHECK-NEXT:    loadplan.fallback "writes overlap with 'moe.experts.w1.g_idx'"
// CHECK-LABEL: loadplan.checkpoint "norm.weight"
// CHECK-NEXT:    loadplan.write @norm box <[0, 8]> region <offset = 0, shape = [8], stride = [1]> as bf16
// CHECK-NEXT:  }
// CHECK-LABEL: loadplan.checkpoint "moe.experts.0.bias"
// CHECK-NOT:     loadplan.write
// CHECK:       }

// JSON:      "attn.q_proj.weight": {
// JSON-NEXT:   "kind": "direct",
// JSON:      "attn.k_scale": {
// JSON-NEXT:   "kind": "fallback",
// JSON:      "moe.experts.w1": {
// JSON-NEXT:   "kind": "direct",
// JSON:        "writes": [
// JSON-NEXT:     {
// JSON-NEXT:       "target": 1,
// JSON:            "region": {
// JSON-NEXT:         "offset": 0,
// JSON-NEXT:         "shape": [
// JSON-NEXT:           2,
// JSON-NEXT:           4,
// JSON-NEXT:           8
// JSON-NEXT:         ],
// JSON-NEXT:         "stride": [
// JSON-NEXT:           64,
// JSON-NEXT:           8,
// JSON-NEXT:           1
// JSON-NEXT:         ]
// JSON-NEXT:       }
// JSON-NEXT:     }
// JSON-NEXT:   ]
// JSON:      "moe.experts.w1.g_idx": {
// JSON-NEXT:   "kind": "fallback",
// JSON:      "norm.weight": {
// JSON-NEXT:   "kind": "direct",
// JSON-NEXT:   "dtype": "float8_e4m3fn",
// JSON:          "convert_to": "bfloat16",
// JSON-NEXT:     "region": {
// JSON:      "moe.experts.0.bias": {
// JSON-NEXT:   "kind": "unneeded",
// JSON:      "stats": {
// JSON-NEXT:   "names": 11,
// JSON-NEXT:   "direct": 7,
// JSON-NEXT:   "fallback": 3,
// JSON-NEXT:   "unneeded": 1,

// REPORT-DAG: load plan: 1 fallback names, e.g. ['attn.k_scale']: its loader reads its values (aten._local_scalar_dense)
// REPORT-DAG: load plan: 1 fallback names, e.g. ['moe.experts.w1.g_idx']: writes overlap with 'moe.experts.w3.g_idx'
// REPORT-DAG: load plan: 1 fallback names, e.g. ['moe.experts.w3.g_idx']: writes overlap with 'moe.experts.w1.g_idx'
// REPORT-NOT: norm.weight
// REPORT:     load plan: 11 names: 7 direct ({{.*}} MiB), 3 fallback ({{.*}} MiB), 1 not needed on this rank; compiled in

// MAGIC: LOADPLAN
