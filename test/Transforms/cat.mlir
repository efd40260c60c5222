// RUN: loadplan-opt --loadplan-fold-views --split-input-file %s | FileCheck %s --check-prefix=FOLD
// RUN: loadplan-opt --loadplan-pipeline --split-input-file %s 2>/dev/null | FileCheck %s

// torch.cat of views of one incoming tensor: a copy from it is a copy of each
// input into its part of the destination, and views of the concatenation
// move onto its inputs.

module {
  loadplan.storage @s size 4096
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [8, 1] : tensor<16x8xbf16>
  loadplan.target @q module "m" tensor "q" storage @s byte_offset 256 stride [8, 1] : tensor<16x8xbf16>
  loadplan.target @r module "m" tensor "r" storage @s byte_offset 512 stride [8, 1] : tensor<16x8xbf16>
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 768 stride [16, 1] : tensor<8x16xbf16>
  // Falcon's query_key_value with 2 kv heads of 2 query heads, head_dim 2:
  // on disk (kv, q per kv + 2, d, K); q, k and v cut from each group, then
  // concatenated. The whole of it: one box per group and part.
  // CHECK-LABEL: loadplan.checkpoint "falcon"
  // CHECK-NEXT:    loadplan.write @p box <[0, 4], [0, 8]> region <offset = 0, shape = [4, 8], stride = [8, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[8, 12], [0, 8]> region <offset = 32, shape = [4, 8], stride = [8, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[4, 6], [0, 8]> region <offset = 64, shape = [2, 8], stride = [8, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[12, 14], [0, 8]> region <offset = 80, shape = [2, 8], stride = [8, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[6, 8], [0, 8]> region <offset = 96, shape = [2, 8], stride = [8, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[14, 16], [0, 8]> region <offset = 112, shape = [2, 8], stride = [8, 1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "falcon" : tensor<16x8xbf16> (%w) {
    %0 = loadplan.view %w : tensor<16x8xbf16> -> tensor<2x4x2x8xbf16>
    %1 = loadplan.slice %0 dim 1 start 0 end 2 step 1 : tensor<2x4x2x8xbf16> -> tensor<2x2x2x8xbf16>
    %2 = loadplan.reshape %1 : tensor<2x2x2x8xbf16> -> tensor<8x8xbf16>
    %3 = loadplan.slice %0 dim 1 start 2 end 3 step 1 : tensor<2x4x2x8xbf16> -> tensor<2x1x2x8xbf16>
    %4 = loadplan.reshape %3 : tensor<2x1x2x8xbf16> -> tensor<4x8xbf16>
    %5 = loadplan.slice %0 dim 1 start 3 end 4 step 1 : tensor<2x4x2x8xbf16> -> tensor<2x1x2x8xbf16>
    %6 = loadplan.reshape %5 : tensor<2x1x2x8xbf16> -> tensor<4x8xbf16>
    %7 = loadplan.cat (%2, %4, %6) dim 0 : (tensor<8x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<16x8xbf16>
    loadplan.copy %7 to @p <offset = 0, shape = [16, 8], stride = [8, 1]> as bf16 : tensor<16x8xbf16>
  }
  // Narrows of the concatenation (a shard, then a TP rank) keep the inputs
  // they touch: k rows 2..4 are kv head 1's k, v rows 0..4 both v heads.
  // FOLD-LABEL: loadplan.checkpoint "falcon_tp"
  // FOLD-NOT:     loadplan.cat
  // FOLD:         loadplan.copy
  // CHECK-LABEL: loadplan.checkpoint "falcon_tp"
  // CHECK-NEXT:    loadplan.write @q box <[12, 14], [0, 8]> region <offset = 0, shape = [2, 8], stride = [8, 1]>
  // CHECK-NEXT:    loadplan.write @q box <[6, 8], [0, 8]> region <offset = 16, shape = [2, 8], stride = [8, 1]>
  // CHECK-NEXT:    loadplan.write @q box <[14, 16], [0, 8]> region <offset = 32, shape = [2, 8], stride = [8, 1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "falcon_tp" : tensor<16x8xbf16> (%w) {
    %0 = loadplan.view %w : tensor<16x8xbf16> -> tensor<2x4x2x8xbf16>
    %1 = loadplan.slice %0 dim 1 start 0 end 2 step 1 : tensor<2x4x2x8xbf16> -> tensor<2x2x2x8xbf16>
    %2 = loadplan.reshape %1 : tensor<2x2x2x8xbf16> -> tensor<8x8xbf16>
    %3 = loadplan.slice %0 dim 1 start 2 end 3 step 1 : tensor<2x4x2x8xbf16> -> tensor<2x1x2x8xbf16>
    %4 = loadplan.reshape %3 : tensor<2x1x2x8xbf16> -> tensor<4x8xbf16>
    %5 = loadplan.slice %0 dim 1 start 3 end 4 step 1 : tensor<2x4x2x8xbf16> -> tensor<2x1x2x8xbf16>
    %6 = loadplan.reshape %5 : tensor<2x1x2x8xbf16> -> tensor<4x8xbf16>
    %7 = loadplan.cat (%2, %4, %6) dim 0 : (tensor<8x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<16x8xbf16>
    %8 = loadplan.slice %7 dim 0 start 8 end 12 step 1 : tensor<16x8xbf16> -> tensor<4x8xbf16>
    %9 = loadplan.slice %8 dim 0 start 2 end 4 step 1 : tensor<4x8xbf16> -> tensor<2x8xbf16>
    loadplan.copy %9 to @q <offset = 0, shape = [2, 8], stride = [8, 1]> as bf16 : tensor<2x8xbf16>
    %10 = loadplan.slice %7 dim 0 start -4 end 16 step 1 : tensor<16x8xbf16> -> tensor<4x8xbf16>
    loadplan.copy %10 to @q <offset = 16, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
  }
  // torch.stack of two rows (the capture's unsqueeze, then cat), transposed:
  // each row into a column.
  // CHECK-LABEL: loadplan.checkpoint "stack"
  // CHECK-NEXT:    loadplan.write @r box <[0, 1], [0, 8]> region <offset = 0, shape = [1, 8], stride = [1, 2]>
  // CHECK-NEXT:    loadplan.write @r box <[3, 4], [0, 8]> region <offset = 1, shape = [1, 8], stride = [1, 2]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "stack" : tensor<4x8xbf16> (%w) {
    %0 = loadplan.select %w dim 0 index 0 : tensor<4x8xbf16> -> tensor<8xbf16>
    %1 = loadplan.select %w dim 0 index 3 : tensor<4x8xbf16> -> tensor<8xbf16>
    %2 = loadplan.unsqueeze %0 dim 0 : tensor<8xbf16> -> tensor<1x8xbf16>
    %3 = loadplan.unsqueeze %1 dim 0 : tensor<8xbf16> -> tensor<1x8xbf16>
    %4 = loadplan.cat (%2, %3) dim 0 : (tensor<1x8xbf16>, tensor<1x8xbf16>) -> tensor<2x8xbf16>
    %5 = loadplan.transpose %4 dim0 0 dim1 1 : tensor<2x8xbf16> -> tensor<8x2xbf16>
    loadplan.copy %5 to @r <offset = 0, shape = [8, 2], stride = [2, 1]> as bf16 : tensor<8x2xbf16>
  }
  // A reshape of a concatenation that keeps its rows' blocks whole.
  // CHECK-LABEL: loadplan.checkpoint "reshape_of_cat"
  // CHECK-NEXT:    loadplan.write @t box <[0, 2], [0, 8]> region <offset = 0, shape = [2, 8], stride = [8, 1]>
  // CHECK-NEXT:    loadplan.write @t box <[6, 8], [0, 8]> region <offset = 16, shape = [2, 8], stride = [8, 1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "reshape_of_cat" : tensor<8x8xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 0 end 2 step 1 : tensor<8x8xbf16> -> tensor<2x8xbf16>
    %1 = loadplan.slice %w dim 0 start 6 end 8 step 1 : tensor<8x8xbf16> -> tensor<2x8xbf16>
    %2 = loadplan.cat (%0, %1) dim 0 : (tensor<2x8xbf16>, tensor<2x8xbf16>) -> tensor<4x8xbf16>
    %3 = loadplan.reshape %2 : tensor<4x8xbf16> -> tensor<2x16xbf16>
    loadplan.copy %3 to @t <offset = 0, shape = [2, 16], stride = [16, 1]> as bf16 : tensor<2x16xbf16>
  }
}

// -----

// What still falls back: a view that mixes the inputs, and a concatenation
// of a value without a layout.

module {
  loadplan.storage @s size 4096
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<2048xbf16>
  // A reshape across the concatenated dim: the inputs' elements interleave
  // in the result's rows.
  // CHECK-LABEL: loadplan.checkpoint "reshape_across"
  // CHECK-NEXT:    loadplan.fallback "applies aten.cat to it"
  loadplan.checkpoint "reshape_across" : tensor<4x4xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 0 end 2 step 1 : tensor<4x4xbf16> -> tensor<2x4xbf16>
    %1 = loadplan.slice %w dim 0 start 2 end 4 step 1 : tensor<4x4xbf16> -> tensor<2x4xbf16>
    %2 = loadplan.cat (%0, %1) dim 1 : (tensor<2x4xbf16>, tensor<2x4xbf16>) -> tensor<2x8xbf16>
    %3 = loadplan.reshape %2 : tensor<2x8xbf16> -> tensor<4x4xbf16>
    loadplan.copy %3 to @p <offset = 0, shape = [4, 4], stride = [4, 1]> as bf16 : tensor<4x4xbf16>
  }
  // CHECK-LABEL: loadplan.checkpoint "cat_of_arithmetic"
  // CHECK-NEXT:    loadplan.fallback "applies aten.mul.Tensor to it"
  loadplan.checkpoint "cat_of_arithmetic" : tensor<4xbf16> (%w) {
    %0 = loadplan.apply "aten.mul.Tensor" (%w) : (tensor<4xbf16>) -> tensor<4xbf16>
    %1 = loadplan.cat (%w, %0) dim 0 : (tensor<4xbf16>, tensor<4xbf16>) -> tensor<8xbf16>
    loadplan.copy %1 to @p <offset = 32, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
}
