// Writes whose merged stride arithmetic would wrap around int64_t (a UBSan
// report in the build scripts/fuzz makes) stay separate.

// RUN: loadplan-opt %s --loadplan-merge-writes | FileCheck %s

module {
  loadplan.storage @s size 9223372036854775807
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<4611686018427387904xi8>
  // The first write ends at 2 * 2^62, which int64_t does not hold.
  // CHECK-LABEL: loadplan.checkpoint "a"
  // CHECK-NEXT:    loadplan.write @t box <[0, 2]> region <offset = 0, shape = [2], stride = [4611686018427387904]>
  // CHECK-NEXT:    loadplan.write @t box <[2, 3]> region <offset = 5, shape = [1], stride = [1]>
  loadplan.checkpoint "a" : tensor<3xi8> (%w) {
    loadplan.write @t box <[0, 2]> region <offset = 0, shape = [2], stride = [4611686018427387904]>
    loadplan.write @t box <[2, 3]> region <offset = 5, shape = [1], stride = [1]>
  }
}
