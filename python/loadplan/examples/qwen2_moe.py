"""A Qwen2-MoE-style decoder, loaded as vLLM's ``qwen2_moe.py`` loads it.

Checkpoint (Hugging Face names), per layer: ``self_attn.{q,k,v}_proj.weight``
and ``.bias``, ``self_attn.o_proj.weight``, ``mlp.gate.weight`` (the router),
``mlp.experts.{e}.{gate,up,down}_proj.weight`` for every expert,
``mlp.shared_expert.{gate,up,down}_proj.weight``,
``mlp.shared_expert_gate.weight``, and the two layer norms; around them
``model.embed_tokens.weight``, ``model.norm.weight``, ``lm_head.weight``.

Live layout on a rank: routed experts fused per layer into ``w13_weight``
[E_local, 2I, H] and ``w2_weight`` [E_local, H, I], loaded one checkpoint
expert at a time through ``FusedMoE.weight_loader``. Without expert
parallelism every rank holds every expert and the intermediate dim is split
by tensor parallelism; with ``enable_expert_parallel`` the experts are split
over ranks (an expert map, ``_expert_map``, as vLLM registers it) and the
loader skips experts of other ranks. The shared expert is a tensor-parallel
MLP; its gate is a plain ``nn.Linear`` loaded by ``default_weight_loader``.
The top-level loader is ``AutoWeightsLoader`` (it reads one name ahead).

What a load plan should find: every name direct, except other ranks'
experts under expert parallelism (unneeded).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from ._layers import (
    AutoWeightsLoader,
    Config,
    FusedMoE,
    GatedMLP,
    ParallelLMHead,
    QKVParallelLinear,
    ReplicatedLinear,
    RMSNorm,
    RowParallelLinear,
    VocabParallelEmbedding,
    determine_expert_map,
    load_one,
)
from ._meta import Checkpoint, ParamMeta


class Qwen2MoeSparseMoeBlock(nn.Module):
    def __init__(self, c, kw):
        super().__init__()
        dtype, device = kw["params_dtype"], kw["device"]
        self.experts = FusedMoE(c.num_experts, c.num_experts_per_tok, c.hidden_size,
                                c.moe_intermediate_size, params_dtype=dtype,
                                tp_rank=kw["tp_rank"], tp_size=kw["tp_size"],
                                enable_ep=c.enable_expert_parallel, device=device)
        self.gate = ReplicatedLinear(c.hidden_size, c.num_experts, bias=False, **kw)
        self.shared_expert = GatedMLP(c.hidden_size, c.shared_expert_intermediate_size, kw)
        self.shared_expert_gate = nn.Linear(c.hidden_size, 1, bias=False, dtype=dtype,
                                            device=device)
        self.shared_expert_gate.weight.requires_grad_(False)


class Qwen2MoeAttention(nn.Module):
    def __init__(self, c, kw):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(c.hidden_size, c.head_dim, c.num_heads, c.num_kv_heads,
                                          bias=True, **kw)
        self.o_proj = RowParallelLinear(c.num_heads * c.head_dim, c.hidden_size, bias=False, **kw)


class Qwen2MoeDecoderLayer(nn.Module):
    def __init__(self, c, kw):
        super().__init__()
        self.self_attn = Qwen2MoeAttention(c, kw)
        self.mlp = Qwen2MoeSparseMoeBlock(c, kw)
        norm_kw = {"params_dtype": kw["params_dtype"], "device": kw["device"]}
        self.input_layernorm = RMSNorm(c.hidden_size, **norm_kw)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, **norm_kw)


class Qwen2MoeModel(nn.Module):
    def __init__(self, c, kw):
        super().__init__()
        self.config = c
        self.embed_tokens = VocabParallelEmbedding(
            c.vocab_size, c.hidden_size, params_dtype=kw["params_dtype"], tp_rank=kw["tp_rank"],
            tp_size=kw["tp_size"], padding_size=c.padding_size, device=kw["device"])
        self.layers = nn.ModuleList(Qwen2MoeDecoderLayer(c, kw) for _ in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, params_dtype=kw["params_dtype"], device=kw["device"])

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        stacked_params_mapping = [
            # (param_name, shard_name, shard_id)
            ("qkv_proj", "q_proj", "q"),
            ("qkv_proj", "k_proj", "k"),
            ("qkv_proj", "v_proj", "v"),
            ("gate_up_proj", "gate_proj", 0),
            ("gate_up_proj", "up_proj", 1),
        ]
        # (param_name, weight_name, expert_id, shard_id)
        expert_params_mapping = FusedMoE.make_expert_params_mapping(
            ckpt_gate_proj_name="gate_proj", ckpt_down_proj_name="down_proj",
            ckpt_up_proj_name="up_proj", num_experts=self.config.num_experts)
        params_dict = dict(self.named_parameters())
        loaded_params: set[str] = set()
        for name, loaded_weight in weights:
            if "rotary_emb.inv_freq" in name:
                continue
            loaded = load_one(params_dict, name, loaded_weight, stacked_params_mapping,
                              expert_params_mapping)
            if loaded is not None:
                loaded_params.add(loaded)
        return loaded_params


class Qwen2MoeForCausalLM(nn.Module):
    def __init__(self, config: Config, *, tp_rank: int = 0, tp_size: int = 1,
                 dtype: torch.dtype = torch.bfloat16, device=None):
        super().__init__()
        self.config = config
        kw = {"params_dtype": dtype, "tp_rank": tp_rank, "tp_size": tp_size, "device": device}
        self.model = Qwen2MoeModel(config, {**kw, "quant_config": None})
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size,
                                      padding_size=config.padding_size, **kw)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return AutoWeightsLoader(self).load_weights(weights)


def checkpoint(c: Config, dtype: torch.dtype = torch.bfloat16) -> list[ParamMeta]:
    ck = Checkpoint(dtype)
    h = c.hidden_size
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    ck.add("model.embed_tokens.weight", c.vocab_size, h)
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        ck.add(p + "self_attn.q_proj.weight", q, h)
        ck.add(p + "self_attn.q_proj.bias", q)
        ck.add(p + "self_attn.k_proj.weight", kv, h)
        ck.add(p + "self_attn.k_proj.bias", kv)
        ck.add(p + "self_attn.v_proj.weight", kv, h)
        ck.add(p + "self_attn.v_proj.bias", kv)
        ck.add(p + "self_attn.o_proj.weight", h, q)
        ck.add(p + "mlp.gate.weight", c.num_experts, h)
        for e in range(c.num_experts):
            ck.add(p + f"mlp.experts.{e}.gate_proj.weight", c.moe_intermediate_size, h)
            ck.add(p + f"mlp.experts.{e}.up_proj.weight", c.moe_intermediate_size, h)
            ck.add(p + f"mlp.experts.{e}.down_proj.weight", h, c.moe_intermediate_size)
        ck.add(p + "mlp.shared_expert.gate_proj.weight", c.shared_expert_intermediate_size, h)
        ck.add(p + "mlp.shared_expert.up_proj.weight", c.shared_expert_intermediate_size, h)
        ck.add(p + "mlp.shared_expert.down_proj.weight", h, c.shared_expert_intermediate_size)
        ck.add(p + "mlp.shared_expert_gate.weight", 1, h)
        ck.add(p + "input_layernorm.weight", h)
        ck.add(p + "post_attention_layernorm.weight", h)
    ck.add("model.norm.weight", h)
    ck.add("lm_head.weight", c.vocab_size, h)
    return ck.metas


def local_experts(num_experts: int, tp_rank: int, tp_size: int,
                  enable_expert_parallel: bool) -> list[int]:
    """The global ids of the experts rank ``tp_rank`` holds."""
    if not enable_expert_parallel:
        return list(range(num_experts))
    _, expert_map = determine_expert_map(tp_size, tp_rank, num_experts)
    return [e for e in range(num_experts) if expert_map is None or expert_map[e] >= 0]


def make(tp_rank: int = 0, tp_size: int = 1, *, vocab_size: int = 100, hidden_size: int = 32,
         num_layers: int = 2, num_heads: int = 4, num_kv_heads: int = 2,
         head_dim: int | None = None, num_experts: int = 4, num_experts_per_tok: int = 2,
         moe_intermediate_size: int = 16, shared_expert_intermediate_size: int = 32,
         enable_expert_parallel: bool = False, padding_size: int = 64,
         dtype: torch.dtype = torch.bfloat16,
         device=None) -> tuple[Qwen2MoeForCausalLM, list[ParamMeta]]:
    """A Qwen2-MoE-style model for rank ``tp_rank`` of ``tp_size`` and the full
    checkpoint's metadata. Defaults are tiny; Qwen1.5-MoE-A2.7B is
    vocab_size=151936, hidden_size=2048, num_layers=24, num_heads=16,
    num_kv_heads=16, num_experts=60, num_experts_per_tok=4,
    moe_intermediate_size=1408, shared_expert_intermediate_size=5632."""
    config = Config(
        vocab_size=vocab_size, hidden_size=hidden_size, num_layers=num_layers,
        num_heads=num_heads, num_kv_heads=num_kv_heads,
        head_dim=head_dim or hidden_size // num_heads, num_experts=num_experts,
        num_experts_per_tok=num_experts_per_tok, moe_intermediate_size=moe_intermediate_size,
        shared_expert_intermediate_size=shared_expert_intermediate_size,
        enable_expert_parallel=enable_expert_parallel, padding_size=padding_size)
    model = Qwen2MoeForCausalLM(config, tp_rank=tp_rank, tp_size=tp_size, dtype=dtype,
                                device=device)
    return model, checkpoint(config, dtype)
