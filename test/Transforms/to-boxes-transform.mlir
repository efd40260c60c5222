// RUN: loadplan-opt --loadplan-fold-views --loadplan-to-boxes --split-input-file %s | FileCheck %s
// RUN: loadplan-opt --loadplan-fold-views --loadplan-to-boxes --loadplan-expand-groups --split-input-file %s | FileCheck %s --check-prefix=EXPAND
// RUN: loadplan-opt --loadplan-pipeline --loadplan-report --split-input-file %s -o /dev/null 2>&1 | FileCheck %s --check-prefix=REPORT

// A copy through a transform becomes a transforming write where its source
// is a box of the 2-d checkpoint tensor in row-major order: the box is the
// source's, the region the copy's destination as it is (it splits the
// transform's output already). Marlin's w13 of 4 x 512 words takes four
// names of 64 x 8 words, each [8 / 2, 64 / 16, 32] atoms and words
// interleaved along its rows.

module {
  loadplan.storage @s size 8192
  loadplan.target @w13 module "experts" tensor "w13_weight_packed" storage @s byte_offset 0 stride [512, 1] : tensor<4x512xi32>
  // Rows 64..128, a TP shard: the box starts at row 64.
  // CHECK-LABEL: loadplan.checkpoint "shard"
  // CHECK-NEXT:    loadplan.write @w13 box <[64, 128], [0, 8]> region <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> transform "marlin_w4"
  // CHECK-NEXT:  }
  loadplan.checkpoint "shard" : tensor<128x8xi32> (%w) {
    %0 = loadplan.slice %w dim 0 start 64 end 128 step 1 : tensor<128x8xi32> -> tensor<64x8xi32>
    loadplan.copy %0 to @w13 <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
  }
  // The incoming tensor itself: all of it.
  // CHECK-LABEL: loadplan.checkpoint "whole"
  // CHECK-NEXT:    loadplan.write @w13 box <[0, 64], [0, 8]> region <offset = 128, shape = [4, 4, 32], stride = [512, 1, 4]> transform "marlin_w4"
  // CHECK-NEXT:  }
  loadplan.checkpoint "whole" : tensor<64x8xi32> (%w) {
    loadplan.copy %w to @w13 <offset = 128, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
  }
  // Columns 8..16 (a shard of the packed input dim): rows stay whole.
  // CHECK-LABEL: loadplan.checkpoint "columns"
  // CHECK-NEXT:    loadplan.write @w13 box <[0, 64], [8, 16]> region <offset = 256, shape = [4, 4, 32], stride = [512, 1, 4]> transform "marlin_w4"
  // CHECK-NEXT:  }
  loadplan.checkpoint "columns" : tensor<64x16xi32> (%w) {
    %0 = loadplan.slice %w dim 1 start 8 end 16 step 1 : tensor<64x16xi32> -> tensor<64x8xi32>
    loadplan.copy %0 to @w13 <offset = 256, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
  }
  // A transposed source is a box, but its rows are the checkpoint's
  // columns: the transform would cut other atoms. The copy stays behind
  // the fallback, and coverage counts its words.
  // CHECK-LABEL: loadplan.checkpoint "transposed"
  // CHECK-NEXT:    %[[T:.*]] = loadplan.as_strided %w <offset = 0, shape = [64, 8], stride = [1, 64]>
  // CHECK-NEXT:    loadplan.fallback "copies through transform marlin_w4 a view that is not a row-major box of a 2-d checkpoint tensor"
  // CHECK-NEXT:    loadplan.copy %[[T]] to @w13 <offset = 384, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4"
  // CHECK-NEXT:  }
  loadplan.checkpoint "transposed" : tensor<8x64xi32> (%w) {
    %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<8x64xi32> -> tensor<64x8xi32>
    loadplan.copy %0 to @w13 <offset = 384, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
  }
}

// The three writes and the fallback's copy cover every word of w13.
// REPORT-NOT:  remark
// REPORT:      load plan: 1 fallback names, e.g. ['transposed']: copies through transform marlin_w4 a view that is not a row-major box of a 2-d checkpoint tensor
// REPORT-NEXT: load plan: 4 names: 3 direct (0.0 MiB), 1 fallback (0.0 MiB), 0 not needed

// -----

// Other sources that are no row-major box of a 2-d checkpoint tensor.
module {
  loadplan.storage @s size 8192
  loadplan.target @w module "m" tensor "w" storage @s byte_offset 0 stride [512, 1] : tensor<4x512xi32>
  loadplan.target @halves module "m" tensor "halves" storage @s byte_offset 2 stride [1] : tensor<4000xi16>
  // CHECK-LABEL: loadplan.checkpoint "flat"
  // CHECK:         loadplan.fallback "copies through transform marlin_w4 a view that is not a row-major box of a 2-d checkpoint tensor"
  loadplan.checkpoint "flat" : tensor<512xi32> (%w) {
    %0 = loadplan.view %w : tensor<512xi32> -> tensor<64x8xi32>
    loadplan.copy %0 to @w <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
  }
  // CHECK-LABEL: loadplan.checkpoint "expert_of_3d"
  // CHECK:         loadplan.fallback "copies through transform marlin_w4 a view that is not a row-major box of a 2-d checkpoint tensor"
  loadplan.checkpoint "expert_of_3d" : tensor<2x64x8xi32> (%w) {
    %0 = loadplan.select %w dim 0 index 1 : tensor<2x64x8xi32> -> tensor<64x8xi32>
    loadplan.copy %0 to @w <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
  }
  // CHECK-LABEL: loadplan.checkpoint "step"
  // CHECK:         loadplan.fallback "copies through transform marlin_w4 a view that is not a row-major box of a 2-d checkpoint tensor"
  loadplan.checkpoint "step" : tensor<128x8xi32> (%w) {
    %0 = loadplan.slice %w dim 0 start 0 end 128 step 2 : tensor<128x8xi32> -> tensor<64x8xi32>
    loadplan.copy %0 to @w <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
  }
  // Every other column: rows whole, but no box.
  // CHECK-LABEL: loadplan.checkpoint "column_step"
  // CHECK:         loadplan.fallback "copies through transform marlin_w4 a view that is not a row-major box of a 2-d checkpoint tensor"
  loadplan.checkpoint "column_step" : tensor<64x16xi32> (%w) {
    %0 = loadplan.slice %w dim 1 start 0 end 16 step 2 : tensor<64x16xi32> -> tensor<64x8xi32>
    loadplan.copy %0 to @w <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
  }
  // Rows of 8 from column 4 of rows of 8: each runs into the next row.
  // CHECK-LABEL: loadplan.checkpoint "across_rows"
  // CHECK:         loadplan.fallback "copies through transform marlin_w4 a view that is not a row-major box of a 2-d checkpoint tensor"
  loadplan.checkpoint "across_rows" : tensor<64x8xi32> (%w) {
    %0 = loadplan.as_strided %w <offset = 4, shape = [16, 8], stride = [8, 1]> : tensor<64x8xi32> -> tensor<16x8xi32>
    loadplan.copy %0 to @w <offset = 0, shape = [4, 1, 32], stride = [32, 32, 1]> as i32 transform "marlin_w4" : tensor<16x8xi32>
  }
  // CHECK-LABEL: loadplan.checkpoint "expand"
  // CHECK:         loadplan.fallback "copies through transform marlin_w4 a view that is not a row-major box of a 2-d checkpoint tensor"
  loadplan.checkpoint "expand" : tensor<1x8xi32> (%w) {
    %0 = loadplan.expand %w : tensor<1x8xi32> -> tensor<64x8xi32>
    loadplan.copy %0 to @w <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
  }
  // A reshape no strides give (of a transposed view) stays a reshape: its
  // elements in row-major order are no box's.
  // CHECK-LABEL: loadplan.checkpoint "kept_reshape"
  // CHECK:         loadplan.fallback "copies through transform marlin_w4 a view that is not a row-major box of a 2-d checkpoint tensor"
  loadplan.checkpoint "kept_reshape" : tensor<16x32xi32> (%w) {
    %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<16x32xi32> -> tensor<32x16xi32>
    %1 = loadplan.reshape %0 : tensor<32x16xi32> -> tensor<16x32xi32>
    loadplan.copy %1 to @w <offset = 0, shape = [16, 1, 32], stride = [32, 32, 1]> as i32 transform "marlin_w4" : tensor<16x32xi32>
  }
  // CHECK-LABEL: loadplan.checkpoint "cat"
  // CHECK:         loadplan.fallback "copies through transform marlin_w4 a view that is not a row-major box of a 2-d checkpoint tensor"
  loadplan.checkpoint "cat" : tensor<64x8xi32> (%w) {
    %0 = loadplan.slice %w dim 0 start 32 end 64 step 1 : tensor<64x8xi32> -> tensor<32x8xi32>
    %1 = loadplan.slice %w dim 0 start 0 end 32 step 1 : tensor<64x8xi32> -> tensor<32x8xi32>
    %2 = loadplan.cat (%0, %1) dim 0 : (tensor<32x8xi32>, tensor<32x8xi32>) -> tensor<64x8xi32>
    loadplan.copy %2 to @w <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
  }
  // CHECK-LABEL: loadplan.checkpoint "computed"
  // CHECK:         loadplan.fallback "applies aten.bitwise_not.default to it"
  loadplan.checkpoint "computed" : tensor<64x8xi32> (%w) {
    %0 = loadplan.apply "aten.bitwise_not.default" (%w) : (tensor<64x8xi32>) -> tensor<64x8xi32>
    loadplan.copy %0 to @w <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
  }
  // A conversion the executors do not make into words (the transform
  // takes the checkpoint's own words in any case).
  // CHECK-LABEL: loadplan.checkpoint "converted"
  // CHECK:         loadplan.fallback "casts float32 to int32 (send it as int32 to make it direct)"
  loadplan.checkpoint "converted" : tensor<64x8xf32> (%w) {
    %0 = loadplan.convert %w : tensor<64x8xf32> -> tensor<64x8xi32>
    loadplan.copy %0 to @w <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
  }
  // CHECK-LABEL: loadplan.checkpoint "dest_repeats"
  // CHECK:         loadplan.fallback "writes one destination element twice"
  loadplan.checkpoint "dest_repeats" : tensor<64x8xi32> (%w) {
    loadplan.copy %w to @w <offset = 0, shape = [4, 4, 32], stride = [0, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
  }
  // CHECK-LABEL: loadplan.checkpoint "viewed_as_words"
  // CHECK:         loadplan.fallback "copies into a destination viewed with another element size"
  loadplan.checkpoint "viewed_as_words" : tensor<64x8xi32> (%w) {
    loadplan.copy %w to @halves <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
  }
  // A copy of no element stays, without a fallback, as any such copy.
  // CHECK-LABEL: loadplan.checkpoint "empty"
  // CHECK-NOT:     loadplan.fallback
  // CHECK:         loadplan.copy %{{.*}} to @w <offset = 0, shape = [4, 0, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4"
  // CHECK-NEXT:  }
  loadplan.checkpoint "empty" : tensor<64x8xi32> (%w) {
    %0 = loadplan.slice %w dim 0 start 64 end 64 step 1 : tensor<64x8xi32> -> tensor<0x8xi32>
    loadplan.copy %0 to @w <offset = 0, shape = [4, 0, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<0x8xi32>
  }
}

// REPORT: load plan: 13 names: 0 direct (0.0 MiB), 12 fallback (0.0 MiB), 1 not needed

// -----

// A layer's experts as members of one checkpoint: the block is reduced once,
// and each member's write is moved by its shift (512 bytes, 128 words).
module {
  loadplan.storage @s size 8192
  loadplan.target @w13 module "experts" tensor "w13_weight_packed" storage @s byte_offset 0 stride [512, 1] : tensor<4x512xi32>
  // CHECK-LABEL: loadplan.checkpoint "experts.0.w"
  // CHECK-SAME:    members ["experts.1.w" at 1 moved 512, "experts.2.w" at 2 moved 1024, "experts.3.w" at 3 moved 1536]
  // CHECK-NEXT:    loadplan.write @w13 box <[0, 64], [0, 8]> region <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> transform "marlin_w4"
  // CHECK-NEXT:  }
  loadplan.checkpoint "experts.0.w" : tensor<64x8xi32> (%w)
      members ["experts.1.w" at 1 moved 512, "experts.2.w" at 2 moved 1024, "experts.3.w" at 3 moved 1536] {
    loadplan.copy %w to @w13 <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
  }
}

// EXPAND-LABEL: loadplan.checkpoint "experts.0.w"
// EXPAND-NEXT:    loadplan.write @w13 box <[0, 64], [0, 8]> region <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> transform "marlin_w4"
// EXPAND-LABEL: loadplan.checkpoint "experts.1.w"
// EXPAND-NEXT:    loadplan.write @w13 box <[0, 64], [0, 8]> region <offset = 128, shape = [4, 4, 32], stride = [512, 1, 4]> transform "marlin_w4"
// EXPAND-LABEL: loadplan.checkpoint "experts.3.w"
// EXPAND-NEXT:    loadplan.write @w13 box <[0, 64], [0, 8]> region <offset = 384, shape = [4, 4, 32], stride = [512, 1, 4]> transform "marlin_w4"

// Their words do not meet, and cover w13.
// REPORT-NOT:  remark
// REPORT:      load plan: 4 names: 4 direct (0.0 MiB), 0 fallback (0.0 MiB), 0 not needed
