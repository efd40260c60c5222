"""A Llama-style decoder, loaded as vLLM's ``llama.py`` loads it.

Checkpoint (Hugging Face names): ``model.embed_tokens.weight``, per layer
``self_attn.{q,k,v,o}_proj.weight``, ``mlp.{gate,up,down}_proj.weight``,
``input_layernorm.weight``, ``post_attention_layernorm.weight``, then
``model.norm.weight`` and ``lm_head.weight``.

Live layout on a rank: q/k/v fused into ``qkv_proj`` (KV heads replicated
when tp_size > num_kv_heads), gate/up fused into ``gate_up_proj``,
row-parallel ``o_proj`` / ``down_proj``, a vocab-parallel embedding padded to
a multiple of ``padding_size`` whose padding rows the loader zeroes. With tied
embeddings the checkpoint's ``lm_head.weight`` (a trainer sending its
``state_dict`` sends it) is skipped by the loader: nothing to load on any rank.

The same classes serve the fp8 variant (``fp8.py``): a quantization config
per layer and, where the KV cache is fp8, its scales, loaded as vLLM's
``llama.py`` loads them (``get_cache_scale``).

What a load plan should find: every name direct, except ``lm_head.weight``
when tied (unneeded).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from ._layers import (
    Config,
    GatedMLP,
    ParallelLMHead,
    QKVParallelLinear,
    RMSNorm,
    RowParallelLinear,
    VocabParallelEmbedding,
    default_weight_loader,
    load_one,
)
from ._meta import Checkpoint, ParamMeta

STACKED_PARAMS_MAPPING = [
    # (param_name, shard_name, shard_id)
    (".qkv_proj", ".q_proj", "q"),
    (".qkv_proj", ".k_proj", "k"),
    (".qkv_proj", ".v_proj", "v"),
    (".gate_up_proj", ".gate_proj", 0),
    (".gate_up_proj", ".up_proj", 1),
]


def get_cache_scale(name: str) -> str | None:
    """The live name of an fp8 KV-cache scale of the checkpoint, if ``name``
    is one (``self_attn.k_proj.k_scale`` -> ``self_attn.attn.k_scale``)."""
    for proj, scale in ((".k_proj.", "k_scale"), (".v_proj.", "v_scale")):
        if name.endswith(proj + scale):
            return name.replace(proj + scale, ".attn." + scale)
    return None


class Attention(nn.Module):
    """What the fp8 KV cache keeps of the attention layer: its scales, one
    scalar each (vLLM's ``BaseKVCacheMethod``)."""

    def __init__(self, device=None):
        super().__init__()
        self.k_scale = nn.Parameter(torch.tensor(-1.0, device=device), requires_grad=False)
        self.v_scale = nn.Parameter(torch.tensor(-1.0, device=device), requires_grad=False)


class LlamaAttention(nn.Module):
    def __init__(self, c, kw, kv_cache_fp8: bool):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(c.hidden_size, c.head_dim, c.num_heads, c.num_kv_heads,
                                          bias=c.attention_bias, **kw)
        self.o_proj = RowParallelLinear(c.num_heads * c.head_dim, c.hidden_size, bias=False, **kw)
        if kv_cache_fp8:
            self.attn = Attention(kw["device"])


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c, kw, layer: int):
        super().__init__()
        lkw = {**kw, "quant_config": c.layer_quant_configs[layer]}
        self.self_attn = LlamaAttention(c, lkw, kv_cache_fp8=layer in c.kv_cache_fp8_layers)
        self.mlp = GatedMLP(c.hidden_size, c.intermediate_size, lkw)
        norm_kw = {"params_dtype": kw["params_dtype"], "device": kw["device"]}
        self.input_layernorm = RMSNorm(c.hidden_size, **norm_kw)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, **norm_kw)


class LlamaModel(nn.Module):
    def __init__(self, c, kw):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(
            c.vocab_size, c.hidden_size, padding_size=c.padding_size, **kw)
        self.layers = nn.ModuleList(LlamaDecoderLayer(c, kw, i) for i in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, params_dtype=kw["params_dtype"], device=kw["device"])

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params_dict = dict(self.named_parameters())
        loaded_params: set[str] = set()
        for name, loaded_weight in weights:
            if "rotary_emb.inv_freq" in name:
                continue
            if scale_name := get_cache_scale(name):
                # fp8 KV-cache scales: one scalar each
                param = params_dict[scale_name]
                weight_loader = getattr(param, "weight_loader", default_weight_loader)
                loaded_weight = loaded_weight if loaded_weight.dim() == 0 else loaded_weight[0]
                weight_loader(param, loaded_weight)
                loaded_params.add(scale_name)
                continue
            loaded = load_one(params_dict, name, loaded_weight, STACKED_PARAMS_MAPPING)
            if loaded is not None:
                loaded_params.add(loaded)
        return loaded_params


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: Config, *, tp_rank: int = 0, tp_size: int = 1,
                 dtype: torch.dtype = torch.bfloat16, device=None):
        super().__init__()
        self.config = config
        kw = {"params_dtype": dtype, "tp_rank": tp_rank, "tp_size": tp_size, "device": device}
        self.model = LlamaModel(config, kw)
        if config.tie_word_embeddings:
            self.lm_head = self.model.embed_tokens
        else:
            self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size,
                                          padding_size=config.padding_size, **kw)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        loaded: set[str] = set()

        def model_weights():
            for name, loaded_weight in weights:
                if name.startswith("lm_head."):
                    # tied: lm_head *is* embed_tokens, loaded from its own name
                    if not self.config.tie_word_embeddings:
                        param = self.lm_head.weight
                        param.weight_loader(param, loaded_weight)
                        loaded.add(name)
                    continue
                assert name.startswith("model."), name
                yield name[len("model."):], loaded_weight

        loaded |= {f"model.{n}" for n in self.model.load_weights(model_weights())}
        return loaded


def checkpoint(config: Config, dtype: torch.dtype = torch.bfloat16) -> list[ParamMeta]:
    """The Hugging Face checkpoint of ``config``, as a trainer sends it."""
    c = config
    ck = Checkpoint(dtype)
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    ck.add("model.embed_tokens.weight", c.vocab_size, c.hidden_size)
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        ck.add(p + "self_attn.q_proj.weight", q, c.hidden_size)
        ck.add(p + "self_attn.k_proj.weight", kv, c.hidden_size)
        ck.add(p + "self_attn.v_proj.weight", kv, c.hidden_size)
        if c.attention_bias:
            ck.add(p + "self_attn.q_proj.bias", q)
            ck.add(p + "self_attn.k_proj.bias", kv)
            ck.add(p + "self_attn.v_proj.bias", kv)
        ck.add(p + "self_attn.o_proj.weight", c.hidden_size, q)
        ck.add(p + "mlp.gate_proj.weight", c.intermediate_size, c.hidden_size)
        ck.add(p + "mlp.up_proj.weight", c.intermediate_size, c.hidden_size)
        ck.add(p + "mlp.down_proj.weight", c.hidden_size, c.intermediate_size)
        ck.add(p + "input_layernorm.weight", c.hidden_size)
        ck.add(p + "post_attention_layernorm.weight", c.hidden_size)
    ck.add("model.norm.weight", c.hidden_size)
    ck.add("lm_head.weight", c.vocab_size, c.hidden_size)
    return ck.metas


def make(tp_rank: int = 0, tp_size: int = 1, *, vocab_size: int = 100, hidden_size: int = 32,
         intermediate_size: int = 64, num_layers: int = 2, num_heads: int = 4,
         num_kv_heads: int = 2, head_dim: int | None = None, tie_word_embeddings: bool = True,
         attention_bias: bool = False, padding_size: int = 64,
         dtype: torch.dtype = torch.bfloat16,
         device=None) -> tuple[LlamaForCausalLM, list[ParamMeta]]:
    """A Llama-style model for rank ``tp_rank`` of ``tp_size``, and the full
    checkpoint's metadata. Defaults are tiny; pass Llama-3-8B-like sizes
    (vocab_size=128256, hidden_size=4096, intermediate_size=14336,
    num_layers=32, num_heads=32, num_kv_heads=8) for benchmarks."""
    config = Config(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads,
        head_dim=head_dim or hidden_size // num_heads, tie_word_embeddings=tie_word_embeddings,
        attention_bias=attention_bias, padding_size=padding_size,
        layer_quant_configs=[None] * num_layers, kv_cache_fp8_layers=frozenset())
    model = LlamaForCausalLM(config, tp_rank=tp_rank, tp_size=tp_size, dtype=dtype,
                             device=device)
    return model, checkpoint(config, dtype)
