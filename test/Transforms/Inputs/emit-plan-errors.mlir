// Modules no plan can hold (see ../emit-plan.mlir).

module {
  loadplan.storage @s size 64
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
  loadplan.checkpoint "w" : tensor<8xbf16> (%w) {
    // expected-error @+1 {{copy was not reduced to a write; run --loadplan-to-boxes first}}
    loadplan.copy %w to @p <offset = 0, shape = [8], stride = [1]> as bf16 : tensor<8xbf16>
  }
}

// -----

module {
  loadplan.storage @s size 64
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<8xbf16>
  // expected-error @+1 {{dtype has no plan code}}
  loadplan.checkpoint "w" : tensor<8xf8E4M3> (%w) {
  }
}

// -----

module {
  loadplan.storage @s size 64
  // expected-error @+1 {{dtype has no plan code}}
  loadplan.target @p module "m" tensor "p" storage @s byte_offset 0 stride [1] : tensor<8xi4>
}
