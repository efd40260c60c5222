// RUN: loadplan-opt --loadplan-check-coverage --split-input-file --verify-diagnostics %s

// Target bytes that no write, fallback copy or constant write covers get a
// remark with their first gap: the metadata may miss a name.

module {
  loadplan.storage @s size 64
  // expected-remark @+1 {{target 'm.p' has 16 bytes no name writes (first gap: bytes [16, 32) of storage @s)}}
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<16xbf16>
  loadplan.checkpoint "head" : tensor<8xbf16> (%w) {
    loadplan.write @p box <[0, 8]> region <offset = 0, shape = [8], stride = [1]>
  }
}

// -----

module {
  loadplan.storage @s size 256
  // Two gaps: the remark counts both and shows the first.
  // expected-remark @+1 {{target 'm.p' has 32 bytes no name writes (first gap: bytes [8, 16) of storage @s)}}
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<32xbf16>
  loadplan.checkpoint "a" : tensor<4xbf16> (%w) {
    loadplan.write @p box <[0, 4]> region <offset = 0, shape = [4], stride = [1]>
  }
  loadplan.checkpoint "b" : tensor<12xbf16> (%w) {
    loadplan.write @p box <[0, 12]> region <offset = 8, shape = [12], stride = [1]>
  }
}

// -----

module {
  loadplan.storage @s size 256
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [8, 1] : tensor<4x8xbf16>
  // Covered by a direct write, a constant write of the padding (fill_ during
  // planning) and a fallback's copy: no remark.
  loadplan.checkpoint "rows" : tensor<2x8xbf16> (%w) {
    loadplan.write @p box <[0, 2], [0, 8]> region <offset = 0, shape = [2, 8], stride = [8, 1]>
    loadplan.constant_write "aten.zero_" @p <offset = 16, shape = [8], stride = [1]> as bf16
  }
  loadplan.checkpoint "scaled" : tensor<8xbf16> (%w) {
    loadplan.fallback "applies aten.mul.Tensor to it"
    %0 = loadplan.apply "aten.mul.Tensor" (%w) : (tensor<8xbf16>) -> tensor<8xbf16>
    loadplan.copy %0 to @p <offset = 24, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 256
  // A target that is every other row of its storage: the rows between are
  // not its bytes.
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [16, 1] : tensor<4x8xbf16>
  // A fused buffer: a write through one target covers the other's bytes.
  loadplan.target @gate module "mlp" tensor "gate" storage @s byte_offset 16 stride [16, 1] : tensor<4x8xbf16>
  loadplan.checkpoint "w" : tensor<4x8xbf16> (%w) {
    loadplan.write @p box <[0, 4], [0, 8]> region <offset = 0, shape = [4, 8], stride = [16, 1]>
  }
  loadplan.checkpoint "both" : tensor<4x8xbf16> (%w) {
    loadplan.write @p box <[0, 4], [0, 8]> region <offset = 8, shape = [4, 8], stride = [16, 1]>
  }
}

// -----

module {
  loadplan.storage @s size 64
  // A loader that stopped writes nothing, whatever it recorded first.
  // expected-remark @+1 {{target 'm.scale' has 4 bytes no name writes (first gap: bytes [0, 4) of storage @s)}}
  loadplan.target @scale module "m" tensor "scale" storage @s byte_offset 0 stride [] : tensor<f32>
  loadplan.checkpoint "scale" : tensor<f32> (%w) {
    loadplan.fallback "its loader reads its values (aten._local_scalar_dense)" stop
    loadplan.write @scale box <> region <offset = 0, shape = [], stride = []>
  }
}
