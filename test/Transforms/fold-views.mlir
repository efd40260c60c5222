// RUN: loadplan-opt --loadplan-fold-views --split-input-file %s | FileCheck %s

// Each view chain becomes one as_strided of the incoming tensor: its layout
// in the contiguous checkpoint tensor. Intermediate layouts are erased.

module {
  loadplan.storage @s size 48
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [4, 1] : tensor<6x4xbf16>
  // CHECK-LABEL: loadplan.checkpoint "transpose"
  // CHECK-NEXT:    %[[V:.*]] = loadplan.as_strided %w <offset = 0, shape = [6, 4], stride = [1, 6]>
  // CHECK-NEXT:    loadplan.copy %[[V]] to @p
  loadplan.checkpoint "transpose" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [6, 4], stride = [4, 1]> as bf16 : tensor<6x4xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<512xbf16>
  // Rows 4..12, then rows 2..6 of those: rows 6..10 of the checkpoint.
  // CHECK-LABEL: loadplan.checkpoint "narrow_of_narrow"
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 96, shape = [4, 16], stride = [16, 1]>
  // CHECK-NOT:     loadplan.slice
  loadplan.checkpoint "narrow_of_narrow" : tensor<16x16xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 4 end 12 step 1 : tensor<16x16xbf16> -> tensor<8x16xbf16>
    %1 = loadplan.slice %0 dim 0 start 2 end 6 step 1 : tensor<8x16xbf16> -> tensor<4x16xbf16>
    loadplan.copy %1 to @p <offset = 0, shape = [4, 16], stride = [16, 1]> as bf16 : tensor<4x16xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<512xbf16>
  // torch clamps: a negative start counts from the end, a full slice ends
  // at INT64_MAX.
  // CHECK-LABEL: loadplan.checkpoint "clamped_slice"
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 12, shape = [16, 4], stride = [16, 1]>
  loadplan.checkpoint "clamped_slice" : tensor<16x16xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 0 end 9223372036854775807 step 1 : tensor<16x16xbf16> -> tensor<16x16xbf16>
    %1 = loadplan.slice %0 dim 1 start -4 end 100 step 1 : tensor<16x16xbf16> -> tensor<16x4xbf16>
    loadplan.copy %1 to @p <offset = 0, shape = [16, 4], stride = [4, 1]> as bf16 : tensor<16x4xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<512xbf16>
  // A step slice is still a strided layout; to-boxes refuses it.
  // CHECK-LABEL: loadplan.checkpoint "step_slice"
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 1, shape = [8], stride = [2]>
  loadplan.checkpoint "step_slice" : tensor<16xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 1 end 16 step 2 : tensor<16xbf16> -> tensor<8xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<512xbf16>
  // chunk(3) of a fused qkv checkpoint arrives as three slices of dim 0;
  // unbind as selects.
  // CHECK-LABEL: loadplan.checkpoint "chunk"
  // CHECK-DAG:     loadplan.as_strided %w <offset = 0, shape = [4, 8], stride = [8, 1]>
  // CHECK-DAG:     loadplan.as_strided %w <offset = 32, shape = [4, 8], stride = [8, 1]>
  // CHECK-DAG:     loadplan.as_strided %w <offset = 64, shape = [4, 8], stride = [8, 1]>
  loadplan.checkpoint "chunk" : tensor<12x8xbf16> (%w) {
    %q = loadplan.slice %w dim 0 start 0 end 4 step 1 : tensor<12x8xbf16> -> tensor<4x8xbf16>
    %k = loadplan.slice %w dim 0 start 4 end 8 step 1 : tensor<12x8xbf16> -> tensor<4x8xbf16>
    %v = loadplan.slice %w dim 0 start 8 end 12 step 1 : tensor<12x8xbf16> -> tensor<4x8xbf16>
    loadplan.copy %q to @p <offset = 0, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
    loadplan.copy %k to @p <offset = 32, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
    loadplan.copy %v to @p <offset = 64, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
  }
  // CHECK-LABEL: loadplan.checkpoint "unbind"
  // CHECK-DAG:     loadplan.as_strided %w <offset = 0, shape = [8], stride = [1]>
  // CHECK-DAG:     loadplan.as_strided %w <offset = 8, shape = [8], stride = [1]>
  loadplan.checkpoint "unbind" : tensor<2x8xbf16> (%w) {
    %g = loadplan.select %w dim 0 index 0 : tensor<2x8xbf16> -> tensor<8xbf16>
    %u = loadplan.select %w dim 0 index -1 : tensor<2x8xbf16> -> tensor<8xbf16>
    loadplan.copy %g to @p <offset = 128, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
    loadplan.copy %u to @p <offset = 136, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<512xbf16>
  // CHECK-LABEL: loadplan.checkpoint "permute"
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 0, shape = [2, 4, 3], stride = [12, 1, 4]>
  loadplan.checkpoint "permute" : tensor<2x3x4xbf16> (%w) {
    %0 = loadplan.permute %w dims [0, 2, 1] : tensor<2x3x4xbf16> -> tensor<2x4x3xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [2, 4, 3], stride = [12, 3, 1]> as bf16 : tensor<2x4x3xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<512xbf16>
  // unsqueeze takes the stride torch gives (size times stride of the dim it
  // lands before); squeeze drops only size-1 dims.
  // CHECK-LABEL: loadplan.checkpoint "unsqueeze_squeeze"
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 8, shape = [1, 8], stride = [8, 1]>
  // CHECK-NEXT:    loadplan.copy
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 0, shape = [2, 8], stride = [8, 1]>
  loadplan.checkpoint "unsqueeze_squeeze" : tensor<2x8xbf16> (%w) {
    %0 = loadplan.select %w dim 0 index 1 : tensor<2x8xbf16> -> tensor<8xbf16>
    %1 = loadplan.unsqueeze %0 dim 0 : tensor<8xbf16> -> tensor<1x8xbf16>
    loadplan.copy %1 to @p <offset = 0, shape = [1, 8], stride = [8, 1]> as bf16 : tensor<1x8xbf16>
    %2 = loadplan.unsqueeze %w dim 1 : tensor<2x8xbf16> -> tensor<2x1x8xbf16>
    %3 = loadplan.squeeze %2 dims [0, 1] : tensor<2x1x8xbf16> -> tensor<2x8xbf16>
    loadplan.copy %3 to @p <offset = 16, shape = [2, 8], stride = [8, 1]> as bf16 : tensor<2x8xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<512xbf16>
  // flatten and view of a contiguous part are views; unflatten splits a
  // dim; alias (detach, .data) is the same tensor.
  // CHECK-LABEL: loadplan.checkpoint "reshapes"
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 18, shape = [36], stride = [1]>
  // CHECK-NEXT:    loadplan.copy
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 24, shape = [48], stride = [1]>
  // CHECK-NEXT:    loadplan.copy
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 0, shape = [2, 2, 3, 4], stride = [36, 18, 6, 1]>
  // CHECK-NEXT:    loadplan.copy
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 0, shape = [4, 3, 6], stride = [18, 6, 1]>
  loadplan.checkpoint "reshapes" : tensor<4x3x6xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 1 end 3 step 1 : tensor<4x3x6xbf16> -> tensor<2x3x6xbf16>
    %1 = loadplan.flatten %0 start_dim 0 end_dim -1 : tensor<2x3x6xbf16> -> tensor<36xbf16>
    loadplan.copy %1 to @p <offset = 200, shape = [36], stride = [1]> as bf16 : tensor<36xbf16>
    %2 = loadplan.view %w : tensor<4x3x6xbf16> -> tensor<72xbf16>
    %3 = loadplan.slice %2 dim 0 start 24 end 72 step 1 : tensor<72xbf16> -> tensor<48xbf16>
    loadplan.copy %3 to @p <offset = 0, shape = [48], stride = [1]> as bf16 : tensor<48xbf16>
    %5 = loadplan.view %w : tensor<4x3x6xbf16> -> tensor<2x2x18xbf16>
    %6 = loadplan.unflatten %5 dim 2 : tensor<2x2x18xbf16> -> tensor<2x2x3x6xbf16>
    %7 = loadplan.slice %6 dim 3 start 0 end 4 step 1 : tensor<2x2x3x6xbf16> -> tensor<2x2x3x4xbf16>
    loadplan.copy %7 to @p <offset = 48, shape = [2, 2, 3, 4], stride = [24, 12, 4, 1]> as bf16 : tensor<2x2x3x4xbf16>
    %8 = loadplan.alias %w : tensor<4x3x6xbf16>
    loadplan.copy %8 to @p <offset = 96, shape = [4, 3, 6], stride = [18, 6, 1]> as bf16 : tensor<4x3x6xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<512xbf16>
  // expand repeats elements: stride 0 (to-boxes refuses it).
  // CHECK-LABEL: loadplan.checkpoint "expand"
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 0, shape = [3, 4, 8], stride = [0, 0, 1]>
  loadplan.checkpoint "expand" : tensor<1x8xbf16> (%w) {
    %0 = loadplan.expand %w : tensor<1x8xbf16> -> tensor<3x4x8xbf16>
    loadplan.copy %0 to @p <offset = 0, shape = [3, 4, 8], stride = [32, 8, 1]> as bf16 : tensor<3x4x8xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 4096
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<2048xbf16>
  // gpt-oss: w.permute(0, 2, 1).contiguous(). The clone carries the same
  // elements, so it keeps the permuted layout of the checkpoint tensor.
  // CHECK-LABEL: loadplan.checkpoint "clone_after_permute"
  // CHECK-NEXT:    %[[V:.*]] = loadplan.as_strided %w <offset = 0, shape = [2, 4, 3], stride = [12, 1, 4]>
  // CHECK-NEXT:    loadplan.copy %[[V]] to @p
  loadplan.checkpoint "clone_after_permute" : tensor<2x3x4xbf16> (%w) {
    %0 = loadplan.permute %w dims [0, 2, 1] : tensor<2x3x4xbf16> -> tensor<2x4x3xbf16>
    %1 = loadplan.clone %0 : tensor<2x4x3xbf16>
    loadplan.copy %1 to @p <offset = 0, shape = [2, 4, 3], stride = [12, 3, 1]> as bf16 : tensor<2x4x3xbf16>
  }
  // A view of the clone is a view of the same elements: a slice of the
  // permuted layout.
  // CHECK-LABEL: loadplan.checkpoint "slice_of_clone"
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 1, shape = [2, 2, 3], stride = [12, 1, 4]>
  loadplan.checkpoint "slice_of_clone" : tensor<2x3x4xbf16> (%w) {
    %0 = loadplan.permute %w dims [0, 2, 1] : tensor<2x3x4xbf16> -> tensor<2x4x3xbf16>
    %1 = loadplan.clone %0 : tensor<2x4x3xbf16>
    %2 = loadplan.slice %1 dim 1 start 1 end 3 step 1 : tensor<2x4x3xbf16> -> tensor<2x2x3xbf16>
    loadplan.copy %2 to @p <offset = 100, shape = [2, 2, 3], stride = [6, 3, 1]> as bf16 : tensor<2x2x3xbf16>
  }
  // as_strided of a clone of a contiguous run addresses the clone's own
  // storage, which starts at that run.
  // CHECK-LABEL: loadplan.checkpoint "as_strided_of_clone"
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 13, shape = [3, 2], stride = [1, 3]>
  loadplan.checkpoint "as_strided_of_clone" : tensor<2x3x4xbf16> (%w) {
    %0 = loadplan.select %w dim 0 index 1 : tensor<2x3x4xbf16> -> tensor<3x4xbf16>
    %1 = loadplan.clone %0 : tensor<3x4xbf16>
    %2 = loadplan.as_strided %1 <offset = 1, shape = [3, 2], stride = [1, 3]> : tensor<3x4xbf16> -> tensor<3x2xbf16>
    loadplan.copy %2 to @p <offset = 200, shape = [3, 2], stride = [2, 1]> as bf16 : tensor<3x2xbf16>
  }
  // as_strided of a view addresses the checkpoint tensor's storage.
  // CHECK-LABEL: loadplan.checkpoint "as_strided_of_view"
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 1, shape = [3, 2], stride = [1, 3]>
  loadplan.checkpoint "as_strided_of_view" : tensor<2x3x4xbf16> (%w) {
    %0 = loadplan.select %w dim 0 index 1 : tensor<2x3x4xbf16> -> tensor<3x4xbf16>
    %2 = loadplan.as_strided %0 <offset = 1, shape = [3, 2], stride = [1, 3]> : tensor<3x4xbf16> -> tensor<3x2xbf16>
    loadplan.copy %2 to @p <offset = 300, shape = [3, 2], stride = [2, 1]> as bf16 : tensor<3x2xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 4096
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<2048xbf16>
  // A reshape that would copy is no strided layout, but its elements are
  // still the checkpoint's: it stays a loadplan.reshape of the strided
  // layout it reshapes. A slice of it aligned to the dims it merged narrows
  // that layout (rows 0..12 of the flat [24] are rows 0..3 of the [6, 4]).
  // CHECK-LABEL: loadplan.checkpoint "reshape_non_contiguous"
  // CHECK-NEXT:    %[[X:.*]] = loadplan.as_strided %w <offset = 0, shape = [3, 4], stride = [1, 6]> : tensor<4x6xbf16> -> tensor<3x4xbf16>
  // CHECK-NEXT:    %[[R:.*]] = loadplan.reshape %[[X]] : tensor<3x4xbf16> -> tensor<12xbf16>
  // CHECK-NEXT:    loadplan.copy %[[R]]
  loadplan.checkpoint "reshape_non_contiguous" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    %1 = loadplan.reshape %0 : tensor<6x4xbf16> -> tensor<24xbf16>
    %2 = loadplan.slice %1 dim 0 start 0 end 12 step 1 : tensor<24xbf16> -> tensor<12xbf16>
    loadplan.copy %2 to @p <offset = 0, shape = [12], stride = [1]> as bf16 : tensor<12xbf16>
  }
  // flatten is a reshape too.
  // CHECK-LABEL: loadplan.checkpoint "flatten_non_contiguous"
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 0, shape = [4, 3], stride = [6, 1]>
  // CHECK-NEXT:    loadplan.reshape %{{.*}} : tensor<4x3xbf16> -> tensor<12xbf16>
  loadplan.checkpoint "flatten_non_contiguous" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.slice %w dim 1 start 0 end 3 step 1 : tensor<4x6xbf16> -> tensor<4x3xbf16>
    %1 = loadplan.flatten %0 start_dim 0 end_dim 1 : tensor<4x3xbf16> -> tensor<12xbf16>
    loadplan.copy %1 to @p <offset = 100, shape = [12], stride = [1]> as bf16 : tensor<12xbf16>
  }
  // A view of a non-contiguous tensor that strides can express folds.
  // CHECK-LABEL: loadplan.checkpoint "view_non_contiguous"
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 0, shape = [4, 2, 3], stride = [6, 3, 1]>
  loadplan.checkpoint "view_non_contiguous" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.slice %w dim 1 start 0 end 6 step 1 : tensor<4x6xbf16> -> tensor<4x6xbf16>
    %1 = loadplan.view %0 : tensor<4x6xbf16> -> tensor<4x2x3xbf16>
    loadplan.copy %1 to @p <offset = 200, shape = [4, 2, 3], stride = [6, 3, 1]> as bf16 : tensor<4x2x3xbf16>
  }
  // Reshaping a clone of a non-contiguous view gives its elements in an
  // order no strides of the checkpoint tensor give: a reshape of the
  // clone's source.
  // CHECK-LABEL: loadplan.checkpoint "reshape_of_clone"
  // CHECK-NEXT:    %[[X:.*]] = loadplan.as_strided %w <offset = 0, shape = [6, 4], stride = [1, 6]>
  // CHECK-NEXT:    %[[R:.*]] = loadplan.reshape %[[X]] : tensor<6x4xbf16> -> tensor<24xbf16>
  // CHECK-NEXT:    loadplan.copy %[[R]]
  loadplan.checkpoint "reshape_of_clone" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    %1 = loadplan.clone %0 : tensor<6x4xbf16>
    %2 = loadplan.view %1 : tensor<6x4xbf16> -> tensor<24xbf16>
    loadplan.copy %2 to @p <offset = 300, shape = [24], stride = [1]> as bf16 : tensor<24xbf16>
  }
  // CHECK-LABEL: loadplan.checkpoint "as_strided_of_permuted_clone"
  // CHECK:         loadplan.apply "aten.as_strided"(%{{.*}}) {reason = "applies as_strided to a copy of a non-contiguous view"}
  loadplan.checkpoint "as_strided_of_permuted_clone" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    %1 = loadplan.clone %0 : tensor<6x4xbf16>
    %2 = loadplan.as_strided %1 <offset = 0, shape = [24], stride = [1]> : tensor<6x4xbf16> -> tensor<24xbf16>
    loadplan.copy %2 to @p <offset = 400, shape = [24], stride = [1]> as bf16 : tensor<24xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<512xbf16>
  // Views of a value without a layout (the result of an op that is not a
  // view) are left alone.
  // CHECK-LABEL: loadplan.checkpoint "view_of_apply"
  // CHECK-NEXT:    %[[A:.*]] = loadplan.apply "aten.mul.Tensor"(%w)
  // CHECK-NEXT:    %[[T:.*]] = loadplan.transpose %[[A]]
  // CHECK-NEXT:    loadplan.copy %[[T]]
  loadplan.checkpoint "view_of_apply" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.apply "aten.mul.Tensor" (%w) : (tensor<4x6xbf16>) -> tensor<4x6xbf16>
    %1 = loadplan.transpose %0 dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    loadplan.copy %1 to @p <offset = 0, shape = [6, 4], stride = [4, 1]> as bf16 : tensor<6x4xbf16>
  }
  // A 0-d checkpoint viewed as (1,).
  // CHECK-LABEL: loadplan.checkpoint "zero_dim"
  // CHECK-NEXT:    loadplan.as_strided %w <offset = 0, shape = [1], stride = [1]>
  loadplan.checkpoint "zero_dim" : tensor<f32> (%w) {
    %0 = loadplan.view %w : tensor<f32> -> tensor<1xf32>
    loadplan.copy %0 to @p <offset = 100, shape = [1], stride = [1]> as f32 : tensor<1xf32>
  }
}

// -----

// Reshapes that no strides give, and the views after them.
module {
  loadplan.storage @s size 1024
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [4, 1] : tensor<16x4xbf16>
  // Mistral's q/k permute, w.view(2, 2, 2, 4).transpose(1, 2).reshape(8, 4),
  // then the narrow to TP rank 1's rows 4..8: head 1 of the permuted layout.
  // CHECK-LABEL: loadplan.checkpoint "mistral_permute"
  // CHECK-NEXT:    %[[X:.*]] = loadplan.as_strided %w <offset = 16, shape = [1, 2, 2, 4], stride = [16, 4, 8, 1]> : tensor<8x4xbf16> -> tensor<1x2x2x4xbf16>
  // CHECK-NEXT:    %[[R:.*]] = loadplan.reshape %[[X]] : tensor<1x2x2x4xbf16> -> tensor<4x4xbf16>
  // CHECK-NEXT:    loadplan.copy %[[R]] to @p <offset = 32
  loadplan.checkpoint "mistral_permute" : tensor<8x4xbf16> (%w) {
    %0 = loadplan.view %w : tensor<8x4xbf16> -> tensor<2x2x2x4xbf16>
    %1 = loadplan.transpose %0 dim0 1 dim1 2 : tensor<2x2x2x4xbf16> -> tensor<2x2x2x4xbf16>
    %2 = loadplan.clone %1 : tensor<2x2x2x4xbf16>
    %3 = loadplan.view %2 : tensor<2x2x2x4xbf16> -> tensor<8x4xbf16>
    %4 = loadplan.slice %3 dim 0 start 4 end 8 step 1 : tensor<8x4xbf16> -> tensor<4x4xbf16>
    loadplan.copy %4 to @p <offset = 32, shape = [4, 4], stride = [4, 1]> as bf16 : tensor<4x4xbf16>
  }
  // A select of a merged dim at an index aligned to the dims it merged, then
  // an alias: one row of the transposed [4, 6] is one column of the
  // checkpoint, a strided layout again.
  // CHECK-LABEL: loadplan.checkpoint "select_of_reshape"
  // CHECK-NEXT:    %[[X:.*]] = loadplan.as_strided %w <offset = 2, shape = [4], stride = [6]> : tensor<4x6xbf16> -> tensor<4xbf16>
  // CHECK-NEXT:    loadplan.copy %[[X]]
  loadplan.checkpoint "select_of_reshape" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    %1 = loadplan.reshape %0 : tensor<6x4xbf16> -> tensor<3x8xbf16>
    %2 = loadplan.select %1 dim 0 index 1 : tensor<3x8xbf16> -> tensor<8xbf16>
    %3 = loadplan.slice %2 dim 0 start 0 end 4 step 1 : tensor<8xbf16> -> tensor<4xbf16>
    %4 = loadplan.alias %3 : tensor<4xbf16>
    loadplan.copy %4 to @p <offset = 0, shape = [4], stride = [1]> as bf16 : tensor<4xbf16>
  }
  // A slice that cuts through a merged dim's rows is no box of the reshaped
  // layout: the reshape's reason.
  // CHECK-LABEL: loadplan.checkpoint "unaligned_slice_of_reshape"
  // CHECK:         loadplan.apply "loadplan.slice"(%{{.*}}) {reason = "reshapes a non-contiguous view (a copy that is not a strided view of the checkpoint tensor)"}
  loadplan.checkpoint "unaligned_slice_of_reshape" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    %1 = loadplan.reshape %0 : tensor<6x4xbf16> -> tensor<24xbf16>
    %2 = loadplan.slice %1 dim 0 start 2 end 10 step 1 : tensor<24xbf16> -> tensor<8xbf16>
    loadplan.copy %2 to @p <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
  // A transpose of a reshape that no strides give: no layout either.
  // CHECK-LABEL: loadplan.checkpoint "transpose_of_reshape"
  // CHECK:         loadplan.apply "loadplan.transpose"(%{{.*}}) {reason = "reshapes a copy of a non-contiguous view into a layout no strides of the checkpoint tensor give"}
  loadplan.checkpoint "transpose_of_reshape" : tensor<4x6xbf16> (%w) {
    %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    %1 = loadplan.clone %0 : tensor<6x4xbf16>
    %2 = loadplan.view %1 : tensor<6x4xbf16> -> tensor<4x6xbf16>
    %3 = loadplan.transpose %2 dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
    loadplan.copy %3 to @p <offset = 0, shape = [6, 4], stride = [4, 1]> as bf16 : tensor<6x4xbf16>
  }
}
