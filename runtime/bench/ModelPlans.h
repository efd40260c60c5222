//===- ModelPlans.h - Load plans of real models for benchmarks ---*- C++ -*-===//
//
// The plans a vLLM-style loader gives at tensor parallelism `tp`, rank
// `rank`, with real shapes and bf16 throughout, and `layers` decoder layers
// so that an update can be sized to the machine:
//
// - llamaPlan, Llama-3-8B (32 layers in the real model): q/k/v into a fused
//   qkv_proj, gate/up into gate_up_proj, o_proj and down_proj split along
//   their input dim (column blocks), vocab-parallel embedding and lm_head,
//   replicated norms;
// - moePlan, the MoE blocks of Qwen3-Next-80B-A3B (48 layers): per layer
//   512 experts whose gate/up rows go into one stacked w13 [E, 2*I/tp, H]
//   and whose down_proj column blocks go into one stacked w2 [E, H, I/tp],
//   as vLLM's FusedMoE holds them, plus the replicated router and the
//   shared expert. Tens of thousands of names of a megabyte or less: what
//   per-copy costs show on;
// - int4ExpertsPlan, Kimi-K2's int4 W4A16 routed experts (compressed-
//   tensors, hidden 7168, intermediate 2048) as Marlin's MoE kernel holds
//   them, whole experts on this rank (expert parallelism): each expert's
//   gate, up and down int32 [N, K/8] written through the marlin_w4
//   transform into w13 [E, K/16, 2 * 2I] and w2 [E, I/16, 2H] words.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_BENCH_MODELPLANS_H
#define LOADPLAN_RUNTIME_BENCH_MODELPLANS_H

#include "PlanWriter.h"

namespace loadplan::testing {

/// Adds the targets and entries of one rank's bf16 plan.
class ModelPlanBuilder {
public:
  ModelPlanBuilder(int64_t tp, int64_t rank) : tp(tp), rank(rank) {}

  /// A target with its own storage, as torch allocates parameters.
  uint32_t target(const std::string &module, std::vector<int64_t> shape) {
    p.storageSizes.push_back(uint64_t(product(shape)) * 2);
    return p.addTarget({module, "weight", uint32_t(p.storageSizes.size() - 1),
                        0, bf16, shape, rowMajor(shape)});
  }
  /// Rows [rows * rank, rows * (rank + 1)) of a [rows * tp, cols] tensor
  /// into rows [at, at + rows) of target `t` seen as [*, cols].
  void rowBlock(const std::string &name, int64_t rows, int64_t cols,
                uint32_t t, int64_t at) {
    p.entries.push_back({name, LOADPLAN_KIND_DIRECT, bf16, {rows * tp, cols},
                         std::nullopt,
                         {{{rows * rank, 0}, {rows * (rank + 1), cols}}},
                         {{t, 0, at * cols, {rows, cols}, {cols, 1}}}});
  }
  /// Columns [cols * rank, cols * (rank + 1)) of a [rows, cols * tp] tensor
  /// into rows [at, at + rows) of target `t` seen as [*, cols].
  void columnBlock(const std::string &name, int64_t rows, int64_t cols,
                   uint32_t t, int64_t at = 0) {
    p.entries.push_back({name, LOADPLAN_KIND_DIRECT, bf16, {rows, cols * tp},
                         std::nullopt,
                         {{{0, cols * rank}, {rows, cols * (rank + 1)}}},
                         {{t, 0, at * cols, {rows, cols}, {cols, 1}}}});
  }
  /// A replicated tensor of `shape` into target `t`.
  void whole(const std::string &name, std::vector<int64_t> shape, uint32_t t) {
    std::vector<int64_t> zeros(shape.size(), 0);
    p.entries.push_back({name, LOADPLAN_KIND_DIRECT, bf16, shape, std::nullopt,
                         {{zeros, shape}},
                         {{t, 0, 0, shape, rowMajor(shape)}}});
  }

  TestPlan take() { return std::move(p); }

  const int64_t tp, rank;

private:
  static constexpr uint32_t bf16 = LOADPLAN_DTYPE_BFLOAT16;
  TestPlan p;
};

inline TestPlan llamaPlan(int layers, int64_t tp, int64_t rank) {
  constexpr int64_t hidden = 4096, inter = 14336, heads = 32, kvHeads = 8,
                    headDim = 128, vocab = 128256;
  ModelPlanBuilder b(tp, rank);
  int64_t vocabPart = vocab / tp;
  b.rowBlock("model.embed_tokens.weight", vocabPart, hidden,
             b.target("model.embed_tokens", {vocabPart, hidden}), 0);
  int64_t q = heads / tp * headDim, kv = kvHeads / tp * headDim;
  int64_t interPart = inter / tp;
  for (int l = 0; l < layers; ++l) {
    std::string layer = "model.layers." + std::to_string(l) + ".";
    uint32_t qkv = b.target(layer + "self_attn.qkv_proj", {q + 2 * kv, hidden});
    b.rowBlock(layer + "self_attn.q_proj.weight", q, hidden, qkv, 0);
    b.rowBlock(layer + "self_attn.k_proj.weight", kv, hidden, qkv, q);
    b.rowBlock(layer + "self_attn.v_proj.weight", kv, hidden, qkv, q + kv);
    b.columnBlock(layer + "self_attn.o_proj.weight", hidden, q,
                  b.target(layer + "self_attn.o_proj", {hidden, q}));
    uint32_t gateUp =
        b.target(layer + "mlp.gate_up_proj", {2 * interPart, hidden});
    b.rowBlock(layer + "mlp.gate_proj.weight", interPart, hidden, gateUp, 0);
    b.rowBlock(layer + "mlp.up_proj.weight", interPart, hidden, gateUp,
               interPart);
    b.columnBlock(layer + "mlp.down_proj.weight", hidden, interPart,
                  b.target(layer + "mlp.down_proj", {hidden, interPart}));
    b.whole(layer + "input_layernorm.weight", {hidden},
            b.target(layer + "input_layernorm", {hidden}));
    b.whole(layer + "post_attention_layernorm.weight", {hidden},
            b.target(layer + "post_attention_layernorm", {hidden}));
  }
  b.whole("model.norm.weight", {hidden}, b.target("model.norm", {hidden}));
  b.rowBlock("lm_head.weight", vocabPart, hidden,
             b.target("lm_head", {vocabPart, hidden}), 0);
  return b.take();
}

inline TestPlan moePlan(int layers, int64_t tp, int64_t rank) {
  constexpr int64_t hidden = 2048, experts = 512, inter = 512,
                    sharedInter = 512;
  ModelPlanBuilder b(tp, rank);
  int64_t part = inter / tp, sharedPart = sharedInter / tp;
  for (int l = 0; l < layers; ++l) {
    std::string layer = "model.layers." + std::to_string(l) + ".mlp.";
    b.whole(layer + "gate.weight", {experts, hidden},
            b.target(layer + "gate", {experts, hidden}));
    uint32_t w13 = b.target(layer + "experts.w13", {experts, 2 * part, hidden});
    uint32_t w2 = b.target(layer + "experts.w2", {experts, hidden, part});
    for (int64_t e = 0; e < experts; ++e) {
      std::string expert = layer + "experts." + std::to_string(e) + ".";
      b.rowBlock(expert + "gate_proj.weight", part, hidden, w13, 2 * part * e);
      b.rowBlock(expert + "up_proj.weight", part, hidden, w13,
                 2 * part * e + part);
      b.columnBlock(expert + "down_proj.weight", hidden, part, w2, hidden * e);
    }
    uint32_t sharedGateUp =
        b.target(layer + "shared_expert.gate_up_proj", {2 * sharedPart, hidden});
    b.rowBlock(layer + "shared_expert.gate_proj.weight", sharedPart, hidden,
               sharedGateUp, 0);
    b.rowBlock(layer + "shared_expert.up_proj.weight", sharedPart, hidden,
               sharedGateUp, sharedPart);
    b.columnBlock(layer + "shared_expert.down_proj.weight", hidden, sharedPart,
                  b.target(layer + "shared_expert.down_proj", {hidden, sharedPart}));
    b.whole(layer + "shared_expert_gate.weight", {1, hidden},
            b.target(layer + "shared_expert_gate", {1, hidden}));
  }
  return b.take();
}

inline TestPlan int4ExpertsPlan(int experts) {
  constexpr int64_t hidden = 7168, inter = 2048;
  constexpr uint32_t i32 = LOADPLAN_DTYPE_INT32;
  constexpr uint32_t marlin = LOADPLAN_TRANSFORM_MARLIN_W4;
  TestPlan p;
  auto stacked = [&](const char *name, int64_t k, int64_t n) {
    // Marlin's words of one expert's [n, k] weight: [k / 16, 2n].
    std::vector<int64_t> shape = {experts, k / 16, 2 * n};
    p.storageSizes.push_back(uint64_t(product(shape)) * 4);
    return p.addTarget({"model.layers.0.mlp.experts", name,
                        uint32_t(p.storageSizes.size() - 1), 0, i32, shape,
                        rowMajor(shape)});
  };
  uint32_t w13 = stacked("w13_weight_packed", hidden, 2 * inter);
  uint32_t w2 = stacked("w2_weight_packed", inter, hidden);
  // An [n, k / 8] box as atoms [k / 16, n / 16, 32]: K tile t, N subtile
  // q = 4m + w (q0 + q, from the target's subtile q0) to row t, words
  // 128 (m0 + m) + 4 lane + w of a target of `words` per row.
  auto marlinWrite = [&](const std::string &name, int64_t n, int64_t k,
                         uint32_t t, int64_t expertWords, int64_t words,
                         int64_t q0) {
    p.entries.push_back(
        {name, LOADPLAN_KIND_DIRECT, i32, {n, k / 8}, std::nullopt,
         {{{0, 0}, {n, k / 8}}},
         {{t, 0, expertWords + q0 / 4 * 128, {k / 16, n / 64, 4, 32},
           {words, 128, 1, 4}, 0, marlin}}});
  };
  for (int64_t e = 0; e < experts; ++e) {
    std::string expert = "model.layers.0.mlp.experts." + std::to_string(e) + ".";
    int64_t w13Words = e * (hidden / 16) * 4 * inter;
    marlinWrite(expert + "gate_proj.weight_packed", inter, hidden, w13,
                w13Words, 4 * inter, 0);
    marlinWrite(expert + "up_proj.weight_packed", inter, hidden, w13,
                w13Words, 4 * inter, inter / 16);
    marlinWrite(expert + "down_proj.weight_packed", hidden, inter, w2,
                e * (inter / 16) * 2 * hidden, 2 * hidden, 0);
  }
  return p;
}

} // namespace loadplan::testing

#endif // LOADPLAN_RUNTIME_BENCH_MODELPLANS_H
