// Parseable IR whose sizes, offsets or strides would overflow int64_t index
// arithmetic gets a diagnostic, never a wrapped-around value that passes a
// bounds check.

// RUN: loadplan-opt %s -split-input-file -verify-diagnostics

// A box attribute without its ranges is an error, not an empty box.
// RUN: echo 'loadplan.storage @s size 8 {a = #loadplan.box}' | not loadplan-opt 2>&1 | FileCheck %s --check-prefix=BOX
// BOX: error: expected '<'

//===----------------------------------------------------------------------===//
// Tensor types
//===----------------------------------------------------------------------===//

// expected-error @+1 {{'loadplan.checkpoint' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of fewer than 2^63 elements}}
loadplan.checkpoint "w" : tensor<4x2305843009213693952xbf16> (%w) {
}

// -----

// Wrapping arithmetic would make this 1 element.
// expected-error @+1 {{'loadplan.checkpoint' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of fewer than 2^63 elements}}
loadplan.checkpoint "w" : tensor<9223372036854775807x9223372036854775807xbf16> (%w) {
}

// -----

// No elements, but contiguous strides of the other dims would overflow.
// expected-error @+1 {{'loadplan.checkpoint' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of fewer than 2^63 elements}}
loadplan.checkpoint "w" : tensor<0x9223372036854775807x2xbf16> (%w) {
}

// -----

loadplan.storage @s size 9223372036854775807
// expected-error @+1 {{'loadplan.target' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of fewer than 2^63 elements}}
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1, 1] : tensor<9223372036854775807x9223372036854775807xbf16>

// -----

loadplan.checkpoint "w" : tensor<1xbf16> (%w) {
  // expected-error @+1 {{'loadplan.expand' op result #0 must be statically shaped tensor of fewer than 2^63 elements}}
  %0 = loadplan.expand %w : tensor<1xbf16> -> tensor<4611686018427387904x2xbf16>
}

// -----

loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
  // expected-error @+1 {{'loadplan.apply' op result #0 must be variadic of statically shaped tensor of fewer than 2^63 elements}}
  %0 = loadplan.apply "aten.outer" (%w) : (tensor<8xbf16>) -> tensor<9223372036854775807x9223372036854775807xbf16>
}

//===----------------------------------------------------------------------===//
// Layouts, regions, boxes
//===----------------------------------------------------------------------===//

// -----

// expected-error @+1 {{layout reaches past element 9223372036854775807}}
loadplan.storage @s size 8 {a = #loadplan.layout<offset = 9223372036854775807, shape = [2], stride = [1]>}

// -----

// expected-error @+1 {{layout reaches past element 9223372036854775807}}
loadplan.storage @s size 8 {a = #loadplan.layout<offset = 0, shape = [3], stride = [4611686018427387904]>}

// -----

// expected-error @+1 {{layout reaches past element 9223372036854775807}}
loadplan.storage @s size 8 {a = #loadplan.layout<offset = 0, shape = [4611686018427387904, 2], stride = [0, 0]>}

// -----

// expected-error @+1 {{region reaches past element 9223372036854775807}}
loadplan.storage @s size 8 {a = #loadplan.region<offset = 1, shape = [3, 2], stride = [4611686018427387904, 1]>}

// -----

// expected-error @+1 {{box has more than 9223372036854775807 elements}}
loadplan.storage @s size 8 {a = #loadplan.box<[0, 9223372036854775807], [0, 2]>}

//===----------------------------------------------------------------------===//
// Bytes in storages
//===----------------------------------------------------------------------===//

// -----

loadplan.storage @s size 64
// expected-error @+1 {{'loadplan.target' op spans more than 9223372036854775807 bytes}}
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [4611686018427387904] : tensor<2xbf16>

// -----

// An element count that fits, in 16-byte elements.
loadplan.storage @s size 64
// expected-error @+1 {{'loadplan.target' op spans more than 9223372036854775807 bytes}}
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<1152921504606846976xcomplex<f64>>

// -----

loadplan.storage @s size 9223372036854775807
// expected-error @+1 {{'loadplan.target' op ends past byte 9223372036854775807 of storage @s, which has 9223372036854775807 bytes}}
loadplan.target @t module "m" tensor "w" storage @s byte_offset 9223372036854775806 stride [1] : tensor<2xbf16>

// -----

loadplan.storage @s size 64
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<32xbf16>
loadplan.checkpoint "w" : tensor<4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.copy' op destination reaches past byte 9223372036854775807 of storage @s, which has 64 bytes}}
  loadplan.copy %w to @t <offset = 4611686018427387904, shape = [4], stride = [1]> as bf16 : tensor<4xbf16>
}

// -----

loadplan.storage @s size 64
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<32xbf16>
loadplan.checkpoint "w" : tensor<4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.constant_write' op destination reaches past byte 9223372036854775807 of storage @s, which has 64 bytes}}
  loadplan.constant_write "aten.fill_" @t <offset = 0, shape = [2, 2], stride = [2305843009213693952, 1]> as f64
}

// -----

loadplan.storage @s size 64
loadplan.target @t module "m" tensor "w" storage @s byte_offset 0 stride [1] : tensor<32xbf16>
loadplan.checkpoint "w" : tensor<4xbf16> (%w) {
  // expected-error @+1 {{'loadplan.write' op region reaches past byte 9223372036854775807 of storage @s, which has 64 bytes}}
  loadplan.write @t box <[0, 4]> region <offset = 4611686018427387904, shape = [4], stride = [1]>
}

// -----

// The checkpoint tensor is the as_strided storage: 24 elements.
loadplan.checkpoint "w" : tensor<4x6xbf16> (%w) {
  // expected-error @+1 {{layout reaches past element 9223372036854775807}}
  %0 = loadplan.as_strided %w <offset = 9223372036854775807, shape = [2], stride = [1]> : tensor<4x6xbf16> -> tensor<2xbf16>
}
