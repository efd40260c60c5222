// A checkpoint tensor of 2^62 bf16 elements has 2^63 bytes: the plan's byte
// counts saturate at INT64_MAX instead of wrapping (a UBSan report in the
// build scripts/fuzz makes).

// RUN: loadplan-opt %s --loadplan-pipeline="json=-" -o /dev/null | FileCheck %s

// CHECK:      "stats": {
// CHECK:        "fallback": 1,
// CHECK:        "fallback_bytes": 9223372036854775807,
module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<4xbf16>
  loadplan.checkpoint "huge" : tensor<4611686018427387904xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 0 end 4 step 1 : tensor<4611686018427387904xbf16> -> tensor<4xbf16>
    %1 = loadplan.apply "aten.neg" (%0) : (tensor<4xbf16>) -> tensor<4xbf16>
    loadplan.copy %1 to @t <offset = 0, shape = [4], stride = [1]> as bf16 : tensor<4xbf16>
  }
}
