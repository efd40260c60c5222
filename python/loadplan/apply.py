"""Applying: ``load_planned`` loads one update of full checkpoint tensors
as a plan says, direct names through the runtime in one call, fallbacks
through ``model.load_weights``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from . import checks
from .plan import LoadPlan


def load_planned(
    model: torch.nn.Module,
    plan: LoadPlan,
    weights: Iterable[tuple[str, torch.Tensor]],
) -> None:
    """Load full checkpoint tensors as ``plan`` says: copy each direct name's
    boxes into its destinations, skip names this rank needs nothing of, and
    pass fallbacks to ``model.load_weights`` in arrival order.

    Direct names go through the runtime in one call per batch (bound on
    first use, see ``LoadPlan.bind``): CPU targets with its thread pool,
    CUDA targets on torch's current stream (incoming tensors in pageable
    host memory are first copied to the device). Incoming tensors that are
    not contiguous are made contiguous first.

    The whole batch is checked first (names in the plan, each once, shapes
    and dtypes as declared, the model's tensors where the plan saw them,
    then the runtime's own checks): nothing is written unless all of it is
    valid.

    Raises:
        ValueError: a name is not in the plan or sent twice, or a tensor
            does not match its declaration.
        RuntimeError: the model's tensors are not the ones the plan was
            made for.
    """
    batch = list(weights)
    state = plan.runtime
    if state.binding is not None:
        # One native call checks the whole batch; Python does nothing per
        # name unless something is off (then the checks below say what).
        fallbacks = state.binding.check_update(batch)
        if fallbacks is not None:
            plan.check_layout(model)
            with torch.no_grad():
                state.binding.apply_checked()
                if fallbacks:
                    model.load_weights(fallbacks)
            return
    _check_batch(plan, batch)
    plan.check_layout(model)

    direct, fallbacks = [], []
    for name, full in batch:
        kind = plan.entries[name].kind
        if kind == "fallback":
            fallbacks.append((name, full))
        elif kind == "direct":
            direct.append((name, full))
    if state.binding is None and state.unusable is None:
        plan.bind()
    with torch.no_grad():
        if state.binding is not None:
            # One call for the whole batch; the runtime checks it all
            # before it writes a byte.
            state.binding.apply_tensors(direct)
        else:
            copy_with_torch(plan, direct)
        if fallbacks:
            model.load_weights(fallbacks)


def copy_with_torch(plan: LoadPlan, direct: list[tuple[str, torch.Tensor]]) -> None:
    """What the runtime does, one ``copy_`` per destination: for targets
    the runtime cannot bind (on several devices, say)."""
    for name, full in direct:
        for d in plan.dests(name):
            part = full if d.whole else full[d.index]
            if d.split:
                # The region splits box dims; splitting a dim is always
                # a view, so this copies nothing.
                part = part.view(d.view.shape)
            d.view.copy_(part)


def _check_batch(plan: LoadPlan, batch: Sequence[object]) -> None:
    """Refuse an update batch that is not (name, tensor) pairs of declared
    names, each once, with the declared shape and dtype and dense bytes.

    Raises:
        ValueError: naming the first item that is wrong.
    """
    for item in batch:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise ValueError(f"load plan: expected (name, tensor) pairs, got {checks.describe(item)}")
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
        if problem := checks.not_dense(full):
            raise ValueError(f"load plan: {name!r} is {problem}")
    seen: set[str] = set()
    for name, _ in batch:
        if name in seen:
            raise ValueError(f"load plan: {name!r} is sent twice in one update")
        seen.add(name)
