"""Simplified vLLM layers for the bundled example models.

Each class keeps the *loading* behaviour of its vLLM namesake (which slice of
a checkpoint tensor a rank takes, where in the fused parameter it lands, how
padding and scales are written), with tensor parallelism emulated by explicit
``tp_rank`` / ``tp_size`` arguments instead of ``torch.distributed``. Forward
passes are left out: loadplan only runs ``load_weights``.

Two loader styles are kept, as in vLLM: plain ``nn.Parameter`` with
``weight_loader`` / ``output_dim`` / ``input_dim`` attributes (the v1
loaders, used by unquantized layers here), and parameter classes that load
themselves (``ModelWeightParameter``, ``PerTensorScaleParameter``,
``BlockQuantScaleParameter``: the v2 loaders, used by fp8 layers).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import torch
from torch import nn
from torch.nn import Parameter

from ._common import (
    DEFAULT_VOCAB_PADDING_SIZE,
    cdiv,
    default_weight_loader,
    divide,
    empty_param,
    set_weight_attrs,
)
from ._quant import (
    BasevLLMParameter,
    BlockQuantScaleParameter,
    Fp8Config,
    PerTensorScaleParameter,
    RowvLLMParameter,
    adjust_block_scale_shard,
    get_quant_method,
    load_tp_shard,
)

# --------------------------------------------------------------------- linear


class LinearBase(nn.Module):
    def __init__(self, input_size: int, output_size: int, *, params_dtype: torch.dtype,
                 quant_config: Fp8Config | None, tp_rank: int, tp_size: int, device=None):
        super().__init__()
        self.input_size = input_size
        self.output_size = output_size
        self.params_dtype = params_dtype
        self.tp_rank = tp_rank
        self.tp_size = tp_size
        self.device = device
        self.quant_method = get_quant_method(quant_config)

    def _create(self, input_size_per_partition: int, output_partition_sizes: list[int],
                bias_size: int | None):
        """The quant method's weights, and a bias of ``bias_size`` (or none)."""
        loader = self.weight_loader_v2 if self.quant_method.uses_v2 else self.weight_loader
        self.quant_method.create_weights(self, input_size_per_partition, output_partition_sizes,
                                         self.params_dtype, self.device, loader)
        if bias_size is not None:
            self.bias = empty_param(bias_size, dtype=self.params_dtype, device=self.device)
            set_weight_attrs(self.bias, {"output_dim": 0, "weight_loader": self.weight_loader})
        else:
            self.register_parameter("bias", None)


def scalar_as_1d(loaded_weight: torch.Tensor) -> torch.Tensor:
    """Scales saved without a shape (AutoFP8) load as shape (1,)."""
    if len(loaded_weight.shape) == 0:
        assert loaded_weight.numel() == 1
        loaded_weight = loaded_weight.reshape(1)
    return loaded_weight


class ReplicatedLinear(LinearBase):
    def __init__(self, input_size: int, output_size: int, bias: bool = False, **kw):
        super().__init__(input_size, output_size, **kw)
        self.output_partition_sizes = getattr(self, "output_sizes", [output_size])
        self._create(input_size, self.output_partition_sizes, output_size if bias else None)

    def weight_loader(self, param: Parameter, loaded_weight: torch.Tensor) -> None:
        load_tp_shard(param, loaded_weight, None, 0)

    weight_loader_v2 = weight_loader


class MergedReplicatedLinear(ReplicatedLinear):
    """Several replicated projections in one weight (DeepSeek's
    ``fused_qkv_a_proj``)."""

    def __init__(self, input_size: int, output_sizes: list[int], bias: bool = False, **kw):
        self.output_sizes = output_sizes
        super().__init__(input_size, sum(output_sizes), bias=bias, **kw)

    def weight_loader(self, param: Parameter, loaded_weight: torch.Tensor,
                      loaded_shard_id: int | None = None) -> None:
        assert loaded_shard_id is not None and loaded_shard_id < len(self.output_sizes)
        if isinstance(param, BlockQuantScaleParameter):
            shard_size, shard_offset = adjust_block_scale_shard(
                self.weight_block_size, self.output_sizes[loaded_shard_id],
                sum(self.output_sizes[:loaded_shard_id]))
        elif isinstance(param, PerTensorScaleParameter):
            shard_offset, shard_size = loaded_shard_id, 1
        else:
            shard_offset = sum(self.output_sizes[:loaded_shard_id])
            shard_size = self.output_sizes[loaded_shard_id]
        param.data[shard_offset:shard_offset + shard_size] = loaded_weight

    weight_loader_v2 = weight_loader


class ColumnParallelLinear(LinearBase):
    def __init__(self, input_size: int, output_size: int, bias: bool = False, **kw):
        super().__init__(input_size, output_size, **kw)
        self.input_size_per_partition = input_size
        self.output_size_per_partition = divide(output_size, self.tp_size)
        self.output_partition_sizes = [self.output_size_per_partition]
        if hasattr(self, "output_sizes"):
            self.output_partition_sizes = [divide(s, self.tp_size) for s in self.output_sizes]
        self._create(self.input_size_per_partition, self.output_partition_sizes,
                     self.output_size_per_partition if bias else None)

    def weight_loader(self, param: Parameter, loaded_weight: torch.Tensor) -> None:
        load_tp_shard(param, loaded_weight, getattr(param, "output_dim", None), self.tp_rank)

    def weight_loader_v2(self, param: BasevLLMParameter, loaded_weight: torch.Tensor) -> None:
        param.load_column_parallel_weight(loaded_weight=scalar_as_1d(loaded_weight))


class _FusedColumnParallelLinear(ColumnParallelLinear):
    """Several projections in one column-parallel weight, each split over
    ranks on its own (``MergedColumnParallelLinear``, ``QKVParallelLinear``).
    A checkpoint name is one projection (``loaded_shard_id``) or, when the
    checkpoint already fuses them (Phi-3), all of them (``None``)."""

    def _disk_offsets(self) -> list[tuple[str | int, int, int]]:
        """(shard id, offset, size) of each projection in a fused checkpoint."""
        raise NotImplementedError

    def _offset_size(self, shard_id) -> tuple[int, int]:
        """Where this rank's part of projection ``shard_id`` sits in the weight."""
        raise NotImplementedError

    def _shard_rank(self, shard_id) -> int:
        """Which part of projection ``shard_id`` this rank holds."""
        return self.tp_rank

    def _load_v2(self, param: BasevLLMParameter, loaded_weight: torch.Tensor, **kwargs) -> None:
        raise NotImplementedError

    def weight_loader(self, param: Parameter, loaded_weight: torch.Tensor,
                      loaded_shard_id: str | int | None = None) -> None:
        output_dim = param.output_dim
        if loaded_shard_id is None:
            # fused on disk: split, then load each projection
            for shard_id, offset, size in self._disk_offsets():
                self.weight_loader(param, loaded_weight.narrow(output_dim, offset, size),
                                   shard_id)
            return
        shard_offset, shard_size = self._offset_size(loaded_shard_id)
        param_data = param.data.narrow(output_dim, shard_offset, shard_size)
        start = self._shard_rank(loaded_shard_id) * shard_size
        loaded_weight = loaded_weight.narrow(output_dim, start, shard_size)
        assert param_data.shape == loaded_weight.shape
        param_data.copy_(loaded_weight)

    def weight_loader_v2(self, param: BasevLLMParameter, loaded_weight: torch.Tensor,
                         loaded_shard_id: str | int | None = None) -> None:
        if loaded_shard_id is None:
            if isinstance(param, PerTensorScaleParameter):
                # fused on disk: one scale for the whole matrix goes to every
                # slot, so that a later max() over slots keeps working
                for idx in range(param.data.shape[0]):
                    self._load_v2(param, loaded_weight, shard_id=idx)
                return
            if type(param) in (RowvLLMParameter, BasevLLMParameter):
                self._load_v2(param, loaded_weight)
                return
            for shard_id, offset, size in self._disk_offsets():
                if isinstance(param, BlockQuantScaleParameter):
                    size, offset = adjust_block_scale_shard(self.weight_block_size, size, offset)
                part = loaded_weight.narrow(param.output_dim, offset, size)
                self.weight_loader_v2(param, part, shard_id)
            return
        shard_offset, shard_size = self._offset_size(loaded_shard_id)
        if isinstance(param, BlockQuantScaleParameter):
            shard_size, shard_offset = adjust_block_scale_shard(
                self.weight_block_size, shard_size, shard_offset)
        self._load_v2(param, loaded_weight, shard_id=loaded_shard_id, shard_offset=shard_offset,
                      shard_size=shard_size)


class MergedColumnParallelLinear(_FusedColumnParallelLinear):
    """gate_proj and up_proj in one column-parallel weight."""

    def __init__(self, input_size: int, output_sizes: list[int], bias: bool = False, **kw):
        self.output_sizes = output_sizes
        assert all(s % kw["tp_size"] == 0 for s in output_sizes)
        super().__init__(input_size, sum(output_sizes), bias=bias, **kw)

    def _disk_offsets(self):
        offsets = itertools.accumulate([0] + self.output_sizes[:-1])
        return [(i, offset, size) for i, (offset, size) in
                enumerate(zip(offsets, self.output_sizes))]

    def _offset_size(self, shard_id: int) -> tuple[int, int]:
        return (sum(self.output_sizes[:shard_id]) // self.tp_size,
                self.output_sizes[shard_id] // self.tp_size)

    def _load_v2(self, param, loaded_weight, **kwargs) -> None:
        param.load_merged_column_weight(loaded_weight=loaded_weight, **kwargs)


class QKVParallelLinear(_FusedColumnParallelLinear):
    """q, k and v projections in one column-parallel weight, split by heads.
    When tp_size exceeds the number of KV heads, each KV head is replicated on
    ``tp_size // total_num_kv_heads`` ranks."""

    def __init__(self, hidden_size: int, head_size: int, total_num_heads: int,
                 total_num_kv_heads: int | None = None, bias: bool = False, **kw):
        tp_size = kw["tp_size"]
        self.hidden_size = hidden_size
        self.head_size = head_size
        self.total_num_heads = total_num_heads
        self.total_num_kv_heads = total_num_kv_heads or total_num_heads
        self.num_heads = divide(total_num_heads, tp_size)
        if tp_size >= self.total_num_kv_heads:
            self.num_kv_heads = 1
            self.num_kv_head_replicas = divide(tp_size, self.total_num_kv_heads)
        else:
            self.num_kv_heads = divide(self.total_num_kv_heads, tp_size)
            self.num_kv_head_replicas = 1
        self.output_sizes = [
            self.num_heads * head_size * tp_size,  # q
            self.num_kv_heads * head_size * tp_size,  # k
            self.num_kv_heads * head_size * tp_size,  # v
        ]
        super().__init__(hidden_size, sum(self.output_sizes), bias=bias, **kw)

    def _disk_offsets(self):
        q = self.total_num_heads * self.head_size
        kv = self.total_num_kv_heads * self.head_size
        return [("q", 0, q), ("k", q, kv), ("v", q + kv, kv)]

    def _offset_size(self, shard_id: str) -> tuple[int, int]:
        q, kv = self.num_heads * self.head_size, self.num_kv_heads * self.head_size
        return {"q": (0, q), "k": (q, kv), "v": (q + kv, kv)}[shard_id]

    def _shard_rank(self, shard_id: str) -> int:
        return self.tp_rank if shard_id == "q" else self.tp_rank // self.num_kv_head_replicas

    def _load_v2(self, param, loaded_weight, **kwargs) -> None:
        param.load_qkv_weight(loaded_weight=loaded_weight, num_heads=self.num_kv_head_replicas,
                              **kwargs)


class RowParallelLinear(LinearBase):
    def __init__(self, input_size: int, output_size: int, bias: bool = False, **kw):
        super().__init__(input_size, output_size, **kw)
        self.input_is_parallel = True
        self.input_size_per_partition = divide(input_size, self.tp_size)
        self.output_size_per_partition = output_size
        # the bias is not sharded: every rank holds all of it
        self._create(self.input_size_per_partition, [output_size], output_size if bias else None)

    def weight_loader(self, param: Parameter, loaded_weight: torch.Tensor) -> None:
        load_tp_shard(param, loaded_weight, getattr(param, "input_dim", None), self.tp_rank)

    def weight_loader_v2(self, param: BasevLLMParameter, loaded_weight: torch.Tensor) -> None:
        param.load_row_parallel_weight(loaded_weight=scalar_as_1d(loaded_weight))


# ------------------------------------------------------------------ embedding


def pad_vocab_size(vocab_size: int, pad_to: int = DEFAULT_VOCAB_PADDING_SIZE) -> int:
    return cdiv(vocab_size, pad_to) * pad_to


class VocabParallelEmbedding(nn.Module):
    """Embedding rows split over ranks; the vocabulary is padded to a multiple
    of ``padding_size`` first, and the padding rows a rank holds are zeroed
    by the loader (``fill_(0)``)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, *, params_dtype: torch.dtype,
                 tp_rank: int, tp_size: int, padding_size: int = DEFAULT_VOCAB_PADDING_SIZE,
                 device=None):
        super().__init__()
        self.tp_rank = tp_rank
        self.tp_size = tp_size
        self.org_vocab_size = num_embeddings
        self.num_embeddings_padded = pad_vocab_size(num_embeddings, padding_size)
        self.num_embeddings_per_partition = divide(self.num_embeddings_padded, tp_size)
        padded_start = tp_rank * self.num_embeddings_per_partition
        padded_end = padded_start + self.num_embeddings_per_partition
        # remove padding
        self.org_vocab_start_index = min(padded_start, num_embeddings)
        self.org_vocab_end_index = min(padded_end, num_embeddings)
        self.embedding_dim = embedding_dim
        self.weight = empty_param(self.num_embeddings_per_partition, embedding_dim,
                                  dtype=params_dtype, device=device)
        set_weight_attrs(self.weight, {"output_dim": 0, "weight_loader": self.weight_loader})

    def weight_loader(self, param: Parameter, loaded_weight: torch.Tensor) -> None:
        output_dim = getattr(param, "output_dim", None)
        if output_dim is None:
            assert param.data.shape == loaded_weight.shape
            param.data.copy_(loaded_weight)
            return
        start_idx = self.org_vocab_start_index
        shard_size = self.org_vocab_end_index - start_idx
        assert loaded_weight.shape[output_dim] == self.org_vocab_size
        loaded_weight = loaded_weight.narrow(output_dim, start_idx, shard_size)
        param[: loaded_weight.shape[0]].data.copy_(loaded_weight)
        param[loaded_weight.shape[0]:].data.fill_(0)


class ParallelLMHead(VocabParallelEmbedding):
    pass


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, *, params_dtype: torch.dtype, device=None):
        super().__init__()
        # no weight_loader attribute: default_weight_loader loads it
        self.weight = Parameter(torch.ones(hidden_size, dtype=params_dtype, device=device),
                                requires_grad=False)


# ------------------------------------------------------------------------ MoE


def determine_expert_map(ep_size: int, ep_rank: int, global_num_experts: int):
    """Linear expert placement: rank r holds a contiguous run of experts.
    Returns (local_num_experts, expert_map) where expert_map[g] is the local
    index of global expert g on this rank, or -1."""
    if ep_size == 1:
        return global_num_experts, None
    base, remainder = divmod(global_num_experts, ep_size)
    local = base + (1 if ep_rank < remainder else 0)
    expert_map = torch.full((global_num_experts,), -1, dtype=torch.int32)
    start = ep_rank * base + min(ep_rank, remainder)
    expert_map[start:start + local] = torch.arange(local, dtype=torch.int32)
    return local, expert_map


class FusedMoE(nn.Module):
    """Routed experts in two fused tensors: ``w13_weight`` [E_local, 2I, H]
    (gate rows then up rows of each expert) and ``w2_weight`` [E_local, H, I].
    Without expert parallelism every rank holds every expert with the
    intermediate dim split by tensor parallelism; with it (``enable_ep``)
    ranks split the experts and keep them whole."""

    def __init__(self, num_experts: int, top_k: int, hidden_size: int, intermediate_size: int,
                 *, params_dtype: torch.dtype, tp_rank: int, tp_size: int,
                 enable_ep: bool = False, device=None):
        super().__init__()
        self.global_num_experts = num_experts
        self.top_k = top_k
        if enable_ep:
            self.ep_rank, self.ep_size = tp_rank, tp_size
            self.tp_rank, self.tp_size = 0, 1
        else:
            self.ep_rank, self.ep_size = 0, 1
            self.tp_rank, self.tp_size = tp_rank, tp_size
        self.local_num_experts, expert_map = determine_expert_map(
            self.ep_size, self.ep_rank, num_experts)
        if expert_map is not None:
            self.register_buffer("_expert_map", expert_map.to(device))
        else:
            self._expert_map = None
        self.intermediate_size_per_partition = divide(intermediate_size, self.tp_size)
        e, i, h = self.local_num_experts, self.intermediate_size_per_partition, hidden_size
        self.w13_weight = empty_param(e, 2 * i, h, dtype=params_dtype, device=device)
        self.w2_weight = empty_param(e, h, i, dtype=params_dtype, device=device)
        for p in (self.w13_weight, self.w2_weight):
            set_weight_attrs(p, {"weight_loader": self.weight_loader})

    @classmethod
    def make_expert_params_mapping(cls, ckpt_gate_proj_name: str, ckpt_down_proj_name: str,
                                   ckpt_up_proj_name: str, num_experts: int,
                                   num_redundant_experts: int = 0):
        """(param prefix, checkpoint prefix, physical expert id, shard id) for
        every physical expert slot."""
        physical_to_logical = [e % num_experts for e in range(num_experts + num_redundant_experts)]
        return [
            ("experts.w13_" if proj in (ckpt_gate_proj_name, ckpt_up_proj_name) else "experts.w2_",
             f"experts.{physical_to_logical[expert_id]}.{proj}.", expert_id, shard_id)
            for expert_id in range(len(physical_to_logical))
            for shard_id, proj in (("w1", ckpt_gate_proj_name), ("w2", ckpt_down_proj_name),
                                   ("w3", ckpt_up_proj_name))
        ]

    def _map_global_expert_id_to_local_expert_id(self, expert_id: int) -> int:
        if self._expert_map is None:
            return expert_id
        return self._expert_map[expert_id].item()

    def _load_w13(self, expert_data, shard_dim, shard_id, loaded_weight, tp_rank):
        shard_size = expert_data.shape[shard_dim] // 2
        loaded_weight = loaded_weight.narrow(shard_dim, shard_size * tp_rank, shard_size)
        if shard_id == "w1":  # gate_proj: first half
            expert_data = expert_data.narrow(shard_dim, 0, shard_size)
        else:  # up_proj: second half
            assert shard_id == "w3"
            expert_data = expert_data.narrow(shard_dim, shard_size, shard_size)
        expert_data.copy_(loaded_weight)

    def _load_w2(self, expert_data, shard_dim, loaded_weight, tp_rank):
        shard_size = expert_data.shape[shard_dim]
        loaded_weight = loaded_weight.narrow(shard_dim, shard_size * tp_rank, shard_size)
        expert_data.copy_(loaded_weight)

    def weight_loader(self, param: Parameter, loaded_weight: torch.Tensor, weight_name: str,
                      shard_id: str, expert_id: int, return_success: bool = False):
        expert_id = self._map_global_expert_id_to_local_expert_id(expert_id)
        if expert_id == -1:  # another rank's expert
            return False if return_success else None
        if shard_id not in ("w1", "w2", "w3"):
            raise ValueError(f"shard_id must be ['w1','w2','w3'] but got {shard_id}.")
        shard_dim = {"w1": 0, "w2": 1, "w3": 0}[shard_id]
        full_load = len(loaded_weight.shape) == 3
        if full_load:
            shard_dim += 1
        expert_data = param.data if full_load else param.data[expert_id]
        if "weight" in weight_name:
            if shard_id == "w2":
                self._load_w2(expert_data, shard_dim, loaded_weight, self.tp_rank)
            else:
                self._load_w13(expert_data, shard_dim, shard_id, loaded_weight, self.tp_rank)
            return True if return_success else None
        return False if return_success else None


# ------------------------------------------------------------ model plumbing


class AutoWeightsLoader:
    """vLLM's AutoWeightsLoader, simplified: group the incoming names by their
    first component (``itertools.groupby``, which reads one name ahead), hand
    each group to the child module's own ``load_weights`` or, for a
    parameter, to its ``weight_loader``."""

    def __init__(self, module: nn.Module, skip_prefixes: list[str] | None = None):
        self.module = module
        self.skip_prefixes = skip_prefixes or []

    def _load_module(self, prefix: str, module: nn.Module, weights) -> Iterable[str]:
        if module is not self.module and hasattr(module, "load_weights"):
            loaded = module.load_weights((n, w) for n, w in weights)
            yield from (f"{prefix}.{n}" if prefix else n for n in (loaded or ()))
            return
        children = dict(module.named_children())
        params = dict(module.named_parameters(recurse=False))
        split = ((n.split(".", 1), w) for n, w in weights)
        for head, group in itertools.groupby(split, key=lambda x: x[0][0]):
            name = f"{prefix}.{head}" if prefix else head
            if any(name.startswith(p) for p in self.skip_prefixes):
                for _ in group:
                    pass
                continue
            if head in children:
                yield from self._load_module(
                    name, children[head], ((parts[1], w) for parts, w in group))
            elif head in params:
                param = params[head]
                for _, w in group:
                    getattr(param, "weight_loader", default_weight_loader)(param, w)
                yield name
            else:
                raise ValueError(f"no module or parameter for {name!r}")

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        weights = ((n, w) for n, w in weights
                   if not any(n.startswith(p) for p in self.skip_prefixes))
        return set(self._load_module("", self.module, weights))


class Config:
    """A model configuration: the sizes ``make`` was given, as attributes."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


class GatedMLP(nn.Module):
    """Llama's (and Qwen's, DeepSeek's) MLP: gate_proj and up_proj fused into
    one column-parallel ``gate_up_proj``, a row-parallel ``down_proj``."""

    def __init__(self, hidden_size: int, intermediate_size: int, kw: dict):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(hidden_size, [intermediate_size] * 2, **kw)
        self.down_proj = RowParallelLinear(intermediate_size, hidden_size, **kw)


def load_one(params_dict: dict[str, Parameter], name: str, loaded_weight: torch.Tensor,
             stacked_params_mapping: list[tuple[str, str, str | int]],
             expert_params_mapping: list[tuple[str, str, int, str]] = ()) -> str | None:
    """The body of a vLLM model's ``load_weights`` loop for one checkpoint
    name: a shard of a fused parameter (``stacked_params_mapping``), else a
    routed expert (``expert_params_mapping``), else a parameter of its own
    loaded by its ``weight_loader`` or ``default_weight_loader``. Returns the
    parameter's name, or None for a bias the model does not have."""
    for param_name, weight_name, shard_id in stacked_params_mapping:
        if weight_name not in name:
            continue
        # routed experts are loaded by the expert mapping below
        if "mlp.experts" in name:
            continue
        name = name.replace(weight_name, param_name)
        if name.endswith(".bias") and name not in params_dict:
            return None
        param = params_dict[name]
        param.weight_loader(param, loaded_weight, shard_id)
        return name
    for param_name, weight_name, expert_id, shard_id in expert_params_mapping:
        if weight_name not in name:
            continue
        name = name.replace(weight_name, param_name)
        param = params_dict[name]
        param.weight_loader(param, loaded_weight, name, shard_id=shard_id, expert_id=expert_id)
        return name
    if name.endswith(".bias") and name not in params_dict:
        return None
    param = params_dict[name]
    getattr(param, "weight_loader", default_weight_loader)(param, loaded_weight)
    return name
