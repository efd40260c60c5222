"""Capture: run ``model.load_weights`` once over data-free traces, on the
model's real tensors, and record what it did as loadplan IR.

Each declared checkpoint name arrives as a :class:`TraceTensor`: a wrapper
tensor on the meta device, with the declared shape and dtype and no data.
Every op the loader applies to a trace is recorded in that name's
``loadplan.checkpoint`` block:

- torch view ops become what the aten view table says
  (include/loadplan/Records/AtenViews.h, which the torch.export importer
  follows too): the matching ``loadplan`` view op (``slice``, ``select``,
  ``view``, ``transpose``, ...), split/chunk/unbind one slice/select per
  output, and diagonal, unfold or any other same-dtype view an
  ``as_strided`` with the layout torch computed;
- ``clone``/``contiguous()``/same-dtype ``_to_copy`` become ``clone``, a
  dtype change ``convert``;
- ``dest.copy_(trace)`` into a parameter or buffer (a *target*) becomes
  ``loadplan.copy``, with the destination's layout relative to the target's
  first byte; into any other tensor ``write_other``;
- every other op runs on meta copies of its arguments, so no real tensor is
  written, and becomes ``apply`` (or ``inplace_write`` when it writes a real
  tensor); one that fails on meta becomes ``meta_failure`` and stops the
  loader;
- ``.item()``, ``tolist()`` and the like become ``value_read`` and stop the
  loader.

A stopped name falls back: ``load_weights`` is called again with the names
after it (per-name fault isolation). Ops on real tensors alone run for real
under :class:`_TargetGuard`: constant writes into targets (``fill_``,
``zero_``) happen and are recorded as ``constant_write``; a real op that
reads a target is recorded as ``read_target``.

Every op, and the storages and targets, are records (int tuples); the
compiler builds the module of them (``loadplan._native``), and the IR text
is what MLIR's printer prints of it (``Capture.ir``, for
``loadplan-opt --loadplan-pipeline``). The compiler decides what is direct
and why the rest falls back.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .ops import CONSTANT_WRITES, METADATA_OPS, leaves
from .targets import Target, Targets, storage_key
from .trace import (
    ELEMENT_SIZE_REASON,
    REDIRECT_REASON,
    Fill,
    Redirect,
    Sink,
    Stopped,
    TraceTensor,
    TraceUsedAfterPlanning,
)

__all__ = [
    "Capture",
    "ELEMENT_SIZE_REASON",
    "Fill",
    "REDIRECT_REASON",
    "Redirect",
    "Target",
    "Targets",
    "TraceTensor",
    "TraceUsedAfterPlanning",
    "capture",
    "storage_key",
]



class _TargetGuard(TorchDispatchMode):
    """Ops on real tensors alone run for real. One that reads a target (not
    a view, not only metadata) is recorded as ``read_target`` in the block of
    the name being loaded; ``fill_``/``zero_`` (and ``copy_`` of a real
    tensor) into a target as ``constant_write``. Reads that bypass the
    dispatcher (``tolist()`` or ``numpy()`` of a CPU tensor) go unseen."""

    def __init__(self, sink: Sink):
        super().__init__()
        self.sink = sink

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # No torch.compile runs under a capture: keep __torch_dispatch__ a
        # plain method (torch wraps it in a dynamo guard per call otherwise).
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # `types` holds the tensor subclasses among the arguments: empty for
        # the loader's ops on real tensors alone, the common case.
        traces = [a for a in leaves(args, kwargs) if isinstance(a, TraceTensor)] if types else ()
        if traces:
            # What the traces' own __torch_dispatch__ would do, without
            # dispatching again to get there.
            return self.sink.dispatch(func, args, kwargs, traces)
        packet = func.overloadpacket
        if func.is_view or packet in METADATA_OPS:
            return func(*args, **kwargs)
        self.sink.check_reads(func, args, kwargs)
        out = func(*args, **kwargs)
        if packet in CONSTANT_WRITES and args:
            self.sink.constant_write(func, args[0])
        return out


def _tensor(model: torch.nn.Module, qualified: str) -> torch.Tensor:
    module, _, name = qualified.rpartition(".")
    return getattr(model.get_submodule(module), name)


def _own_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    """The parameters and buffers a module holds itself."""
    tensors = itertools.chain(module.named_parameters(recurse=False),
                              module.named_buffers(recurse=False))
    return [t for _, t in tensors if t is not None]


@contextlib.contextmanager
def paused_gc():
    """Python's cyclic collector off for the duration. A capture makes a
    few objects per op and keeps most of them (its records); at 50,000
    names the collector's full passes over them cost about a tenth of the
    capture, and freeing the few cycles can wait for its next pass."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Capture:
    """What one capture produced: its records, and the targets its symbols
    name (``@t<i>`` is ``targets.targets[i]``). ``ir`` is the IR text, made
    when first asked for; the compiler takes ``records()`` instead."""

    def __init__(self, sink: Sink, title: str):
        self._sink = sink
        self._title = title
        self._ir: str | None = None
        self.targets: Targets = sink.targets
        # For each module of ``fallback_modules``, the names whose loader
        # writes into its tensors, in arrival order.
        self.module_names: dict[str, list[str]] = {
            module: list(names) for module, names in sink.module_names.items()}
        # For each module whose tensors stood in for live ones (redirects),
        # the names whose loader wrote into them, in arrival order.
        self.redirect_names: dict[str, list[str]] = {
            module: list(names) for module, names in sink.redirect_names.items()}
        # The constants written into targets while planning, where the
        # loader filled a checkpoint tensor in place and copied it.
        self.fills: list[Fill] = list(sink.fills)

    @property
    def ir(self) -> str:
        if self._ir is None:
            self._ir = self._sink.ir(self._title)
        return self._ir

    def records(self) -> tuple[list, list, list, list]:
        """``(declarations, types, strings, checkpoints)`` as
        ``_native.compile_records`` takes them."""
        with paused_gc():
            return self._sink.records_for_compiler()


def _typed(dtype: torch.dtype, shape) -> str:
    return f"{str(dtype).removeprefix('torch.')} {list(shape)}"


def failure_text(error: BaseException, sink: Sink) -> str:
    """What a loader that raised while tracing was doing: the name it was
    loading with its declared dtype and shape, the line that raised, and
    the tensors that line had at hand."""
    record = sink.current
    what = "load_weights failed"
    if record is not None:
        what += f" on {record.name!r} (declared {_typed(record.dtype, record.shape)})"
    text = f"{what}: {type(error).__name__}"
    if str(error):
        text += f": {error}"
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return text
    frame = traceback.extract_tb(tb, limit=1)[0]
    path = "/".join(Path(frame.filename).parts[-4:])
    text += f", at {path}:{frame.lineno}"
    if frame.line:
        text += f" `{frame.line.strip()}`"
    tensors = [
        f"{k}: {_typed(v.dtype, v.shape)}" + (f" (the incoming {v._record.name!r})"
                              if isinstance(v, TraceTensor) else "")
        for k, v in tb.tb_frame.f_locals.items() if isinstance(v, torch.Tensor)
    ]
    if tensors:
        text += f" ({'; '.join(tensors[:6])})"
    return text


def check_claims(model: torch.nn.Module, claimed: list[str], sink: Sink) -> None:
    """Refuses a capture in which the loader reports loading a parameter or
    buffer that no name was written into: the names meant for it would be
    planned as not needed, and it would keep its old values."""
    if not claimed:
        return
    tensors = dict(model.named_parameters(remove_duplicate=False))
    tensors.update(model.named_buffers(remove_duplicate=False))
    unwritten = [n for n in dict.fromkeys(claimed)
                 if (t := tensors.get(n)) is not None and t.numel()
                 and storage_key(t) not in sink.written_keys]
    if not unwritten:
        return
    silent = [n for n in sink.metas if n not in sink.writers]

    def near(first: str) -> list[str]:
        shared = lambda n: len(os.path.commonprefix([n, first]))  # noqa: E731
        return sorted(silent, key=lambda n: -shared(n))[:4]

    first = unwritten[0]
    more = f" (and {len(unwritten) - 1} more, e.g. {unwritten[1:4]})" if len(unwritten) > 1 else ""
    raise RuntimeError(
        f"load plan: load_weights reports loading {first!r}{more}, but no declared name was "
        f"written into it while tracing; the names it wrote nothing of include "
        f"{near(first)}: a loader that writes nothing would leave them stale on every update")


def capture(model: torch.nn.Module, metadata: Mapping[str, Any] | Iterable[Any], *,
            fallback_modules: Mapping[str, str] | None = None,
            fallback_tensors: Mapping[str, str] | None = None,
            targets: Targets | None = None,
            redirects: Mapping[int, Redirect] | None = None) -> Capture:
    """Runs ``model.load_weights`` over one trace per declared name and
    returns the captured IR. ``metadata`` is ``ParamMeta``s in arrival order
    (or a mapping from name to them); ``plan_loads`` checks it first.
    ``fallback_modules``: qualified module name -> reason; a name whose
    loader copies into a parameter or buffer of one of those modules (its
    own, not its submodules') falls back with that reason.
    ``fallback_tensors``: the same for single tensors (qualified name ->
    reason); ``Capture.module_names`` lists their names under the tensor's
    qualified name.
    ``targets``: the model's targets, if made before (while tensors that
    ``redirects`` name, storage key -> ``Redirect``, were not yet in their
    place): copies into a redirected tensor become copies into the targets
    it remaps to.

    Where ``load_weights`` returns the names of the parameters it loaded
    (as vLLM's models do), each of them must have been written while
    tracing: a loader that reports loading a parameter it wrote nothing
    into would leave it stale on every update.

    Raises:
        RuntimeError: the loader failed (the message names the checkpoint
            name it was loading, its declared dtype and shape, and where it
            failed), reports loading a parameter no name wrote, or used a
            trace it kept across names or after planning.
    """
    if isinstance(metadata, Mapping):
        metas = dict(metadata)
    else:
        metas = {meta.name: meta for meta in metadata}
    targets = targets if targets is not None else Targets(model)
    # The tensors stay referenced through the capture, so their storage keys
    # are not reused.
    flagged = [
        (t, prefix, reason)
        for prefix, reason in (fallback_modules or {}).items()
        for t in _own_tensors(model.get_submodule(prefix))
    ]
    flagged += [(_tensor(model, qualified), qualified, reason)
                for qualified, reason in (fallback_tensors or {}).items()]
    sink = Sink(targets, metas,
                {storage_key(t): (prefix, reason) for t, prefix, reason in flagged},
                redirects)
    names = list(metas)
    start = 0
    claimed: list[str] = []  # what the calls that ran to their end report
    try:
        with torch.no_grad(), paused_gc(), _TargetGuard(sink):
            while start < len(names):
                try:
                    loaded = model.load_weights(sink.weights(names[start:]))
                    if isinstance(loaded, (set, frozenset, list, tuple)):
                        claimed += [n for n in loaded if isinstance(n, str)]
                    break
                except Stopped as stop:
                    # Resume after the name that stopped (not after the last
                    # name handed out: a loader may read ahead).
                    at = names.index(stop.name)
                    if at < start:
                        raise RuntimeError(
                            f"load plan: a loader reads the values of {stop.name!r} "
                            "after later names arrived (it keeps an incoming tensor "
                            "across names)"
                        ) from stop
                    start = at + 1
    except TraceUsedAfterPlanning:
        raise
    except Exception as e:
        if isinstance(e, RuntimeError) and str(e).startswith("load plan:"):
            raise
        raise RuntimeError(f"load plan: {failure_text(e, sink)}") from e
    finally:
        sink.closed = True
    check_claims(model, claimed, sink)
    title = f"Captured by loadplan from {type(model).__qualname__}.load_weights"
    return Capture(sink, title)
