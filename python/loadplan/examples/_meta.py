"""Checkpoint metadata helpers shared by the example models."""

from __future__ import annotations

import torch

from loadplan import ParamMeta


class Checkpoint:
    """Collects the (name, shape, dtype) of every tensor a trainer sends, in
    the order it sends them."""

    def __init__(self, dtype: torch.dtype):
        self.dtype = dtype
        self.metas: list[ParamMeta] = []

    def add(self, name: str, *shape: int, dtype: torch.dtype | None = None) -> None:
        self.metas.append(ParamMeta(name, tuple(shape), dtype or self.dtype))
