// Byte counts: a checkpoint tensor of 2^63 bytes has no plan (the runtime
// refuses it), and the stats of two tensors of 2^62 bytes saturate at
// INT64_MAX instead of wrapping (a UBSan report in the build scripts/fuzz
// makes).

// RUN: loadplan-opt %s --loadplan-pipeline="json=-" -split-input-file -verify-diagnostics -o /dev/null | FileCheck %s

// CHECK:      "stats": {
// CHECK:        "fallback": 2,
// CHECK:        "fallback_bytes": 9223372036854775807,
module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<8xi8>
  loadplan.checkpoint "a" : tensor<4611686018427387904xi8> (%w) {
    %0 = loadplan.slice %w dim 0 start 0 end 4 step 1 : tensor<4611686018427387904xi8> -> tensor<4xi8>
    %1 = loadplan.apply "aten.neg" (%0) : (tensor<4xi8>) -> tensor<4xi8>
    loadplan.copy %1 to @t <offset = 0, shape = [4], stride = [1]> as i8 : tensor<4xi8>
  }
  loadplan.checkpoint "b" : tensor<4611686018427387904xi8> (%w) {
    %0 = loadplan.slice %w dim 0 start 0 end 4 step 1 : tensor<4611686018427387904xi8> -> tensor<4xi8>
    %1 = loadplan.apply "aten.neg" (%0) : (tensor<4xi8>) -> tensor<4xi8>
    loadplan.copy %1 to @t <offset = 4, shape = [4], stride = [1]> as i8 : tensor<4xi8>
  }
}

// -----

module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<4xbf16>
  // expected-error @+1 {{has 2^63 bytes or more, more than a plan file holds}}
  loadplan.checkpoint "huge" : tensor<4611686018427387904xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 0 end 4 step 1 : tensor<4611686018427387904xbf16> -> tensor<4xbf16>
    %1 = loadplan.apply "aten.neg" (%0) : (tensor<4xbf16>) -> tensor<4xbf16>
    loadplan.copy %1 to @t <offset = 0, shape = [4], stride = [1]> as bf16 : tensor<4xbf16>
  }
}
