"""Checks of a model and of incoming tensors that need no plan: the model
can be planned, a tensor has bytes to copy. (What needs a plan is the
plan's: ``LoadPlan.check_layout`` and ``check_checkpoint``, the metadata's
``plan.declare``, an update batch's the binding's, ``Binding.check_update``.)

Every check here raises before a byte of live memory is written, so that
an update is all or nothing.
"""

from __future__ import annotations

import torch


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
