"""Capture: run ``model.load_weights`` once over data-free traces, on the
model's real tensors, and write what it did as loadplan IR text.

Each declared checkpoint name arrives as a :class:`TraceTensor`: a wrapper
tensor on the meta device, with the declared shape and dtype and no data.
Every op the loader applies to a trace is recorded in that name's
``loadplan.checkpoint`` block:

- torch view ops become the matching ``loadplan`` view op (``slice``,
  ``select``, ``view``, ``transpose``, ...), split/chunk/unbind one
  slice/select per output, and any other same-dtype view an ``as_strided``
  with the layout torch computed;
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

The compiler (``loadplan._native``, or ``loadplan-opt --loadplan-pipeline``
on the text) decides what is direct and why the rest falls back.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .ops import CONSTANT_WRITES, METADATA_OPS, leaves
from .targets import Target, Targets, storage_key
from .trace import ELEMENT_SIZE_REASON, Sink, Stopped, TraceTensor, TraceUsedAfterPlanning

__all__ = [
    "Capture",
    "ELEMENT_SIZE_REASON",
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

    @property
    def ir(self) -> str:
        if self._ir is None:
            self._ir = self._sink.ir(self._title)
        return self._ir

    def records(self) -> tuple[str, list, list]:
        """``(text, types, checkpoints)`` as ``_native.compile_records``
        takes them."""
        with paused_gc():
            return self._sink.records_for_compiler(self._title)


def capture(model: torch.nn.Module, metadata: Mapping[str, Any] | Iterable[Any], *,
            fallback_modules: Mapping[str, str] | None = None) -> Capture:
    """Runs ``model.load_weights`` over one trace per declared name and
    returns the captured IR. ``metadata`` is ``ParamMeta``s in arrival order
    (or a mapping from name to them); ``plan_loads`` checks it first.
    ``fallback_modules``: qualified module name -> reason; a name whose
    loader copies into a parameter or buffer of one of those modules (its
    own, not its submodules') falls back with that reason.

    Raises:
        RuntimeError: the loader failed, or used a trace it kept across
            names or after planning.
    """
    if isinstance(metadata, Mapping):
        metas = dict(metadata)
    else:
        metas = {meta.name: meta for meta in metadata}
    targets = Targets(model)
    # The tensors stay referenced through the capture, so their storage keys
    # are not reused.
    flagged = [
        (t, reason)
        for prefix, reason in (fallback_modules or {}).items()
        for t in _own_tensors(model.get_submodule(prefix))
    ]
    sink = Sink(targets, metas, {storage_key(t): reason for t, reason in flagged})
    names = list(metas)
    start = 0
    try:
        with torch.no_grad(), paused_gc(), _TargetGuard(sink):
            while start < len(names):
                try:
                    model.load_weights(sink.weights(names[start:]))
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
        raise RuntimeError(f"load plan: tracing load_weights failed: {e!r}") from e
    finally:
        sink.closed = True
    title = f"Captured by loadplan from {type(model).__qualname__}.load_weights"
    return Capture(sink, title)
