// Valid IR at the edges of what the dialect takes (0-d and empty tensors,
// sizes near 2^63, a storage of INT64_MAX bytes, a step past the end)
// round-trips and compiles without overflow.

// RUN: loadplan-opt %s | loadplan-opt | FileCheck %s --check-prefix=ROUNDTRIP
// RUN: loadplan-opt %s --loadplan-pipeline | loadplan-opt | FileCheck %s

// ROUNDTRIP-LABEL: loadplan.checkpoint "none"
// ROUNDTRIP:         loadplan.view %{{.*}} : tensor<0xbf16> -> tensor<0x4611686018427387904xbf16>

// The last byte of the largest storage.
loadplan.storage @big size 9223372036854775807
loadplan.target @last module "m" tensor "last" storage @big byte_offset 9223372036854775806 stride [1] : tensor<1xi8>
// CHECK-LABEL: loadplan.checkpoint "last"
// CHECK:         loadplan.write @last box <> region
loadplan.checkpoint "last" : tensor<i8> (%w) {
  %0 = loadplan.unsqueeze %w dim 0 : tensor<i8> -> tensor<1xi8>
  loadplan.copy %0 to @last <offset = 0, shape = [1], stride = [1]> as i8 : tensor<1xi8>
}

// 2^60 elements: the second half of a checkpoint tensor of 2^61.
loadplan.storage @s_huge size 2305843009213693952
loadplan.target @huge module "m" tensor "huge" storage @s_huge byte_offset 0 stride [1] : tensor<1152921504606846976xbf16>
// CHECK-LABEL: loadplan.checkpoint "huge"
// CHECK:         loadplan.write @huge box <[1152921504606846976, 2305843009213693952]> region <offset = 0, shape = [1152921504606846976], stride = [1]>
loadplan.checkpoint "huge" : tensor<2305843009213693952xbf16> (%w) {
  %0 = loadplan.slice %w dim 0 start 1152921504606846976 end 9223372036854775807 step 1 : tensor<2305843009213693952xbf16> -> tensor<1152921504606846976xbf16>
  loadplan.copy %0 to @huge <offset = 0, shape = [1152921504606846976], stride = [1]> as bf16 : tensor<1152921504606846976xbf16>
}

// A step past the end leaves one element (torch: ceil((end - start) / step)).
loadplan.storage @s_one size 2
loadplan.target @one module "m" tensor "one" storage @s_one byte_offset 0 stride [1] : tensor<1xbf16>
// CHECK-LABEL: loadplan.checkpoint "huge.step"
// CHECK:         loadplan.write @one box <[1, 2]>
loadplan.checkpoint "huge.step" : tensor<1152921504606846976xbf16> (%w) {
  %0 = loadplan.slice %w dim 0 start 1 end 9223372036854775807 step 9223372036854775807 : tensor<1152921504606846976xbf16> -> tensor<1xbf16>
  loadplan.copy %0 to @one <offset = 0, shape = [1], stride = [1]> as bf16 : tensor<1xbf16>
}

// No elements: an empty destination may sit anywhere; the name is not
// needed, and its empty body still round-trips.
loadplan.storage @empty size 0
loadplan.target @none module "m" tensor "none" storage @empty byte_offset 0 stride [1, 1] : tensor<0x4611686018427387904xbf16>
// CHECK-LABEL: loadplan.checkpoint "none"
// CHECK-NOT:     loadplan.write
// CHECK:       }
loadplan.checkpoint "none" : tensor<0x4611686018427387904xbf16> (%w) {
  %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<0x4611686018427387904xbf16> -> tensor<4611686018427387904x0xbf16>
  %1 = loadplan.flatten %0 start_dim 0 end_dim 1 : tensor<4611686018427387904x0xbf16> -> tensor<0xbf16>
  %2 = loadplan.view %1 : tensor<0xbf16> -> tensor<0x4611686018427387904xbf16>
  loadplan.copy %2 to @none <offset = 9223372036854775807, shape = [0, 4611686018427387904], stride = [9223372036854775807, 9223372036854775807]> as bf16 : tensor<0x4611686018427387904xbf16>
}

// Strides of size-1 dims do not matter, however large.
loadplan.storage @s_scalar size 4
loadplan.target @scalar module "m" tensor "scalar" storage @s_scalar byte_offset 0 stride [] : tensor<f32>
// CHECK-LABEL: loadplan.checkpoint "scalar"
// CHECK:         loadplan.write @scalar box <> region
loadplan.checkpoint "scalar" : tensor<f32> (%w) {
  %0 = loadplan.expand %w : tensor<f32> -> tensor<1x1xf32>
  %1 = loadplan.squeeze %0 dims [] : tensor<1x1xf32> -> tensor<f32>
  %2 = loadplan.as_strided %1 <offset = 0, shape = [1, 1], stride = [9223372036854775807, 0]> : tensor<f32> -> tensor<1x1xf32>
  loadplan.copy %2 to @scalar <offset = 0, shape = [1, 1], stride = [9223372036854775807, 9223372036854775807]> as f32 : tensor<1x1xf32>
}
