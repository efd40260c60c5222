// An empty copy that stays (its name falls back) may have any offset: the
// byte sweeps of detect-overlaps and check-coverage skip it instead of
// scaling INT64_MAX elements to bytes (a UBSan report in the build
// scripts/fuzz makes, on a seed from no-crash-pipeline.mlir).

// RUN: loadplan-opt %s --loadplan-pipeline | FileCheck %s

module {
  loadplan.storage @s size 8
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<4xbf16>
  // CHECK-LABEL: loadplan.checkpoint "a"
  // CHECK-NEXT:    loadplan.fallback "applies aten.neg to it"
  loadplan.checkpoint "a" : tensor<4xbf16> (%w) {
    %0 = loadplan.apply "aten.neg" (%w) : (tensor<4xbf16>) -> tensor<4xbf16>
    %1 = loadplan.apply "aten.narrow" (%0) : (tensor<4xbf16>) -> tensor<0xbf16>
    loadplan.copy %1 to @t <offset = 9223372036854775807, shape = [0], stride = [1]> as bf16 : tensor<0xbf16>
    loadplan.copy %0 to @t <offset = 0, shape = [4], stride = [1]> as bf16 : tensor<4xbf16>
  }
}
