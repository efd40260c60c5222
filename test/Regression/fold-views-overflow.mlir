// Views whose int64_t offsets or strides would wrap around (UBSan reports
// in the build scripts/fuzz makes): the name falls back with a reason, and
// no wrapped-around layout reaches the plan.

// RUN: loadplan-opt %s --loadplan-pipeline -split-input-file 2>/dev/null | FileCheck %s

// unsqueeze of a dim of size 2 and stride 2^62: torch's stride for the new
// dim, size * stride, is 2^63.
module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [2, 1] : tensor<1x2xi8>
  // CHECK-LABEL: loadplan.checkpoint "unsqueeze"
  // CHECK-NEXT:    loadplan.fallback "its offsets or strides overflow int64"
  loadplan.checkpoint "unsqueeze" : tensor<4611686018427387906xi8> (%w) {
    %0 = loadplan.as_strided %w <offset = 0, shape = [2], stride = [4611686018427387904]> : tensor<4611686018427387906xi8> -> tensor<2xi8>
    %1 = loadplan.unsqueeze %0 dim 0 : tensor<2xi8> -> tensor<1x2xi8>
    loadplan.copy %1 to @t <offset = 0, shape = [1, 2], stride = [2, 1]> as i8 : tensor<1x2xi8>
  }
}

// -----

// An empty slice at the end of that dim starts at element 1 + 2 * 2^62.
module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<2xi8>
  // CHECK-LABEL: loadplan.checkpoint "empty_slice"
  // CHECK-NEXT:    loadplan.fallback "its offsets or strides overflow int64"
  loadplan.checkpoint "empty_slice" : tensor<4611686018427387906xi8> (%w) {
    %0 = loadplan.as_strided %w <offset = 1, shape = [2], stride = [4611686018427387904]> : tensor<4611686018427387906xi8> -> tensor<2xi8>
    %1 = loadplan.slice %0 dim 0 start 2 end 2 step 1 : tensor<2xi8> -> tensor<0xi8>
    loadplan.copy %1 to @t <offset = 0, shape = [0], stride = [1]> as i8 : tensor<0xi8>
    loadplan.copy %0 to @t <offset = 0, shape = [2], stride = [1]> as i8 : tensor<2xi8>
  }
}

// -----

// view of [2, 2] with strides [1, 2^62]: the chunk test multiplies 2 * 2^62.
// The reshape keeps its elements, copied in a step through the checkpoint:
// one box per step.
module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<4xi8>
  // CHECK-LABEL: loadplan.checkpoint "view"
  // CHECK-NEXT:    loadplan.write @t box <[0, 2]> region <offset = 0, shape = [2], stride = [2]>
  // CHECK-NEXT:    loadplan.write @t box <[4611686018427387904, 4611686018427387906]> region <offset = 1, shape = [2], stride = [2]>
  // CHECK-NEXT:  }
  loadplan.checkpoint "view" : tensor<4611686018427387906xi8> (%w) {
    %0 = loadplan.as_strided %w <offset = 0, shape = [2, 2], stride = [1, 4611686018427387904]> : tensor<4611686018427387906xi8> -> tensor<2x2xi8>
    %1 = loadplan.view %0 : tensor<2x2xi8> -> tensor<4xi8>
    loadplan.copy %1 to @t <offset = 0, shape = [4], stride = [1]> as i8 : tensor<4xi8>
  }
}

// -----

// as_strided of a clone adds the clone's start to the layout's offset.
module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<4xi8>
  // CHECK-LABEL: loadplan.checkpoint "clone_offset"
  // CHECK-NEXT:    loadplan.fallback "applies as_strided past the end of the checkpoint tensor"
  loadplan.checkpoint "clone_offset" : tensor<4xi8> (%w) {
    %0 = loadplan.slice %w dim 0 start 2 end 4 step 1 : tensor<4xi8> -> tensor<2xi8>
    %1 = loadplan.clone %0 : tensor<2xi8>
    %2 = loadplan.as_strided %1 <offset = 9223372036854775806, shape = [1], stride = [1]> : tensor<2xi8> -> tensor<1xi8>
    loadplan.copy %2 to @t <offset = 0, shape = [1], stride = [1]> as i8 : tensor<1xi8>
    loadplan.copy %w to @t <offset = 0, shape = [4], stride = [1]> as i8 : tensor<4xi8>
  }
}

// -----

// as_strided of a view is checked against the checkpoint tensor as that of
// the incoming tensor is: a layout past its end is no layout of it.
module {
  loadplan.storage @s size 64
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<4xi8>
  // CHECK-LABEL: loadplan.checkpoint "past_the_end"
  // CHECK-NEXT:    loadplan.fallback "applies as_strided past the end of the checkpoint tensor"
  loadplan.checkpoint "past_the_end" : tensor<4xi8> (%w) {
    %0 = loadplan.slice %w dim 0 start 0 end 2 step 1 : tensor<4xi8> -> tensor<2xi8>
    %1 = loadplan.as_strided %0 <offset = 0, shape = [2], stride = [4611686018427387904]> : tensor<2xi8> -> tensor<2xi8>
    loadplan.copy %1 to @t <offset = 0, shape = [2], stride = [1]> as i8 : tensor<2xi8>
    loadplan.copy %w to @t <offset = 0, shape = [4], stride = [1]> as i8 : tensor<4xi8>
  }
}
