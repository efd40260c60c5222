"""Example models whose loaders are written as vLLM writes its layers, with
tensor parallelism emulated by ``(tp_rank, tp_size)``.

Each module has ``make(tp_rank=0, tp_size=1, **sizes) -> (model, metadata)``:
a model for one rank and the full checkpoint (``loadplan.ParamMeta`` per
tensor) that a trainer sends. Defaults are tiny, for tests; the docstrings
give real sizes for benchmarks.

- ``llama``: fused qkv (KV heads replicated past tp_size == num_kv_heads),
  gate_up, row-parallel o/down, padded vocab-parallel embedding, tied
  lm_head skipped by the loader.
- ``qwen2_moe``: fused routed experts (w13/w2) loaded per expert, expert
  parallelism through an expert map, a shared expert and its gate.
- ``deepseek_mla``: multi-head latent attention, fused q_a/kv_a, kv_b, and a
  multi-token-prediction layer the loader skips.
- ``fp8``: fp8 weights with per-tensor and block scales, fp8 KV-cache scales
  loaded with ``fill_(w.item())``, one name sent in bf16.
"""

MODELS = ("llama", "qwen2_moe", "deepseek_mla", "fp8")
