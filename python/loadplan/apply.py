"""Applying: ``load_planned`` loads one update of full checkpoint tensors
as a plan says, direct names through the runtime in one call, fallbacks
through ``model.load_weights``.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from . import _runtime
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

    The whole batch is checked first, in one native call (names in the
    plan, each once, shapes and dtypes as declared, dense bytes; then the
    model's tensors where the plan saw them, then the runtime's own
    checks): nothing is written unless all of it is valid.

    Raises:
        InvalidUpdate (a ValueError): a name is not in the plan or sent
            twice, or a tensor does not match its declaration; the message
            names the first.
        RuntimeError: the model's tensors are not the ones the plan was
            made for.
    """
    batch = list(weights)
    state = plan.runtime
    if state.binding is None and state.unusable is None:
        plan.bind()
    if state.binding is not None:
        # One native call checks the whole batch and holds the direct names;
        # Python does nothing per name.
        fallbacks = state.binding.check_update(batch)
        plan.check_layout(model)
        with torch.no_grad():
            state.binding.apply_checked()
            if fallbacks:
                model.load_weights(fallbacks)
        return
    if state.check is None:
        state.check = _runtime.UpdateCheck(plan.native)
    fallbacks = state.check.check(batch)
    plan.check_layout(model)
    with torch.no_grad():
        copy_with_torch(plan, state.check.direct())
        if fallbacks:
            model.load_weights(fallbacks)


def copy_with_torch(plan: LoadPlan, direct: list[tuple[str, torch.Tensor]]) -> None:
    """What the runtime does, one ``copy_`` per destination: for targets
    the runtime cannot bind (on several devices, say)."""
    for name, full in direct:
        for d in plan.dests(name):
            # A region that splits box dims takes a view (splitting a dim
            # is always one), which copies nothing; a transform computes.
            d.view.copy_(d.transformed(full if d.whole else full[d.index]))

