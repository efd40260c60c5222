// RUN: loadplan-opt --loadplan-fold-views --loadplan-to-boxes --split-input-file %s | FileCheck %s

// Each copy becomes a write: a box of the checkpoint tensor and the region
// of the target its elements go to, in row-major box order.

module {
  loadplan.storage @s size 48
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [4, 1] : tensor<6x4xbf16>
  // The seeds' example: P.copy_(W.t()) with W [4, 6] and P [6, 4].
  // CHECK-LABEL: loadplan.checkpoint "transpose"
  // CHECK-NEXT:    loadplan.write @p box <[0, 4], [0, 6]> region <offset = 0, shape = [4, 6], stride = [1, 4]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "transpose" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [6, 4], stride = [4, 1]> as bf16 : tensor<6x4xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [8, 1] : tensor<64x8xbf16>
  // A box dim the loader splits and sends to unrelated places stays split:
  // 6 becomes (2, 3) with two destination strides.
  // CHECK-LABEL: loadplan.checkpoint "split_box_dim"
  // CHECK-NEXT:    loadplan.write @p box <[0, 6]> region <offset = 0, shape = [2, 3], stride = [8, 1]>
  loadplan.checkpoint "split_box_dim" : tensor<6xbf16> (%w) {
    %0 = loadplan.unflatten %w dim 0 : tensor<6xbf16> -> tensor<2x3xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [2, 3], stride = [8, 1]> as bf16 : tensor<2x3xbf16>
  }
  // Split into places that continue one another, the parts merge back.
  // CHECK-LABEL: loadplan.checkpoint "split_contiguous"
  // CHECK-NEXT:    loadplan.write @p box <[0, 6]> region <offset = 16, shape = [6], stride = [1]>
  loadplan.checkpoint "split_contiguous" : tensor<6xbf16> (%w) {
    %0 = loadplan.unflatten %w dim 0 : tensor<6xbf16> -> tensor<2x3xbf16>
    loadplan.copy %0 to @p <offset = 16, shape = [2, 3], stride = [3, 1]> as bf16 : tensor<2x3xbf16>
  }
  // Split and transposed: the region walks the box in row-major order.
  // CHECK-LABEL: loadplan.checkpoint "split_transposed"
  // CHECK-NEXT:    loadplan.write @p box <[0, 6]> region <offset = 32, shape = [2, 3], stride = [1, 2]>
  loadplan.checkpoint "split_transposed" : tensor<6xbf16> (%w) {
    %0 = loadplan.unflatten %w dim 0 : tensor<6xbf16> -> tensor<2x3xbf16>
    %1 = loadplan.transpose %0 dim0 0 dim1 1 : tensor<2x3xbf16> -> tensor<3x2xbf16>
    loadplan.copy %1 to @p <offset = 32, shape = [3, 2], stride = [2, 1]> as bf16 : tensor<3x2xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 4096
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<2048xbf16>
  // CHECK-LABEL: loadplan.checkpoint "permute"
  // CHECK-NEXT:    loadplan.write @p box <[0, 2], [0, 3], [0, 4]> region <offset = 0, shape = [2, 3, 4], stride = [12, 1, 3]>
  loadplan.checkpoint "permute" : tensor<2x3x4xbf16> (%w) {
    %0 = loadplan.permute %w dims [0, 2, 1] : tensor<2x3x4xbf16> -> tensor<2x4x3xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [2, 4, 3], stride = [12, 3, 1]> as bf16 : tensor<2x4x3xbf16>
  }
  // gpt-oss: w.permute(0, 2, 1).contiguous() copied into the parameter
  // stays direct.
  // CHECK-LABEL: loadplan.checkpoint "clone_after_permute"
  // CHECK-NEXT:    loadplan.write @p box <[0, 2], [0, 3], [0, 4]> region <offset = 100, shape = [2, 3, 4], stride = [12, 1, 3]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "clone_after_permute" : tensor<2x3x4xbf16> (%w) {
    %0 = loadplan.permute %w dims [0, 2, 1] : tensor<2x3x4xbf16> -> tensor<2x4x3xbf16>
    %1 = loadplan.clone %0 : tensor<2x4x3xbf16>
    loadplan.copy %1 to @p <offset = 100, shape = [2, 4, 3], stride = [12, 3, 1]> as bf16 : tensor<2x4x3xbf16>
  }
  // A transposed destination: param.t().copy_(w).
  // CHECK-LABEL: loadplan.checkpoint "transposed_destination"
  // CHECK-NEXT:    loadplan.write @p box <[0, 4], [0, 6]> region <offset = 200, shape = [4, 6], stride = [1, 4]>
  loadplan.checkpoint "transposed_destination" : tensor<4x6xbf16> (%w) {
    loadplan.copy %w to @p <offset = 200, shape = [4, 6], stride = [1, 4]> as bf16 : tensor<4x6xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 4096
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<2048xbf16>
  // A flatten that spans checkpoint dims is split back into them: one box.
  // CHECK-LABEL: loadplan.checkpoint "flatten_one_box"
  // CHECK-NEXT:    loadplan.write @p box <[0, 4], [0, 6]> region <offset = 0, shape = [4, 6], stride = [6, 1]>
  loadplan.checkpoint "flatten_one_box" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.flatten %w start_dim 0 end_dim 1 : tensor<4x6xbf16> -> tensor<24xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [24], stride = [1]> as bf16 : tensor<24xbf16>
  }
  // Pieces of the flat view that are whole rows are boxes of their own.
  // CHECK-LABEL: loadplan.checkpoint "flatten_several_boxes"
  // CHECK-NEXT:    loadplan.write @p box <[0, 2], [0, 6]> region <offset = 100, shape = [2, 6], stride = [6, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[2, 4], [0, 6]> region <offset = 300, shape = [2, 6], stride = [6, 1]>
  loadplan.checkpoint "flatten_several_boxes" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.flatten %w start_dim 0 end_dim 1 : tensor<4x6xbf16> -> tensor<24xbf16>
    %1 = loadplan.slice %0 dim 0 start 0 end 12 step 1 : tensor<24xbf16> -> tensor<12xbf16>
    %2 = loadplan.slice %0 dim 0 start 12 end 24 step 1 : tensor<24xbf16> -> tensor<12xbf16>
    loadplan.copy %1 to @p <offset = 100, shape = [12], stride = [1]> as bf16 : tensor<12xbf16>
    loadplan.copy %2 to @p <offset = 300, shape = [12], stride = [1]> as bf16 : tensor<12xbf16>
  }
  // A flatten of the last two of three dims, sliced per outer index and
  // copied transposed.
  // CHECK-LABEL: loadplan.checkpoint "flatten_inner"
  // CHECK-NEXT:    loadplan.write @p box <[1, 2], [0, 3], [0, 4]> region <offset = 500, shape = [1, 3, 4], stride = [1, 4, 1]>
  loadplan.checkpoint "flatten_inner" : tensor<2x3x4xbf16> (%w) {
    %0 = loadplan.flatten %w start_dim 1 end_dim 2 : tensor<2x3x4xbf16> -> tensor<2x12xbf16>
    %1 = loadplan.select %0 dim 0 index 1 : tensor<2x12xbf16> -> tensor<12xbf16>
    loadplan.copy %1 to @p <offset = 500, shape = [12], stride = [1]> as bf16 : tensor<12xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 4096
  loadplan.target @qkv module "attn.qkv_proj" tensor "weight" storage @s byte_offset 0 stride [8, 1] : tensor<12x8xbf16>
  loadplan.target @e module "moe.experts" tensor "w13" storage @s byte_offset 512 stride [32, 8, 1] : tensor<4x4x8xbf16>
  // chunk / split of a fused checkpoint dim: slices, each its own box.
  // CHECK-LABEL: loadplan.checkpoint "fused.chunk"
  // CHECK-NEXT:    loadplan.write @qkv box <[0, 4], [0, 8]> region <offset = 0, shape = [4, 8], stride = [8, 1]>
  // CHECK-NEXT:    loadplan.write @qkv box <[4, 8], [0, 8]> region <offset = 32, shape = [4, 8], stride = [8, 1]>
  // CHECK-NEXT:    loadplan.write @qkv box <[8, 12], [0, 8]> region <offset = 64, shape = [4, 8], stride = [8, 1]>
  loadplan.checkpoint "fused.chunk" : tensor<12x8xbf16> (%w) {
    %q = loadplan.slice %w dim 0 start 0 end 4 step 1 : tensor<12x8xbf16> -> tensor<4x8xbf16>
    %k = loadplan.slice %w dim 0 start 4 end 8 step 1 : tensor<12x8xbf16> -> tensor<4x8xbf16>
    %v = loadplan.slice %w dim 0 start 8 end 12 step 1 : tensor<12x8xbf16> -> tensor<4x8xbf16>
    loadplan.copy %q to @qkv <offset = 0, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
    loadplan.copy %k to @qkv <offset = 32, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
    loadplan.copy %v to @qkv <offset = 64, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
  }
  // unbind of a fused experts dim: selects, each a box one index wide,
  // copied into its slot (param[e] = w[e] is select + copy).
  // CHECK-LABEL: loadplan.checkpoint "fused.unbind"
  // CHECK-NEXT:    loadplan.write @e box <[0, 1], [0, 4], [0, 8]> region <offset = 64, shape = [1, 4, 8], stride = [1, 8, 1]>
  // CHECK-NEXT:    loadplan.write @e box <[1, 2], [0, 4], [0, 8]> region <offset = 96, shape = [1, 4, 8], stride = [1, 8, 1]>
  loadplan.checkpoint "fused.unbind" : tensor<2x4x8xbf16> (%w) {
    %0 = loadplan.select %w dim 0 index 0 : tensor<2x4x8xbf16> -> tensor<4x8xbf16>
    %1 = loadplan.select %w dim 0 index 1 : tensor<2x4x8xbf16> -> tensor<4x8xbf16>
    loadplan.copy %0 to @e <offset = 64, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
    loadplan.copy %1 to @e <offset = 96, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
  }
  // narrow of a narrow.
  // CHECK-LABEL: loadplan.checkpoint "narrow_of_narrow"
  // CHECK-NEXT:    loadplan.write @qkv box <[6, 8], [2, 6]> region <offset = 0, shape = [2, 4], stride = [8, 1]>
  loadplan.checkpoint "narrow_of_narrow" : tensor<12x8xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 4 end 12 step 1 : tensor<12x8xbf16> -> tensor<8x8xbf16>
    %1 = loadplan.slice %0 dim 1 start 2 end 6 step 1 : tensor<8x8xbf16> -> tensor<8x4xbf16>
    %2 = loadplan.slice %1 dim 0 start 2 end 4 step 1 : tensor<8x4xbf16> -> tensor<2x4xbf16>
    loadplan.copy %2 to @qkv <offset = 0, shape = [2, 4], stride = [8, 1]> as bf16 : tensor<2x4xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 4096
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<2048xbf16>
  loadplan.target @scale module "m" tensor "scale" storage @s byte_offset 64 stride [1] : tensor<4xf32>
  // A per-expert weight copied into its slot of a fused parameter.
  // CHECK-LABEL: loadplan.checkpoint "select_slot"
  // CHECK-NEXT:    loadplan.write @p box <[0, 4], [0, 8]> region <offset = 96, shape = [4, 8], stride = [8, 1]>
  loadplan.checkpoint "select_slot" : tensor<4x8xbf16> (%w) {
    loadplan.copy %w to @p <offset = 96, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
  }
  // A 0-d checkpoint copied into a (1,) slot: a box of no dims.
  // CHECK-LABEL: loadplan.checkpoint "zero_dim"
  // CHECK-NEXT:    loadplan.write @scale box <> region <offset = 2, shape = [], stride = []>
  loadplan.checkpoint "zero_dim" : tensor<f32> (%w) {
    loadplan.copy %w to @scale <offset = 2, shape = [1], stride = [1]> as f32 : tensor<f32>
  }
  // The same box to several destinations (KV-head replication, a
  // per-tensor scale into every slot): several writes.
  // CHECK-LABEL: loadplan.checkpoint "replicated"
  // CHECK-NEXT:    loadplan.write @p box <[4, 8], [0, 8]> region <offset = 512, shape = [4, 8], stride = [8, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[4, 8], [0, 8]> region <offset = 544, shape = [4, 8], stride = [8, 1]>
  loadplan.checkpoint "replicated" : tensor<8x8xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 4 end 8 step 1 : tensor<8x8xbf16> -> tensor<4x8xbf16>
    loadplan.copy %0 to @p <offset = 512, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
    loadplan.copy %0 to @p <offset = 544, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
  }
  // A copy of no element makes no write; it stays for
  // --loadplan-detect-fallbacks, for which the name did write (as in the
  // seeds).
  // CHECK-LABEL: loadplan.checkpoint "empty"
  // CHECK-NOT:     loadplan.write
  // CHECK-NOT:     loadplan.fallback
  // CHECK:         loadplan.copy %{{.*}} to @p <offset = 0, shape = [0], stride = [1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "empty" : tensor<8xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 8 end 8 step 1 : tensor<8xbf16> -> tensor<0xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [0], stride = [1]> as bf16 : tensor<0xbf16>
  }
}

// -----

// Copies that are not copies of boxes keep their copy (later stages still
// see the bytes it writes) behind a fallback with the reason. Steps and
// repeats are several boxes: one per step, one per repeat.

module {
  loadplan.storage @s size 4096
  loadplan.storage @u size 64
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<2048xbf16>
  loadplan.target @q module "m" tensor "q" storage @s byte_offset 0 stride [1] : tensor<2048xf8E4M3FN>
  loadplan.target @bytes module "m" tensor "packed" storage @u byte_offset 1 stride [1] : tensor<32xui8>
  // Every other element: one box each.
  // CHECK-LABEL: loadplan.checkpoint "step_slice"
  // CHECK-NEXT:    loadplan.write @p box <[0, 1]> region <offset = 0, shape = [1], stride = [1]>
  // CHECK-NEXT:    loadplan.write @p box <[2, 3]> region <offset = 1, shape = [1], stride = [1]>
  // CHECK-COUNT-5: loadplan.write @p box
  // CHECK-NEXT:    loadplan.write @p box <[14, 15]> region <offset = 7, shape = [1], stride = [1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "step_slice" : tensor<16xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 0 end 16 step 2 : tensor<16xbf16> -> tensor<8xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
  // A step that covers a whole dim of a flatten is fine: every other
  // element of a [4, 2] tensor is its first column.
  // CHECK-LABEL: loadplan.checkpoint "step_over_flatten"
  // CHECK-NEXT:    loadplan.write @p box <[0, 4], [0, 1]> region <offset = 16, shape = [4, 1], stride = [1, 1]>
  loadplan.checkpoint "step_over_flatten" : tensor<4x2xbf16> (%w) {
    %0 = loadplan.flatten %w start_dim 0 end_dim 1 : tensor<4x2xbf16> -> tensor<8xbf16>
    %1 = loadplan.slice %0 dim 0 start 0 end 8 step 2 : tensor<8xbf16> -> tensor<4xbf16>
    loadplan.copy %1 to @p <offset = 16, shape = [4], stride = [1]> as bf16 : tensor<4xbf16>
  }
  // An expand: the row once per destination row.
  // CHECK-LABEL: loadplan.checkpoint "expand"
  // CHECK-NEXT:    loadplan.write @p box <[0, 1], [0, 8]> region <offset = 32, shape = [1, 8], stride = [1, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[0, 1], [0, 8]> region <offset = 40, shape = [1, 8], stride = [1, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[0, 1], [0, 8]> region <offset = 48, shape = [1, 8], stride = [1, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[0, 1], [0, 8]> region <offset = 56, shape = [1, 8], stride = [1, 1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "expand" : tensor<1x8xbf16> (%w) {
    %0 = loadplan.expand %w : tensor<1x8xbf16> -> tensor<4x8xbf16>
    loadplan.copy %0 to @p <offset = 32, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
  }
  // copy_ broadcasts the source: the same as an expand.
  // CHECK-LABEL: loadplan.checkpoint "broadcasting_copy"
  // CHECK-NEXT:    loadplan.write @p box <[0, 8]> region <offset = 64, shape = [8], stride = [1]>
  // CHECK-COUNT-2: loadplan.write @p box <[0, 8]>
  // CHECK-NEXT:    loadplan.write @p box <[0, 8]> region <offset = 88, shape = [8], stride = [1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "broadcasting_copy" : tensor<8xbf16> (%w) {
    loadplan.copy %w to @p <offset = 64, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<8xbf16>
  }
  // CHECK-LABEL: loadplan.checkpoint "dest_repeats"
  // CHECK:         loadplan.fallback "writes one destination element twice"
  loadplan.checkpoint "dest_repeats" : tensor<4x8xbf16> (%w) {
    loadplan.copy %w to @p <offset = 96, shape = [4, 8], stride = [0, 1]> as bf16 : tensor<4x8xbf16>
  }
  // An expand into a destination that repeats too: one element written
  // four times.
  // CHECK-LABEL: loadplan.checkpoint "expand_into_one_element"
  // CHECK:         loadplan.fallback "repeats source elements (expand or broadcast)"
  // CHECK-NEXT:    loadplan.copy
  loadplan.checkpoint "expand_into_one_element" : tensor<1x8xbf16> (%w) {
    %0 = loadplan.expand %w : tensor<1x8xbf16> -> tensor<4x8xbf16>
    loadplan.copy %0 to @p <offset = 96, shape = [4, 8], stride = [0, 1]> as bf16 : tensor<4x8xbf16>
  }
  // More than 1024 boxes for one copy (2048 single elements): a fallback.
  // CHECK-LABEL: loadplan.checkpoint "too_many_steps"
  // CHECK:         loadplan.fallback "source slice has a step or is not a box"
  // CHECK-NEXT:    loadplan.copy
  loadplan.checkpoint "too_many_steps" : tensor<4096xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 0 end 4096 step 2 : tensor<4096xbf16> -> tensor<2048xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [2048], stride = [1]> as bf16 : tensor<2048xbf16>
  }
  // A step through a flattened [4, 6] (every other element of 3..14) is
  // no box of more than one element: single elements.
  // CHECK-LABEL: loadplan.checkpoint "not_a_box"
  // CHECK-NEXT:    loadplan.write @p box <[0, 1], [3, 4]> region <offset = 128, shape = [1, 1], stride = [1, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[0, 1], [5, 6]> region <offset = 129, shape = [1, 1], stride = [1, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[1, 2], [1, 2]> region <offset = 130, shape = [1, 1], stride = [1, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[1, 2], [3, 4]> region <offset = 131, shape = [1, 1], stride = [1, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[1, 2], [5, 6]> region <offset = 132, shape = [1, 1], stride = [1, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[2, 3], [1, 2]> region <offset = 133, shape = [1, 1], stride = [1, 1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "not_a_box" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.flatten %w start_dim 0 end_dim 1 : tensor<4x6xbf16> -> tensor<24xbf16>
    %1 = loadplan.slice %0 dim 0 start 3 end 15 step 2 : tensor<24xbf16> -> tensor<6xbf16>
    loadplan.copy %1 to @p <offset = 128, shape = [6], stride = [1]> as bf16 : tensor<6xbf16>
  }
  // Every other row: one box per row.
  // CHECK-LABEL: loadplan.checkpoint "step_of_rows"
  // CHECK-NEXT:    loadplan.write @p box <[0, 1], [0, 6]> region <offset = 128, shape = [1, 6], stride = [1, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[2, 3], [0, 6]> region <offset = 134, shape = [1, 6], stride = [1, 1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "step_of_rows" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 0 end 4 step 2 : tensor<4x6xbf16> -> tensor<2x6xbf16>
    loadplan.copy %0 to @p <offset = 128, shape = [2, 6], stride = [6, 1]> as bf16 : tensor<2x6xbf16>
  }
  // copy_ views the source in the destination's shape when the element
  // counts agree; a transposed source cannot be.
  // CHECK-LABEL: loadplan.checkpoint "reshape_at_copy"
  // CHECK:         loadplan.fallback "copy_ with a reshape that is not a view"
  loadplan.checkpoint "reshape_at_copy" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    loadplan.copy %0 to @p <offset = 160, shape = [24], stride = [1]> as bf16 : tensor<6x4xbf16>
  }
  // CHECK-LABEL: loadplan.checkpoint "view_at_copy"
  // CHECK-NEXT:    loadplan.write @p box <[0, 4], [0, 6]> region <offset = 192, shape = [4, 6], stride = [6, 1]>
  loadplan.checkpoint "view_at_copy" : tensor<4x6xbf16> (%w) {
    loadplan.copy %w to @p <offset = 192, shape = [24], stride = [1]> as bf16 : tensor<4x6xbf16>
  }
  // Conversions the executors do are writes that convert (more in
  // to-boxes-convert.mlir); others fall back.
  // CHECK-LABEL: loadplan.checkpoint "cast_at_copy"
  // CHECK-NEXT:    loadplan.write @q box <[0, 8]> region <offset = 0, shape = [8], stride = [1]> as f8E4M3FN
  // CHECK-NEXT:  }
  loadplan.checkpoint "cast_at_copy" : tensor<8xbf16> (%w) {
    loadplan.copy %w to @q <offset = 0, shape = [8], stride = [1]> as f8E4M3FN : tensor<8xbf16>
  }
  // CHECK-LABEL: loadplan.checkpoint "convert"
  // CHECK-NEXT:    loadplan.write @q box <[0, 8]> region <offset = 16, shape = [8], stride = [1]> as f8E4M3FN
  // CHECK-NEXT:  }
  loadplan.checkpoint "convert" : tensor<8xbf16> (%w) {
    %0 = loadplan.convert %w : tensor<8xbf16> -> tensor<8xf8E4M3FN>
    loadplan.copy %0 to @q <offset = 16, shape = [8], stride = [1]> as f8E4M3FN : tensor<8xf8E4M3FN>
  }
  // CHECK-LABEL: loadplan.checkpoint "cast_to_int"
  // CHECK:         loadplan.fallback "casts bfloat16 to int8 at copy_ (send it as int8 to make it direct)"
  loadplan.checkpoint "cast_to_int" : tensor<8xbf16> (%w) {
    loadplan.copy %w to @q <offset = 24, shape = [8], stride = [1]> as i8 : tensor<8xbf16>
  }
  // A destination that views a uint8 buffer at an odd byte as bf16.
  // CHECK-LABEL: loadplan.checkpoint "element_size"
  // CHECK:         loadplan.fallback "copies into a destination viewed with another element size"
  loadplan.checkpoint "element_size" : tensor<8xbf16> (%w) {
    loadplan.copy %w to @bytes <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
  // CHECK-LABEL: loadplan.checkpoint "apply"
  // CHECK:         loadplan.fallback "applies aten.mul.Tensor to it"
  // CHECK-NEXT:    loadplan.copy
  loadplan.checkpoint "apply" : tensor<8xbf16> (%w) {
    %0 = loadplan.apply "aten.mul.Tensor" (%w) : (tensor<8xbf16>) -> tensor<8xbf16>
    %1 = loadplan.slice %0 dim 0 start 0 end 4 step 1 : tensor<8xbf16> -> tensor<4xbf16>
    loadplan.copy %1 to @p <offset = 256, shape = [4], stride = [1]> as bf16 : tensor<4xbf16>
  }
  // A reshape no strides give, copied into a destination that cannot be
  // viewed in the reshaped layout's shape ([2, 12] padded to rows of 24 as
  // [6, 4]).
  // CHECK-LABEL: loadplan.checkpoint "reshape_non_contiguous"
  // CHECK:         loadplan.fallback "copy_ with a reshape that is not a view"
  loadplan.checkpoint "reshape_non_contiguous" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    %1 = loadplan.reshape %0 : tensor<6x4xbf16> -> tensor<2x12xbf16>
    loadplan.copy %1 to @p <offset = 288, shape = [2, 12], stride = [24, 1]> as bf16 : tensor<2x12xbf16>
  }
  // A transpose of a reshape that no strides give: the reshape's reason.
  // CHECK-LABEL: loadplan.checkpoint "transpose_of_reshape"
  // CHECK:         loadplan.fallback "reshapes a non-contiguous view (a copy that is not a strided view of the checkpoint tensor)"
  loadplan.checkpoint "transpose_of_reshape" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    %1 = loadplan.reshape %0 : tensor<6x4xbf16> -> tensor<4x6xbf16>
    %2 = loadplan.transpose %1 dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    loadplan.copy %2 to @p <offset = 600, shape = [6, 4], stride = [4, 1]> as bf16 : tensor<6x4xbf16>
  }
}

// -----

// Copies whose elements are several boxes, and reshapes no strides give.

module {
  loadplan.storage @s size 4096
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<2048xbf16>
  loadplan.target @q module "m" tensor "q" storage @s byte_offset 0 stride [4, 1] : tensor<16x4xbf16>
  // p.copy_(w.reshape(-1)[2:8]) with w [4, 4]: the end of row 0 and row 1.
  // CHECK-LABEL: loadplan.checkpoint "flatten_slice"
  // CHECK-NEXT:    loadplan.write @p box <[0, 1], [2, 4]> region <offset = 0, shape = [1, 2], stride = [1, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[1, 2], [0, 4]> region <offset = 2, shape = [1, 4], stride = [1, 1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "flatten_slice" : tensor<4x4xbf16> (%w) {
    %0 = loadplan.view %w : tensor<4x4xbf16> -> tensor<16xbf16>
    %1 = loadplan.slice %0 dim 0 start 2 end 8 step 1 : tensor<16xbf16> -> tensor<6xbf16>
    loadplan.copy %1 to @p <offset = 0, shape = [6], stride = [1]> as bf16 : tensor<6xbf16>
  }
  // Elements 3..21 of a flattened [4, 6]: a partial row, two rows, a
  // partial row; per expert of a [2, 4, 6], with the expert dim kept whole.
  // CHECK-LABEL: loadplan.checkpoint "flatten_slice_per_expert"
  // CHECK-NEXT:    loadplan.write @p box <[0, 2], [0, 1], [3, 6]> region <offset = 100, shape = [2, 1, 3], stride = [18, 1, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[0, 2], [1, 3], [0, 6]> region <offset = 103, shape = [2, 2, 6], stride = [18, 6, 1]>
  // CHECK-NEXT:    loadplan.write @p box <[0, 2], [3, 4], [0, 3]> region <offset = 115, shape = [2, 1, 3], stride = [18, 1, 1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "flatten_slice_per_expert" : tensor<2x4x6xbf16> (%w) {
    %0 = loadplan.flatten %w start_dim 1 end_dim 2 : tensor<2x4x6xbf16> -> tensor<2x24xbf16>
    %1 = loadplan.slice %0 dim 1 start 3 end 21 step 1 : tensor<2x24xbf16> -> tensor<2x18xbf16>
    loadplan.copy %1 to @p <offset = 100, shape = [2, 18], stride = [18, 1]> as bf16 : tensor<2x18xbf16>
  }
  // Mistral's q/k permute at TP rank 1 of 2: view, transpose, reshape, then
  // the narrow. One box, the permutation in the region's strides.
  // CHECK-LABEL: loadplan.checkpoint "mistral_permute"
  // CHECK-NEXT:    loadplan.write @q box <[8, 16], [0, 4]> region <offset = 0, shape = [2, 2, 2, 4], stride = [16, 4, 8, 1]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "mistral_permute" : tensor<16x4xbf16> (%w) {
    %0 = loadplan.view %w : tensor<16x4xbf16> -> tensor<4x2x2x4xbf16>
    %1 = loadplan.transpose %0 dim0 1 dim1 2 : tensor<4x2x2x4xbf16> -> tensor<4x2x2x4xbf16>
    %2 = loadplan.clone %1 : tensor<4x2x2x4xbf16>
    %3 = loadplan.view %2 : tensor<4x2x2x4xbf16> -> tensor<16x4xbf16>
    %4 = loadplan.slice %3 dim 0 start 8 end 16 step 1 : tensor<16x4xbf16> -> tensor<8x4xbf16>
    loadplan.copy %4 to @q <offset = 0, shape = [8, 4], stride = [4, 1]> as bf16 : tensor<8x4xbf16>
  }
  // A transposed view flattened and copied whole: the destination viewed in
  // the transposed shape.
  // CHECK-LABEL: loadplan.checkpoint "reshape_of_transpose"
  // CHECK-NEXT:    loadplan.write @p box <[0, 4], [0, 6]> region <offset = 200, shape = [4, 6], stride = [1, 4]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "reshape_of_transpose" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    %1 = loadplan.reshape %0 : tensor<6x4xbf16> -> tensor<24xbf16>
    loadplan.copy %1 to @p <offset = 200, shape = [24], stride = [1]> as bf16 : tensor<24xbf16>
  }
}
