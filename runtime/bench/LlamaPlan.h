//===- LlamaPlan.h - A Llama-3-8B load plan for benchmarks -------*- C++ -*-===//
//
// The plan a vLLM-style loader of Llama-3-8B gives at tensor parallelism
// `tp`, rank `rank`: q/k/v into a fused qkv_proj, gate/up into
// gate_up_proj, o_proj and down_proj split along their input dim (column
// blocks), vocab-parallel embedding and lm_head, replicated norms. Real
// shapes; `layers` decoder layers (32 in the real model) so the update can
// be sized to the machine. bf16 throughout.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_BENCH_LLAMAPLAN_H
#define LOADPLAN_RUNTIME_BENCH_LLAMAPLAN_H

#include "PlanWriter.h"

namespace loadplan::testing {

inline TestPlan llamaPlan(int layers, int64_t tp, int64_t rank) {
  constexpr int64_t hidden = 4096, inter = 14336, heads = 32, kvHeads = 8,
                    headDim = 128, vocab = 128256;
  constexpr uint32_t bf16 = LOADPLAN_DTYPE_BFLOAT16;
  TestPlan p;
  // One storage per target, as torch allocates parameters.
  auto target = [&](const std::string &module, std::vector<int64_t> shape) {
    p.storageSizes.push_back(uint64_t(product(shape)) * 2);
    return p.addTarget({module, "weight", uint32_t(p.storageSizes.size() - 1),
                        0, bf16, shape, rowMajor(shape)});
  };
  // Rows [rows * rank, rows * (rank + 1)) of a [rows * tp, cols] tensor
  // into rows [at, at + rows) of a [*, cols] target.
  auto rowBlock = [&](const std::string &name, int64_t rows, int64_t cols,
                      uint32_t t, int64_t at) {
    p.entries.push_back({name, LOADPLAN_KIND_DIRECT, bf16, {rows * tp, cols},
                         std::nullopt,
                         {{{rows * rank, 0}, {rows * (rank + 1), cols}}},
                         {{t, 0, at * cols, {rows, cols}, {cols, 1}}}});
  };
  // Columns [cols * rank, cols * (rank + 1)) of a [rows, cols * tp] tensor
  // into a [rows, cols] target.
  auto columnBlock = [&](const std::string &name, int64_t rows, int64_t cols,
                         uint32_t t) {
    p.entries.push_back({name, LOADPLAN_KIND_DIRECT, bf16, {rows, cols * tp},
                         std::nullopt,
                         {{{0, cols * rank}, {rows, cols * (rank + 1)}}},
                         {{t, 0, 0, {rows, cols}, {cols, 1}}}});
  };
  auto whole = [&](const std::string &name, int64_t n, uint32_t t) {
    p.entries.push_back({name, LOADPLAN_KIND_DIRECT, bf16, {n}, std::nullopt,
                         {{{0}, {n}}}, {{t, 0, 0, {n}, {1}}}});
  };

  int64_t vocabPart = vocab / tp;
  rowBlock("model.embed_tokens.weight", vocabPart, hidden,
           target("model.embed_tokens", {vocabPart, hidden}), 0);
  int64_t q = heads / tp * headDim, kv = kvHeads / tp * headDim;
  int64_t interPart = inter / tp;
  for (int l = 0; l < layers; ++l) {
    std::string layer = "model.layers." + std::to_string(l) + ".";
    uint32_t qkv = target(layer + "self_attn.qkv_proj", {q + 2 * kv, hidden});
    rowBlock(layer + "self_attn.q_proj.weight", q, hidden, qkv, 0);
    rowBlock(layer + "self_attn.k_proj.weight", kv, hidden, qkv, q);
    rowBlock(layer + "self_attn.v_proj.weight", kv, hidden, qkv, q + kv);
    columnBlock(layer + "self_attn.o_proj.weight", hidden, q,
                target(layer + "self_attn.o_proj", {hidden, q}));
    uint32_t gateUp = target(layer + "mlp.gate_up_proj", {2 * interPart, hidden});
    rowBlock(layer + "mlp.gate_proj.weight", interPart, hidden, gateUp, 0);
    rowBlock(layer + "mlp.up_proj.weight", interPart, hidden, gateUp, interPart);
    columnBlock(layer + "mlp.down_proj.weight", hidden, interPart,
                target(layer + "mlp.down_proj", {hidden, interPart}));
    whole(layer + "input_layernorm.weight", hidden,
          target(layer + "input_layernorm", {hidden}));
    whole(layer + "post_attention_layernorm.weight", hidden,
          target(layer + "post_attention_layernorm", {hidden}));
  }
  whole("model.norm.weight", hidden, target("model.norm", {hidden}));
  rowBlock("lm_head.weight", vocabPart, hidden,
           target("lm_head", {vocabPart, hidden}), 0);
  return p;
}

} // namespace loadplan::testing

#endif // LOADPLAN_RUNTIME_BENCH_LLAMAPLAN_H
