"""A DeepSeek-style decoder with multi-head latent attention (MLA), loaded as
vLLM's ``deepseek_v2.py`` loads it.

Checkpoint (Hugging Face names), per layer: ``self_attn.q_a_proj.weight``
[q_lora_rank, H], ``self_attn.q_a_layernorm.weight``,
``self_attn.q_b_proj.weight`` [heads * qk_head_dim, q_lora_rank],
``self_attn.kv_a_proj_with_mqa.weight`` [kv_lora_rank + rope_dim, H],
``self_attn.kv_a_layernorm.weight``, ``self_attn.kv_b_proj.weight``
[heads * (nope_dim + v_head_dim), kv_lora_rank], ``self_attn.o_proj.weight``,
a dense MLP (``mlp.{gate,up,down}_proj``) and the layer norms; around them
``model.embed_tokens.weight``, ``model.norm.weight``, ``lm_head.weight``, and
the multi-token-prediction layer ``model.layers.{num_layers}.*`` that the
checkpoint carries and the loader skips (no speculative decoding here).
With ``q_lora_rank=None`` (DeepSeek-V2-Lite) the query is one
``self_attn.q_proj.weight`` instead of q_a/q_b.

Live layout on a rank: ``q_a_proj`` and ``kv_a_proj_with_mqa`` fused into the
replicated ``fused_qkv_a_proj`` (loaded by ``param.data[a:b] = w``),
column-parallel ``q_b_proj`` and ``kv_b_proj`` (split by heads), row-parallel
``o_proj``.

What a load plan should find: every name direct, except the MTP layer's
names (unneeded on every rank).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from ._layers import (
    ColumnParallelLinear,
    Config,
    GatedMLP,
    MergedReplicatedLinear,
    ParallelLMHead,
    ReplicatedLinear,
    RMSNorm,
    RowParallelLinear,
    VocabParallelEmbedding,
    load_one,
)
from ._meta import Checkpoint, ParamMeta


class DeepseekV2MLAAttention(nn.Module):
    def __init__(self, c, kw):
        super().__init__()
        norm_kw = {"params_dtype": kw["params_dtype"], "device": kw["device"]}
        h, n = c.hidden_size, c.num_heads
        if c.q_lora_rank is not None:
            self.fused_qkv_a_proj = MergedReplicatedLinear(
                h, [c.q_lora_rank, c.kv_lora_rank + c.qk_rope_head_dim], bias=False, **kw)
            self.q_a_layernorm = RMSNorm(c.q_lora_rank, **norm_kw)
            self.q_b_proj = ColumnParallelLinear(c.q_lora_rank, n * c.qk_head_dim, bias=False,
                                                 **kw)
        else:
            self.q_proj = ColumnParallelLinear(h, n * c.qk_head_dim, bias=False, **kw)
            self.kv_a_proj_with_mqa = ReplicatedLinear(
                h, c.kv_lora_rank + c.qk_rope_head_dim, bias=False, **kw)
        self.kv_a_layernorm = RMSNorm(c.kv_lora_rank, **norm_kw)
        self.kv_b_proj = ColumnParallelLinear(
            c.kv_lora_rank, n * (c.qk_nope_head_dim + c.v_head_dim), bias=False, **kw)
        self.o_proj = RowParallelLinear(n * c.v_head_dim, h, bias=False, **kw)


class DeepseekV2DecoderLayer(nn.Module):
    def __init__(self, c, kw):
        super().__init__()
        self.self_attn = DeepseekV2MLAAttention(c, kw)
        self.mlp = GatedMLP(c.hidden_size, c.intermediate_size, kw)
        norm_kw = {"params_dtype": kw["params_dtype"], "device": kw["device"]}
        self.input_layernorm = RMSNorm(c.hidden_size, **norm_kw)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, **norm_kw)


def get_spec_layer_idx_from_weight_name(config, weight_name: str) -> int | None:
    """The index of the multi-token-prediction layer ``weight_name`` belongs
    to, if any (they follow the decoder layers)."""
    for i in range(config.num_nextn_predict_layers):
        layer_idx = config.num_layers + i
        if weight_name.startswith(f"model.layers.{layer_idx}."):
            return layer_idx
    return None


class DeepseekV2ForCausalLM(nn.Module):
    def __init__(self, config: Config, *, tp_rank: int = 0, tp_size: int = 1,
                 dtype: torch.dtype = torch.bfloat16, device=None):
        super().__init__()
        self.config = c = config
        kw = {"params_dtype": dtype, "tp_rank": tp_rank, "tp_size": tp_size, "device": device}
        lkw = {**kw, "quant_config": None}
        self.model = nn.Module()
        self.model.embed_tokens = VocabParallelEmbedding(
            c.vocab_size, c.hidden_size, padding_size=c.padding_size, **kw)
        self.model.layers = nn.ModuleList(DeepseekV2DecoderLayer(c, lkw)
                                          for _ in range(c.num_layers))
        self.model.norm = RMSNorm(c.hidden_size, params_dtype=dtype, device=device)
        self.lm_head = ParallelLMHead(c.vocab_size, c.hidden_size, padding_size=c.padding_size,
                                      **kw)
        self.fuse_qkv_a_proj = c.q_lora_rank is not None

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        stacked_params_mapping = [
            # (param_name, shard_name, shard_id)
            ("gate_up_proj", "gate_proj", 0),
            ("gate_up_proj", "up_proj", 1),
        ]
        if self.fuse_qkv_a_proj:
            stacked_params_mapping += [
                ("fused_qkv_a_proj", "q_a_proj", 0),
                ("fused_qkv_a_proj", "kv_a_proj_with_mqa", 1),
            ]
        params_dict = dict(self.named_parameters())
        loaded_params: set[str] = set()
        for name, loaded_weight in weights:
            if "rotary_emb.inv_freq" in name:
                continue
            if get_spec_layer_idx_from_weight_name(self.config, name) is not None:
                continue  # the MTP layer: only for speculative decoding
            loaded = load_one(params_dict, name, loaded_weight, stacked_params_mapping)
            if loaded is not None:
                loaded_params.add(loaded)
        return loaded_params


def checkpoint(c: Config, dtype: torch.dtype = torch.bfloat16) -> list[ParamMeta]:
    ck = Checkpoint(dtype)
    h, n = c.hidden_size, c.num_heads
    ck.add("model.embed_tokens.weight", c.vocab_size, h)
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        if c.q_lora_rank is not None:
            ck.add(p + "self_attn.q_a_proj.weight", c.q_lora_rank, h)
            ck.add(p + "self_attn.q_a_layernorm.weight", c.q_lora_rank)
            ck.add(p + "self_attn.q_b_proj.weight", n * c.qk_head_dim, c.q_lora_rank)
        else:
            ck.add(p + "self_attn.q_proj.weight", n * c.qk_head_dim, h)
        ck.add(p + "self_attn.kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, h)
        ck.add(p + "self_attn.kv_a_layernorm.weight", c.kv_lora_rank)
        ck.add(p + "self_attn.kv_b_proj.weight", n * (c.qk_nope_head_dim + c.v_head_dim),
               c.kv_lora_rank)
        ck.add(p + "self_attn.o_proj.weight", h, n * c.v_head_dim)
        ck.add(p + "mlp.gate_proj.weight", c.intermediate_size, h)
        ck.add(p + "mlp.up_proj.weight", c.intermediate_size, h)
        ck.add(p + "mlp.down_proj.weight", h, c.intermediate_size)
        ck.add(p + "input_layernorm.weight", h)
        ck.add(p + "post_attention_layernorm.weight", h)
    for i in range(c.num_nextn_predict_layers):
        p = f"model.layers.{c.num_layers + i}."
        ck.add(p + "enorm.weight", h)
        ck.add(p + "hnorm.weight", h)
        ck.add(p + "eh_proj.weight", h, 2 * h)
        ck.add(p + "shared_head.norm.weight", h)
    ck.add("model.norm.weight", h)
    ck.add("lm_head.weight", c.vocab_size, h)
    return ck.metas


def make(tp_rank: int = 0, tp_size: int = 1, *, vocab_size: int = 100, hidden_size: int = 32,
         intermediate_size: int = 64, num_layers: int = 2, num_heads: int = 4,
         q_lora_rank: int | None = 24, kv_lora_rank: int = 16, qk_nope_head_dim: int = 8,
         qk_rope_head_dim: int = 4, v_head_dim: int = 8, num_nextn_predict_layers: int = 1,
         padding_size: int = 64, dtype: torch.dtype = torch.bfloat16,
         device=None) -> tuple[DeepseekV2ForCausalLM, list[ParamMeta]]:
    """A DeepSeek-style MLA model for rank ``tp_rank`` of ``tp_size`` and the
    full checkpoint's metadata. Defaults are tiny; DeepSeek-V3's attention is
    hidden_size=7168, num_heads=128, q_lora_rank=1536, kv_lora_rank=512,
    qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128."""
    config = Config(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_layers=num_layers, num_heads=num_heads, q_lora_rank=q_lora_rank,
        kv_lora_rank=kv_lora_rank, qk_nope_head_dim=qk_nope_head_dim,
        qk_rope_head_dim=qk_rope_head_dim, v_head_dim=v_head_dim,
        num_nextn_predict_layers=num_nextn_predict_layers, padding_size=padding_size,
        qk_head_dim=qk_nope_head_dim + qk_rope_head_dim)
    model = DeepseekV2ForCausalLM(config, tp_rank=tp_rank, tp_size=tp_size, dtype=dtype,
                                  device=device)
    return model, checkpoint(config, dtype)
