// The errors of checkpoints with members: the verifier's, and the
// positions the passes refuse.

// RUN: loadplan-opt %s --split-input-file --loadplan-pipeline --verify-diagnostics

loadplan.storage @s size 32
loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
// expected-error @+1 {{'loadplan.checkpoint' op has 1 member names, 0 positions and 1 shifts}}
"loadplan.checkpoint"() <{name = "e.0", type = tensor<8xbf16>, member_names = ["e.1"], member_positions = array<i64>, member_shifts = array<i64: 16>}> ({
^bb0(%w: tensor<8xbf16>):
}) : () -> ()

// -----

// expected-error @+1 {{'loadplan.checkpoint' op has a member with an empty name}}
loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["" at 1 moved 0] {
}

// -----

// expected-error @+1 {{'loadplan.checkpoint' op member 'e.1' is at position -1, before the first}}
loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["e.1" at -1 moved 0] {
}

// -----

// expected-error @+1 {{expected 'moved'}}
loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["e.1" at 1] {
}

// -----

loadplan.storage @s size 32
loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["e.1" at 1 moved 16] {
  // expected-error @+1 {{'loadplan.read_target' op is in a checkpoint with members, which holds only views, copies, writes and fallbacks}}
  loadplan.read_target @t op "aten.mul.Tensor"
  loadplan.copy %w to @t <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
}

// -----

loadplan.storage @s size 32
loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["e.1" at 1 moved 15] {
  // expected-error @+1 {{'loadplan.copy' op member 'e.1' moves the destination by 15 bytes, not a whole number of its 2-byte elements}}
  loadplan.copy %w to @t <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
}

// -----

loadplan.storage @s size 32
loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["e.1" at 1 moved 18] {
  // expected-error @+1 {{'loadplan.copy' op destination covers bytes [18, 34) of storage @s, which has 32 bytes}}
  loadplan.copy %w to @t <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
}

// -----

loadplan.storage @s size 32
loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["e.1" at 1 moved -2] {
  // expected-error @+1 {{'loadplan.write' op a member's shift of -2 bytes moves the region out of its target's storage}}
  loadplan.write @t box <[0, 8]> region <offset = 0, shape = [8], stride = [1]>
}

// -----

loadplan.storage @s size 32
loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
// expected-error @+1 {{member 'e.1' is at position 2, but the module has 2 names}}
loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["e.1" at 2 moved 16] {
  loadplan.copy %w to @t <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
}

// -----

loadplan.storage @s size 48
loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<24xbf16>
// expected-error @+1 {{member 'e.2' is at position 1, which 'e.1' has too}}
loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["e.1" at 1 moved 16, "e.2" at 1 moved 32] {
  loadplan.copy %w to @t <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
}

// -----

loadplan.storage @s size 32
loadplan.target @t module "m" tensor "t" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
// expected-error @+2 {{checkpoint 'e.0' is declared twice}}
// expected-remark @+1 {{first declared here}}
loadplan.checkpoint "e.0" : tensor<8xbf16> (%w) members ["e.0" at 1 moved 16] {
  loadplan.copy %w to @t <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
}
