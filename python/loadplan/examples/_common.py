"""Helpers the simplified vLLM layers share: TP arithmetic, weight
attributes, the default weight loader."""

from __future__ import annotations

import torch
from torch.nn import Parameter

FP8 = torch.float8_e4m3fn
DEFAULT_VOCAB_PADDING_SIZE = 64


def divide(numerator: int, denominator: int) -> int:
    assert numerator % denominator == 0, f"{numerator} is not divisible by {denominator}"
    return numerator // denominator


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def set_weight_attrs(weight: torch.Tensor, attrs: dict | None) -> None:
    for key, value in (attrs or {}).items():
        assert not hasattr(weight, key), f"overwriting attribute {key}"
        setattr(weight, key, value)


def empty_param(*shape: int, dtype: torch.dtype, device=None) -> Parameter:
    return Parameter(torch.empty(*shape, dtype=dtype, device=device), requires_grad=False)


def default_weight_loader(param: torch.Tensor, loaded_weight: torch.Tensor) -> None:
    """vLLM's default loader: a one-element parameter takes the value of a
    one-element checkpoint tensor (``fill_(w.item())``, a value read); any
    other parameter is a plain full copy."""
    if param.numel() == 1 and loaded_weight.numel() == 1:
        # scalars are not always stored with a shape: "broadcast" the value
        param.data.fill_(loaded_weight.item())
    else:
        assert param.size() == loaded_weight.size(), (
            f"loading {tuple(loaded_weight.shape)} into {tuple(param.shape)}"
        )
        param.data.copy_(loaded_weight)
