"""The load plan API: plan a model's loads once, then apply every update.

``plan_loads`` captures ``model.load_weights`` over data-free traces
(capture.py), compiles the IR in process (``loadplan._native``, the same
pipeline as ``loadplan-opt --loadplan-pipeline``) and returns a
:class:`LoadPlan`: for each declared checkpoint name, its kind
(``direct``/``fallback``/``unneeded``), the boxes of it this rank needs, and
the live tensors those boxes go to. ``load_planned`` then loads full
checkpoint tensors with plain copies, and hands only the fallbacks to
``model.load_weights``.
"""

from __future__ import annotations

import json
import logging
import os
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any

import torch

from . import _ir, _native
from .capture import Target, capture

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


@dataclass(frozen=True)
class Write:
    """A box of the checkpoint tensor copied into a region of a target:
    ``as_strided`` arguments relative to the target's first byte, in
    checkpoint-dtype elements."""

    target: str  # module.tensor of the parameter or buffer
    box: Box
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


@dataclass(frozen=True)
class Entry:
    """What the plan says of one checkpoint name."""

    name: str
    kind: str  # 'direct' | 'fallback' | 'unneeded'
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


@dataclass(frozen=True)
class _Dest:
    box: Box
    view: torch.Tensor  # live, in the checkpoint dtype
    index: tuple[slice, ...]  # the box as an index of the full tensor
    whole: bool  # the box is the whole tensor
    split: bool  # the region splits some of the box's dims


@dataclass(frozen=True)
class _Layout:
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
    def of(target: Target) -> _Layout:
        t = target.real
        return _Layout(
            target.qualified_name, target.owner, target.tensor, t,
            t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape),
            tuple(t.stride()),
        )

    def holds(self) -> bool:
        """Whether the model still has this tensor, where it was."""
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


@dataclass(frozen=True, eq=False)
class LoadPlan:
    """Where each declared checkpoint tensor lands on this rank."""

    entries: dict[str, Entry]  # per declared name, in arrival order
    report: str
    fingerprint: str
    json: str  # the plan as JSON (see docs/python.md)
    plan_bytes: bytes  # the binary plan file, for the runtime
    ir: str  # the captured IR, for loadplan-opt
    dumped: dict[str, Path] = field(default_factory=dict)
    _dests: dict[str, tuple[_Dest, ...]] = field(default_factory=dict, repr=False)
    _layouts: tuple[_Layout, ...] = field(default=(), repr=False)
    _model: Callable[[], torch.nn.Module | None] = field(default=lambda: None, repr=False)

    def get_boxes(self, name: str) -> tuple[Box, ...] | None:
        """Parts of the checkpoint tensor this rank needs; ``None``: nothing.

        For engines that send or read only those slices; an engine that
        receives full tensors calls ``load_planned`` instead."""
        return self.entries[name].boxes

    def get_dest(self, name: str) -> list[tuple[Box, torch.Tensor]] | None:
        """(box, live tensor) pairs: copying each box of the checkpoint
        tensor, reshaped to its tensor's shape, into that tensor is exactly
        what the loader would have written. ``None``: a fallback, send the
        full tensor through ``load_weights``. Write only; never read."""
        if self.entries[name].kind == "fallback":
            return None
        return [(d.box, d.view) for d in self._dests.get(name, ())]


class PlanError(RuntimeError):
    """The captured loader does not compile into a plan (a lonely fallback,
    a name declared twice in the IR, ...); the message is the compiler's,
    ``diagnostics`` its errors one by one."""

    def __init__(self, message: str, diagnostics: list[str] | None = None):
        super().__init__(message)
        self.diagnostics = diagnostics or []


# ---------------------------------------------------------------------------


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


def _declare(metadata: Iterable[ParamMeta]) -> dict[str, ParamMeta]:
    metas: dict[str, ParamMeta] = {}
    for meta in metadata:
        if meta.name in metas:
            raise ValueError(f"load plan: {meta.name!r} is declared twice")
        if not _ir.has_element_type(meta.dtype):
            raise ValueError(f"load plan: {meta.name!r} has an unsupported dtype {meta.dtype}")
        metas[meta.name] = meta
    return metas


def _dump_paths(dump: str | os.PathLike) -> dict[str, Path]:
    """A path ending in .mlir names the captured IR file; the compiled IR and
    the JSON plan go beside it. Any other path is a folder that gets
    plan-<k>.captured.mlir etc., with the first unused k."""
    path = Path(dump)
    if path.suffix == ".mlir":
        stem = path.with_suffix("")
        path.parent.mkdir(parents=True, exist_ok=True)
        captured = path
    else:
        path.mkdir(parents=True, exist_ok=True)
        k = 0
        while (path / f"plan-{k}.captured.mlir").exists():
            k += 1
        stem = path / f"plan-{k}"
        captured = Path(f"{stem}.captured.mlir")
    return {
        "captured": captured,
        "compiled": Path(f"{stem}.compiled.mlir"),
        "json": Path(f"{stem}.plan.json"),
    }


def compile_ir(ir: str, source_name: str = "<captured>", print_ir: bool = False) -> dict:
    """Compiles captured IR in process; the dict has 'json', 'plan' (bytes),
    'report', 'ir' (when ``print_ir``) and 'remarks'.

    Raises:
        PlanError: the IR does not compile; the message is the compiler's.
    """
    try:
        return _native.compile(ir, source_name, print_ir)
    except _native.CompileError as e:
        raise PlanError(f"load plan: {e}", list(getattr(e, "diagnostics", []))) from None


def plan_loads(
    model: torch.nn.Module,
    metadata: Iterable[ParamMeta],
    *,
    dump_ir: str | os.PathLike | None = None,
) -> LoadPlan:
    """Trace ``model.load_weights`` over the declared checkpoint tensors once
    and return where each lands on this rank.

    Incoming tensors are data-free traces, so nothing is loaded; constant
    writes (``fill_``, ``zero_``) happen, and module state a loader sets
    stays, as after ``load_weights``. ``dump_ir`` (or the environment
    variable ``LOADPLAN_DUMP_IR``) writes the captured IR, the compiled IR
    and the JSON plan there, to rerun with ``loadplan-opt``.

    Raises:
        ValueError: a name is declared twice, or has a dtype no plan holds.
        RuntimeError: the model cannot be planned (``PlanError`` when the
            compiler refuses it).
    """
    check_plannable(model)
    metas = _declare(metadata)
    t0 = time.perf_counter()
    captured = capture(model, metas)
    traced = time.perf_counter() - t0

    dump = dump_ir if dump_ir is not None else os.environ.get("LOADPLAN_DUMP_IR") or None
    paths = _dump_paths(dump) if dump else {}
    if paths:
        paths["captured"].write_text(captured.ir)
        logger.info("load plan: captured IR in %s", paths["captured"])
    source = str(paths["captured"]) if paths else "<captured>"
    out = compile_ir(captured.ir, source, print_ir=bool(paths))
    if paths:
        paths["compiled"].write_text(out["ir"])
        paths["json"].write_text(out["json"])
        logger.info(
            "load plan: compiled IR in %s, plan in %s", paths["compiled"], paths["json"]
        )
    for remark in out["remarks"]:
        logger.debug("load plan: %s", remark)

    report = out["report"].rstrip("\n") + f"; traced in {traced:.2f} s\n"
    plan = _build_plan(
        json.loads(out["json"]), metas, captured.targets.targets,
        report=report, plan_bytes=out["plan"], ir=captured.ir, dumped=paths,
        _model=weakref.ref(model),
    )
    _log_report(plan)
    return plan


def _box(raw: list) -> Box:
    return tuple((int(a), int(b)) for a, b in raw)


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


def _build_plan(
    raw: dict, metas: dict[str, ParamMeta], targets: list[Target], **fields: Any
) -> LoadPlan:
    raw_targets = raw["targets"]
    if len(raw_targets) != len(targets):
        raise RuntimeError("load plan: the compiled plan names other targets than captured")
    for t, r in zip(targets, raw_targets):
        if (t.module, t.tensor) != (r["module"], r["tensor"]):
            raise RuntimeError("load plan: the compiled plan names other targets than captured")

    entries: dict[str, Entry] = {}
    dests: dict[str, tuple[_Dest, ...]] = {}
    used: set[int] = set()
    for name, meta in metas.items():
        e = raw["entries"][name]
        kind = e["kind"]
        boxes = tuple(_box(b) for b in e["boxes"]) or None
        writes = None
        if kind != "fallback":
            writes = []
            parts = []
            for w in e["writes"]:
                target = targets[w["target"]]
                box = _box(w["box"])
                region = w["region"]
                shape = tuple(region["shape"])
                stride = tuple(region["stride"])
                writes.append(Write(target.qualified_name, box, region["offset"], shape, stride))
                base = target.byte_offset // meta.dtype.itemsize
                view = _storage_view(
                    target.real, base + region["offset"], shape, stride, meta.dtype
                )
                index = tuple(slice(a, b) for a, b in box)
                whole = all(a == 0 and b == n for (a, b), n in zip(box, meta.shape))
                split = shape != tuple(b - a for a, b in box)
                parts.append(_Dest(box, view, index, whole, split))
                used.add(w["target"])
            writes = tuple(writes)
            dests[name] = tuple(parts)
        entries[name] = Entry(
            name=name,
            kind=kind,
            dtype=meta.dtype,
            shape=meta.shape,
            reason=e["reason"],
            boxes=boxes,
            writes=writes,
        )
    layouts = tuple(_Layout.of(targets[i]) for i in sorted(used))
    return LoadPlan(
        entries=entries,
        fingerprint=raw["fingerprint"],
        json=json.dumps(raw, indent=2),
        _dests=dests,
        _layouts=layouts,
        **fields,
    )


def _log_report(plan: LoadPlan) -> None:
    """Every name at debug; the compiler's report (fallbacks grouped by
    reason, then a summary) at info."""
    if logger.isEnabledFor(logging.DEBUG):
        for e in plan.entries.values():
            suffix = f": {e.reason}" if e.reason else ""
            logger.debug("load plan: %s %s (%d bytes)%s", e.kind, e.name, e.nbytes, suffix)
    for line in plan.report.splitlines():
        logger.info("%s", line)


# ---------------------------------------------------------------------------


def _check_layout(model: torch.nn.Module, plan: LoadPlan) -> None:
    if plan._model() is not model:
        raise RuntimeError("load plan: the plan was made for another model")
    for layout in plan._layouts:
        if not layout.holds():
            raise RuntimeError(
                f"load plan: {layout.name} is not the tensor the plan was made for "
                "(it was replaced or moved); plan again"
            )


def load_planned(
    model: torch.nn.Module,
    plan: LoadPlan,
    weights: Iterable[tuple[str, torch.Tensor]],
) -> None:
    """Load full checkpoint tensors as ``plan`` says: copy each direct name's
    boxes into its destinations, skip names this rank needs nothing of, and
    pass fallbacks to ``model.load_weights`` in arrival order.

    The whole batch is checked first (names in the plan, shapes and dtypes
    as declared, the model's tensors where the plan saw them): nothing is
    written unless all of it is valid.

    Raises:
        ValueError: a name is not in the plan, or a tensor does not match
            its declaration.
        RuntimeError: the model's tensors are not the ones the plan was
            made for.
    """
    batch = list(weights)
    for item in batch:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise ValueError(f"load plan: expected (name, tensor) pairs, got {item!r}")
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
    _check_layout(model, plan)

    fallbacks = []
    with torch.no_grad():
        for name, full in batch:
            if plan.entries[name].kind == "fallback":
                fallbacks.append((name, full))
                continue
            for d in plan._dests.get(name, ()):
                part = full if d.whole else full[d.index]
                if d.split:
                    # The region splits box dims; splitting a dim is always
                    # a view, so this copies nothing.
                    part = part.view(d.view.shape)
                d.view.copy_(part)
        if fallbacks:
            model.load_weights(fallbacks)
