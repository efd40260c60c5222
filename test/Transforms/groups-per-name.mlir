// Where one name of a checkpoint with members has an outcome of its own (its
// bytes meet another name's, another name's loader blames it), the module
// is expanded and compiled name by name: the same IR as the module expanded
// first. Where all names fare alike, they stay members.

// RUN: loadplan-opt %s --split-input-file --loadplan-pipeline | FileCheck %s --check-prefixes=CHECK,GROUPED
// RUN: loadplan-opt %s --split-input-file --loadplan-expand-groups --loadplan-pipeline | FileCheck %s --check-prefixes=CHECK,EXPANDED

// e.2's bytes are x's too: both fall back, and the others stay direct.
module {
  loadplan.storage @s size 48
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<24xbf16>
  loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["e.1" at 1 moved 16, "e.2" at 3 moved 32] {
    loadplan.copy %w to @t <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
  loadplan.checkpoint "x" : tensor<8xbf16> (%w) {
    loadplan.copy %w to @t <offset = 16, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
}
// CHECK-LABEL: loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) {
// CHECK-NEXT:    loadplan.write @t box <[0, 8]> region <offset = 0,
// CHECK-LABEL: loadplan.checkpoint "e.1" : tensor<8xbf16> (%w) {
// CHECK-NEXT:    loadplan.write @t box <[0, 8]> region <offset = 8,
// CHECK-LABEL: loadplan.checkpoint "x" : tensor<8xbf16> (%w) {
// CHECK-NEXT:    loadplan.fallback "writes overlap with 'e.2'"
// CHECK-LABEL: loadplan.checkpoint "e.2" : tensor<8xbf16> (%w) {
// CHECK-NEXT:    loadplan.fallback "writes overlap with 'x'"
// CHECK-NEXT:    loadplan.write @t box <[0, 8]> region <offset = 16,

// -----

// Two members that write the same bytes.
module {
  loadplan.storage @s size 32
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
  loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["e.1" at 1 moved 16, "e.1.again" at 2 moved 16] {
    loadplan.copy %w to @t <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
}
// CHECK-LABEL: loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) {
// CHECK-NEXT:    loadplan.write
// CHECK-LABEL: loadplan.checkpoint "e.1" : tensor<8xbf16> (%w) {
// CHECK-NEXT:    loadplan.fallback "writes overlap with 'e.1.again'"
// CHECK-LABEL: loadplan.checkpoint "e.1.again" : tensor<8xbf16> (%w) {
// CHECK-NEXT:    loadplan.fallback "writes overlap with 'e.1'"

// -----

// r's loader reads @t, which e.0 wrote last by then (e.1 comes after r).
module {
  loadplan.storage @s size 32
  loadplan.storage @s_u size 16
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
  loadplan.target @u module "m" tensor "u" storage @s_u byte_offset 0 stride [1] : tensor<8xbf16>
  loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["e.1" at 2 moved 16] {
    loadplan.copy %w to @t <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
  loadplan.checkpoint "r" : tensor<8xbf16> (%w) {
    loadplan.read_target @t op "aten.mul.Tensor"
    loadplan.copy %w to @u <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
}
// CHECK-LABEL: loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) {
// CHECK-NEXT:    loadplan.fallback "its loader reads the destination (aten.mul.Tensor)"
// CHECK-LABEL: loadplan.checkpoint "r" : tensor<8xbf16> (%w) {
// CHECK-NEXT:    loadplan.write @u
// CHECK-LABEL: loadplan.checkpoint "e.1" : tensor<8xbf16> (%w) {
// CHECK-NEXT:    loadplan.write @t box <[0, 8]> region <offset = 8,

// -----

// c's loader combines e.1 into its own: e.1 falls back with c, e.0 stays.
module {
  loadplan.storage @s size 32
  loadplan.storage @s_u size 32
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
  loadplan.target @u module "m" tensor "u" storage @s_u byte_offset 0 stride [1] : tensor<16xbf16>
  loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["e.1" at 1 moved 16] {
    loadplan.copy %w to @t <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
  loadplan.checkpoint "c" : tensor<8xbf16> (%w) {
    %0 = loadplan.apply "aten.cat" (%w) {names = ["e.1"]} : (tensor<8xbf16>) -> tensor<16xbf16>
    loadplan.copy %0 to @u <offset = 0, shape = [16], stride = [1]> as bf16 : tensor<16xbf16>
  }
}
// CHECK-LABEL: loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) {
// CHECK-NEXT:    loadplan.write @t
// CHECK-LABEL: loadplan.checkpoint "e.1" : tensor<8xbf16> (%w) {
// CHECK-NEXT:    loadplan.fallback "applies aten.cat to it"
// CHECK-LABEL: loadplan.checkpoint "c" : tensor<8xbf16> (%w) {
// CHECK-NEXT:    loadplan.fallback "applies aten.cat to it"

// -----

// A copy that is not of a box makes every member a fallback, and they stay
// members.
module {
  loadplan.storage @s size 16
  loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<16xi8>
  loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["e.1" at 1 moved 8] {
    loadplan.copy %w to @t <offset = 0, shape = [8], stride = [1]> as i8 : tensor<8xbf16>
  }
}
// GROUPED-LABEL:   loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["e.1" at 1 moved 8] {
// GROUPED-NEXT:      loadplan.fallback "casts bfloat16 to int8 at copy_ (send it as int8 to make it direct)"
// EXPANDED-LABEL:  loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) {
// EXPANDED-NEXT:     loadplan.fallback "casts bfloat16 to int8 at copy_ (send it as int8 to make it direct)"
// EXPANDED-LABEL:  loadplan.checkpoint "e.1" : tensor<8xbf16> (%w) {
// EXPANDED-NEXT:     loadplan.fallback "casts bfloat16 to int8 at copy_ (send it as int8 to make it direct)"
