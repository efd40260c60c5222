// Every op and attribute of the dialect prints in a form that parses back to
// the same IR, in the custom and in the generic form.

// RUN: loadplan-opt %s | loadplan-opt | FileCheck %s
// RUN: loadplan-opt %s --mlir-print-op-generic | loadplan-opt | FileCheck %s

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

// CHECK-LABEL: loadplan.storage @s0 size 4096
loadplan.storage @s0 size 4096
// CHECK-LABEL: loadplan.storage @empty size 0
loadplan.storage @empty size 0

// CHECK-LABEL: loadplan.target @t0
// CHECK-SAME:    module "layers.0.self_attn.qkv_proj" tensor "weight"
// CHECK-SAME:    storage @s0 byte_offset 0 stride [8, 1] : tensor<32x8xbf16>
loadplan.target @t0 module "layers.0.self_attn.qkv_proj" tensor "weight"
    storage @s0 byte_offset 0 stride [8, 1] : tensor<32x8xbf16>

// A transposed target: strides need not be row-major.
// CHECK-LABEL: loadplan.target @t_transposed
// CHECK-SAME:    byte_offset 512 stride [1, 4] : tensor<4x6xf32>
loadplan.target @t_transposed module "m" tensor "w"
    storage @s0 byte_offset 512 stride [1, 4] : tensor<4x6xf32>

// CHECK-LABEL: loadplan.target @t_scalar
// CHECK-SAME:    stride [] : tensor<f32>
loadplan.target @t_scalar module "m" tensor "scale"
    storage @s0 byte_offset 1024 stride [] : tensor<f32>

// CHECK-LABEL: loadplan.target @t_fp8
// CHECK-SAME:    : tensor<16xf8E4M3FN>
loadplan.target @t_fp8 module "m" tensor "qweight"
    storage @s0 byte_offset 2048 stride [1] : tensor<16xf8E4M3FN>

// CHECK-LABEL: loadplan.target @t_bool
// CHECK-SAME:    : tensor<8xi1>
loadplan.target @t_bool module "m" tensor "mask"
    storage @s0 byte_offset 2064 stride [1] : tensor<8xi1>

// A broadcast target (stride 0) and an empty one past its storage's end.
// CHECK-LABEL: loadplan.target @t_broadcast
// CHECK-SAME:    stride [0, 1] : tensor<4x8xbf16>
loadplan.target @t_broadcast module "m" tensor "b"
    storage @s0 byte_offset 2080 stride [0, 1] : tensor<4x8xbf16>
// CHECK-LABEL: loadplan.target @t_empty
// CHECK-SAME:    storage @empty byte_offset 64 stride [8, 1] : tensor<0x8xbf16>
loadplan.target @t_empty module "m" tensor "e"
    storage @empty byte_offset 64 stride [8, 1] : tensor<0x8xbf16>

// CHECK-LABEL: loadplan.checkpoint "ckpt.empty" : tensor<4xbf16> (%w) {
// CHECK-NEXT:  }
loadplan.checkpoint "ckpt.empty" : tensor<4xbf16> (%w) {
}

// Extra attributes survive next to the name and type.
// CHECK-LABEL: loadplan.checkpoint "ckpt.attrs" : tensor<4xbf16> (%w)
// CHECK-SAME:    attributes {note = "kept"}
loadplan.checkpoint "ckpt.attrs" : tensor<4xbf16> (%w) attributes {note = "kept"} {
}

// CHECK-LABEL: loadplan.checkpoint "ckpt.scalar" : tensor<f32> (%w)
loadplan.checkpoint "ckpt.scalar" : tensor<f32> (%w) {
}

//===----------------------------------------------------------------------===//
// View ops
//===----------------------------------------------------------------------===//

// CHECK-LABEL: "view.slice"
// CHECK:         loadplan.slice %w dim 0 start 8 end 16 step 1 : tensor<24x8xbf16> -> tensor<8x8xbf16>
// CHECK:         loadplan.slice %w dim 1 start 0 end 8 step 2 : tensor<24x8xbf16> -> tensor<24x4xbf16>
loadplan.checkpoint "view.slice" : tensor<24x8xbf16> (%w) {
  %0 = loadplan.slice %w dim 0 start 8 end 16 step 1 : tensor<24x8xbf16> -> tensor<8x8xbf16>
  %1 = loadplan.slice %w dim 1 start 0 end 8 step 2 : tensor<24x8xbf16> -> tensor<24x4xbf16>
}

// A full slice has end INT64_MAX; negative dims and starts count from the end.
// CHECK-LABEL: "view.slice.edges"
// CHECK:         loadplan.slice %w dim 0 start 0 end 9223372036854775807 step 1 : tensor<6x4xbf16> -> tensor<6x4xbf16>
// CHECK:         loadplan.slice %w dim -1 start -3 end -1 step 1 : tensor<6x4xbf16> -> tensor<6x2xbf16>
// CHECK:         loadplan.slice %w dim 0 start -9223372036854775808 end 2 step 1 : tensor<6x4xbf16> -> tensor<2x4xbf16>
// CHECK:         loadplan.slice %w dim 0 start 5 end 2 step 1 : tensor<6x4xbf16> -> tensor<0x4xbf16>
// CHECK:         loadplan.slice %w dim 0 start 1 end 6 step 9223372036854775807 : tensor<6x4xbf16> -> tensor<1x4xbf16>
loadplan.checkpoint "view.slice.edges" : tensor<6x4xbf16> (%w) {
  %0 = loadplan.slice %w dim 0 start 0 end 9223372036854775807 step 1 : tensor<6x4xbf16> -> tensor<6x4xbf16>
  %1 = loadplan.slice %w dim -1 start -3 end -1 step 1 : tensor<6x4xbf16> -> tensor<6x2xbf16>
  %2 = loadplan.slice %w dim 0 start -9223372036854775808 end 2 step 1 : tensor<6x4xbf16> -> tensor<2x4xbf16>
  %3 = loadplan.slice %w dim 0 start 5 end 2 step 1 : tensor<6x4xbf16> -> tensor<0x4xbf16>
  %4 = loadplan.slice %w dim 0 start 1 end 6 step 9223372036854775807 : tensor<6x4xbf16> -> tensor<1x4xbf16>
}

// CHECK-LABEL: "view.select"
// CHECK:         loadplan.select %w dim 0 index 3 : tensor<8x16x4xbf16> -> tensor<16x4xbf16>
// CHECK:         loadplan.select %w dim -1 index -1 : tensor<8x16x4xbf16> -> tensor<8x16xbf16>
loadplan.checkpoint "view.select" : tensor<8x16x4xbf16> (%w) {
  %0 = loadplan.select %w dim 0 index 3 : tensor<8x16x4xbf16> -> tensor<16x4xbf16>
  %1 = loadplan.select %w dim -1 index -1 : tensor<8x16x4xbf16> -> tensor<8x16xbf16>
}

// Selecting from a 1-d tensor gives a 0-d one.
// CHECK-LABEL: "view.select.scalar"
// CHECK:         loadplan.select %w dim 0 index 2 : tensor<4xf32> -> tensor<f32>
loadplan.checkpoint "view.select.scalar" : tensor<4xf32> (%w) {
  %0 = loadplan.select %w dim 0 index 2 : tensor<4xf32> -> tensor<f32>
}

// CHECK-LABEL: "view.view"
// CHECK:         loadplan.view %w : tensor<4x6xbf16> -> tensor<24xbf16>
// CHECK:         loadplan.view %{{.*}} : tensor<24xbf16> -> tensor<2x3x4xbf16>
loadplan.checkpoint "view.view" : tensor<4x6xbf16> (%w) {
  %0 = loadplan.view %w : tensor<4x6xbf16> -> tensor<24xbf16>
  %1 = loadplan.view %0 : tensor<24xbf16> -> tensor<2x3x4xbf16>
}

// CHECK-LABEL: "view.view.scalar"
// CHECK:         loadplan.view %w : tensor<f32> -> tensor<1xf32>
// CHECK:         loadplan.view %{{.*}} : tensor<1xf32> -> tensor<f32>
loadplan.checkpoint "view.view.scalar" : tensor<f32> (%w) {
  %0 = loadplan.view %w : tensor<f32> -> tensor<1xf32>
  %1 = loadplan.view %0 : tensor<1xf32> -> tensor<f32>
}

// CHECK-LABEL: "view.reshape"
// CHECK:         loadplan.reshape %w : tensor<4x6xbf16> -> tensor<2x12xbf16>
loadplan.checkpoint "view.reshape" : tensor<4x6xbf16> (%w) {
  %0 = loadplan.reshape %w : tensor<4x6xbf16> -> tensor<2x12xbf16>
}

// CHECK-LABEL: "view.transpose"
// CHECK:         loadplan.transpose %w dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
// CHECK:         loadplan.transpose %w dim0 -1 dim1 -2 : tensor<4x6xbf16> -> tensor<6x4xbf16>
loadplan.checkpoint "view.transpose" : tensor<4x6xbf16> (%w) {
  %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<6x4xbf16>
  %1 = loadplan.transpose %w dim0 -1 dim1 -2 : tensor<4x6xbf16> -> tensor<6x4xbf16>
}

// torch allows t() of a 0-d tensor: dims 0 and -1 both wrap to the only
// (virtual) dim.
// CHECK-LABEL: "view.transpose.scalar"
// CHECK:         loadplan.transpose %w dim0 0 dim1 -1 : tensor<f32> -> tensor<f32>
loadplan.checkpoint "view.transpose.scalar" : tensor<f32> (%w) {
  %0 = loadplan.transpose %w dim0 0 dim1 -1 : tensor<f32> -> tensor<f32>
}

// CHECK-LABEL: "view.permute"
// CHECK:         loadplan.permute %w dims [0, 2, 1] : tensor<4x6x8xbf16> -> tensor<4x8x6xbf16>
// CHECK:         loadplan.permute %w dims [-1, 0, -2] : tensor<4x6x8xbf16> -> tensor<8x4x6xbf16>
loadplan.checkpoint "view.permute" : tensor<4x6x8xbf16> (%w) {
  %0 = loadplan.permute %w dims [0, 2, 1] : tensor<4x6x8xbf16> -> tensor<4x8x6xbf16>
  %1 = loadplan.permute %w dims [-1, 0, -2] : tensor<4x6x8xbf16> -> tensor<8x4x6xbf16>
}

// CHECK-LABEL: "view.permute.scalar"
// CHECK:         loadplan.permute %w dims [] : tensor<f32> -> tensor<f32>
loadplan.checkpoint "view.permute.scalar" : tensor<f32> (%w) {
  %0 = loadplan.permute %w dims [] : tensor<f32> -> tensor<f32>
}

// CHECK-LABEL: "view.expand"
// CHECK:         loadplan.expand %w : tensor<1x8xbf16> -> tensor<4x8xbf16>
// CHECK:         loadplan.expand %w : tensor<1x8xbf16> -> tensor<2x3x8xbf16>
loadplan.checkpoint "view.expand" : tensor<1x8xbf16> (%w) {
  %0 = loadplan.expand %w : tensor<1x8xbf16> -> tensor<4x8xbf16>
  %1 = loadplan.expand %w : tensor<1x8xbf16> -> tensor<2x3x8xbf16>
}

// CHECK-LABEL: "view.expand.scalar"
// CHECK:         loadplan.expand %w : tensor<f32> -> tensor<4xf32>
loadplan.checkpoint "view.expand.scalar" : tensor<f32> (%w) {
  %0 = loadplan.expand %w : tensor<f32> -> tensor<4xf32>
}

// CHECK-LABEL: "view.unsqueeze"
// CHECK:         loadplan.unsqueeze %w dim 0 : tensor<8xbf16> -> tensor<1x8xbf16>
// CHECK:         loadplan.unsqueeze %w dim -1 : tensor<8xbf16> -> tensor<8x1xbf16>
loadplan.checkpoint "view.unsqueeze" : tensor<8xbf16> (%w) {
  %0 = loadplan.unsqueeze %w dim 0 : tensor<8xbf16> -> tensor<1x8xbf16>
  %1 = loadplan.unsqueeze %w dim -1 : tensor<8xbf16> -> tensor<8x1xbf16>
}

// The 0-d -> (1,) copy of a per-tensor scale.
// CHECK-LABEL: "view.unsqueeze.scalar"
// CHECK:         loadplan.unsqueeze %w dim 0 : tensor<f32> -> tensor<1xf32>
loadplan.checkpoint "view.unsqueeze.scalar" : tensor<f32> (%w) {
  %0 = loadplan.unsqueeze %w dim 0 : tensor<f32> -> tensor<1xf32>
}

// CHECK-LABEL: "view.squeeze"
// CHECK:         loadplan.squeeze %w dims [0] : tensor<1x8x1xbf16> -> tensor<8x1xbf16>
// CHECK:         loadplan.squeeze %w dims [-1, 1] : tensor<1x8x1xbf16> -> tensor<1x8xbf16>
loadplan.checkpoint "view.squeeze" : tensor<1x8x1xbf16> (%w) {
  %0 = loadplan.squeeze %w dims [0] : tensor<1x8x1xbf16> -> tensor<8x1xbf16>
  // Dim 1 has size 8: torch keeps it.
  %1 = loadplan.squeeze %w dims [-1, 1] : tensor<1x8x1xbf16> -> tensor<1x8xbf16>
}

// With no dims listed, every dim of size 1 goes.
// CHECK-LABEL: "view.squeeze.all"
// CHECK:         loadplan.squeeze %w dims [] : tensor<1x8x1xbf16> -> tensor<8xbf16>
loadplan.checkpoint "view.squeeze.all" : tensor<1x8x1xbf16> (%w) {
  %0 = loadplan.squeeze %w dims [] : tensor<1x8x1xbf16> -> tensor<8xbf16>
}

// CHECK-LABEL: "view.squeeze.scalar"
// CHECK:         loadplan.squeeze %w dims [] : tensor<1xf32> -> tensor<f32>
// CHECK:         loadplan.squeeze %{{.*}} dims [0] : tensor<f32> -> tensor<f32>
loadplan.checkpoint "view.squeeze.scalar" : tensor<1xf32> (%w) {
  %0 = loadplan.squeeze %w dims [] : tensor<1xf32> -> tensor<f32>
  %1 = loadplan.squeeze %0 dims [0] : tensor<f32> -> tensor<f32>
}

// CHECK-LABEL: "view.flatten"
// CHECK:         loadplan.flatten %w start_dim 0 end_dim 1 : tensor<4x6x2xbf16> -> tensor<24x2xbf16>
// CHECK:         loadplan.flatten %w start_dim 1 end_dim -1 : tensor<4x6x2xbf16> -> tensor<4x12xbf16>
// CHECK:         loadplan.flatten %w start_dim 1 end_dim 1 : tensor<4x6x2xbf16> -> tensor<4x6x2xbf16>
loadplan.checkpoint "view.flatten" : tensor<4x6x2xbf16> (%w) {
  %0 = loadplan.flatten %w start_dim 0 end_dim 1 : tensor<4x6x2xbf16> -> tensor<24x2xbf16>
  %1 = loadplan.flatten %w start_dim 1 end_dim -1 : tensor<4x6x2xbf16> -> tensor<4x12xbf16>
  %2 = loadplan.flatten %w start_dim 1 end_dim 1 : tensor<4x6x2xbf16> -> tensor<4x6x2xbf16>
}

// CHECK-LABEL: "view.flatten.scalar"
// CHECK:         loadplan.flatten %w start_dim 0 end_dim -1 : tensor<f32> -> tensor<1xf32>
loadplan.checkpoint "view.flatten.scalar" : tensor<f32> (%w) {
  %0 = loadplan.flatten %w start_dim 0 end_dim -1 : tensor<f32> -> tensor<1xf32>
}

// CHECK-LABEL: "view.unflatten"
// CHECK:         loadplan.unflatten %w dim 0 : tensor<24x2xbf16> -> tensor<4x6x2xbf16>
// CHECK:         loadplan.unflatten %w dim -1 : tensor<24x2xbf16> -> tensor<24x1x2xbf16>
// CHECK:         loadplan.unflatten %w dim 1 : tensor<24x2xbf16> -> tensor<24x2xbf16>
loadplan.checkpoint "view.unflatten" : tensor<24x2xbf16> (%w) {
  %0 = loadplan.unflatten %w dim 0 : tensor<24x2xbf16> -> tensor<4x6x2xbf16>
  %1 = loadplan.unflatten %w dim -1 : tensor<24x2xbf16> -> tensor<24x1x2xbf16>
  %2 = loadplan.unflatten %w dim 1 : tensor<24x2xbf16> -> tensor<24x2xbf16>
}

// CHECK-LABEL: "view.as_strided"
// CHECK:         loadplan.as_strided %w <offset = 0, shape = [6, 4], stride = [1, 6]> : tensor<4x6xbf16> -> tensor<6x4xbf16>
// CHECK:         loadplan.as_strided %w <offset = 23, shape = [], stride = []> : tensor<4x6xbf16> -> tensor<bf16>
// CHECK:         loadplan.as_strided %w <offset = 6, shape = [3, 0], stride = [6, 1]> : tensor<4x6xbf16> -> tensor<3x0xbf16>
loadplan.checkpoint "view.as_strided" : tensor<4x6xbf16> (%w) {
  %0 = loadplan.as_strided %w <offset = 0, shape = [6, 4], stride = [1, 6]> : tensor<4x6xbf16> -> tensor<6x4xbf16>
  %1 = loadplan.as_strided %w <offset = 23, shape = [], stride = []> : tensor<4x6xbf16> -> tensor<bf16>
  %2 = loadplan.as_strided %w <offset = 6, shape = [3, 0], stride = [6, 1]> : tensor<4x6xbf16> -> tensor<3x0xbf16>
}

// CHECK-LABEL: "view.alias"
// CHECK:         loadplan.alias %w : tensor<4x6xbf16>
loadplan.checkpoint "view.alias" : tensor<4x6xbf16> (%w) {
  %0 = loadplan.alias %w : tensor<4x6xbf16>
}

// CHECK-LABEL: "view.clone"
// CHECK:         %[[T:.*]] = loadplan.permute %w dims [1, 0]
// CHECK:         loadplan.clone %[[T]] : tensor<6x4xbf16>
loadplan.checkpoint "view.clone" : tensor<4x6xbf16> (%w) {
  %0 = loadplan.permute %w dims [1, 0] : tensor<4x6xbf16> -> tensor<6x4xbf16>
  %1 = loadplan.clone %0 : tensor<6x4xbf16>
}

//===----------------------------------------------------------------------===//
// Copies and events
//===----------------------------------------------------------------------===//

// CHECK-LABEL: "event.copy"
// CHECK:         loadplan.copy %w to @t0 <offset = 0, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
loadplan.checkpoint "event.copy" : tensor<4x8xbf16> (%w) {
  loadplan.copy %w to @t0 <offset = 0, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
}

// Into a transposed destination, and broadcast from a row.
// CHECK-LABEL: "event.copy.strided"
// CHECK:         loadplan.copy %w to @t_transposed <offset = 0, shape = [4, 6], stride = [1, 4]> as f32 : tensor<4x6xf32>
// CHECK:         loadplan.copy %{{.*}} to @t_transposed <offset = 0, shape = [4, 6], stride = [1, 4]> as f32 : tensor<6xf32>
loadplan.checkpoint "event.copy.strided" : tensor<4x6xf32> (%w) {
  loadplan.copy %w to @t_transposed <offset = 0, shape = [4, 6], stride = [1, 4]> as f32 : tensor<4x6xf32>
  %0 = loadplan.select %w dim 0 index 0 : tensor<4x6xf32> -> tensor<6xf32>
  loadplan.copy %0 to @t_transposed <offset = 0, shape = [4, 6], stride = [1, 4]> as f32 : tensor<6xf32>
}

// A 0-d checkpoint into a (1,) destination, and a copy through a
// reinterpreting view of the target (`param.view(torch.uint8)`).
// CHECK-LABEL: "event.copy.scalar"
// CHECK:         loadplan.copy %w to @t_scalar <offset = 0, shape = [], stride = []> as f32 : tensor<f32>
// CHECK:         loadplan.copy %w to @t_scalar <offset = 0, shape = [1], stride = [1]> as f32 : tensor<f32>
loadplan.checkpoint "event.copy.scalar" : tensor<f32> (%w) {
  loadplan.copy %w to @t_scalar <offset = 0, shape = [], stride = []> as f32 : tensor<f32>
  loadplan.copy %w to @t_scalar <offset = 0, shape = [1], stride = [1]> as f32 : tensor<f32>
}

// CHECK-LABEL: "event.copy.fp8"
// CHECK:         loadplan.copy %w to @t_fp8 <offset = 0, shape = [16], stride = [1]> as f8E4M3FN : tensor<16xf8E4M3FN>
// CHECK:         loadplan.copy %w to @t_fp8 <offset = 0, shape = [16], stride = [1]> as i8 : tensor<16xf8E4M3FN>
loadplan.checkpoint "event.copy.fp8" : tensor<16xf8E4M3FN> (%w) {
  loadplan.copy %w to @t_fp8 <offset = 0, shape = [16], stride = [1]> as f8E4M3FN : tensor<16xf8E4M3FN>
  loadplan.copy %w to @t_fp8 <offset = 0, shape = [16], stride = [1]> as i8 : tensor<16xf8E4M3FN>
}

// CHECK-LABEL: "event.copy.bool"
// CHECK:         loadplan.copy %w to @t_bool <offset = 0, shape = [8], stride = [1]> as i1 : tensor<8xi1>
loadplan.checkpoint "event.copy.bool" : tensor<8xi1> (%w) {
  loadplan.copy %w to @t_bool <offset = 0, shape = [8], stride = [1]> as i1 : tensor<8xi1>
}

// An empty destination may sit anywhere.
// CHECK-LABEL: "event.copy.empty"
// CHECK:         loadplan.copy %w to @t_empty <offset = 1000000, shape = [0, 8], stride = [8, 1]> as bf16 : tensor<0x8xbf16>
loadplan.checkpoint "event.copy.empty" : tensor<0x8xbf16> (%w) {
  loadplan.copy %w to @t_empty <offset = 1000000, shape = [0, 8], stride = [8, 1]> as bf16 : tensor<0x8xbf16>
}

// A copy through a transform: its destination splits the transform's output
// of the source ([8 / 2, 64 / 16, 32] for "marlin_w4"), here the rows of
// a TP shard.
// CHECK-LABEL: "event.copy.transform"
// CHECK:         %[[S:.*]] = loadplan.slice %w dim 0 start 64 end 128 step 1
// CHECK:         loadplan.copy %[[S]] to @t_marlin <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
loadplan.checkpoint "event.copy.transform" : tensor<128x8xi32> (%w) {
  %0 = loadplan.slice %w dim 0 start 64 end 128 step 1 : tensor<128x8xi32> -> tensor<64x8xi32>
  loadplan.copy %0 to @t_marlin <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
}

// CHECK-LABEL: "event.value_read"
// CHECK:         loadplan.value_read %w op "aten._local_scalar_dense" : tensor<bf16>
loadplan.checkpoint "event.value_read" : tensor<bf16> (%w) {
  loadplan.value_read %w op "aten._local_scalar_dense" : tensor<bf16>
}

// CHECK-LABEL: "event.apply"
// CHECK:         loadplan.apply "aten.mul.Tensor"(%w) : (tensor<8xbf16>) -> tensor<8xbf16>
loadplan.checkpoint "event.apply" : tensor<8xbf16> (%w) {
  %0 = loadplan.apply "aten.mul.Tensor" (%w) : (tensor<8xbf16>) -> tensor<8xbf16>
}

// Several results (chunk-like ops), names of other checkpoint tensors, and
// a reason.
// CHECK-LABEL: "event.apply.attrs"
// CHECK:         %{{.*}}:2 = loadplan.apply "aten.split_with_sizes"(%w)
// CHECK-SAME:      {names = ["a.weight", "b.weight"], reason = "combines a.weight and b.weight"}
// CHECK-SAME:      : (tensor<8xbf16>) -> (tensor<4xbf16>, tensor<4xbf16>)
loadplan.checkpoint "event.apply.attrs" : tensor<8xbf16> (%w) {
  %0:2 = loadplan.apply "aten.split_with_sizes" (%w) {names = ["a.weight", "b.weight"], reason = "combines a.weight and b.weight"} : (tensor<8xbf16>) -> (tensor<4xbf16>, tensor<4xbf16>)
}

// No operands and no results.
// CHECK-LABEL: "event.apply.none"
// CHECK:         loadplan.apply "aten.manual_seed"() : () -> ()
loadplan.checkpoint "event.apply.none" : tensor<8xbf16> (%w) {
  loadplan.apply "aten.manual_seed" () : () -> ()
}

// CHECK-LABEL: "event.meta_failure"
// CHECK:         loadplan.meta_failure "aten.nonzero"(%w) : tensor<8xbf16>
// CHECK:         loadplan.meta_failure "aten.where"(%w, %w) : tensor<8xbf16>, tensor<8xbf16>
loadplan.checkpoint "event.meta_failure" : tensor<8xbf16> (%w) {
  loadplan.meta_failure "aten.nonzero" (%w) : tensor<8xbf16>
  loadplan.meta_failure "aten.where" (%w, %w) : tensor<8xbf16>, tensor<8xbf16>
}

// CHECK-LABEL: "event.convert"
// CHECK:         loadplan.convert %w : tensor<8xbf16> -> tensor<8xf8E4M3FN>
// CHECK:         loadplan.convert %w : tensor<8xbf16> -> tensor<8xi1>
loadplan.checkpoint "event.convert" : tensor<8xbf16> (%w) {
  %0 = loadplan.convert %w : tensor<8xbf16> -> tensor<8xf8E4M3FN>
  %1 = loadplan.convert %w : tensor<8xbf16> -> tensor<8xi1>
}

// CHECK-LABEL: "event.inplace_write"
// CHECK:         loadplan.inplace_write "aten.add_"(%w) into @t0 : tensor<4x8xbf16>
// CHECK:         loadplan.inplace_write "aten.mul.out"(%w) : tensor<4x8xbf16>
loadplan.checkpoint "event.inplace_write" : tensor<4x8xbf16> (%w) {
  loadplan.inplace_write "aten.add_" (%w) into @t0 : tensor<4x8xbf16>
  loadplan.inplace_write "aten.mul.out" (%w) : tensor<4x8xbf16>
}

// CHECK-LABEL: "event.read_target"
// CHECK:         loadplan.read_target @t0 op "aten.equal"
loadplan.checkpoint "event.read_target" : tensor<4x8xbf16> (%w) {
  loadplan.read_target @t0 op "aten.equal"
}

// CHECK-LABEL: "event.write_other"
// CHECK:         loadplan.write_other "aten.copy_"(%w) : tensor<4x8xbf16>
loadplan.checkpoint "event.write_other" : tensor<4x8xbf16> (%w) {
  loadplan.write_other "aten.copy_" (%w) : tensor<4x8xbf16>
}

// CHECK-LABEL: "event.constant_write"
// CHECK:         loadplan.constant_write "aten.fill_" @t0 <offset = 48, shape = [2, 8], stride = [8, 1]> as bf16
// CHECK:         loadplan.constant_write "aten.zero_" @t_scalar <offset = 0, shape = [], stride = []> as f32
loadplan.checkpoint "event.constant_write" : tensor<4x8xbf16> (%w) {
  loadplan.constant_write "aten.fill_" @t0 <offset = 48, shape = [2, 8], stride = [8, 1]> as bf16
  loadplan.constant_write "aten.zero_" @t_scalar <offset = 0, shape = [], stride = []> as f32
}

//===----------------------------------------------------------------------===//
// Plan ops
//===----------------------------------------------------------------------===//

// CHECK-LABEL: "plan.write"
// CHECK:         loadplan.write @t_transposed box <[0, 4], [0, 6]> region <offset = 0, shape = [4, 6], stride = [1, 4]>
loadplan.checkpoint "plan.write" : tensor<4x6xf32> (%w) {
  loadplan.write @t_transposed box <[0, 4], [0, 6]> region <offset = 0, shape = [4, 6], stride = [1, 4]>
}

// A transforming write: a box of whole atoms, its region splitting the
// transform's output.
// CHECK-LABEL: "plan.write_transform"
// CHECK:         loadplan.write @t_marlin box <[0, 64], [0, 8]> region <offset = 0, shape = [4, 1, 4, 32], stride = [512, 128, 1, 4]> transform "marlin_w4"
loadplan.storage @s_marlin size 8192
loadplan.target @t_marlin module "experts" tensor "w13_weight_packed"
    storage @s_marlin byte_offset 0 stride [512, 1] : tensor<4x512xi32>
loadplan.checkpoint "plan.write_transform" : tensor<192x8xi32> (%w) {
  loadplan.write @t_marlin box <[0, 64], [0, 8]> region <offset = 0, shape = [4, 1, 4, 32], stride = [512, 128, 1, 4]> transform "marlin_w4"
}

// A box of a 0-d tensor has no ranges; a split dim gives the region more
// dims than the box.
// CHECK-LABEL: "plan.write.shapes"
// CHECK:         loadplan.write @t_scalar box <> region <offset = 0, shape = [], stride = []>
// CHECK:         loadplan.write @t_scalar box <> region <offset = 0, shape = [1, 1], stride = [1, 1]>
loadplan.checkpoint "plan.write.shapes" : tensor<f32> (%w) {
  loadplan.write @t_scalar box <> region <offset = 0, shape = [], stride = []>
  loadplan.write @t_scalar box <> region <offset = 0, shape = [1, 1], stride = [1, 1]>
}

// CHECK-LABEL: "plan.write.split"
// CHECK:         loadplan.write @t0 box <[2, 6], [0, 8]> region <offset = 0, shape = [2, 2, 8], stride = [16, 8, 1]>
// CHECK:         loadplan.write @t0 box <[0, 0], [0, 8]> region <offset = 0, shape = [0, 8], stride = [0, 1]>
loadplan.checkpoint "plan.write.split" : tensor<6x8xbf16> (%w) {
  loadplan.write @t0 box <[2, 6], [0, 8]> region <offset = 0, shape = [2, 2, 8], stride = [16, 8, 1]>
  // An empty box; a dim of at most one element may have stride 0.
  loadplan.write @t0 box <[0, 0], [0, 8]> region <offset = 0, shape = [0, 8], stride = [0, 1]>
}

// CHECK-LABEL: "plan.fallback"
// CHECK:         loadplan.fallback "casts bf16 to f8E4M3FN at copy_ (send it as f8E4M3FN to make it direct)"
// CHECK-NOT:     stop
loadplan.checkpoint "plan.fallback" : tensor<8xbf16> (%w) {
  loadplan.fallback "casts bf16 to f8E4M3FN at copy_ (send it as f8E4M3FN to make it direct)"
}

// CHECK-LABEL: "plan.fallback.stop"
// CHECK:         loadplan.fallback "reads the values of the incoming tensor (aten._local_scalar_dense)" stop
loadplan.checkpoint "plan.fallback.stop" : tensor<8xbf16> (%w) {
  loadplan.fallback "reads the values of the incoming tensor (aten._local_scalar_dense)" stop
}

//===----------------------------------------------------------------------===//
// Attributes outside ops
//===----------------------------------------------------------------------===//

// CHECK-LABEL: "attrs"
// CHECK-SAME:    box = #loadplan.box<[3, 4], [0, 9223372036854775807]>
// CHECK-SAME:    empty_box = #loadplan.box<>
// CHECK-SAME:    layout = #loadplan.layout<offset = 32, shape = [4, 8], stride = [8, 0]>
// CHECK-SAME:    region = #loadplan.region<offset = 0, shape = [1, 4], stride = [0, 1]>
loadplan.checkpoint "attrs" : tensor<8xbf16> (%w) attributes {
  box = #loadplan.box<[3, 4], [0, 9223372036854775807]>,
  empty_box = #loadplan.box<>,
  layout = #loadplan.layout<offset = 32, shape = [4, 8], stride = [8, 0]>,
  region = #loadplan.region<offset = 0, shape = [1, 4], stride = [0, 1]>
} {
}
