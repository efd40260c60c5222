// RUN: loadplan-opt --loadplan-merge-writes --split-input-file %s | FileCheck %s

// Writes of one name merge when the second continues the first along
// exactly one box dim, into the same target, with the same destination
// stride there.

module {
  loadplan.storage @s size 4096
  loadplan.target @w13 module "moe.experts" tensor "w13_weight" storage @s byte_offset 0 stride [32, 8, 1] : tensor<4x4x8xbf16>
  loadplan.target @rows module "m" tensor "rows" storage @s byte_offset 256 stride [16, 1] : tensor<8x16xbf16>
  // A per-expert loop: param[e].copy_(w[e]) for each expert.
  // CHECK-LABEL: loadplan.checkpoint "experts"
  // CHECK-NEXT:    loadplan.write @w13 box <[0, 4], [0, 4], [0, 8]> region <offset = 0, shape = [4, 4, 8], stride = [32, 8, 1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "experts" : tensor<4x4x8xbf16> (%w) {
    loadplan.write @w13 box <[0, 1], [0, 4], [0, 8]> region <offset = 0, shape = [1, 4, 8], stride = [1, 8, 1]>
    loadplan.write @w13 box <[1, 2], [0, 4], [0, 8]> region <offset = 32, shape = [1, 4, 8], stride = [1, 8, 1]>
    loadplan.write @w13 box <[2, 3], [0, 4], [0, 8]> region <offset = 64, shape = [1, 4, 8], stride = [1, 8, 1]>
    loadplan.write @w13 box <[3, 4], [0, 4], [0, 8]> region <offset = 96, shape = [1, 4, 8], stride = [1, 8, 1]>
  }
  // A per-row loop into a wider parameter: the rows' stride is the
  // parameter's, not the box's.
  // CHECK-LABEL: loadplan.checkpoint "per_row"
  // CHECK-NEXT:    loadplan.write @rows box <[2, 6], [0, 8]> region <offset = 8, shape = [4, 8], stride = [16, 1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "per_row" : tensor<8x8xbf16> (%w) {
    loadplan.write @rows box <[2, 3], [0, 8]> region <offset = 8, shape = [1, 8], stride = [8, 1]>
    loadplan.write @rows box <[3, 4], [0, 8]> region <offset = 24, shape = [1, 8], stride = [8, 1]>
    loadplan.write @rows box <[4, 6], [0, 8]> region <offset = 40, shape = [2, 8], stride = [16, 1]>
  }
  // A loop that runs backwards merges too.
  // CHECK-LABEL: loadplan.checkpoint "backwards_loop"
  // CHECK-NEXT:    loadplan.write @w13 box <[0, 3], [0, 4], [0, 8]> region <offset = 0, shape = [3, 4, 8], stride = [32, 8, 1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "backwards_loop" : tensor<3x4x8xbf16> (%w) {
    loadplan.write @w13 box <[2, 3], [0, 4], [0, 8]> region <offset = 64, shape = [1, 4, 8], stride = [1, 8, 1]>
    loadplan.write @w13 box <[1, 2], [0, 4], [0, 8]> region <offset = 32, shape = [1, 4, 8], stride = [1, 8, 1]>
    loadplan.write @w13 box <[0, 1], [0, 4], [0, 8]> region <offset = 0, shape = [1, 4, 8], stride = [1, 8, 1]>
  }
  // A merge may join two writes that did not continue one another before:
  // 0 and 2 merge once 1 arrives.
  // CHECK-LABEL: loadplan.checkpoint "out_of_order"
  // CHECK-NEXT:    loadplan.write @w13 box <[0, 3], [0, 4], [0, 8]> region <offset = 0, shape = [3, 4, 8], stride = [32, 8, 1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "out_of_order" : tensor<3x4x8xbf16> (%w) {
    loadplan.write @w13 box <[0, 1], [0, 4], [0, 8]> region <offset = 0, shape = [1, 4, 8], stride = [1, 8, 1]>
    loadplan.write @w13 box <[2, 3], [0, 4], [0, 8]> region <offset = 64, shape = [1, 4, 8], stride = [1, 8, 1]>
    loadplan.write @w13 box <[1, 2], [0, 4], [0, 8]> region <offset = 32, shape = [1, 4, 8], stride = [1, 8, 1]>
  }
  // Halves of the last dim (a column-parallel shard written in two
  // pieces) merge along that dim.
  // CHECK-LABEL: loadplan.checkpoint "columns"
  // CHECK-NEXT:    loadplan.write @rows box <[0, 8], [0, 16]> region <offset = 0, shape = [8, 16], stride = [16, 1]>
  loadplan.checkpoint "columns" : tensor<8x16xbf16> (%w) {
    loadplan.write @rows box <[0, 8], [0, 8]> region <offset = 0, shape = [8, 8], stride = [16, 1]>
    loadplan.write @rows box <[0, 8], [8, 16]> region <offset = 8, shape = [8, 8], stride = [16, 1]>
  }
}

// -----

module {
  loadplan.storage @s size 4096
  loadplan.target @a module "m" tensor "a" storage @s byte_offset 0 stride [8, 1] : tensor<8x8xbf16>
  loadplan.target @b module "m" tensor "b" storage @s byte_offset 128 stride [8, 1] : tensor<8x8xbf16>
  loadplan.target @c module "m" tensor "c" storage @s byte_offset 1024 stride [8, 1] : tensor<32x8xbf16>
  loadplan.target @f module "m" tensor "f" storage @s byte_offset 2048 stride [1] : tensor<64xf32>
  // Writes that must not merge.
  // CHECK-LABEL: loadplan.checkpoint "other_target"
  // CHECK-NEXT:    loadplan.write @a box <[0, 1], [0, 8]>
  // CHECK-NEXT:    loadplan.write @b box <[1, 2], [0, 8]>
  loadplan.checkpoint "other_target" : tensor<2x8xbf16> (%w) {
    loadplan.write @a box <[0, 1], [0, 8]> region <offset = 0, shape = [1, 8], stride = [8, 1]>
    loadplan.write @b box <[1, 2], [0, 8]> region <offset = 8, shape = [1, 8], stride = [8, 1]>
  }
  // The destination leaves a gap.
  // CHECK-LABEL: loadplan.checkpoint "destination_gap"
  // CHECK-NEXT:    loadplan.write @c box <[0, 2], [0, 8]>
  // CHECK-NEXT:    loadplan.write @c box <[2, 3], [0, 8]>
  loadplan.checkpoint "destination_gap" : tensor<3x8xbf16> (%w) {
    loadplan.write @c box <[0, 2], [0, 8]> region <offset = 0, shape = [2, 8], stride = [8, 1]>
    loadplan.write @c box <[2, 3], [0, 8]> region <offset = 24, shape = [1, 8], stride = [8, 1]>
  }
  // Single rows take the step between them as their stride.
  // CHECK-LABEL: loadplan.checkpoint "rows_apart"
  // CHECK-NEXT:    loadplan.write @c box <[0, 2], [0, 8]> region <offset = 0, shape = [2, 8], stride = [16, 1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "rows_apart" : tensor<2x8xbf16> (%w) {
    loadplan.write @c box <[0, 1], [0, 8]> region <offset = 0, shape = [1, 8], stride = [8, 1]>
    loadplan.write @c box <[1, 2], [0, 8]> region <offset = 16, shape = [1, 8], stride = [8, 1]>
  }
  // The second write's stride differs from the step between the two.
  // CHECK-LABEL: loadplan.checkpoint "other_stride"
  // CHECK-NEXT:    loadplan.write @c box <[0, 2], [0, 8]> region <offset = 0, shape = [2, 8], stride = [8, 1]>
  // CHECK-NEXT:    loadplan.write @c box <[2, 4], [0, 8]> region <offset = 16, shape = [2, 8], stride = [16, 1]>
  loadplan.checkpoint "other_stride" : tensor<4x8xbf16> (%w) {
    loadplan.write @c box <[0, 2], [0, 8]> region <offset = 0, shape = [2, 8], stride = [8, 1]>
    loadplan.write @c box <[2, 4], [0, 8]> region <offset = 16, shape = [2, 8], stride = [16, 1]>
  }
  // Another dim's stride differs.
  // CHECK-LABEL: loadplan.checkpoint "other_dim_stride"
  // CHECK-NEXT:    loadplan.write @c box <[0, 1], [0, 4]>
  // CHECK-NEXT:    loadplan.write @c box <[1, 2], [0, 4]>
  loadplan.checkpoint "other_dim_stride" : tensor<2x4xbf16> (%w) {
    loadplan.write @c box <[0, 1], [0, 4]> region <offset = 0, shape = [1, 4], stride = [4, 1]>
    loadplan.write @c box <[1, 2], [0, 4]> region <offset = 4, shape = [1, 4], stride = [4, 2]>
  }
  // The boxes differ in two dims.
  // CHECK-LABEL: loadplan.checkpoint "two_dims"
  // CHECK-NEXT:    loadplan.write @c box <[0, 1], [0, 4]>
  // CHECK-NEXT:    loadplan.write @c box <[1, 2], [4, 8]>
  loadplan.checkpoint "two_dims" : tensor<2x8xbf16> (%w) {
    loadplan.write @c box <[0, 1], [0, 4]> region <offset = 0, shape = [1, 4], stride = [4, 1]>
    loadplan.write @c box <[1, 2], [4, 8]> region <offset = 4, shape = [1, 4], stride = [4, 1]>
  }
  // The second box does not continue the first (a step).
  // CHECK-LABEL: loadplan.checkpoint "box_gap"
  // CHECK-NEXT:    loadplan.write @c box <[0, 1], [0, 8]>
  // CHECK-NEXT:    loadplan.write @c box <[2, 3], [0, 8]>
  loadplan.checkpoint "box_gap" : tensor<4x8xbf16> (%w) {
    loadplan.write @c box <[0, 1], [0, 8]> region <offset = 0, shape = [1, 8], stride = [8, 1]>
    loadplan.write @c box <[2, 3], [0, 8]> region <offset = 8, shape = [1, 8], stride = [8, 1]>
  }
  // A region with a split dim does not merge.
  // CHECK-LABEL: loadplan.checkpoint "split_dim"
  // CHECK-NEXT:    loadplan.write @c box <[0, 6]> region <offset = 0, shape = [2, 3], stride = [8, 1]>
  // CHECK-NEXT:    loadplan.write @c box <[6, 12]> region <offset = 16, shape = [2, 3], stride = [8, 1]>
  loadplan.checkpoint "split_dim" : tensor<12xbf16> (%w) {
    loadplan.write @c box <[0, 6]> region <offset = 0, shape = [2, 3], stride = [8, 1]>
    loadplan.write @c box <[6, 12]> region <offset = 16, shape = [2, 3], stride = [8, 1]>
  }
  // The same box to two places (KV-head replication) stays two writes.
  // CHECK-LABEL: loadplan.checkpoint "replicated"
  // CHECK-NEXT:    loadplan.write @c box <[0, 2], [0, 8]> region <offset = 0,
  // CHECK-NEXT:    loadplan.write @c box <[0, 2], [0, 8]> region <offset = 16,
  loadplan.checkpoint "replicated" : tensor<2x8xbf16> (%w) {
    loadplan.write @c box <[0, 2], [0, 8]> region <offset = 0, shape = [2, 8], stride = [8, 1]>
    loadplan.write @c box <[0, 2], [0, 8]> region <offset = 16, shape = [2, 8], stride = [8, 1]>
  }
  // The destination runs backwards: no region has a negative stride.
  // CHECK-LABEL: loadplan.checkpoint "backwards_destination"
  // CHECK-NEXT:    loadplan.write @c box <[0, 1], [0, 8]> region <offset = 8,
  // CHECK-NEXT:    loadplan.write @c box <[1, 2], [0, 8]> region <offset = 0,
  loadplan.checkpoint "backwards_destination" : tensor<2x8xbf16> (%w) {
    loadplan.write @c box <[0, 1], [0, 8]> region <offset = 8, shape = [1, 8], stride = [8, 1]>
    loadplan.write @c box <[1, 2], [0, 8]> region <offset = 0, shape = [1, 8], stride = [8, 1]>
  }
  // Converting writes merge with writes of the same conversion only:
  // regions count elements of the dtype written.
  // CHECK-LABEL: loadplan.checkpoint "converting_rows"
  // CHECK-NEXT:    loadplan.write @f box <[0, 4]> region <offset = 0, shape = [4], stride = [1]> as f32
  // CHECK-NEXT:  }
  loadplan.checkpoint "converting_rows" : tensor<4xbf16> (%w) {
    loadplan.write @f box <[0, 2]> region <offset = 0, shape = [2], stride = [1]> as f32
    loadplan.write @f box <[2, 4]> region <offset = 2, shape = [2], stride = [1]> as f32
  }
  // CHECK-LABEL: loadplan.checkpoint "mixed_conversions"
  // CHECK-NEXT:    loadplan.write @f box <[0, 2]> region <offset = 8, shape = [2], stride = [1]> as f32
  // CHECK-NEXT:    loadplan.write @f box <[2, 4]> region <offset = 10, shape = [2], stride = [1]> as f16
  // CHECK-NEXT:  }
  loadplan.checkpoint "mixed_conversions" : tensor<4xbf16> (%w) {
    loadplan.write @f box <[0, 2]> region <offset = 8, shape = [2], stride = [1]> as f32
    loadplan.write @f box <[2, 4]> region <offset = 10, shape = [2], stride = [1]> as f16
  }
  // CHECK-LABEL: loadplan.checkpoint "copy_then_convert"
  // CHECK-NEXT:    loadplan.write @f box <[0, 2]> region <offset = 32, shape = [2], stride = [1]>{{$}}
  // CHECK-NEXT:    loadplan.write @f box <[2, 4]> region <offset = 34, shape = [2], stride = [1]> as f32
  // CHECK-NEXT:  }
  loadplan.checkpoint "copy_then_convert" : tensor<4xbf16> (%w) {
    loadplan.write @f box <[0, 2]> region <offset = 32, shape = [2], stride = [1]>
    loadplan.write @f box <[2, 4]> region <offset = 34, shape = [2], stride = [1]> as f32
  }
}
