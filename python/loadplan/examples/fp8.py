"""An fp8 Llama-style decoder, loaded as vLLM loads fp8 checkpoints: the
Llama model of ``llama.py`` with ``Fp8LinearMethod`` linears, whose
parameters load themselves (the v2 loaders).

Layers alternate between two fp8 schemes:

- even layers, per-tensor scales (AutoFP8 / ModelOpt style, static
  activations): each projection has a ``weight_scale`` and an
  ``input_scale`` scalar. A fused layer keeps one scale slot per logical
  matrix: ``q_proj.weight_scale`` lands in slot 0 of ``qkv_proj.weight_scale``
  and so on. The MLP's ``gate_up_proj`` is fused on disk (as in Phi-3), so its
  one ``weight_scale`` goes to both slots (same box, two destinations). The
  KV-cache scales ``self_attn.{k,v}_proj.{k,v}_scale`` are loaded by
  ``default_weight_loader``, which does ``fill_(w.item())``: a value read.
- odd layers, block scales (DeepSeek-V3 style): ``weight_scale_inv``
  [ceil(N / block_n), ceil(K / block_k)] per projection, sharded over ranks
  like the weight, in blocks.

Embedding, norms and ``lm_head`` stay bf16. One name,
``model.layers.0.mlp.down_proj.weight`` by default, is sent by the trainer in
bf16 although the parameter is fp8: the loader's ``copy_`` casts it.

What a load plan should find: every name direct except the KV-cache scales
(fallback: value read); the bf16-sent names are direct too, as writes that
convert to float8_e4m3fn with torch's rounding.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ._common import FP8, cdiv
from ._layers import Config
from ._quant import Fp8Config
from ._meta import Checkpoint, ParamMeta
from .llama import LlamaForCausalLM


def scheme(layer: int) -> str:
    return "per_tensor" if layer % 2 == 0 else "block"


def checkpoint(c: Config, dtype: torch.dtype = torch.bfloat16) -> list[ParamMeta]:
    ck = Checkpoint(dtype)
    h, i_size = c.hidden_size, c.intermediate_size
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    f32 = torch.float32
    ck.add("model.embed_tokens.weight", c.vocab_size, h)
    for i in range(c.num_layers):
        p = f"model.layers.{i}."

        def linear(name: str, n: int, k: int) -> None:
            full = p + name
            ck.add(full + ".weight", n, k, dtype=dtype if full + ".weight" in c.bf16_names else FP8)
            if scheme(i) == "per_tensor":
                ck.add(full + ".weight_scale", dtype=f32)
                ck.add(full + ".input_scale", dtype=f32)
            else:
                bn, bk = c.weight_block_size
                ck.add(full + ".weight_scale_inv", cdiv(n, bn), cdiv(k, bk), dtype=f32)

        linear("self_attn.q_proj", q, h)
        linear("self_attn.k_proj", kv, h)
        linear("self_attn.v_proj", kv, h)
        linear("self_attn.o_proj", h, q)
        if scheme(i) == "per_tensor":
            ck.add(p + "self_attn.k_proj.k_scale", dtype=f32)
            ck.add(p + "self_attn.v_proj.v_scale", dtype=f32)
            linear("mlp.gate_up_proj", 2 * i_size, h)  # fused on disk
        else:
            linear("mlp.gate_proj", i_size, h)
            linear("mlp.up_proj", i_size, h)
        linear("mlp.down_proj", h, i_size)
        ck.add(p + "input_layernorm.weight", h)
        ck.add(p + "post_attention_layernorm.weight", h)
    ck.add("model.norm.weight", h)
    ck.add("lm_head.weight", c.vocab_size, h)
    return ck.metas


def make(tp_rank: int = 0, tp_size: int = 1, *, vocab_size: int = 100, hidden_size: int = 320,
         intermediate_size: int = 512, num_layers: int = 2, num_heads: int = 4,
         num_kv_heads: int = 2, head_dim: int = 128,
         weight_block_size: tuple[int, int] = (128, 128),
         bf16_names: Iterable[str] = ("model.layers.0.mlp.down_proj.weight",),
         padding_size: int = 64, dtype: torch.dtype = torch.bfloat16,
         device=None) -> tuple[LlamaForCausalLM, list[ParamMeta]]:
    """An fp8 Llama-style model for rank ``tp_rank`` of ``tp_size`` and the
    full checkpoint's metadata. Sizes must keep every rank's part of a block-
    scaled projection whole blocks (the defaults do for tp_size up to 4;
    hidden_size 320 leaves a partial last block along K)."""
    per_tensor = Fp8Config(activation_scheme="static")
    block = Fp8Config(weight_block_size=tuple(weight_block_size))
    config = Config(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
        tie_word_embeddings=False, attention_bias=False, padding_size=padding_size,
        layer_quant_configs=[per_tensor if scheme(i) == "per_tensor" else block
                             for i in range(num_layers)],
        kv_cache_fp8_layers=frozenset(i for i in range(num_layers) if scheme(i) == "per_tensor"),
        weight_block_size=tuple(weight_block_size), bf16_names=frozenset(bf16_names))
    model = LlamaForCausalLM(config, tp_rank=tp_rank, tp_size=tp_size, dtype=dtype,
                             device=device)
    return model, checkpoint(config, dtype)
