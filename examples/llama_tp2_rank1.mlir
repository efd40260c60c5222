// A captured loader: one Llama-style decoder layer (hidden 16, 4 heads of
// 4, 2 KV heads, intermediate 32) at tensor parallelism 2, rank 1, in bf16.
// q/k/v load into the fused qkv_proj, gate/up into gate_up_proj; o_proj and
// down_proj are row-parallel; the norms are replicated.
//
// Run: loadplan-opt --loadplan-pipeline examples/llama_tp2_rank1.mlir

module {
  loadplan.storage @s_qkv size 512
  loadplan.storage @s_o size 256
  loadplan.storage @s_gate_up size 1024
  loadplan.storage @s_down size 512
  loadplan.storage @s_ln1 size 32
  loadplan.storage @s_ln2 size 32

  loadplan.target @qkv module "model.layers.0.self_attn.qkv_proj" tensor "weight"
      storage @s_qkv byte_offset 0 stride [16, 1] : tensor<16x16xbf16>
  loadplan.target @o module "model.layers.0.self_attn.o_proj" tensor "weight"
      storage @s_o byte_offset 0 stride [8, 1] : tensor<16x8xbf16>
  loadplan.target @gate_up module "model.layers.0.mlp.gate_up_proj" tensor "weight"
      storage @s_gate_up byte_offset 0 stride [16, 1] : tensor<32x16xbf16>
  loadplan.target @down module "model.layers.0.mlp.down_proj" tensor "weight"
      storage @s_down byte_offset 0 stride [16, 1] : tensor<16x16xbf16>
  loadplan.target @ln1 module "model.layers.0.input_layernorm" tensor "weight"
      storage @s_ln1 byte_offset 0 stride [1] : tensor<16xbf16>
  loadplan.target @ln2 module "model.layers.0.post_attention_layernorm" tensor "weight"
      storage @s_ln2 byte_offset 0 stride [1] : tensor<16xbf16>

  // QKVParallelLinear.weight_loader: narrow the checkpoint to this rank's
  // heads, narrow the fused parameter to the shard, copy.
  loadplan.checkpoint "model.layers.0.self_attn.q_proj.weight" : tensor<16x16xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 8 end 16 step 1 : tensor<16x16xbf16> -> tensor<8x16xbf16>
    loadplan.copy %0 to @qkv <offset = 0, shape = [8, 16], stride = [16, 1]> as bf16 : tensor<8x16xbf16>
  }
  loadplan.checkpoint "model.layers.0.self_attn.k_proj.weight" : tensor<8x16xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 4 end 8 step 1 : tensor<8x16xbf16> -> tensor<4x16xbf16>
    loadplan.copy %0 to @qkv <offset = 128, shape = [4, 16], stride = [16, 1]> as bf16 : tensor<4x16xbf16>
  }
  loadplan.checkpoint "model.layers.0.self_attn.v_proj.weight" : tensor<8x16xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 4 end 8 step 1 : tensor<8x16xbf16> -> tensor<4x16xbf16>
    loadplan.copy %0 to @qkv <offset = 192, shape = [4, 16], stride = [16, 1]> as bf16 : tensor<4x16xbf16>
  }
  // RowParallelLinear: the input dim is split.
  loadplan.checkpoint "model.layers.0.self_attn.o_proj.weight" : tensor<16x16xbf16> (%w) {
    %0 = loadplan.slice %w dim 1 start 8 end 16 step 1 : tensor<16x16xbf16> -> tensor<16x8xbf16>
    loadplan.copy %0 to @o <offset = 0, shape = [16, 8], stride = [8, 1]> as bf16 : tensor<16x8xbf16>
  }
  // MergedColumnParallelLinear: gate then up.
  loadplan.checkpoint "model.layers.0.mlp.gate_proj.weight" : tensor<32x16xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 16 end 32 step 1 : tensor<32x16xbf16> -> tensor<16x16xbf16>
    loadplan.copy %0 to @gate_up <offset = 0, shape = [16, 16], stride = [16, 1]> as bf16 : tensor<16x16xbf16>
  }
  loadplan.checkpoint "model.layers.0.mlp.up_proj.weight" : tensor<32x16xbf16> (%w) {
    %0 = loadplan.slice %w dim 0 start 16 end 32 step 1 : tensor<32x16xbf16> -> tensor<16x16xbf16>
    loadplan.copy %0 to @gate_up <offset = 256, shape = [16, 16], stride = [16, 1]> as bf16 : tensor<16x16xbf16>
  }
  loadplan.checkpoint "model.layers.0.mlp.down_proj.weight" : tensor<16x32xbf16> (%w) {
    %0 = loadplan.slice %w dim 1 start 16 end 32 step 1 : tensor<16x32xbf16> -> tensor<16x16xbf16>
    loadplan.copy %0 to @down <offset = 0, shape = [16, 16], stride = [16, 1]> as bf16 : tensor<16x16xbf16>
  }
  // default_weight_loader: a full copy.
  loadplan.checkpoint "model.layers.0.input_layernorm.weight" : tensor<16xbf16> (%w) {
    %0 = loadplan.alias %w : tensor<16xbf16>
    loadplan.copy %0 to @ln1 <offset = 0, shape = [16], stride = [1]> as bf16 : tensor<16xbf16>
  }
  loadplan.checkpoint "model.layers.0.post_attention_layernorm.weight" : tensor<16xbf16> (%w) {
    loadplan.copy %w to @ln2 <offset = 0, shape = [16], stride = [1]> as bf16 : tensor<16xbf16>
  }
}
