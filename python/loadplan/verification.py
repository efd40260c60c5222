"""Verification: the plan writes exactly what ``load_weights`` writes.

``verify`` builds two fresh models from one factory, gives them the same
bytes, loads the same random weights into one with ``load_weights`` and into
the other with ``plan_loads`` + ``load_planned``, and compares every byte of
every parameter and buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from .apply import load_planned
from .plan import LoadPlan, ParamMeta, declare
from .planning import plan_loads


@dataclass(frozen=True)
class Mismatch:
    """A tensor whose bytes differ between the two paths."""

    tensor: str
    index: tuple[int, ...]  # the first differing element
    expected: Any  # its value after load_weights
    got: Any  # its value after load_planned
    round: int = 0

    def __str__(self) -> str:
        return (
            f"{self.tensor}[{', '.join(map(str, self.index))}]: load_weights wrote "
            f"{self.expected!r}, the plan {self.got!r} (update {self.round})"
        )


@dataclass
class VerifyResult:
    """``bool(result)`` is ``result.ok``."""

    ok: bool
    mismatches: list[Mismatch] = field(default_factory=list)
    plan: LoadPlan | None = None
    tensors: int = 0  # compared per update
    rounds: int = 0

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        if self.ok:
            return f"verified: {self.tensors} tensors equal byte for byte after {self.rounds} updates"
        lines = [f"{len(self.mismatches)} tensors differ:"]
        lines += [f"  {m}" for m in self.mismatches]
        return "\n".join(lines)


def random_weights(
    metadata: Iterable[ParamMeta], seed: int = 0
) -> list[tuple[str, torch.Tensor]]:
    """Random bytes of each declared dtype and shape, the same for the same
    seed (bool gets 0 or 1: other bytes are not bools)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for meta in metadata:
        numel = 1
        for n in meta.shape:
            numel *= n
        raw = torch.randint(0, 256, (numel * meta.dtype.itemsize,), dtype=torch.uint8, generator=gen)
        if meta.dtype == torch.bool:
            t = (raw & 1).bool()
        else:
            t = raw.view(meta.dtype)
        out.append((meta.name, t.reshape(meta.shape)))
    return out


def model_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of ``model`` that holds data, by name."""
    out: dict[str, torch.Tensor] = {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t is not None and not t.is_meta:
            out.setdefault(name, t)
    return out


def copy_bytes(source: torch.nn.Module, dest: torch.nn.Module) -> None:
    """Makes every storage of ``dest``'s tensors hold ``source``'s bytes, so
    that bytes no loader writes compare equal."""
    ours = model_tensors(dest)
    done: set[int] = set()
    for name, t in model_tensors(source).items():
        d = ours.get(name)
        if d is None:
            continue
        key = d.untyped_storage()._cdata
        if key in done:
            continue
        done.add(key)
        src, dst = t.untyped_storage(), d.untyped_storage()
        if src.nbytes() == dst.nbytes():
            dst.copy_(src)
        else:
            with torch.no_grad():
                d.copy_(t)


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    flat = t.detach().reshape(-1).cpu()
    if flat.numel() == 0:
        return flat.view(torch.uint8) if flat.dtype != torch.bool else flat.to(torch.uint8)
    return flat.contiguous().view(torch.uint8)


def first_difference(name: str, a: torch.Tensor, b: torch.Tensor, rnd: int) -> Mismatch | None:
    """The first element where ``a`` and ``b`` differ byte-wise, or None."""
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return Mismatch(name, (), (a.dtype, tuple(a.shape)), (b.dtype, tuple(b.shape)), rnd)
    ba, bb = _as_bytes(a), _as_bytes(b)
    differ = (ba != bb).nonzero()
    if differ.numel() == 0:
        return None
    element = int(differ[0, 0]) // a.element_size()
    index = []
    rest = element
    for n in reversed(a.shape):
        index.append(rest % n)
        rest //= n
    index.reverse()
    flat_a, flat_b = a.detach().reshape(-1), b.detach().reshape(-1)
    return Mismatch(name, tuple(index), flat_a[element].item(), flat_b[element].item(), rnd)


def _model(made: Any) -> torch.nn.Module:
    """A factory may return the model or (model, metadata)."""
    return made[0] if isinstance(made, tuple) else made


def verify(
    model_factory: Callable[[], Any],
    metadata: Iterable[ParamMeta],
    *,
    seed: int = 0,
    rounds: int = 2,
) -> VerifyResult:
    """Apply random weights to two fresh models from ``model_factory``, once
    through ``load_weights`` and once through ``plan_loads`` +
    ``load_planned``, and compare every byte of every parameter and buffer.

    ``rounds`` updates with different weights (seeds ``seed``,
    ``seed + 1``, ...) go through the same plan. The result names each
    tensor that differs with its first differing element.
    """
    metas = list(declare(metadata).values())
    reference = _model(model_factory())
    planned = _model(model_factory())
    copy_bytes(reference, planned)
    plan = plan_loads(planned, metas)

    result = VerifyResult(ok=True, plan=plan, rounds=rounds)
    for rnd in range(rounds):
        weights = random_weights(metas, seed + rnd)
        with torch.no_grad():
            reference.load_weights([(n, t.clone()) for n, t in weights])
        load_planned(planned, plan, [(n, t.clone()) for n, t in weights])
        ours = model_tensors(planned)
        theirs = model_tensors(reference)
        result.tensors = len(theirs)
        for name, t in theirs.items():
            other = ours.get(name)
            if other is None:
                result.mismatches.append(Mismatch(name, (), "present", "missing", rnd))
                continue
            mismatch = first_difference(name, t, other, rnd)
            if mismatch is not None:
                result.mismatches.append(mismatch)
        if result.mismatches:
            result.ok = False
            break
    return result
