// One case per error the dialect reports: parse errors of its attributes,
// verifier errors of its attributes and ops, and symbol errors.

// RUN: loadplan-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// #loadplan.layout, #loadplan.region, #loadplan.box: parsing
//===----------------------------------------------------------------------===//

// expected-error @+1 {{expected 'offset'}}
loadplan.storage @s size 8 {a = #loadplan.layout<shape = [2], stride = [1]>}

// -----

// expected-error @+1 {{expected integer value}}
loadplan.storage @s size 8 {a = #loadplan.layout<offset = x, shape = [2], stride = [1]>}

// -----

// expected-error @+1 {{expected '['}}
loadplan.storage @s size 8 {a = #loadplan.region<offset = 0, shape = 2, stride = [1]>}

// -----

// expected-error @+1 {{expected '>'}}
loadplan.storage @s size 8 {a = #loadplan.layout<offset = 0, shape = [2], stride = [1], dtype = bf16>}

// -----

// expected-error @+1 {{a box range is [start, stop], got 3 numbers}}
loadplan.storage @s size 8 {a = #loadplan.box<[0, 4, 8]>}

// -----

// expected-error @+1 {{a box range is [start, stop], got 1 numbers}}
loadplan.storage @s size 8 {a = #loadplan.box<[0, 4], [2]>}

// -----

// expected-error @+1 {{expected '['}}
loadplan.storage @s size 8 {a = #loadplan.box<0, 4>}

// -----

// expected-error @+1 {{expected integer value}}
loadplan.storage @s size 8 {a = #loadplan.box<[0, end]>}

// -----

// expected-error @+1 {{expected '<'}}
loadplan.storage @s size 8 {a = #loadplan.box}

// -----

// expected-error @+1 {{integer value too large}}
loadplan.storage @s size 8 {a = #loadplan.box<[0, 9223372036854775808]>}

//===----------------------------------------------------------------------===//
// #loadplan.layout, #loadplan.region, #loadplan.box: verification
//===----------------------------------------------------------------------===//

// -----

// expected-error @+1 {{layout has 2 sizes but 1 strides}}
loadplan.storage @s size 8 {a = #loadplan.layout<offset = 0, shape = [2, 4], stride = [1]>}

// -----

// expected-error @+1 {{layout offset must be non-negative, got -1}}
loadplan.storage @s size 8 {a = #loadplan.layout<offset = -1, shape = [2], stride = [1]>}

// -----

// expected-error @+1 {{layout size of dim 1 must be non-negative, got -4}}
loadplan.storage @s size 8 {a = #loadplan.layout<offset = 0, shape = [2, -4], stride = [4, 1]>}

// -----

// expected-error @+1 {{layout stride of dim 0 must be non-negative, got -4}}
loadplan.storage @s size 8 {a = #loadplan.layout<offset = 0, shape = [2, 4], stride = [-4, 1]>}

// -----

// expected-error @+1 {{region has 0 sizes but 1 strides}}
loadplan.storage @s size 8 {a = #loadplan.region<offset = 0, shape = [], stride = [1]>}

// -----

// expected-error @+1 {{region offset must be non-negative, got -8}}
loadplan.storage @s size 8 {a = #loadplan.region<offset = -8, shape = [2], stride = [1]>}

// -----

// expected-error @+1 {{region size of dim 0 must be non-negative, got -1}}
loadplan.storage @s size 8 {a = #loadplan.region<offset = 0, shape = [-1], stride = [1]>}

// -----

// expected-error @+1 {{region stride of dim 0 must be non-negative, got -1}}
loadplan.storage @s size 8 {a = #loadplan.region<offset = 0, shape = [2], stride = [-1]>}

// -----

// A layout may broadcast (torch's expand); a region may not.
// expected-error @+1 {{region dim 1 has stride 0 and size 4: it would write one element twice}}
loadplan.storage @s size 8 {a = #loadplan.region<offset = 0, shape = [2, 4], stride = [4, 0]>}

// -----

// expected-error @+1 {{box range of dim 1 must satisfy 0 <= start <= stop, got [4, 2]}}
loadplan.storage @s size 8 {a = #loadplan.box<[0, 8], [4, 2]>}

// -----

// expected-error @+1 {{box range of dim 0 must satisfy 0 <= start <= stop, got [-1, 2]}}
loadplan.storage @s size 8 {a = #loadplan.box<[-1, 2]>}

//===----------------------------------------------------------------------===//
// loadplan.storage, loadplan.target
//===----------------------------------------------------------------------===//

// -----

// expected-error @+1 {{'loadplan.storage' op size must be non-negative, got -1}}
loadplan.storage @s size -1

// -----

// expected-note @+1 {{see existing symbol definition here}}
loadplan.storage @s size 8
// expected-error @+1 {{redefinition of symbol named 's'}}
loadplan.storage @s size 16

// -----

loadplan.checkpoint "w" : tensor<4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.storage' op expects parent op 'builtin.module'}}
  loadplan.storage @s size 8
}

// -----

loadplan.storage @s size 64
// expected-error @+1 {{'loadplan.target' op has 1 strides for a tensor of 2 dims}}
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<4x4xbf16>

// -----

loadplan.storage @s size 64
// expected-error @+1 {{'loadplan.target' op stride of dim 1 must be non-negative, got -1}}
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [4, -1] : tensor<4x4xbf16>

// -----

loadplan.storage @s size 64
// expected-error @+1 {{'loadplan.target' op byte_offset must be non-negative, got -2}}
loadplan.target @t module "m" tensor "w" storage @s byte_offset -2 stride [1] : tensor<4xbf16>

// -----

loadplan.storage @s size 64
// expected-error @+1 {{'loadplan.target' op byte_offset 3 is not a multiple of its element size 2}}
loadplan.target @t module "m" tensor "w" storage @s byte_offset 3 stride [1] : tensor<4xbf16>

// -----

loadplan.storage @s size 64
// expected-error @+1 {{'loadplan.target' op dtype 'index' has no byte size}}
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<4xindex>

// -----

loadplan.storage @s size 64
// expected-error @+1 {{'loadplan.target' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of fewer than 2^63 elements}}
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<?xbf16>

// -----

// expected-error @+1 {{'loadplan.target' op @missing does not name a loadplan.storage}}
loadplan.target @t module "m" tensor "w" storage @missing byte_offset 0 stride [1] : tensor<4xbf16>

// -----

loadplan.storage @s size 64
loadplan.target @other module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<4xbf16>
// expected-error @+1 {{'loadplan.target' op @other does not name a loadplan.storage}}
loadplan.target @t module "m" tensor "w" storage @other byte_offset 0 stride [1] : tensor<4xbf16>

// -----

loadplan.storage @s size 64
// 4 x 8 bf16 elements are 64 bytes; at byte_offset 2 they end at byte 66.
// expected-error @+1 {{'loadplan.target' op ends at byte 66 of storage @s, which has 64 bytes}}
loadplan.target @t module "m" tensor "w" storage @s byte_offset 2 stride [8, 1] : tensor<4x8xbf16>

// -----

loadplan.storage @s size 64
// A transposed [8, 4] target: its last element is at 3 * 1 + 7 * 4 = 31.
// expected-error @+1 {{'loadplan.target' op ends at byte 128 of storage @s, which has 64 bytes}}
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1, 8] : tensor<8x4xf32>

//===----------------------------------------------------------------------===//
// loadplan.checkpoint
//===----------------------------------------------------------------------===//

// -----

// expected-error @+1 {{'loadplan.checkpoint' op has an empty name}}
loadplan.checkpoint "" : tensor<4xbf16> (%w) {
}

// -----

// A name in the attribute dictionary is not the name property.
// expected-error @+1 {{'loadplan.checkpoint' op has an empty name (the generic form gives it as a property: <{name = "...", ...}>)}}
"loadplan.checkpoint"() ({
^bb0(%w: tensor<4xbf16>):
}) {name = "w", type = tensor<4xbf16>} : () -> ()

// -----

// The generic form may leave the name out: it is then empty.
// expected-error @+1 {{'loadplan.checkpoint' op has an empty name}}
"loadplan.checkpoint"() <{type = tensor<4xbf16>}> ({
^bb0(%w: tensor<4xbf16>):
}) : () -> ()

// -----

// expected-error @+1 {{invalid properties {name = 5 : i64, type = tensor<4xbf16>} for op loadplan.checkpoint: expected string property to come from string attribute}}
"loadplan.checkpoint"() <{name = 5, type = tensor<4xbf16>}> ({
^bb0(%w: tensor<4xbf16>):
}) : () -> ()

// -----

// expected-error @+1 {{'loadplan.checkpoint' op dtype 'index' has no byte size}}
loadplan.checkpoint "w" : tensor<4xindex> (%w) {
}

// -----

// expected-error @+1 {{'loadplan.checkpoint' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of fewer than 2^63 elements}}
loadplan.checkpoint "w" : tensor<*xbf16> (%w) {
}

// -----

// expected-error @+1 {{'loadplan.checkpoint' op body must take one argument of the checkpoint type 'tensor<4xbf16>'}}
"loadplan.checkpoint"() <{name = "w", type = tensor<4xbf16>}> ({
^bb0(%w: tensor<8xbf16>):
}) : () -> ()

// -----

// expected-error @+1 {{'loadplan.checkpoint' op body must take one argument of the checkpoint type 'tensor<4xbf16>'}}
"loadplan.checkpoint"() <{name = "w", type = tensor<4xbf16>}> ({
^bb0:
}) : () -> ()

// -----

// expected-error @+1 {{'loadplan.checkpoint' op region #0 ('body') failed to verify constraint: region with 1 blocks}}
"loadplan.checkpoint"() <{name = "w", type = tensor<4xbf16>}> ({}) : () -> ()

// -----

loadplan.checkpoint "outer" : tensor<4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.checkpoint' op expects parent op 'builtin.module'}}
  loadplan.checkpoint "inner" : tensor<4xbf16> (%v) {
  }
}

//===----------------------------------------------------------------------===//
// View ops: result types
//===----------------------------------------------------------------------===//

// -----

loadplan.checkpoint "w" : tensor<8x4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.slice' op result dtype 'f32' differs from input dtype 'bf16'}}
  %0 = loadplan.slice %w dim 0 start 0 end 4 step 1 : tensor<8x4xbf16> -> tensor<4x4xf32>
}

// -----

loadplan.checkpoint "w" : tensor<8x4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.slice' op result shape [4, 4] differs from the shape torch gives, [8, 4]}}
  %0 = loadplan.slice %w dim 0 start 0 end 9223372036854775807 step 1 : tensor<8x4xbf16> -> tensor<4x4xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<8x4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.slice' op result #0 must be statically shaped tensor of fewer than 2^63 elements, but got 'tensor<?x4xbf16>'}}
  %0 = loadplan.slice %w dim 0 start 0 end 4 step 1 : tensor<8x4xbf16> -> tensor<?x4xbf16>
}

//===----------------------------------------------------------------------===//
// loadplan.slice
//===----------------------------------------------------------------------===//

// -----

loadplan.checkpoint "w" : tensor<bf16> (%w) {
  // expected-error @+1 {{'loadplan.slice' op cannot slice a 0-d tensor}}
  %0 = loadplan.slice %w dim 0 start 0 end 1 step 1 : tensor<bf16> -> tensor<bf16>
}

// -----

loadplan.checkpoint "w" : tensor<8x4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.slice' op dim 2 is out of range for a tensor of 2 dims}}
  %0 = loadplan.slice %w dim 2 start 0 end 4 step 1 : tensor<8x4xbf16> -> tensor<8x4xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<8x4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.slice' op dim -3 is out of range for a tensor of 2 dims}}
  %0 = loadplan.slice %w dim -3 start 0 end 4 step 1 : tensor<8x4xbf16> -> tensor<8x4xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<8x4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.slice' op slice step must be positive, got 0}}
  %0 = loadplan.slice %w dim 0 start 0 end 4 step 0 : tensor<8x4xbf16> -> tensor<4x4xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<8x4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.slice' op slice step must be positive, got -1}}
  %0 = loadplan.slice %w dim 0 start 4 end 0 step -1 : tensor<8x4xbf16> -> tensor<4x4xbf16>
}

//===----------------------------------------------------------------------===//
// loadplan.select
//===----------------------------------------------------------------------===//

// -----

loadplan.checkpoint "w" : tensor<bf16> (%w) {
  // expected-error @+1 {{'loadplan.select' op cannot select from a 0-d tensor}}
  %0 = loadplan.select %w dim 0 index 0 : tensor<bf16> -> tensor<bf16>
}

// -----

loadplan.checkpoint "w" : tensor<8x4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.select' op dim 2 is out of range for a tensor of 2 dims}}
  %0 = loadplan.select %w dim 2 index 0 : tensor<8x4xbf16> -> tensor<8xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<8x4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.select' op index 8 is out of range for dim 0 of size 8}}
  %0 = loadplan.select %w dim 0 index 8 : tensor<8x4xbf16> -> tensor<4xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<8x4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.select' op index -5 is out of range for dim 1 of size 4}}
  %0 = loadplan.select %w dim -1 index -5 : tensor<8x4xbf16> -> tensor<8xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<0x4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.select' op index 0 is out of range for dim 0 of size 0}}
  %0 = loadplan.select %w dim 0 index 0 : tensor<0x4xbf16> -> tensor<4xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<8x4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.select' op result shape [4] differs from the shape torch gives, [8]}}
  %0 = loadplan.select %w dim 1 index 0 : tensor<8x4xbf16> -> tensor<4xbf16>
}

//===----------------------------------------------------------------------===//
// loadplan.view, loadplan.reshape
//===----------------------------------------------------------------------===//

// -----

loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.view' op cannot view 24 elements as 25}}
  %0 = loadplan.view %w : tensor<4x6xbf16> -> tensor<5x5xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.view' op result dtype 'i16' differs from input dtype 'bf16'}}
  %0 = loadplan.view %w : tensor<4x6xbf16> -> tensor<24xi16>
}

// -----

loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.reshape' op cannot view 24 elements as 1}}
  %0 = loadplan.reshape %w : tensor<4x6xbf16> -> tensor<bf16>
}

//===----------------------------------------------------------------------===//
// loadplan.transpose, loadplan.permute
//===----------------------------------------------------------------------===//

// -----

loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.transpose' op dim 2 is out of range for a tensor of 2 dims}}
  %0 = loadplan.transpose %w dim0 0 dim1 2 : tensor<4x6xbf16> -> tensor<6x4xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.transpose' op dim -3 is out of range for a tensor of 2 dims}}
  %0 = loadplan.transpose %w dim0 -3 dim1 0 : tensor<4x6xbf16> -> tensor<6x4xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<bf16> (%w) {
  // expected-error @+1 {{'loadplan.transpose' op dim 1 is out of range for a tensor of 0 dims}}
  %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<bf16> -> tensor<bf16>
}

// -----

loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.transpose' op result shape [4, 6] differs from the shape torch gives, [6, 4]}}
  %0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<4x6xbf16> -> tensor<4x6xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<4x6x8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.permute' op permute needs 3 dims, got 2}}
  %0 = loadplan.permute %w dims [1, 0] : tensor<4x6x8xbf16> -> tensor<6x4x8xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<4x6x8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.permute' op permute repeats dim 2}}
  %0 = loadplan.permute %w dims [2, 0, -1] : tensor<4x6x8xbf16> -> tensor<8x4x8xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<4x6x8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.permute' op dim 3 is out of range for a tensor of 3 dims}}
  %0 = loadplan.permute %w dims [0, 1, 3] : tensor<4x6x8xbf16> -> tensor<4x6x8xbf16>
}

//===----------------------------------------------------------------------===//
// loadplan.expand
//===----------------------------------------------------------------------===//

// -----

loadplan.checkpoint "w" : tensor<1x8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.expand' op expand to 1 dims cannot drop dims of a tensor of 2 dims}}
  %0 = loadplan.expand %w : tensor<1x8xbf16> -> tensor<8xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<2x8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.expand' op expand cannot change dim 0 of size 2 to 4 (only dims of size 1 expand)}}
  %0 = loadplan.expand %w : tensor<2x8xbf16> -> tensor<4x8xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<2x8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.expand' op expand cannot change dim 1 of size 8 to 16 (only dims of size 1 expand)}}
  %0 = loadplan.expand %w : tensor<2x8xbf16> -> tensor<3x2x16xbf16>
}

//===----------------------------------------------------------------------===//
// loadplan.unsqueeze, loadplan.squeeze
//===----------------------------------------------------------------------===//

// -----

loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.unsqueeze' op unsqueeze dim 3 is out of range [-3, 2] for a tensor of 2 dims}}
  %0 = loadplan.unsqueeze %w dim 3 : tensor<4x6xbf16> -> tensor<4x6x1xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.unsqueeze' op result shape [1, 4, 6] differs from the shape torch gives, [4, 6, 1]}}
  %0 = loadplan.unsqueeze %w dim -1 : tensor<4x6xbf16> -> tensor<1x4x6xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<1x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.squeeze' op dim 2 is out of range for a tensor of 2 dims}}
  %0 = loadplan.squeeze %w dims [0, 2] : tensor<1x6xbf16> -> tensor<6xbf16>
}

// -----

// torch keeps a listed dim whose size is not 1.
loadplan.checkpoint "w" : tensor<1x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.squeeze' op result shape [1] differs from the shape torch gives, [1, 6]}}
  %0 = loadplan.squeeze %w dims [1] : tensor<1x6xbf16> -> tensor<1xbf16>
}

//===----------------------------------------------------------------------===//
// loadplan.flatten, loadplan.unflatten
//===----------------------------------------------------------------------===//

// -----

loadplan.checkpoint "w" : tensor<4x6x2xbf16> (%w) {
  // expected-error @+1 {{'loadplan.flatten' op flatten start_dim 2 comes after end_dim 1}}
  %0 = loadplan.flatten %w start_dim -1 end_dim 1 : tensor<4x6x2xbf16> -> tensor<48xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<4x6x2xbf16> (%w) {
  // expected-error @+1 {{'loadplan.flatten' op dim 3 is out of range for a tensor of 3 dims}}
  %0 = loadplan.flatten %w start_dim 0 end_dim 3 : tensor<4x6x2xbf16> -> tensor<48xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<4x6x2xbf16> (%w) {
  // expected-error @+1 {{'loadplan.flatten' op result shape [4, 12] differs from the shape torch gives, [24, 2]}}
  %0 = loadplan.flatten %w start_dim 0 end_dim 1 : tensor<4x6x2xbf16> -> tensor<4x12xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<bf16> (%w) {
  // expected-error @+1 {{'loadplan.unflatten' op cannot unflatten a 0-d tensor}}
  %0 = loadplan.unflatten %w dim 0 : tensor<bf16> -> tensor<1xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<24x2xbf16> (%w) {
  // expected-error @+1 {{'loadplan.unflatten' op dim 2 is out of range for a tensor of 2 dims}}
  %0 = loadplan.unflatten %w dim 2 : tensor<24x2xbf16> -> tensor<24x1x2xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<24x2xbf16> (%w) {
  // expected-error @+1 {{'loadplan.unflatten' op unflatten of dim 0 (size 24) must split it into dims whose product is its size}}
  %0 = loadplan.unflatten %w dim 0 : tensor<24x2xbf16> -> tensor<4x5x2xbf16>
}

// -----

// The dims after the split one must stay as they are.
loadplan.checkpoint "w" : tensor<24x2xbf16> (%w) {
  // expected-error @+1 {{'loadplan.unflatten' op unflatten of dim 0 (size 24) must split it into dims whose product is its size}}
  %0 = loadplan.unflatten %w dim 0 : tensor<24x2xbf16> -> tensor<4x6x3xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<24x2xbf16> (%w) {
  // expected-error @+1 {{'loadplan.unflatten' op unflatten of dim 1 (size 2) must split it into dims whose product is its size}}
  %0 = loadplan.unflatten %w dim 1 : tensor<24x2xbf16> -> tensor<24xbf16>
}

//===----------------------------------------------------------------------===//
// loadplan.as_strided, loadplan.alias, loadplan.clone
//===----------------------------------------------------------------------===//

// -----

loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.as_strided' op result shape [4, 6] differs from the shape torch gives, [6, 4]}}
  %0 = loadplan.as_strided %w <offset = 0, shape = [6, 4], stride = [1, 6]> : tensor<4x6xbf16> -> tensor<4x6xbf16>
}

// -----

// The incoming tensor's storage is the 24-element checkpoint tensor.
loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.as_strided' op layout reaches element 24 of a checkpoint tensor of 24 elements}}
  %0 = loadplan.as_strided %w <offset = 1, shape = [6, 4], stride = [1, 6]> : tensor<4x6xbf16> -> tensor<6x4xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.as_strided' op layout reaches element 24 of a checkpoint tensor of 24 elements}}
  %0 = loadplan.as_strided %w <offset = 24, shape = [], stride = []> : tensor<4x6xbf16> -> tensor<bf16>
}

// -----

loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{layout has 2 sizes but 1 strides}}
  %0 = loadplan.as_strided %w <offset = 0, shape = [6, 4], stride = [1]> : tensor<4x6xbf16> -> tensor<6x4xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.alias' op failed to verify that all of {input, result} have same type}}
  %0 = "loadplan.alias"(%w) : (tensor<4x6xbf16>) -> tensor<6x4xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.clone' op failed to verify that all of {input, result} have same type}}
  %0 = "loadplan.clone"(%w) : (tensor<4x6xbf16>) -> tensor<4x6xf32>
}

//===----------------------------------------------------------------------===//
// loadplan.copy
//===----------------------------------------------------------------------===//

// -----

loadplan.storage @s size 64
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [8, 1] : tensor<4x8xbf16>
loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{'loadplan.copy' op cannot copy a tensor of shape [4, 6] into a destination of shape [4, 8]}}
  loadplan.copy %w to @t <offset = 0, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x6xbf16>
}

// -----

loadplan.storage @s size 64
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [8, 1] : tensor<4x8xbf16>
loadplan.checkpoint "w" : tensor<4x8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.copy' op dtype 'index' has no byte size}}
  loadplan.copy %w to @t <offset = 0, shape = [4, 8], stride = [8, 1]> as index : tensor<4x8xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<4x8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.copy' op @missing does not name a loadplan.target}}
  loadplan.copy %w to @missing <offset = 0, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
}

// -----

loadplan.storage @s size 64
loadplan.checkpoint "w" : tensor<4x8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.copy' op @s does not name a loadplan.target}}
  loadplan.copy %w to @s <offset = 0, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
}

// -----

// The destination may leave the target (a view past its end) but not its
// storage: rows 2..6 of [4, 8] bf16 end at byte 96 of a 64-byte storage.
loadplan.storage @s size 64
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [8, 1] : tensor<4x8xbf16>
loadplan.checkpoint "w" : tensor<4x8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.copy' op destination covers bytes [32, 96) of storage @s, which has 64 bytes}}
  loadplan.copy %w to @t <offset = 16, shape = [4, 8], stride = [8, 1]> as bf16 : tensor<4x8xbf16>
}

// -----

// The destination is relative to the target, in elements of `dtype`.
loadplan.storage @s size 128
loadplan.target @t module "m" tensor "w" storage @s byte_offset 64 stride [8, 1] : tensor<4x8xbf16>
loadplan.checkpoint "w" : tensor<4x8xf32> (%w) {
  // expected-error @+1 {{'loadplan.copy' op destination covers bytes [64, 192) of storage @s, which has 128 bytes}}
  loadplan.copy %w to @t <offset = 0, shape = [4, 8], stride = [8, 1]> as f32 : tensor<4x8xf32>
}

// -----

// A copy through a transform: a known transform, of its element type, from
// a 2-d source of whole atoms, into a destination of as many elements (the
// destination need not match the source's shape: it splits the transform's
// output).
loadplan.storage @s size 8192
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [512, 1] : tensor<4x512xi32>
loadplan.checkpoint "w" : tensor<64x8xi32> (%w) {
  // expected-error @+1 {{'loadplan.copy' op unknown transform "marlin_w8" (known: "marlin_w4")}}
  loadplan.copy %w to @t <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w8" : tensor<64x8xi32>
}

// -----

loadplan.storage @s size 8192
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [512, 1] : tensor<4x512xi32>
loadplan.checkpoint "w" : tensor<64x8xi32> (%w) {
  // expected-error @+1 {{'loadplan.copy' op transform "marlin_w4" writes i32, not 'f32' (a transforming copy does not convert)}}
  loadplan.copy %w to @t <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as f32 transform "marlin_w4" : tensor<64x8xi32>
}

// -----

loadplan.storage @s size 8192
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [512, 1] : tensor<4x512xi32>
loadplan.checkpoint "w" : tensor<64x8xf32> (%w) {
  // expected-error @+1 {{'loadplan.copy' op transform "marlin_w4" reads a 2-d i32 source, not 'tensor<64x8xf32>'}}
  loadplan.copy %w to @t <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xf32>
}

// -----

loadplan.storage @s size 8192
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [512, 1] : tensor<4x512xi32>
loadplan.checkpoint "w" : tensor<512xi32> (%w) {
  // expected-error @+1 {{'loadplan.copy' op transform "marlin_w4" reads a 2-d i32 source, not 'tensor<512xi32>'}}
  loadplan.copy %w to @t <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<512xi32>
}

// -----

loadplan.storage @s size 8192
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [512, 1] : tensor<4x512xi32>
loadplan.checkpoint "w" : tensor<64x8xi32> (%w) {
  %0 = loadplan.slice %w dim 0 start 0 end 56 step 1 : tensor<64x8xi32> -> tensor<56x8xi32>
  // expected-error @+1 {{'loadplan.copy' op source of 56 x 8 is not whole atoms of transform "marlin_w4" (16 rows by 2 columns)}}
  loadplan.copy %0 to @t <offset = 0, shape = [4, 112], stride = [512, 1]> as i32 transform "marlin_w4" : tensor<56x8xi32>
}

// -----

loadplan.storage @s size 8192
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [512, 1] : tensor<4x512xi32>
loadplan.checkpoint "w" : tensor<64x8xi32> (%w) {
  %0 = loadplan.slice %w dim 1 start 0 end 7 step 1 : tensor<64x8xi32> -> tensor<64x7xi32>
  // expected-error @+1 {{'loadplan.copy' op source of 64 x 7 is not whole atoms of transform "marlin_w4" (16 rows by 2 columns)}}
  loadplan.copy %0 to @t <offset = 0, shape = [448], stride = [1]> as i32 transform "marlin_w4" : tensor<64x7xi32>
}

// -----

loadplan.storage @s size 8192
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [512, 1] : tensor<4x512xi32>
loadplan.checkpoint "w" : tensor<64x8xi32> (%w) {
  // expected-error @+1 {{'loadplan.copy' op destination has 256 elements but transform "marlin_w4" writes 512 of its source}}
  loadplan.copy %w to @t <offset = 0, shape = [4, 2, 32], stride = [512, 1, 4]> as i32 transform "marlin_w4" : tensor<64x8xi32>
}

// -----

loadplan.storage @s size 64
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [8, 1] : tensor<4x8xbf16>
// expected-error @+1 {{'loadplan.read_target' op expects parent op 'loadplan.checkpoint'}}
loadplan.read_target @t op "aten.equal"

//===----------------------------------------------------------------------===//
// Fallback events
//===----------------------------------------------------------------------===//

// -----

loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.convert' op must keep the shape}}
  %0 = loadplan.convert %w : tensor<8xbf16> -> tensor<4xf8E4M3FN>
}

// -----

loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.inplace_write' op @missing does not name a loadplan.target}}
  loadplan.inplace_write "aten.add_" (%w) into @missing : tensor<8xbf16>
}

// -----

loadplan.storage @s size 64
loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.read_target' op @s does not name a loadplan.target}}
  loadplan.read_target @s op "aten.equal"
}

// -----

loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.constant_write' op @missing does not name a loadplan.target}}
  loadplan.constant_write "aten.fill_" @missing <offset = 0, shape = [8], stride = [1]> as bf16
}

// -----

loadplan.storage @s size 16
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.constant_write' op dtype 'none' has no byte size}}
  loadplan.constant_write "aten.zero_" @t <offset = 0, shape = [8], stride = [1]> as none
}

// -----

loadplan.storage @s size 16
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.constant_write' op destination covers bytes [8, 24) of storage @s, which has 16 bytes}}
  loadplan.constant_write "aten.fill_" @t <offset = 4, shape = [8], stride = [1]> as bf16
}

// -----

loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.apply' op result #0 must be variadic of statically shaped tensor of fewer than 2^63 elements, but got 'tensor<*xbf16>'}}
  %0 = loadplan.apply "aten.nonzero" (%w) : (tensor<8xbf16>) -> tensor<*xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.apply' op requires attribute 'op'}}
  %0 = "loadplan.apply"(%w) : (tensor<8xbf16>) -> tensor<8xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.apply' op attribute 'names' failed to satisfy constraint: string array attribute}}
  %0 = loadplan.apply "aten.cat" (%w) {names = [1, 2]} : (tensor<8xbf16>) -> tensor<16xbf16>
}

//===----------------------------------------------------------------------===//
// loadplan.write, loadplan.fallback
//===----------------------------------------------------------------------===//

// -----

loadplan.storage @s size 64
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [8, 1] : tensor<4x8xbf16>
loadplan.checkpoint "w" : tensor<4x8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.write' op box has 1 dims but the checkpoint tensor has 2}}
  loadplan.write @t box <[0, 32]> region <offset = 0, shape = [32], stride = [1]>
}

// -----

loadplan.storage @s size 64
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [] : tensor<bf16>
loadplan.checkpoint "w" : tensor<bf16> (%w) {
  // expected-error @+1 {{'loadplan.write' op box has 1 dims but the checkpoint tensor has 0}}
  loadplan.write @t box <[0, 1]> region <offset = 0, shape = [1], stride = [1]>
}

// -----

loadplan.storage @s size 64
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [8, 1] : tensor<4x8xbf16>
loadplan.checkpoint "w" : tensor<4x8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.write' op box range [4, 9) of dim 1 exceeds its size 8}}
  loadplan.write @t box <[0, 4], [4, 9]> region <offset = 0, shape = [4, 5], stride = [8, 1]>
}

// -----

loadplan.storage @s size 64
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [8, 1] : tensor<4x8xbf16>
loadplan.checkpoint "w" : tensor<4x8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.write' op region has 16 elements but the box has 32}}
  loadplan.write @t box <[0, 4], [0, 8]> region <offset = 0, shape = [4, 4], stride = [8, 1]>
}

// -----

loadplan.storage @s size 64
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [8, 1] : tensor<4x8xbf16>
loadplan.checkpoint "w" : tensor<4x8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.write' op @missing does not name a loadplan.target}}
  loadplan.write @missing box <[0, 4], [0, 8]> region <offset = 0, shape = [4, 8], stride = [8, 1]>
}

// -----

loadplan.storage @s size 64
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<8xi8>
loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.write' op cannot convert 'bf16' to 'i8' (a write converts bf16, f16, f32, f8E4M3FN and f8E5M2 into another of them, but f16 into f32)}}
  loadplan.write @t box <[0, 8]> region <offset = 0, shape = [8], stride = [1]> as i8
}

// -----

loadplan.storage @s size 8192
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [512, 1] : tensor<4x512xi32>
loadplan.checkpoint "w" : tensor<64x8xi32> (%w) {
  // expected-error @+1 {{'loadplan.write' op unknown transform "marlin_w8" (known: "marlin_w4")}}
  loadplan.write @t box <[0, 64], [0, 8]> region <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> transform "marlin_w8"
}

// -----

loadplan.storage @s size 8192
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [512, 1] : tensor<4x512xf32>
loadplan.checkpoint "w" : tensor<64x8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.write' op transforms and converts (a transforming write does not convert)}}
  loadplan.write @t box <[0, 64], [0, 8]> region <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> as f32 transform "marlin_w4"
}

// -----

loadplan.storage @s size 8192
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [512, 1] : tensor<4x512xi32>
loadplan.checkpoint "w" : tensor<64x8xui32> (%w) {
  // expected-error @+1 {{'loadplan.write' op transform "marlin_w4" reads a 2-d i32 checkpoint tensor, not 'tensor<64x8xui32>'}}
  loadplan.write @t box <[0, 64], [0, 8]> region <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> transform "marlin_w4"
}

// -----

loadplan.storage @s size 8192
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<2048xi32>
loadplan.checkpoint "w" : tensor<1x64x8xi32> (%w) {
  // expected-error @+1 {{'loadplan.write' op transform "marlin_w4" reads a 2-d i32 checkpoint tensor, not 'tensor<1x64x8xi32>'}}
  loadplan.write @t box <[0, 1], [0, 64], [0, 8]> region <offset = 0, shape = [4, 4, 32], stride = [512, 1, 4]> transform "marlin_w4"
}

// -----

loadplan.storage @s size 8192
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [512, 1] : tensor<4x512xi32>
loadplan.checkpoint "w" : tensor<64x8xi32> (%w) {
  // expected-error @+1 {{'loadplan.write' op box of 56 x 8 is not whole atoms of transform "marlin_w4" (16 rows by 2 columns)}}
  loadplan.write @t box <[0, 56], [0, 8]> region <offset = 0, shape = [4, 112], stride = [512, 1]> transform "marlin_w4"
}

// -----

// A converting write's region counts elements of the dtype it writes: 8
// f32 elements from 8 bf16 ones are 32 bytes.
loadplan.storage @s size 16
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<4xf32>
loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
  // expected-error @+1 {{region covers bytes [0, 32) of storage @s, which has 16 bytes}}
  loadplan.write @t box <[0, 8]> region <offset = 0, shape = [8], stride = [1]> as f32
}

// -----

// The region is in elements of the checkpoint dtype: 32 f32 elements are
// 128 bytes.
loadplan.storage @s size 64
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [8, 1] : tensor<4x8xbf16>
loadplan.checkpoint "w" : tensor<4x8xf32> (%w) {
  // expected-error @+1 {{'loadplan.write' op region covers bytes [0, 128) of storage @s, which has 64 bytes}}
  loadplan.write @t box <[0, 4], [0, 8]> region <offset = 0, shape = [4, 8], stride = [8, 1]>
}

// -----

loadplan.storage @s size 64
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [8, 1] : tensor<4x8xbf16>
loadplan.checkpoint "w" : tensor<4x8xbf16> (%w) {
  // expected-error @+1 {{region dim 0 has stride 0 and size 4: it would write one element twice}}
  loadplan.write @t box <[0, 4], [0, 8]> region <offset = 0, shape = [4, 8], stride = [0, 1]>
}

// -----

// expected-error @+1 {{'loadplan.fallback' op expects parent op 'loadplan.checkpoint'}}
loadplan.fallback "not in a checkpoint"

// -----

loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
  // expected-error @+1 {{expected attribute value}}
  loadplan.fallback stop
}

// -----

loadplan.checkpoint "w" : tensor<4xbf16> (%w) {
  // expected-error @+1 {{inputs do not add up to size 9 in dim 0}}
  %0 = loadplan.cat (%w, %w) dim 0 : (tensor<4xbf16>, tensor<4xbf16>) -> tensor<9xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<4x2xbf16> (%w) {
  // expected-error @+1 {{input 0 has size 4 in dim 0 but the result has 8}}
  %0 = loadplan.cat (%w, %w) dim 1 : (tensor<4x2xbf16>, tensor<4x2xbf16>) -> tensor<8x4xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<4xbf16> (%w) {
  // expected-error @+1 {{dim 1 is not a dim of a rank-1 result}}
  %0 = loadplan.cat (%w) dim 1 : (tensor<4xbf16>) -> tensor<4xbf16>
}
