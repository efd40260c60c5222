"""Checks made before anything is planned or written: the model can be
planned, the metadata is well formed, the model's tensors are still where
the plan saw them, and an update batch is what the plan was made for.

Every check here raises before a byte of live memory is written, so that
an update is all or nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import torch

from . import _ir

if TYPE_CHECKING:
    from .plan import LoadPlan, ParamMeta


def check_plannable(model: torch.nn.Module) -> None:
    """Refuse a model no load plan supports: one without a vLLM-style
    ``load_weights(weights)``, and expert-parallel load balancing (EPLB),
    which moves experts between updates.

    Raises:
        RuntimeError: the model cannot be planned.
    """
    if not isinstance(model, torch.nn.Module):
        raise RuntimeError(f"load plan: expects a torch.nn.Module, got {type(model).__name__}")
    if not callable(getattr(model, "load_weights", None)):
        raise RuntimeError(
            f"load plan: {type(model).__name__} has no load_weights(weights) method; "
            "a plan traces it"
        )
    for name, module in model.named_modules():
        moe_config = getattr(module, "moe_config", None)
        parallel = getattr(moe_config, "moe_parallel_config", None)
        if getattr(parallel, "enable_eplb", False) or getattr(module, "enable_eplb", False):
            raise RuntimeError(f"load plan: EPLB is not supported ({name or 'the model'})")


def declare(metadata: Iterable[ParamMeta]) -> dict[str, ParamMeta]:
    """The declared checkpoint tensors by name, in arrival order.

    Raises:
        ValueError: a name is declared twice, or has a dtype no plan holds.
    """
    metas: dict[str, ParamMeta] = {}
    for meta in metadata:
        if meta.name in metas:
            raise ValueError(f"load plan: {meta.name!r} is declared twice")
        if not _ir.has_element_type(meta.dtype):
            raise ValueError(f"load plan: {meta.name!r} has an unsupported dtype {meta.dtype}")
        metas[meta.name] = meta
    return metas


def check_layout(model: torch.nn.Module, plan: LoadPlan) -> None:
    """Refuse a model that is not the plan's, or whose written tensors were
    replaced or moved since planning.

    Raises:
        RuntimeError: naming the first tensor that is not where it was.
    """
    if plan.model is not model:
        raise RuntimeError("load plan: the plan was made for another model")
    for layout in plan.layouts:
        if not layout.holds():
            raise RuntimeError(
                f"load plan: {layout.name} is not the tensor the plan was made for "
                "(it was replaced or moved); plan again"
            )


def not_dense(t: torch.Tensor) -> str | None:
    """Why the bytes of ``t`` cannot be copied from, or None."""
    if t.is_meta:
        return "a meta tensor, which holds no data"
    if t.layout != torch.strided:
        return f"a {t.layout} tensor, not a dense (strided) one"
    return None


def describe(item: object) -> str:
    """An item for an error message, without printing a tensor's values."""
    if isinstance(item, (str, int, float, type(None))):
        return repr(item)
    if isinstance(item, (list, tuple)):
        return f"a {type(item).__name__} of {len(item)} items"
    return f"a {type(item).__name__}"


def check_batch(plan: LoadPlan, batch: Sequence[object]) -> None:
    """Refuse an update batch that is not (name, tensor) pairs of declared
    names, each once, with the declared shape and dtype and dense bytes.

    Raises:
        ValueError: naming the first item that is wrong.
    """
    for item in batch:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise ValueError(f"load plan: expected (name, tensor) pairs, got {describe(item)}")
        name, full = item
        entry = plan.entries.get(name) if isinstance(name, str) else None
        if entry is None:
            raise ValueError(f"load plan: {name!r} is not a declared checkpoint name")
        if not isinstance(full, torch.Tensor):
            raise ValueError(f"load plan: {name!r} is not a tensor: {type(full).__name__}")
        if tuple(full.shape) != entry.shape or full.dtype != entry.dtype:
            raise ValueError(
                f"load plan: {name!r} is {full.dtype} {tuple(full.shape)}, declared "
                f"{entry.dtype} {entry.shape}"
            )
        # Else a fallback's load_weights would fail only after the direct
        # names were written.
        if problem := not_dense(full):
            raise ValueError(f"load plan: {name!r} is {problem}")
    seen: set[str] = set()
    for name, _ in batch:
        if name in seen:
            raise ValueError(f"load plan: {name!r} is sent twice in one update")
        seen.add(name)
