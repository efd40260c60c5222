// RUN: loadplan-opt --loadplan-fold-views --loadplan-to-boxes --loadplan-detect-fallbacks %s | FileCheck %s
// RUN: loadplan-opt --loadplan-pipeline="json=%t.json" %s -o /dev/null
// RUN: FileCheck %s --check-prefix=JSON --input-file=%t.json

// Copies that convert: copy_ across dtypes, and .to(dtype) then copy_,
// become writes that convert (`as DTYPE`; the region counts DTYPE
// elements) wherever the executors do that conversion exactly as torch
// does: bf16, f16, f32, f8E4M3FN and f8E5M2 into one another (but f16
// into f32).

module {
  loadplan.storage @s32 size 4096
  loadplan.target @f32 module "m" tensor "f32" storage @s32 byte_offset 0 stride [8, 1] : tensor<8x8xf32>
  loadplan.target @f32b module "m" tensor "f32b" storage @s32 byte_offset 256 stride [1] : tensor<64xf32>
  loadplan.storage @s8 size 1024
  loadplan.target @fp8 module "m" tensor "fp8" storage @s8 byte_offset 0 stride [8, 1] : tensor<8x8xf8E4M3FN>
  loadplan.target @e5m2 module "m" tensor "e5m2" storage @s8 byte_offset 64 stride [1] : tensor<64xf8E5M2>
  loadplan.target @fp8b module "m" tensor "fp8b" storage @s8 byte_offset 128 stride [1] : tensor<64xf8E4M3FN>
  loadplan.storage @s16 size 1024
  loadplan.target @bf16 module "m" tensor "bf16" storage @s16 byte_offset 0 stride [1] : tensor<64xbf16>
  loadplan.target @f16 module "m" tensor "f16" storage @s16 byte_offset 128 stride [1] : tensor<64xf16>

  // DeepSeek-V3's e_score_correction_bias: a bf16 checkpoint tensor copied
  // into an fp32 parameter.
  // CHECK-LABEL: loadplan.checkpoint "bias"
  // CHECK-NEXT:    loadplan.write @f32b box <[0, 8]> region <offset = 0, shape = [8], stride = [1]> as f32
  // CHECK-NEXT:  }
  loadplan.checkpoint "bias" : tensor<8xbf16> (%w) {
    loadplan.copy %w to @f32b <offset = 0, shape = [8], stride = [1]> as f32 : tensor<8xbf16>
  }
  // .to(float32) then copy_ of a TP narrow, transposed: a box and a region
  // as for any copy, in f32 elements.
  // CHECK-LABEL: loadplan.checkpoint "narrow_to_t"
  // CHECK-NEXT:    loadplan.write @f32 box <[0, 8], [4, 8]> region <offset = 0, shape = [8, 4], stride = [1, 8]> as f32
  // CHECK-NEXT:  }
  loadplan.checkpoint "narrow_to_t" : tensor<8x8xbf16> (%w) {
    %0 = loadplan.slice %w dim 1 start 4 end 8 step 1 : tensor<8x8xbf16> -> tensor<8x4xbf16>
    %1 = loadplan.transpose %0 dim0 0 dim1 1 : tensor<8x4xbf16> -> tensor<4x8xbf16>
    %2 = loadplan.convert %1 : tensor<4x8xbf16> -> tensor<4x8xf32>
    loadplan.copy %2 to @f32 <offset = 0, shape = [4, 8], stride = [8, 1]> as f32 : tensor<4x8xf32>
  }
  // A bf16 trainer into an fp8 engine.
  // CHECK-LABEL: loadplan.checkpoint "to_fp8"
  // CHECK-NEXT:    loadplan.write @fp8 box <[0, 8], [0, 8]> region <offset = 0, shape = [8, 8], stride = [8, 1]> as f8E4M3FN
  loadplan.checkpoint "to_fp8" : tensor<8x8xbf16> (%w) {
    loadplan.copy %w to @fp8 <offset = 0, shape = [8, 8], stride = [8, 1]> as f8E4M3FN : tensor<8x8xbf16>
  }
  // A chain that rounds once: bf16 widens exactly to f32, then f32 rounds
  // to e5m2 as bf16 would.
  // CHECK-LABEL: loadplan.checkpoint "chain_once"
  // CHECK-NEXT:    loadplan.write @e5m2 box <[0, 8]> region <offset = 0, shape = [8], stride = [1]> as f8E5M2
  // CHECK-NEXT:  }
  loadplan.checkpoint "chain_once" : tensor<8xbf16> (%w) {
    %0 = loadplan.convert %w : tensor<8xbf16> -> tensor<8xf32>
    loadplan.copy %0 to @e5m2 <offset = 0, shape = [8], stride = [1]> as f8E5M2 : tensor<8xf32>
  }
  // From fp8, widening.
  // CHECK-LABEL: loadplan.checkpoint "from_fp8"
  // CHECK-NEXT:    loadplan.write @f16 box <[0, 8]> region <offset = 0, shape = [8], stride = [1]> as f16
  loadplan.checkpoint "from_fp8" : tensor<8xf8E4M3FN> (%w) {
    %0 = loadplan.convert %w : tensor<8xf8E4M3FN> -> tensor<8xf32>
    loadplan.copy %0 to @f16 <offset = 0, shape = [8], stride = [1]> as f16 : tensor<8xf32>
  }
  // A round trip that ends where it started is a plain copy when it keeps
  // every byte (e4m3fn through f16) ...
  // CHECK-LABEL: loadplan.checkpoint "round_trip_exact"
  // CHECK-NEXT:    loadplan.write @fp8b box <[0, 8]> region <offset = 16, shape = [8], stride = [1]>{{$}}
  loadplan.checkpoint "round_trip_exact" : tensor<8xf8E4M3FN> (%w) {
    %0 = loadplan.convert %w : tensor<8xf8E4M3FN> -> tensor<8xf16>
    loadplan.copy %0 to @fp8b <offset = 16, shape = [8], stride = [1]> as f8E4M3FN : tensor<8xf16>
  }
  // ... and falls back where it does not: torch gives a NaN that went
  // through another type other bits (bf16 through f32; e5m2 through f16).
  // CHECK-LABEL: loadplan.checkpoint "round_trip_e5m2"
  // CHECK-NEXT:    loadplan.fallback "casts float8_e5m2 to float16 to float8_e5m2, which gives other bytes than one cast for some values (send it as float8_e5m2 to make it direct)"
  loadplan.checkpoint "round_trip_e5m2" : tensor<8xf8E5M2> (%w) {
    %0 = loadplan.convert %w : tensor<8xf8E5M2> -> tensor<8xf16>
    loadplan.copy %0 to @e5m2 <offset = 8, shape = [8], stride = [1]> as f8E5M2 : tensor<8xf16>
  }
  // CHECK-LABEL: loadplan.checkpoint "round_trip_nan"
  // CHECK-NEXT:    loadplan.fallback "casts bfloat16 to float32 to bfloat16, which gives other bytes than one cast for some values (send it as bfloat16 to make it direct)"
  loadplan.checkpoint "round_trip_nan" : tensor<8xbf16> (%w) {
    %0 = loadplan.convert %w : tensor<8xbf16> -> tensor<8xf32>
    loadplan.copy %0 to @bf16 <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xf32>
  }
  // f32 to f16 to fp8 rounds twice.
  // CHECK-LABEL: loadplan.checkpoint "rounds_twice"
  // CHECK-NEXT:    loadplan.fallback "casts float32 to float16 to float8_e4m3fn, which gives other bytes than one cast for some values (send it as float8_e4m3fn to make it direct)"
  loadplan.checkpoint "rounds_twice" : tensor<8xf32> (%w) {
    %0 = loadplan.convert %w : tensor<8xf32> -> tensor<8xf16>
    loadplan.copy %0 to @fp8b <offset = 0, shape = [8], stride = [1]> as f8E4M3FN : tensor<8xf16>
  }
  // Mamba's A_log, -torch.exp(w.float()): the conversion is not what keeps
  // it from being direct; the reason names exp, whatever dtype it is sent
  // as.
  // CHECK-LABEL: loadplan.checkpoint "a_log_bf16"
  // CHECK-NEXT:    loadplan.fallback "applies aten.exp to it"
  loadplan.checkpoint "a_log_bf16" : tensor<8xbf16> (%w) {
    %0 = loadplan.convert %w : tensor<8xbf16> -> tensor<8xf32>
    %1 = loadplan.apply "aten.exp" (%0) : (tensor<8xf32>) -> tensor<8xf32>
    %2 = loadplan.apply "aten.neg" (%1) : (tensor<8xf32>) -> tensor<8xf32>
    loadplan.copy %2 to @f32b <offset = 8, shape = [8], stride = [1]> as f32 : tensor<8xf32>
  }
  // CHECK-LABEL: loadplan.checkpoint "a_log_f32"
  // CHECK-NEXT:    loadplan.fallback "applies aten.exp to it"
  loadplan.checkpoint "a_log_f32" : tensor<8xf32> (%w) {
    %0 = loadplan.clone %w : tensor<8xf32>
    %1 = loadplan.apply "aten.exp" (%0) : (tensor<8xf32>) -> tensor<8xf32>
    %2 = loadplan.apply "aten.neg" (%1) : (tensor<8xf32>) -> tensor<8xf32>
    loadplan.copy %2 to @f32b <offset = 16, shape = [8], stride = [1]> as f32 : tensor<8xf32>
  }
  // Scales are arithmetic: still a fallback, with the arithmetic's reason.
  // CHECK-LABEL: loadplan.checkpoint "scaled"
  // CHECK-NEXT:    loadplan.fallback "applies aten.mul.Tensor to it"
  loadplan.checkpoint "scaled" : tensor<8xbf16> (%w) {
    %0 = loadplan.convert %w : tensor<8xbf16> -> tensor<8xf32>
    %1 = loadplan.apply "aten.mul.Tensor" (%0) : (tensor<8xf32>) -> tensor<8xf32>
    loadplan.copy %1 to @fp8b <offset = 8, shape = [8], stride = [1]> as f8E4M3FN : tensor<8xf32>
  }
  // Casts no write does keep their reason: to an integer, to f64.
  // CHECK-LABEL: loadplan.checkpoint "to_f64"
  // CHECK-NEXT:    loadplan.fallback "casts bfloat16 to float64 (send it as float64 to make it direct)"
  loadplan.checkpoint "to_f64" : tensor<8xbf16> (%w) {
    %0 = loadplan.convert %w : tensor<8xbf16> -> tensor<8xf64>
    %1 = loadplan.convert %0 : tensor<8xf64> -> tensor<8xf32>
    loadplan.copy %1 to @f32b <offset = 24, shape = [8], stride = [1]> as f32 : tensor<8xf32>
  }
  // float16 to float32 is no write's: torch widens a float16 NaN to other
  // bits in a tensor's vectorized body than in its tail.
  // CHECK-LABEL: loadplan.checkpoint "f16_to_f32"
  // CHECK-NEXT:    loadplan.fallback "casts float16 to float32 at copy_ (send it as float32 to make it direct)"
  loadplan.checkpoint "f16_to_f32" : tensor<8xf16> (%w) {
    loadplan.copy %w to @f32b <offset = 40, shape = [8], stride = [1]> as f32 : tensor<8xf16>
  }
  // CHECK-LABEL: loadplan.checkpoint "f16_to_bf16"
  // CHECK-NEXT:    loadplan.write @bf16 box <[0, 8]> region <offset = 8, shape = [8], stride = [1]> as bf16
  loadplan.checkpoint "f16_to_bf16" : tensor<8xf16> (%w) {
    loadplan.copy %w to @bf16 <offset = 8, shape = [8], stride = [1]> as bf16 : tensor<8xf16>
  }
  // A cat of views, then converted: each input's write converts.
  // CHECK-LABEL: loadplan.checkpoint "cat_then_convert"
  // CHECK-NEXT:    loadplan.write @f32 box <[4, 6], [0, 8]> region <offset = 32, shape = [2, 8], stride = [8, 1]> as f32
  // CHECK-NEXT:    loadplan.write @f32 box <[0, 2], [0, 8]> region <offset = 48, shape = [2, 8], stride = [8, 1]> as f32
  // CHECK-NEXT:  }
  loadplan.checkpoint "cat_then_convert" : tensor<8x8xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 4 end 6 step 1 : tensor<8x8xbf16> -> tensor<2x8xbf16>
    %1 = loadplan.slice %w dim 0 start 0 end 2 step 1 : tensor<8x8xbf16> -> tensor<2x8xbf16>
    %2 = loadplan.cat (%0, %1) dim 0 : (tensor<2x8xbf16>, tensor<2x8xbf16>) -> tensor<4x8xbf16>
    %3 = loadplan.convert %2 : tensor<4x8xbf16> -> tensor<4x8xf32>
    loadplan.copy %3 to @f32 <offset = 32, shape = [4, 8], stride = [8, 1]> as f32 : tensor<4x8xf32>
  }
  // A view of the converted tensor is not folded: convert after the views.
  // CHECK-LABEL: loadplan.checkpoint "view_after_convert"
  // CHECK-NEXT:    loadplan.fallback "views it after casting bfloat16 to float32 (cast after the views, or send it as float32, to make it direct)"
  loadplan.checkpoint "view_after_convert" : tensor<8xbf16> (%w) {
    %0 = loadplan.convert %w : tensor<8xbf16> -> tensor<8xf32>
    %1 = loadplan.slice %0 dim 0 start 0 end 4 step 1 : tensor<8xf32> -> tensor<4xf32>
    loadplan.copy %1 to @f32b <offset = 32, shape = [4], stride = [1]> as f32 : tensor<4xf32>
  }
}

// The plan records the dtype each converting write writes; the entry's
// dtype is the one sent.
// JSON:      "bias": {
// JSON-NEXT:   "kind": "direct",
// JSON-NEXT:   "dtype": "bfloat16",
// JSON:        "writes": [
// JSON-NEXT:     {
// JSON-NEXT:       "target": 1,
// JSON-NEXT:       "box": [
// JSON:            "convert_to": "float32",
// JSON-NEXT:       "region": {
// JSON:      "round_trip_exact": {
// JSON-NOT:    "convert_to"
// JSON:      "round_trip_e5m2": {
// No two names meet: every verdict above is the pipeline's too.
// JSON:      "stats": {
// JSON-NEXT:   "names": 17,
// JSON-NEXT:   "direct": 8,
// JSON-NEXT:   "fallback": 9,
