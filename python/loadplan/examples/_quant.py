"""Simplified vLLM fp8 quantization for the bundled example models: the
fp8 config, the v2 parameter classes that load themselves
(``ModelWeightParameter``, ``PerTensorScaleParameter``,
``BlockQuantScaleParameter``) and the linear methods that create them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn import Parameter

from ._common import FP8, cdiv, empty_param, set_weight_attrs

# ---------------------------------------------------------------- quantization


@dataclass(frozen=True)
class Fp8Config:
    """fp8 weights; per-tensor scales (``weight_scale``) unless
    ``weight_block_size`` is given (``weight_scale_inv`` per block, as
    DeepSeek-V3). ``activation_scheme="static"`` adds per-tensor
    ``input_scale``s."""

    weight_block_size: tuple[int, int] | None = None
    activation_scheme: str = "dynamic"


def load_tp_shard(param: Parameter, loaded_weight: torch.Tensor, dim: int | None,
                  tp_rank: int) -> None:
    """The v1 column/row-parallel load: this rank's part of ``dim`` (the whole
    tensor when ``dim`` is None); a scalar scale becomes shape (1,)."""
    param_data = param.data
    if dim is not None:
        shard_size = param_data.shape[dim]
        loaded_weight = loaded_weight.narrow(dim, tp_rank * shard_size, shard_size)
    if len(loaded_weight.shape) == 0:
        loaded_weight = loaded_weight.reshape(1)
    assert param_data.shape == loaded_weight.shape
    param_data.copy_(loaded_weight)


# v2 parameters (vllm/model_executor/parameter.py, simplified)


class BasevLLMParameter(Parameter):
    def __new__(cls, data: torch.Tensor, **kwargs):
        return super().__new__(cls, data=data, requires_grad=False)

    def __init__(self, data: torch.Tensor, weight_loader: Callable, tp_rank: int = 0,
                 tp_size: int = 1):
        self._weight_loader = weight_loader
        self.tp_rank = tp_rank
        self.tp_size = tp_size

    @property
    def weight_loader(self) -> Callable:
        return self._weight_loader

    def _is_1d_and_scalar(self, loaded_weight: torch.Tensor) -> bool:
        return self.data.ndim == 1 and self.data.numel() == 1 and loaded_weight.numel() == 1

    def _assert_and_load(self, loaded_weight: torch.Tensor) -> None:
        assert self.data.shape == loaded_weight.shape or self._is_1d_and_scalar(loaded_weight)
        self.data.copy_(loaded_weight)

    def load_column_parallel_weight(self, loaded_weight: torch.Tensor) -> None:
        self._assert_and_load(loaded_weight)

    def load_row_parallel_weight(self, loaded_weight: torch.Tensor) -> None:
        self._assert_and_load(loaded_weight)

    def load_merged_column_weight(self, loaded_weight: torch.Tensor, **kwargs) -> None:
        self._assert_and_load(loaded_weight)

    def load_qkv_weight(self, loaded_weight: torch.Tensor, **kwargs) -> None:
        self._assert_and_load(loaded_weight)


class _ColumnvLLMParameter(BasevLLMParameter):
    def __init__(self, output_dim: int, **kwargs):
        self._output_dim = output_dim
        super().__init__(**kwargs)

    @property
    def output_dim(self) -> int:
        return self._output_dim

    def load_column_parallel_weight(self, loaded_weight: torch.Tensor) -> None:
        load_tp_shard(self, loaded_weight, self.output_dim, self.tp_rank)

    def _load_part(self, loaded_weight: torch.Tensor, shard_offset: int, shard_size: int,
                   shard_rank: int) -> None:
        """Part ``shard_rank`` of the checkpoint tensor into rows
        [shard_offset, shard_offset + shard_size) of the fused parameter."""
        param_data = self.data.narrow(self.output_dim, shard_offset, shard_size)
        loaded_weight = loaded_weight.narrow(self.output_dim, shard_rank * shard_size, shard_size)
        assert param_data.shape == loaded_weight.shape
        param_data.copy_(loaded_weight)

    def load_merged_column_weight(self, loaded_weight: torch.Tensor, **kwargs) -> None:
        self._load_part(loaded_weight, kwargs["shard_offset"], kwargs["shard_size"], self.tp_rank)

    def load_qkv_weight(self, loaded_weight: torch.Tensor, **kwargs) -> None:
        num_heads = kwargs["num_heads"]  # KV-head replicas
        shard_rank = self.tp_rank if kwargs["shard_id"] == "q" else self.tp_rank // num_heads
        self._load_part(loaded_weight, kwargs["shard_offset"], kwargs["shard_size"], shard_rank)


class RowvLLMParameter(BasevLLMParameter):
    def __init__(self, input_dim: int, **kwargs):
        self._input_dim = input_dim
        super().__init__(**kwargs)

    @property
    def input_dim(self) -> int:
        return self._input_dim

    def load_row_parallel_weight(self, loaded_weight: torch.Tensor) -> None:
        load_tp_shard(self, loaded_weight, self.input_dim, self.tp_rank)


class ModelWeightParameter(_ColumnvLLMParameter, RowvLLMParameter):
    pass


class BlockQuantScaleParameter(_ColumnvLLMParameter, RowvLLMParameter):
    pass


class PerTensorScaleParameter(BasevLLMParameter):
    """One scale per logical matrix of a fused layer (q, k, v / gate, up)."""

    def _shard_id_as_int(self, shard_id: str | int) -> int:
        if isinstance(shard_id, int):
            return shard_id
        return {"q": 0, "k": 1, "v": 2}[shard_id]

    def load_merged_column_weight(self, loaded_weight: torch.Tensor, **kwargs) -> None:
        self._load_into_shard_id(loaded_weight, kwargs["shard_id"])

    def load_qkv_weight(self, loaded_weight: torch.Tensor, **kwargs) -> None:
        self._load_into_shard_id(loaded_weight, kwargs["shard_id"])

    def load_column_parallel_weight(self, loaded_weight: torch.Tensor) -> None:
        self._assert_and_load(loaded_weight)

    def _load_into_shard_id(self, loaded_weight: torch.Tensor, shard_id: str | int) -> None:
        param_data = self.data[self._shard_id_as_int(shard_id)]
        # AutoFP8 scales have no shape; compressed-tensors scales are [1]
        if len(loaded_weight.shape) != 0:
            assert loaded_weight.shape[0] == 1
            loaded_weight = loaded_weight[0]
        assert param_data.shape == loaded_weight.shape
        param_data.copy_(loaded_weight)


def adjust_block_scale_shard(weight_block_size, shard_size: int, shard_offset: int):
    block_n = weight_block_size[0]
    return cdiv(shard_size, block_n), cdiv(shard_offset, block_n)


class UnquantizedLinearMethod:
    uses_v2 = False

    def create_weights(self, layer, input_size_per_partition, output_partition_sizes,
                       params_dtype, device, weight_loader):
        weight = empty_param(sum(output_partition_sizes), input_size_per_partition,
                             dtype=params_dtype, device=device)
        set_weight_attrs(weight, {"input_dim": 1, "output_dim": 0,
                                  "weight_loader": weight_loader})
        layer.register_parameter("weight", weight)


class Fp8LinearMethod:
    uses_v2 = True

    def __init__(self, config: Fp8Config):
        self.config = config

    def create_weights(self, layer, input_size_per_partition, output_partition_sizes,
                       params_dtype, device, weight_loader):
        tp = {"tp_rank": layer.tp_rank, "tp_size": layer.tp_size}
        out = sum(output_partition_sizes)
        weight = ModelWeightParameter(
            data=torch.empty(out, input_size_per_partition, dtype=FP8, device=device),
            input_dim=1, output_dim=0, weight_loader=weight_loader, **tp)
        layer.register_parameter("weight", weight)
        block = self.config.weight_block_size
        if block is not None:
            block_n, block_k = block
            layer.weight_block_size = block
            # vLLM requires every partition to be whole blocks (or allows the
            # mismatch explicitly); keep the examples exact.
            if len(output_partition_sizes) > 1 or out != layer.output_size:
                for size in output_partition_sizes:
                    assert size % block_n == 0, (size, block_n)
            if layer.tp_size > 1 and getattr(layer, "input_is_parallel", False):
                assert input_size_per_partition % block_k == 0
            scale = BlockQuantScaleParameter(
                data=torch.empty(cdiv(out, block_n), cdiv(input_size_per_partition, block_k),
                                 dtype=torch.float32, device=device),
                input_dim=1, output_dim=0, weight_loader=weight_loader, **tp)
            layer.register_parameter("weight_scale_inv", scale)
        else:
            scale = PerTensorScaleParameter(
                data=torch.empty(len(output_partition_sizes), dtype=torch.float32, device=device),
                weight_loader=weight_loader, **tp)
            scale[:] = torch.finfo(torch.float32).min
            layer.register_parameter("weight_scale", scale)
            if self.config.activation_scheme == "static":
                input_scale = PerTensorScaleParameter(
                    data=torch.empty(len(output_partition_sizes), dtype=torch.float32,
                                     device=device),
                    weight_loader=weight_loader, **tp)
                input_scale[:] = torch.finfo(torch.float32).min
                layer.register_parameter("input_scale", input_scale)


def get_quant_method(quant_config: Fp8Config | None):
    return UnquantizedLinearMethod() if quant_config is None else Fp8LinearMethod(quant_config)
