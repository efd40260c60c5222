"""The load plan's data model: ``ParamMeta``, ``Entry``, ``Write`` and
``LoadPlan``.

A ``LoadPlan`` is the binary plan file, held by the runtime
(``loadplan._native.Plan``), bound to one model's live tensors. Its entries
are decoded from the runtime's plan when they are first asked for, so a
plan of tens of thousands of names costs nothing in Python until it is read;
``plan_loads`` (planning.py) and ``LoadPlan.load`` build it the same way,
from the plan's bytes. ``LoadPlan.json`` is the compiler's JSON of the plan,
for people and tests, made on first use.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from math import prod
from pathlib import Path

import torch

from . import _ir, _runtime, checks
from .capture import Capture, Target, Targets

logger = logging.getLogger("loadplan")

Box = tuple[tuple[int, int], ...]
"""One ``[start, stop)`` per dim of the checkpoint tensor."""


@dataclass(frozen=True)
class ParamMeta:
    """A checkpoint tensor as the trainer sends it."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"load plan: a name must be a str, got {self.name!r}")
        shape = tuple(int(n) for n in self.shape)
        if any(n < 0 for n in shape):
            raise ValueError(f"load plan: {self.name!r} has a negative size {shape}")
        if not isinstance(self.dtype, torch.dtype):
            raise TypeError(f"load plan: {self.name!r} has no torch dtype: {self.dtype!r}")
        object.__setattr__(self, "shape", shape)


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


@dataclass(frozen=True)
class Write:
    """A box of the checkpoint tensor copied into a region of a target:
    ``as_strided`` arguments relative to the target's first byte, in
    elements of the dtype written: the checkpoint's, or ``convert_to`` for
    a write that converts each element (with torch's rounding) as it
    copies."""

    target: str  # module.tensor of the parameter or buffer
    box: Box
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    convert_to: torch.dtype | None = None
    # A transform's name ("marlin_w4"): the box's atoms are written as the
    # engine's kernel lays them out, the region splitting the transform's
    # output shape instead of the box's.
    transform: str | None = None


@dataclass(frozen=True)
class Entry:
    """What the plan says of one checkpoint name."""

    name: str
    kind: str  # one of _runtime.KINDS: 'direct', 'fallback' or 'unneeded'
    dtype: torch.dtype
    shape: tuple[int, ...]
    reason: str | None
    # The parts this rank needs: the boxes of a direct name, the whole tensor
    # for a fallback, None when nothing is needed.
    boxes: tuple[Box, ...] | None
    # Where a direct name's boxes go; None for a fallback.
    writes: tuple[Write, ...] | None

    @property
    def nbytes(self) -> int:
        """What an engine moves for this name on this rank."""
        item = self.dtype.itemsize
        if self.kind == "fallback":
            return prod(self.shape) * item
        return sum(prod(b - a for a, b in box) for box in self.boxes or ()) * item


class PlanError(RuntimeError):
    """The captured loader does not compile into a plan (a lonely fallback,
    a name declared twice in the IR, ...); the message is the compiler's,
    ``diagnostics`` its errors one by one."""

    def __init__(self, message: str, diagnostics: list[str] | None = None):
        super().__init__(message)
        self.diagnostics = diagnostics or []


@dataclass(frozen=True)
class Dest:
    """One write of a direct name, as torch sees it: the box, the live
    region it goes to (a view in the dtype written: the checkpoint's, or
    the one a converting write converts into, which ``view.copy_(box)``
    does with torch's rounding) and how to cut the box out of the full
    tensor."""

    box: Box
    view: torch.Tensor  # live, in the dtype written
    index: tuple[slice, ...]  # the box as an index of the full tensor
    whole: bool  # the box is the whole tensor
    split: bool  # the region splits some of the box's dims
    # The write's transform ("marlin_w4"), or None: ``transformed`` gives
    # what the region receives.
    transform: str | None = None

    def transformed(self, part: torch.Tensor) -> torch.Tensor:
        """What the region receives of the box ``part``: itself, or its
        transform's output (shaped as the region)."""
        if self.transform is None:
            return part.view(self.view.shape) if self.split else part
        if self.transform != "marlin_w4":
            raise ValueError(f"unknown transform {self.transform!r}")
        from .vllm.kernel_refs import marlin_w4_transform
        return marlin_w4_transform(part).reshape(self.view.shape)


@dataclass(frozen=True)
class TargetLayout:
    """A target as the plan saw it, to refuse a model whose tensors were
    replaced or moved since."""

    name: str
    owner: torch.nn.Module
    attr: str
    tensor: torch.Tensor
    data_ptr: int
    storage_offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]

    @staticmethod
    def of(target: Target) -> TargetLayout:
        t = target.real
        return TargetLayout(
            target.qualified_name, target.owner, target.tensor, t,
            t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape),
            tuple(t.stride()),
        )

    def holds(self) -> bool:
        """Whether the model still has this tensor, where it was: the
        binding holds its address. (Which field of a layout differs is the
        runtime's to say, ``LoadPlan.check_layout``.)"""
        owner = self.owner
        t = owner._parameters.get(self.attr)
        if t is None:
            t = owner._buffers.get(self.attr)
        return (
            t is self.tensor
            and t.untyped_storage().data_ptr() == self.data_ptr
            and t.storage_offset() == self.storage_offset
            and t.shape == self.shape
            and t.stride() == self.stride
        )


def _box(raw) -> Box:
    return tuple((int(a), int(b)) for a, b in raw)


class Entries(Mapping[str, Entry]):
    """A plan's entries by checkpoint name, in arrival order, each decoded
    from the runtime's plan the first time it is asked for."""

    def __init__(self, native: _runtime.Plan, target_names: list[str]):
        self._native = native
        self._target_names = target_names
        self._cache: dict[str, Entry] = {}
        self._names: list[str] | None = None
        self._count = native.summary()["names"]

    def raw(self, name: str) -> dict | None:
        """The runtime's decoding of ``name``'s entry (target indices, region
        dicts), or None when the plan has no such name."""
        if not isinstance(name, str):
            return None
        try:
            index = self._native.find_entry(name)
        except _runtime.StatusError:
            return None
        return self._native.entry(index)

    def __getitem__(self, name: str) -> Entry:
        entry = self._cache.get(name)
        if entry is None:
            raw = self.raw(name)
            if raw is None:
                raise KeyError(name)
            entry = self._cache[name] = self._decode(raw)
        return entry

    def _decode(self, e: dict) -> Entry:
        kind = e["kind"]
        writes = None
        if kind != "fallback":
            writes = tuple(
                Write(self._target_names[w["target"]], _box(w["box"]), w["region"]["offset"],
                      tuple(w["region"]["shape"]), tuple(w["region"]["stride"]),
                      _runtime.dtype_of(w["convert_to"]) if "convert_to" in w else None,
                      w.get("transform"))
                for w in e["writes"]
            )
        return Entry(
            name=e["name"], kind=kind, dtype=_runtime.dtype_of(e["dtype"]),
            shape=tuple(e["shape"]), reason=e["reason"],
            boxes=tuple(_box(b) for b in e["boxes"]) or None, writes=writes,
        )

    def __contains__(self, name: object) -> bool:
        if name in self._cache:
            return True
        if not isinstance(name, str):
            return False
        try:
            self._native.find_entry(name)
        except _runtime.StatusError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        if self._names is None:
            self._names = self._native.names()
        return iter(self._names)

    def __len__(self) -> int:
        return self._count


@dataclass(eq=False)
class RuntimeState:
    """A plan's runtime side, made on first use: its binding to the live
    targets. ``unusable`` says why there is none (targets on several
    devices, CUDA not built in): then ``load_planned`` checks batches with
    ``check`` and copies with torch instead."""

    binding: _runtime.Binding | None = None
    unusable: str | None = None
    # Where there is no binding: the update batches' check.
    check: _runtime.UpdateCheck | None = None


class LoadPlan:
    """Where each declared checkpoint tensor lands on this rank.

    ``entries``: per declared name, in arrival order; ``report``: the
    compiler's report (fallbacks grouped by reason, then counts);
    ``fingerprint``: of the live layout the plan was made for;
    ``plan_bytes``: the binary plan file; ``ir``: the captured IR (empty
    for a loaded plan), made from ``capture`` when first asked for;
    ``dumped``: the files ``plan_loads(dump_ir=...)`` wrote.
    """

    def __init__(self, native: _runtime.Plan, plan_bytes: bytes, targets: list[Target],
                 model: torch.nn.Module, *, report: str, capture: Capture | None = None,
                 dumped: dict[str, Path] | None = None):
        self.native = native
        self.plan_bytes = plan_bytes
        self.report = report
        self.capture = capture
        self.dumped = dumped or {}
        summary = native.summary()
        self.fingerprint = f"{summary['fingerprint']:016x}"
        self.summary = summary
        match_targets(native, targets)
        self.targets = targets
        self.entries: Entries = Entries(native, [t.qualified_name for t in targets])
        # Every target of the plan, in plan order: what the runtime binds.
        self.target_tensors: tuple[torch.Tensor, ...] = tuple(t.real for t in targets)
        self.layouts = tuple(TargetLayout.of(targets[i]) for i in native.written_targets())
        self._model: Callable[[], torch.nn.Module | None] = weakref.ref(model)
        self.runtime = RuntimeState()
        self._dests: dict[str, tuple[Dest, ...]] = {}
        self._json: str | None = None

    @property
    def ir(self) -> str:
        return self.capture.ir if self.capture is not None else ""

    @property
    def model(self) -> torch.nn.Module | None:
        """The model the plan was made for (None once it is gone)."""
        return self._model()

    @property
    def json(self) -> str:
        """The plan as JSON (see docs/python.md), made on first use."""
        if self._json is None:
            self._json = self.native.json()
        return self._json

    def get_boxes(self, name: str) -> tuple[Box, ...] | None:
        """Parts of the checkpoint tensor this rank needs; ``None``: nothing.

        For engines that send or read only those slices; an engine that
        receives full tensors calls ``load_planned`` instead."""
        return self.entries[name].boxes

    def get_dest(self, name: str) -> list[tuple[Box, torch.Tensor]] | None:
        """(box, live tensor) pairs: copying each box of the checkpoint
        tensor, reshaped to its tensor's shape, into that tensor is exactly
        what the loader would have written (``copy_`` converts where the
        live tensor has another dtype, with the rounding the loader's
        own cast has). ``None``: a fallback, send the full tensor through
        ``load_weights``. Write only; never read."""
        if self.entries[name].kind == "fallback":
            return None
        return [(d.box, d.view) for d in self.dests(name)]

    def dests(self, name: str) -> tuple[Dest, ...]:
        """The writes of direct ``name`` as views of the live targets."""
        dests = self._dests.get(name)
        if dests is None:
            raw = self.entries.raw(name)
            dests = () if raw is None or raw["kind"] != "direct" else self._make_dests(raw)
            self._dests[name] = dests
        return dests

    def _make_dests(self, raw: dict) -> tuple[Dest, ...]:
        shape = tuple(raw["shape"])
        parts = []
        for w in raw["writes"]:
            dtype = _runtime.dtype_of(w.get("convert_to", raw["dtype"]))
            target = self.targets[w["target"]]
            box = _box(w["box"])
            region = w["region"]
            view = _storage_view(
                target.real, target.byte_offset // dtype.itemsize + region["offset"],
                tuple(region["shape"]), tuple(region["stride"]), dtype,
            )
            parts.append(Dest(
                box, view, tuple(slice(a, b) for a, b in box),
                all(a == 0 and b == n for (a, b), n in zip(box, shape)),
                tuple(region["shape"]) != tuple(b - a for a, b in box),
                w.get("transform"),
            ))
        return tuple(parts)

    def save(self, path: str | os.PathLike) -> None:
        """Writes the binary plan file (``LoadPlan.load`` reads it back)."""
        Path(path).write_bytes(self.plan_bytes)

    @classmethod
    def load(
        cls, path: str | os.PathLike, model: torch.nn.Module, *, num_threads: int | None = None
    ) -> LoadPlan:
        """Reads a plan file written by ``save`` (or ``loadplan plan
        --plan``) and binds it to ``model``'s tensors, without tracing the
        loader again. ``num_threads``: as ``bind``.

        The plan must have been made for a model with this layout: the same
        parameters and buffers, with the same dtypes, shapes, strides and
        byte offsets in their storages. The layout says nothing of which
        rank a model is, so a plan of another rank with the same shapes is
        not refused: keep one file per rank. Constant writes the loader
        made while planning (``fill_``/``zero_`` of padding) are not in the
        file: ``model`` should have been loaded once by its own loader, as
        an engine's model is at start-up.

        Raises:
            InvalidPlan (a ValueError): the file is not a valid plan.
            FingerprintMismatch (a RuntimeError): ``model``'s layout is not
                the plan's; the message names the first target and field
                that differ.
            StatusError: the file cannot be read.
        """
        checks.check_plannable(model)
        native = _runtime.open_plan(path)
        targets = _live_targets(native, model)
        plan = cls(native, Path(path).read_bytes(), targets, model,
                   report=native.report(f"loaded from {os.fspath(path)}"))
        log_report(plan)
        plan.bind(num_threads=num_threads)
        return plan

    def bind(self, *, num_threads: int | None = None) -> _runtime.Binding | None:
        """Binds the runtime to the model's tensors now (``load_planned``
        does it on first use), replacing any earlier binding.
        ``num_threads``: CPU executor threads (None: all hardware threads).
        Returns the binding, or None where the runtime cannot apply this
        plan (targets on several devices; CUDA targets with a runtime built
        without CUDA) and ``load_planned`` copies with torch: the warning
        logged says why.

        Raises:
            RuntimeError: the model's tensors are not the ones the plan was
                made for.
        """
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"load plan: num_threads must be at least 1, got {num_threads}")
        model = self.model
        if model is not None:
            self.check_layout(model)
        state = self.runtime
        if state.binding is not None:
            state.binding.close()
            state.binding = None
        state.unusable = None
        try:
            _runtime.device_of(self.target_tensors)
            state.binding = _runtime.Binding(self.native, self.target_tensors,
                                             num_threads=num_threads)
        except ValueError as e:  # several devices, or one with no executor
            state.unusable = str(e)
        except _runtime.StatusError as e:
            if e.code != _runtime.status_code("unavailable"):
                raise
            state.unusable = str(e)
        if state.unusable:
            logger.warning("load plan: copying with torch: %s", state.unusable)
        return state.binding

    def check_layout(self, model: torch.nn.Module) -> None:
        """Refuse a model that is not the plan's, or whose written tensors
        were replaced or moved since planning (the binding holds their
        addresses). Which field of a layout differs, the runtime says
        (``loadplan_plan_check_layout``); a tensor that is another one with
        the plan's layout is refused here.

        Raises:
            RuntimeError: the plan was made for another model, or a tensor
                is not where it was (``FingerprintMismatch`` naming the
                first target and field that differ, where one does).
        """
        if self.model is not model:
            raise RuntimeError("load plan: the plan was made for another model")
        for layout in self.layouts:
            if not layout.holds():
                _live_targets(self.native, model)
                raise RuntimeError(
                    f"load plan: {layout.name} is not the tensor the plan was made for "
                    "(it was replaced or moved); plan again"
                )

    def check_checkpoint(self, metadata: Iterable[ParamMeta], what: str = "the plan") -> None:
        """Refuse a checkpoint other than the plan's (names, dtypes,
        shapes; the order may differ); ``what`` names the plan in the
        message.

        Raises:
            ValueError: naming the first name that differs, or the counts.
        """
        metas = declare(metadata)
        for m in metas.values():
            e = self.entries.get(m.name)
            if e is None or e.dtype != m.dtype or e.shape != m.shape:
                got = "no such name" if e is None else f"{e.dtype} {list(e.shape)}"
                raise ValueError(
                    f"load plan: {what} was made for another checkpoint: {m.name!r} is "
                    f"{m.dtype} {list(m.shape)} in the metadata but the plan has {got}"
                )
        if len(self.entries) != len(metas):
            extra = [n for n in self.entries if n not in metas][:3]
            raise ValueError(
                f"load plan: {what} was made for another checkpoint: the plan has "
                f"{len(self.entries)} names, the metadata {len(metas)} (e.g. {extra})"
            )

    @property
    def binding(self) -> _runtime.Binding | None:
        """The runtime binding ``load_planned`` applies through (None
        before the first update or ``bind``, or where it copies with
        torch)."""
        return self.runtime.binding


def _storage_view(
    target: torch.Tensor, offset: int, shape: tuple[int, ...], stride: tuple[int, ...],
    dtype: torch.dtype,
) -> torch.Tensor:
    """``as_strided`` of ``target``'s storage in ``dtype``; ``offset`` in
    ``dtype`` elements from the storage's start."""
    storage = target.untyped_storage()
    view = torch.empty((0,), dtype=dtype, device=target.device)
    view.set_(storage, offset, shape, stride)
    return view


def match_targets(native: _runtime.Plan, targets: list[Target]) -> None:
    """Refuse targets (a model's parameters and buffers, or a capture's)
    that are not the plan's, naming the first that differs.

    Raises:
        FingerprintMismatch: the message names the target.
    """
    planned = []
    for i in range(native.summary()["targets"]):
        t = native.target(i)
        planned.append(f"{t['module']}.{t['tensor']}" if t["module"] else t["tensor"])
    live = [t.qualified_name for t in targets]
    for i, (p, m) in enumerate(zip(planned, live)):
        if p != m:
            raise _runtime.fingerprint_mismatch(
                f"target {i} of the plan is {p!r} but the model's is {m!r}"
            )
    if len(planned) != len(live):
        extra = planned[len(live)] if len(planned) > len(live) else live[len(planned)]
        where = "the model lacks" if len(planned) > len(live) else "the plan lacks"
        raise _runtime.fingerprint_mismatch(
            f"the plan has {len(planned)} targets but the model {len(live)}: "
            f"{where} {extra!r}"
        )


def _live_targets(native: _runtime.Plan, model: torch.nn.Module) -> list[Target]:
    """``model``'s targets now, refused unless they are the plan's, with
    the plan's layout.

    Raises:
        FingerprintMismatch: naming the first target (and field) that
            differs.
    """
    targets = Targets(model).targets
    match_targets(native, targets)
    native.check_layout([_runtime.layout(t.real) for t in targets])
    return targets


def log_report(plan: LoadPlan) -> None:
    """Every name at debug; the compiler's report (fallbacks grouped by
    reason, then a summary) at info."""
    if logger.isEnabledFor(logging.DEBUG):
        for e in plan.entries.values():
            suffix = f": {e.reason}" if e.reason else ""
            logger.debug("load plan: %s %s (%d bytes)%s", e.kind, e.name, e.nbytes, suffix)
    for line in plan.report.splitlines():
        logger.info("%s", line)
