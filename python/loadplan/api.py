"""The load plan API: plan a model's loads once, then apply every update.

``plan_loads`` captures ``model.load_weights`` over data-free traces
(capture.py), compiles the IR in process (``loadplan._native``, the same
pipeline as ``loadplan-opt --loadplan-pipeline``) and returns a
:class:`LoadPlan`: for each declared checkpoint name, its kind
(``direct``/``fallback``/``unneeded``), the boxes of it this rank needs, and
the live tensors those boxes go to. ``load_planned`` then loads full
checkpoint tensors through the runtime (one call per update batch, see
_runtime.py), and hands only the fallbacks to ``model.load_weights``.
``LoadPlan.save`` / ``LoadPlan.load`` keep a plan in a file and bind it to a
model again, refusing one whose layout differs.
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

from . import _ir, _native, _runtime
from .capture import Target, Targets, capture

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


@dataclass(eq=False)
class _RuntimeState:
    """A plan's runtime side, made on first use: the plan as the runtime
    holds it and its binding to the live targets. ``unusable`` says why
    there is none (targets on several devices, CUDA not built in): then
    ``load_planned`` copies with torch instead."""

    plan: _runtime.Plan | None = None
    binding: _runtime.Binding | None = None
    unusable: str | None = None


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
    # Every target of the plan, in plan order: what the runtime binds.
    _targets: tuple[torch.Tensor, ...] = field(default=(), repr=False)
    _runtime: _RuntimeState = field(default_factory=_RuntimeState, repr=False)

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
        check_plannable(model)
        rt_plan = _runtime.open_plan(path)
        targets = Targets(model).targets
        raw = _raw_plan(rt_plan)
        _match_targets(raw["targets"], targets)
        rt_plan.check_layout([_runtime.layout(t.real) for t in targets])
        metas = {
            name: ParamMeta(name, tuple(e["shape"]), _ir.dtype_from_plan(e["dtype"]))
            for name, e in raw["entries"].items()
        }
        plan = _build_plan(
            raw, metas, targets, report=_report(raw, f"loaded from {os.fspath(path)}"),
            plan_bytes=Path(path).read_bytes(), ir="", _model=weakref.ref(model),
        )
        plan._runtime.plan = rt_plan
        _log_report(plan)
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
        model = self._model()
        if model is not None:
            _check_layout(model, self)
        state = self._runtime
        if state.binding is not None:
            state.binding.close()
            state.binding = None
        if state.plan is None:
            state.plan = _runtime.open_plan(self.plan_bytes)
        state.unusable = None
        try:
            _runtime.device_of(self._targets)
            state.binding = _runtime.Binding(state.plan, self._targets, num_threads=num_threads)
        except ValueError as e:  # several devices, or one with no executor
            state.unusable = str(e)
        except _runtime.StatusError as e:
            if e.code != _runtime.UNAVAILABLE:
                raise
            state.unusable = str(e)
        if state.unusable:
            logger.warning("load plan: copying with torch: %s", state.unusable)
        return state.binding

    @property
    def binding(self) -> _runtime.Binding | None:
        """The runtime binding ``load_planned`` applies through (None
        before the first update or ``bind``, or where it copies with
        torch)."""
        return self._runtime.binding


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
        _targets=tuple(t.real for t in targets),
        **fields,
    )


def _raw_plan(rt_plan: _runtime.Plan) -> dict:
    """The plan the runtime read, in the compiler's JSON form."""
    summary = rt_plan.summary()

    def dtype_name(code: int) -> str:
        return str(_runtime.dtype_of(code)).removeprefix("torch.")

    targets = []
    for i in range(summary["targets"]):
        t = rt_plan.target(i)
        targets.append({**t, "dtype": dtype_name(t["dtype"])})
    entries = {}
    for i in range(summary["names"]):
        e = rt_plan.entry(i)
        entries[e.pop("name")] = {
            "kind": e["kind"], "dtype": dtype_name(e["dtype"]), "shape": e["shape"],
            "reason": e["reason"],
            "boxes": [[list(d) for d in b] for b in e["boxes"]],
            "writes": [
                {**w, "box": [list(d) for d in w["box"]]} for w in e["writes"]
            ],
        }
    return {
        "version": 1,
        "fingerprint": f"{summary['fingerprint']:016x}",
        "targets": targets,
        "entries": entries,
        "stats": {
            "names": summary["names"], "direct": summary["direct"],
            "fallback": summary["fallback"], "unneeded": summary["unneeded"],
            "direct_bytes": summary["direct_bytes"],
            "fallback_bytes": summary["fallback_bytes"],
            "writes": summary["writes"], "targets": summary["targets"],
        },
    }


def _match_targets(raw_targets: list[dict], targets: list[Target]) -> None:
    """Refuse a model whose parameters and buffers are not the plan's
    targets, naming the first that differs."""
    planned = [f"{t['module']}.{t['tensor']}" if t["module"] else t["tensor"] for t in raw_targets]
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


def _report(raw: dict, how: str) -> str:
    """The compiler's report of a plan, from its JSON."""
    lines = []
    by_reason: dict[str, list[str]] = {}
    for name, e in raw["entries"].items():
        if e["reason"]:
            by_reason.setdefault(e["reason"], []).append(name)
    for reason, names in by_reason.items():
        lines.append(f"load plan: {len(names)} fallback names, e.g. {names[:3]}: {reason}")
    st = raw["stats"]
    mib = 1 << 20
    lines.append(
        f"load plan: {st['names']} names: {st['direct']} direct "
        f"({st['direct_bytes'] / mib:.1f} MiB), {st['fallback']} fallback "
        f"({st['fallback_bytes'] / mib:.1f} MiB), {st['unneeded']} not needed on this "
        f"rank; {how}"
    )
    return "\n".join(lines) + "\n"


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


def _not_dense(t: torch.Tensor) -> str | None:
    """Why the bytes of ``t`` cannot be copied from, or None."""
    if t.is_meta:
        return "a meta tensor, which holds no data"
    if t.layout != torch.strided:
        return f"a {t.layout} tensor, not a dense (strided) one"
    return None


def _describe(item: object) -> str:
    """An item for an error message, without printing a tensor's values."""
    if isinstance(item, (str, int, float, type(None))):
        return repr(item)
    if isinstance(item, (list, tuple)):
        return f"a {type(item).__name__} of {len(item)} items"
    return f"a {type(item).__name__}"


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
    seen: set[str] = set()
    for item in batch:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise ValueError(
                f"load plan: expected (name, tensor) pairs, got {_describe(item)}")
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
        if problem := _not_dense(full):
            raise ValueError(f"load plan: {name!r} is {problem}")
    for name, _ in batch:
        if name in seen:
            raise ValueError(f"load plan: {name!r} is sent twice in one update")
        seen.add(name)
    _check_layout(model, plan)

    direct, fallbacks = [], []
    for name, full in batch:
        kind = plan.entries[name].kind
        if kind == "fallback":
            fallbacks.append((name, full))
        elif kind == "direct":
            direct.append((name, full))
    state = plan._runtime
    if state.binding is None and state.unusable is None:
        plan.bind()
    with torch.no_grad():
        if state.binding is not None:
            # One call for the whole batch; the runtime checks it all
            # before it writes a byte.
            state.binding.apply_tensors(direct)
        else:
            _copy_with_torch(plan, direct)
        if fallbacks:
            model.load_weights(fallbacks)


def _copy_with_torch(plan: LoadPlan, direct: list[tuple[str, torch.Tensor]]) -> None:
    """What the runtime does, one ``copy_`` per destination: for targets
    the runtime cannot bind (on several devices, say)."""
    for name, full in direct:
        for d in plan._dests.get(name, ()):
            part = full if d.whole else full[d.index]
            if d.split:
                # The region splits box dims; splitting a dim is always
                # a view, so this copies nothing.
                part = part.view(d.view.shape)
            d.view.copy_(part)
