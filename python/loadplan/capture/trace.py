"""Traces: the data-free stand-ins for incoming checkpoint tensors, and the
sink that records what a loader does with them as records of loadplan IR
(int tuples, include/loadplan/Records/RecordOps.h). Which records a view
becomes is the aten view table's (``_native.lower_view``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any, NoReturn

import torch
import torch.utils._pytree as pytree

from .. import _ir, _native, _runtime
from torch.utils._python_dispatch import _disable_current_modes as no_dispatch

from .ops import (
    ANY_VIEW,
    CONSTANT_WRITES,
    METADATA_QUERIES,
    META,
    VALUE_READS,
    VIEW_OPS,
    arg,
    aten,
    leaves,
    map_args,
    normalize,
    op_name,
    written_args,
)
from .targets import Targets, storage_key

# In-place fills of a trace: with a number, of the whole tensor, a constant.
_FILLS = (aten.zero_, aten.fill_)

# The reason a copy gets when its destination cannot be written as elements
# of its own dtype relative to any target (see Sink._copy).
ELEMENT_SIZE_REASON = "copies into a destination viewed with another element size"
# The reason of a copy from a name the loader filled in place (``zero_``,
# ``fill_``) whose source is not known to hold the constant: a view taken
# before the fill, or a value computed from the filled tensor.
FILLED_REASON = "the loader filled {name} in place and copies a value it cannot hold as the constant"

_CODES = _ir.OP_CODES
APPLY, CAT, CONSTANT_WRITE = _CODES["apply"], _CODES["cat"], _CODES["constant_write"]
INPLACE_WRITE, META_FAILURE = _CODES["inplace_write"], _CODES["meta_failure"]
READ_TARGET, VALUE_READ, WRITE_OTHER = (
    _CODES["read_target"], _CODES["value_read"], _CODES["write_other"])


@dataclass(frozen=True)
class TargetRead:
    """A ``read_target`` record, kept only if some name writes its storage:
    reading a buffer no checkpoint tensor goes into (an expert map, say) is
    the loader's own business."""

    storage: int
    record: tuple[int, ...]


class Record:
    """One checkpoint name's block: the ops its traces went through, each a
    record (an int tuple, include/loadplan/Records/RecordOps.h), a
    ``TargetRead`` until the capture ends. ``reads`` says whether any is."""

    __slots__ = ("name", "shape", "dtype", "lines", "reads", "_next", "checkpoint", "filled",
                 "epoch")

    def __init__(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, type_id: int):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.lines: list[TargetRead | tuple[int, ...]] = []
        self.reads = False
        self._next = 0
        # What _native.compile_records takes for the name, unless it read a
        # target: the records are its lines, which grow in place.
        self.checkpoint = (name, type_id, self.lines)
        # The op with which the loader filled the whole tensor in place
        # (``aten.zero_``, ``aten.fill_``; empty: it did not), and a count of the in-place writes of its traces: a
        # trace's constant holds while the count is the one it was made at.
        self.filled = ""
        self.epoch = 0

    def fresh(self) -> int:
        value = self._next
        self._next += 1
        return value


class TraceTensor(torch.Tensor):
    """A data-free stand-in for an incoming checkpoint tensor or a view of
    it. ``_meta`` is a meta tensor with the same layout (views of it keep
    torch's storage offsets, which ``as_strided`` needs); ``_num`` is its
    value in its name's block (-1: the incoming tensor, ``%w``)."""

    _sink: Sink
    _record: Record
    _num: int
    _meta: torch.Tensor
    # The value every element holds after the loader filled the whole
    # incoming tensor in place (a 0-d CPU tensor of this trace's dtype),
    # valid while its record's epoch is ``_epoch``; None: not known.
    _constant: torch.Tensor | None = None
    _epoch: int = -1

    @staticmethod
    def __new__(cls, sink: Sink, record: Record, num: int, meta: torch.Tensor):
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            meta.shape,
            strides=meta.stride(),
            storage_offset=meta.storage_offset(),
            dtype=meta.dtype,
            device=META,
            requires_grad=False,
        )
        r._sink = sink
        r._record = record
        r._num = num
        r._meta = meta
        return r

    def __init__(self, *args: Any, **kwargs: Any):
        pass

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        traces = [a for a in leaves(args, kwargs) if isinstance(a, TraceTensor)]
        return traces[0]._sink.dispatch(func, args, kwargs, traces)

    # Reads that do not go through an op the dispatcher sees.
    def tolist(self) -> NoReturn:
        self._sink.value_read(self, "tolist")

    def numpy(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._sink.value_read(self, "numpy")

    def __array__(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._sink.value_read(self, "__array__")

    def __repr__(self, *args: Any, **kwargs: Any) -> str:
        return (
            f"TraceTensor({self._record.name!r}, shape={tuple(self.shape)}, "
            f"dtype={self.dtype})"
        )


class Stopped(Exception):
    """A loader needs a trace's values, or an op on it fails on meta: the
    loader cannot go on. ``name`` is the trace's name."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class TraceUsedAfterPlanning(RuntimeError):
    """A trace was used after its capture ended."""


def _dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill a run of memory without gaps or
    repeats (in some order of its dims)."""
    expected = 1
    for stride, size in sorted((abs(st), n) for n, st in zip(t.shape, t.stride()) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def to_meta(a: Any) -> Any:
    """A trace's meta tensor; any other tensor as a meta tensor."""
    if isinstance(a, TraceTensor):
        return a._meta
    if isinstance(a, torch.Tensor):
        return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=META)
    if isinstance(a, torch.device):
        return META
    return a


def result_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype the IR holds a result without a layout in. A dtype the IR
    lacks is held as int8: such a value is only ever a reason, never a
    write."""
    return t.dtype if _ir.has_element_type(t.dtype) else torch.int8


@dataclass(frozen=True)
class Redirect:
    """A tensor that stands in the model for others while the loader is
    traced: a layer's tensor in its checkpoint format, whose elements the
    engine's processing only moves into live tensors, or writes through a
    transform. ``remap(offset, shape, stride)`` turns a copy into a region
    of it (in its elements) into ``(target, offset, shape, stride)`` regions
    of those live tensors, each shape splitting the region's dims in order,
    or says why it cannot (then the name falls back, with ``module``'s
    reason).

    A region may also be ``(target, offset, shape, stride, transform)``,
    ``transform`` None (as a 4-tuple) or the name of one of the plan's
    transforms (``_ir.TRANSFORMS``, "marlin_w4"): the processing writes the
    copied region, a matrix [rows, cols] (its dims other than 1, in order),
    through it, so the live region's shape splits the transform's output
    ([cols / 2, rows / 16, 32] for "marlin_w4") instead, its strides all
    non-negative, and the copy is recorded as one through the transform
    of the copied value as it is. The matrix must be whole atoms of the
    transform's dtype, copied without a conversion; a copy that is not, and
    a constant copied into such a region, fall back. The fifth item may
    also be a pair ``(transform, box)``: the region is that of the part
    ``box`` (a ``(start, stop)`` per dim of the copied region) only."""

    module: str
    tensor: str
    dtype: torch.dtype
    # (offset, shape, stride) -> str, or a list of
    # (Target, int, tuple, tuple[, str | None | (str | None, box)])
    remap: Any
    # What the writes into the live tensors write: ``dtype``'s bytes as
    # they are (the live tensor may view them as another dtype of their
    # size), or converted to another dtype, where the processing converts.
    writes_as: torch.dtype | None = None


@dataclass(frozen=True)
class Fill:
    """A constant written into a region of a target while planning, where
    the loader filled a checkpoint tensor in place and copied it there:
    ``offset``, ``shape`` and ``stride`` in elements of ``dtype`` from the
    target's first byte; ``value`` a 0-d CPU tensor of ``dtype``."""

    target: Any  # Target
    dtype: torch.dtype
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    value: torch.Tensor

    def write(self) -> None:
        """Writes the constant into the target's memory."""
        real = self.target.real
        with no_dispatch():
            region = torch.empty(0, dtype=self.dtype, device=real.device)
            region.set_(real.untyped_storage(),
                        self.target.byte_offset // self.dtype.itemsize + self.offset,
                        self.shape, self.stride)
            region.fill_(self.value.to(real.device))


# The most copies one write into a Redirect's tensor may become where it
# runs backwards through a live tensor (one per index of such dims).
_BACKWARDS_LIMIT = 64

# The reason of a name whose copy into a Redirect's tensor does not remap.
REDIRECT_REASON = "vLLM rearranges {module} after loading, and a write of it does not follow: {why}"


def _transform_and_box(more: list) -> tuple[str | None, tuple | None]:
    """The transform and the box of a remapped region's fifth item (see
    ``Redirect``): None, a transform's name, or a pair of either and a box."""
    extra = more[0] if more else None
    if isinstance(extra, tuple):
        transform, box = extra
        return transform, tuple(tuple(r) for r in box)
    return extra, None


def _transform_refusal(transform: str, copied: torch.dtype, written: torch.dtype,
                       part: Sequence[int], shape: Sequence[int], target: Any,
                       backwards: list[int]) -> str | None:
    """Why a copy of a part of shape ``part`` of a ``copied`` tensor,
    writing ``written`` elements, cannot go through ``transform`` into a
    live region of ``shape`` (the verifier's rules for a transforming copy,
    of the part's dims other than 1, and strides that step forwards); None
    if it can."""
    entry = _ir.TRANSFORMS.get(transform)
    if entry is None:
        return f"it names no transform {transform!r} (known: {', '.join(_ir.TRANSFORMS)})"
    _, dtype_code, rows, cols, _ = entry
    if backwards:
        return f"a write through transform {transform} runs backwards through " \
               f"{target.qualified_name}"
    dtype = _runtime.DTYPES.get(dtype_code)
    matrix = [n for n in part if n != 1]
    if copied != dtype or written != dtype or len(matrix) != 2 or matrix[0] % rows \
            or matrix[1] % cols or prod(shape) != prod(part):
        name = str(dtype).removeprefix("torch.")
        return f"a copy of {str(copied).removeprefix('torch.')} {list(part)} into a region of " \
               f"{list(shape)} is not whole atoms of transform {transform} ({rows} x {cols} " \
               f"{name}, as many elements)"
    return None


class Sink:
    """One capture: the records of every name, and the handlers the traces
    and the guard call."""

    def __init__(self, targets: Targets, metas: Mapping[str, Any],
                 fallback_storages: Mapping[int, tuple[str, str]] | None = None,
                 redirects: Mapping[int, Redirect] | None = None):
        self.targets = targets
        self.metas = metas
        # Storage key -> where copies into it go instead.
        self.redirects = dict(redirects or {})
        # Storage key -> (module, reason): a copy into it makes its name
        # fall back with the reason.
        self.fallback_storages = dict(fallback_storages or {})
        # Module of fallback_storages -> the names written into it, in order.
        self.module_names: dict[str, dict[str, None]] = {}
        # Module of redirects -> the names written into it, in order.
        self.redirect_names: dict[str, dict[str, None]] = {}
        # The constants the loader filled checkpoint tensors with and
        # copied into targets, written while planning (``Fill``).
        self.fills: list[Fill] = []
        # Each name's incoming meta tensor, made before the capture's mode is
        # on (inside it each would cost a dispatch).
        self._incoming = {name: torch.empty(tuple(m.shape), dtype=m.dtype, device=META)
                          for name, m in metas.items()}
        self.records: dict[str, Record] = {}
        # The name last handed to load_weights, or last copied from: a real
        # op that reads a target is recorded in its block.
        self.current: Record | None = None
        # Constant writes before the first name arrived.
        self.pending: list[tuple[int, ...]] = []
        # Storages a name writes (copy_ or an in-place op from a trace).
        self.written: set[int] = set()
        # The storage keys of every real tensor written (by a name, or by a
        # constant write), and the names that wrote any.
        self.written_keys: set[int] = set()
        self.writers: set[str] = set()
        self.closed = False
        # The records' type table: (shape, dtype code), and its index.
        self.types: list[tuple[tuple[int, ...], int]] = []
        self.type_ids: dict[tuple, int] = {}
        # The records' string table (op names, reasons, names), and its index.
        self.strings: list[str] = []
        self.string_ids: dict[str, int] = {}

    # -- names -------------------------------------------------------------

    def weights(self, names: list[str]) -> Iterator[tuple[str, torch.Tensor]]:
        for name in names:
            meta = self.metas[name]
            shape, dtype = tuple(meta.shape), meta.dtype
            # A name handed out again (the loader read ahead of a stop)
            # starts a fresh block: its earlier trace is never replayed.
            record = Record(name, shape, dtype, self.type_id(shape, dtype))
            if not self.records and self.pending:
                record.lines.extend(self.pending)
                self.pending.clear()
            self.records[name] = record
            self.current = record
            incoming = self._incoming.pop(name, None)
            if incoming is None:  # handed out again after a stop
                with no_dispatch():  # the capture's own tensor, not the loader's op
                    incoming = torch.empty(shape, dtype=dtype, device=META)
            yield name, TraceTensor(self, record, -1, incoming)

    def _check_open(self, trace: TraceTensor) -> None:
        if self.closed:
            raise TraceUsedAfterPlanning(
                f"load plan: a planning trace of {trace._record.name!r} was used "
                "after planning; a loader keeps an incoming tensor across "
                "load_weights calls, which the load plan does not support"
            )

    def _emit_current(self, entry: tuple[int, ...]) -> None:
        if self.current is not None:
            self.current.lines.append(entry)
        else:
            self.pending.append(entry)

    def type_id(self, shape: Sequence[int], dtype: torch.dtype) -> int:
        """The index of (shape, dtype) in this capture's type table."""
        key = (shape, dtype)
        found = self.type_ids.get(key)
        if found is None:
            found = self.type_ids[key] = len(self.types)
            self.types.append((tuple(shape), _ir.dtype_code(dtype)))
        return found

    def string_id(self, text: str) -> int:
        """The index of ``text`` in this capture's string table."""
        found = self.string_ids.get(text)
        if found is None:
            found = self.string_ids[text] = len(self.strings)
            self.strings.append(text)
        return found

    # -- events that stop the loader ----------------------------------------

    def value_read(self, trace: TraceTensor, op: str) -> NoReturn:
        self._check_open(trace)
        trace._record.lines.append((VALUE_READ, trace._num, self.string_id(op)))
        raise Stopped(trace._record.name)

    def _meta_failure(self, func: Any, traces: list[TraceTensor], error: Exception):
        record = traces[0]._record
        own = [t._num for t in traces if t._record is record]
        record.lines.append((META_FAILURE, self.string_id(op_name(func)), *own))
        raise Stopped(record.name) from error

    # -- ops on traces -------------------------------------------------------

    def dispatch(self, func: Any, args: tuple, kwargs: dict, traces: list) -> Any:
        self._check_open(traces[0])
        packet = func.overloadpacket
        if packet in VALUE_READS:
            self.value_read(traces[0], op_name(func))
        if packet is aten.copy_:
            if not isinstance(args[0], TraceTensor):
                return self._copy(args[0], args[1], func, args, kwargs)
            return self.apply(func, args, kwargs, traces)
        if packet in METADATA_QUERIES:
            return func(*map_args(to_meta, args), **kwargs)
        if packet in _FILLS and len(traces) == 1 and args and args[0] is traces[0]:
            filled = self._fill(func, args, kwargs)
            if filled is not None:
                return filled
        if packet in (aten.cat, aten.stack):
            joined = self._cat(func, args, kwargs, traces)
            if joined is not None:
                return joined
        src = args[0] if args else None
        only_src = isinstance(src, TraceTensor) and len(traces) == 1
        if only_src:
            index = VIEW_OPS.get(packet)
            if index is not None or func.is_view:
                view = self._view(index, func, src, args, kwargs)
                if view is not None:
                    return view
            elif packet is aten.detach_:
                return src
        return self.apply(func, args, kwargs, traces)

    def run_meta(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """``func`` on meta copies of its arguments (nothing real is
        written). Called from a dispatch handler, where torch has the
        capture's mode out of the way already."""
        return func(*map_args(to_meta, args), **{k: to_meta(v) for k, v in kwargs.items()})

    def _view(self, index: int | None, func: Any, src: TraceTensor, args: tuple,
              kwargs: dict) -> Any:
        """A view or element copy of ``src`` (its only trace argument), op
        ``index`` of the aten view table, or with None any other view: run
        on its meta tensor, and recorded as the record ops the table lowers
        it to, one per output. None for a call the table does not hold as
        such (a view into another dtype, a copy into a dtype the IR lacks):
        that is an ``apply``."""
        if index is None or kwargs:
            # Tensors or a device among the arguments (.to(device): the
            # trace stays on meta).
            out = self.run_meta(func, args, kwargs)
        else:  # ints and lists of them: nothing to map
            out = func(src._meta, *args[1:])
        lowered = _native.lower_view(ANY_VIEW if index is None else index, src._meta, out,
                                     args, kwargs)
        if lowered is None:
            return None
        in_type = self.type_id(src.shape, src.dtype)
        if isinstance(out, torch.Tensor):
            return self._record_view(src, in_type, out, lowered[0])
        return type(out)(self._record_view(src, in_type, o, r) for o, r in zip(out, lowered))

    def _record_view(self, src: TraceTensor, in_type: int, out: torch.Tensor,
                     lowered: tuple[int, ...]) -> TraceTensor:
        """Records ``%r = loadplan.<op> %src <ints> : in -> out`` for
        ``lowered``, ``(code, ints...)``."""
        record = src._record
        value = record.fresh()
        record.lines.append((lowered[0], value, src._num, in_type,
                             self.type_id(out.shape, out.dtype), *lowered[1:]))
        view = TraceTensor(self, record, value, out)
        constant = self._constant_of(src)
        if constant is not None:  # a view or an element copy of a constant
            view._constant = constant if out.dtype == constant.dtype else constant.to(out.dtype)
            view._epoch = record.epoch
        return view

    def _fill(self, func: Any, args: tuple, kwargs: dict) -> TraceTensor | None:
        """``trace.zero_()`` or ``trace.fill_(value)`` of the whole incoming
        tensor: the loader overwrites every element with one constant, and
        what it then copies of the trace are constant writes (``_copy``).
        None where it is not that (a part of the tensor, a value that is a
        trace or not a number): an ``apply``."""
        src = args[0]
        record = src._record
        if kwargs or src.numel() != prod(record.shape) or src.numel() == 0:
            return None
        if not _dense(src._meta):
            return None
        value = args[1] if len(args) > 1 else 0
        with no_dispatch():
            if isinstance(value, torch.Tensor):
                if value.is_meta or value.numel() != 1:
                    return None
                value = value.detach().reshape(()).to("cpu")
            try:
                constant = torch.full((), value, dtype=src.dtype)
            except (RuntimeError, TypeError):
                return None  # a dtype torch cannot fill on the CPU
        record.filled = op_name(func)
        record.epoch += 1
        src._constant, src._epoch = constant, record.epoch
        return src

    @staticmethod
    def _constant_of(trace: TraceTensor) -> torch.Tensor | None:
        """The constant every element of ``trace`` holds, if known."""
        if trace._constant is None or trace._epoch != trace._record.epoch:
            return None
        return trace._constant

    def _new(self, record: Record, num: int, meta: torch.Tensor) -> TraceTensor:
        return TraceTensor(self, record, num, meta)

    def view_op(self, src: TraceTensor, out: torch.Tensor, op: str, *attrs: int) -> TraceTensor:
        """Records ``%r = loadplan.<op> %src <attrs> : in -> out``; ``attrs``
        are the op's ints (RecordOps.h)."""
        return self._record_view(src, self.type_id(src.shape, src.dtype), out,
                                 (_ir.OP_CODES[op], *attrs))

    def _cat(self, func, args, kwargs, traces: list) -> TraceTensor | None:
        """``torch.cat`` / ``torch.stack`` of views of one incoming tensor,
        all of its dtype: a ``loadplan.cat`` (of each input unsqueezed, for
        stack). Anything else (another name's trace, a real tensor, a dtype
        promotion) is an ``apply``: None."""
        tensors = list(args[0]) if args and isinstance(args[0], (list, tuple)) else None
        if not tensors or kwargs.keys() - {"dim"} or len(args) > 2:
            return None
        first = tensors[0]
        if not all(isinstance(t, TraceTensor) and t._record is first._record
                   and t.dtype == first.dtype for t in tensors):
            return None
        if not _ir.has_element_type(first.dtype):
            return None
        out = self.run_meta(func, args, kwargs)
        stack = func.overloadpacket is aten.stack
        rank = out.dim()
        if rank == 0 or any(t.dim() != (rank - 1 if stack else rank) for t in tensors):
            return None  # legacy cat of 1-d empty tensors
        dim = normalize(arg(args, kwargs, 0, "dim", 0), rank)
        if stack:
            tensors = [self.view_op(t, t._meta.unsqueeze(dim), "unsqueeze", dim)
                       for t in tensors]
        record = first._record
        value = record.fresh()
        record.lines.append((CAT, value, self.type_id(out.shape, out.dtype), dim,
                             *(t._num for t in tensors)))
        return self._new(record, value, out)

    def _copy(self, dest: torch.Tensor, src: Any, func, args, kwargs) -> torch.Tensor:
        """``dest.copy_(src)`` with a real ``dest`` and a trace ``src``."""
        # torch's own checks (shapes that do not broadcast, a destination
        # that overlaps itself, ...), on meta; nothing to check when the
        # shapes are the same and the destination is contiguous.
        if tuple(dest.shape) != tuple(src.shape) or not dest.is_contiguous():
            self.run_meta(func, args, kwargs)
        record = src._record
        self.current = record
        target, offset = self.targets.locate(dest)
        key = storage_key(dest)
        self.written_keys.add(key)
        self.writers.add(record.name)
        flagged = self.fallback_storages.get(key)
        redirect = self.redirects.get(key)
        constant = self._constant_of(src) if record.filled else None
        if redirect is not None and record.filled and constant is None:
            flagged = redirect.module, FILLED_REASON.format(name=record.name)
        elif redirect is not None:
            flagged = self._redirect(redirect, dest, src, func, args, kwargs, constant)
            if flagged is None:
                return dest
        if flagged is None and constant is not None and offset is not None \
                and _ir.has_element_type(dest.dtype):
            # A constant the loader filled the checkpoint tensor with: written
            # now, during planning, and kept out of the plan.
            self._fill_target(record, Fill(target, dest.dtype, offset, tuple(dest.shape),
                                           tuple(dest.stride()), constant.to(dest.dtype)))
            return dest
        reason = None
        if flagged is not None:
            module, reason = flagged
            self.module_names.setdefault(module, {})[record.name] = None
        elif record.filled and constant is None:
            reason = FILLED_REASON.format(name=record.name)
        if reason is None and offset is not None and _ir.has_element_type(dest.dtype):
            # A copy the compiler reduces.
            self.written.add(target.storage)
            record.lines.append(
                (_ir.COPY, src._num, self.type_id(src.shape, src.dtype), target.index,
                 _ir.dtype_code(dest.dtype), offset, *dest.shape, *dest.stride())
            )
            return dest
        op = self.string_id(op_name(func))
        if reason is not None:
            # A tensor the caller says must be loaded by load_weights: the
            # name falls back with the caller's reason.
            record.lines.append((APPLY, op, self.string_id(reason), 1, src._num, 0))
            if target is None:
                record.lines.append((WRITE_OTHER, op, src._num))
            else:
                self.written.add(target.storage)
                record.lines.append((INPLACE_WRITE, op, target.index, src._num))
            return dest
        if target is None or not _ir.has_element_type(dest.dtype):
            record.lines.append((WRITE_OTHER, op, src._num))
            return dest
        # The IR holds destinations in elements of their own dtype from a
        # target's first byte; this one has no such offset.
        self.written.add(target.storage)
        record.lines.append((APPLY, op, self.string_id(ELEMENT_SIZE_REASON), 1, src._num, 0))
        record.lines.append((INPLACE_WRITE, op, target.index, src._num))
        return dest

    def _redirect(self, redirect: Redirect, dest: torch.Tensor, src: TraceTensor, func,
                  args: tuple, kwargs: dict,
                  constant: torch.Tensor | None = None) -> tuple[str, str] | None:
        """``dest.copy_(src)`` into ``redirect``'s tensor, recorded as copies
        into the live tensors it remaps to (with a ``constant`` source,
        written into them now and recorded as constant writes); None once
        recorded, else ``(module, reason)`` to fall back with."""
        if dest.dtype != redirect.dtype:
            why = f"it is copied into as {dest.dtype}"
        else:
            if tuple(dest.shape) != tuple(src.shape):
                self.run_meta(func, args, kwargs)  # torch's own broadcast checks
            why = redirect.remap(dest.storage_offset(), tuple(dest.shape), tuple(dest.stride()))
        if isinstance(why, str):
            return redirect.module, REDIRECT_REASON.format(module=redirect.module, why=why)
        if tuple(dest.shape) != tuple(src.shape):
            return redirect.module, REDIRECT_REASON.format(module=redirect.module,
                                                           why="the copy broadcasts")
        writes = []
        for target, offset, shape, stride, *more in why:
            transform, box = _transform_and_box(more)
            # The part of the copied region this one writes: its shape.
            part = tuple(src.shape) if box is None else tuple(b - a for a, b in box)
            backwards = [d for d, st in enumerate(stride) if st < 0]
            if transform is not None:
                refused = _transform_refusal(transform, src.dtype, redirect.writes_as or dest.dtype,
                                             part, shape, target, backwards)
            elif prod(shape[d] for d in backwards) > _BACKWARDS_LIMIT:
                refused = f"a write runs backwards through {target.qualified_name} too often"
            else:
                refused = None
            if refused is not None:
                return redirect.module, REDIRECT_REASON.format(module=redirect.module,
                                                               why=refused)
            writes.append((target, offset, shape, stride, backwards, transform, box))
        record = src._record
        self.redirect_names.setdefault(redirect.module, {})[record.name] = None
        if constant is not None:
            return self._fill_redirect(redirect, dest, record, writes, constant)
        for target, offset, shape, stride, backwards, transform, box in writes:
            value = src
            for d, (a, b) in enumerate(box or ()):
                if (a, b) != (0, src.shape[d]):
                    value = self.view_op(value, value._meta.narrow(d, a, b - a), "slice",
                                         d, a, b, 1)
            self.written.add(target.storage)
            if transform is not None:
                # The copied value in its own order, as a 2-d [rows, cols]:
                # the region splits the transform's output of it.
                matrix = tuple(n for n in value.shape if n != 1)
                if tuple(value.shape) != matrix:
                    value = self.view_op(value, value._meta.view(matrix), "view")
                record.lines.append(
                    (_ir.COPY, value._num, self.type_id(value.shape, value.dtype), target.index,
                     _ir.dtype_code(value.dtype), offset, *shape, *stride,
                     _ir.TRANSFORMS[transform][0]))
                continue
            if tuple(shape) != tuple(value.shape):
                value = self.view_op(value, value._meta.view(shape), "view")
            # A dim that runs backwards through the live tensor: one copy per
            # index of it (regions step forwards).
            for picks in itertools.product(*(range(shape[d]) for d in backwards)):
                part, at = value, offset
                for d, k in reversed(list(zip(backwards, picks))):
                    part = self.view_op(part, part._meta.select(d, k), "select", d, k)
                    at += k * stride[d]
                kept = [d for d in range(len(shape)) if d not in backwards]
                record.lines.append(
                    (_ir.COPY, part._num, self.type_id(part.shape, part.dtype), target.index,
                     _ir.dtype_code(redirect.writes_as or dest.dtype), at, *(shape[d] for d in kept),
                     *(stride[d] for d in kept)))
        return None

    def _fill_redirect(self, redirect: Redirect, dest: torch.Tensor, record: Record,
                       writes: list, constant: torch.Tensor) -> tuple[str, str] | None:
        """A constant copied into ``redirect``'s tensor: each live region it
        remaps to filled now and recorded as a constant write. Not through
        a transform, whose output of a constant is not the constant."""
        dtype = redirect.writes_as or dest.dtype
        size = dtype.itemsize
        transform = next((w[5] for w in writes if w[5] is not None), None)
        if transform is not None:
            why = f"a constant written through transform {transform} is not supported"
        elif any(t.byte_offset % size for t, *_ in writes):
            why = "a live tensor's first byte is not a whole element of the constant"
        else:
            why = None
        if why is not None:
            return redirect.module, REDIRECT_REASON.format(module=redirect.module, why=why)
        value = constant.to(dtype)
        for target, offset, shape, stride, backwards, *_ in writes:
            # Every element gets the same value: a dim that runs backwards
            # is the same region run forwards.
            for d in backwards:
                offset += (shape[d] - 1) * stride[d]
            stride = tuple(-st if d in backwards else st for d, st in enumerate(stride))
            self._fill_target(record, Fill(target, dtype, offset, tuple(shape), stride, value))
        return None

    def _fill_target(self, record: Record, fill: Fill) -> None:
        """Writes ``fill`` now and records it as a constant write of
        ``record``'s name."""
        fill.write()
        self.fills.append(fill)
        self.written_keys.add(storage_key(fill.target.real))
        self._emit_current((CONSTANT_WRITE, self.string_id(record.filled), fill.target.index,
                            _ir.dtype_code(fill.dtype), fill.offset, *fill.shape, *fill.stride))

    def apply(self, func, args: tuple, kwargs: dict, traces: list) -> Any:
        """Any other op: run on meta copies of its arguments, so it writes
        no real tensor; its tensor results are traces without a layout."""
        first = traces[0]
        record = first._record
        own = [t for t in traces if t._record is record]
        names = list(dict.fromkeys(t._record.name for t in traces if t._record is not record))
        flat, spec = pytree.tree_flatten((args, kwargs))
        meta_flat = [to_meta(a) for a in flat]
        meta_args, meta_kwargs = pytree.tree_unflatten(meta_flat, spec)
        try:
            out = func(*meta_args, **meta_kwargs)
        except Exception as e:  # no meta kernel, a shape error, ...
            self._meta_failure(func, traces, e)
        originals = {id(m): a for m, a in zip(meta_flat, flat) if isinstance(a, torch.Tensor)}

        op = self.string_id(op_name(func))
        values = [t._num for t in own]
        name_ids = [self.string_id(n) for n in names]
        written = [
            v
            for _, value in written_args(func, args, kwargs)
            for v in pytree.tree_leaves(value)
            if isinstance(v, torch.Tensor) and not isinstance(v, TraceTensor)
        ]
        if written:
            # Writes a real tensor from a trace: the write happens on meta
            # only, and the name falls back.
            if names:
                record.lines.append((APPLY, op, -1, len(values), *values,
                                     len(name_ids), *name_ids))
            for real in written:
                key = storage_key(real)
                self.written_keys.add(key)
                self.writers.add(record.name)
                if (flagged := self.fallback_storages.get(key)) is not None:
                    self.module_names.setdefault(flagged[0], {})[record.name] = None
                target, _ = self.targets.locate(real)
                into = -1
                if target is not None:
                    into = target.index
                    self.written.add(target.storage)
                record.lines.append((INPLACE_WRITE, op, into, *values))

        # Tensor results: new traces, or a trace written in place, which
        # gets the result as its new value.
        out_flat, out_spec = pytree.tree_flatten(out)
        results: list[tuple[int, torch.Tensor]] = []
        wrapped: list[Any] = []
        for o in out_flat:
            if not isinstance(o, torch.Tensor):
                wrapped.append(o)
                continue
            original = originals.get(id(o))
            if original is not None and not isinstance(original, TraceTensor):
                wrapped.append(original)  # a real tensor written in place
                continue
            results.append((len(wrapped), o))
            wrapped.append(original)
        result_values = [record.fresh() for _ in results]
        if results or not written:
            entry = [APPLY, op, -1, len(values), *values]
            if names and not written:
                entry += [len(name_ids), *name_ids]
            else:
                entry.append(0)
            for (_, o), value in zip(results, result_values):
                entry += [value, self.type_id(o.shape, result_dtype(o))]
            record.lines.append(tuple(entry))
        for (k, o), value in zip(results, result_values):
            if isinstance(wrapped[k], TraceTensor):
                wrapped[k]._num = value  # written in place: a new value
                wrapped[k]._record.epoch += 1  # what was constant may not be
            else:
                wrapped[k] = self._new(record, value, o)
        return pytree.tree_unflatten(wrapped, out_spec)

    # -- real ops (from the guard) ------------------------------------------

    def check_reads(self, func: Any, args: tuple, kwargs: dict) -> None:
        """Records a real op's reads of target storages."""
        if self.current is None:
            return
        constant = func.overloadpacket in CONSTANT_WRITES
        write_only = {
            i for i, _ in written_args(func, args, kwargs) if constant
        }
        out_names = {
            a.name
            for a in getattr(func._schema, "arguments", ())
            if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write
        }
        leaves = [
            a
            for i, arg in enumerate(args)
            if i not in write_only
            for a in pytree.tree_leaves(arg)
        ] + [
            a for k, v in kwargs.items() if k not in out_names for a in pytree.tree_leaves(v)
        ]
        seen: set[str] = set()
        for a in leaves:
            if not isinstance(a, torch.Tensor) or a.is_meta:
                continue
            on_storage = self.targets.on_storage(a)
            if on_storage and on_storage[0].storage not in seen:
                seen.add(on_storage[0].storage)
                read = (READ_TARGET, on_storage[0].index, self.string_id(op_name(func)))
                self.current.lines.append(TargetRead(on_storage[0].storage, read))
                self.current.reads = True

    def constant_write(self, func: Any, dest: torch.Tensor) -> None:
        if not isinstance(dest, torch.Tensor):
            return
        self.written_keys.add(storage_key(dest))
        if not _ir.has_element_type(dest.dtype):
            return
        target, offset = self.targets.locate(dest)
        if target is None or offset is None:
            return  # only coverage needs it
        self._emit_current((CONSTANT_WRITE, self.string_id(op_name(func)), target.index,
                            _ir.dtype_code(dest.dtype), offset, *dest.shape, *dest.stride()))

    # -- the IR --------------------------------------------------------------

    def _items(self, record: Record) -> list[tuple[int, ...]]:
        """A block that read a target, as compile_records takes it: its
        records, with the reads of targets no name writes left out."""
        return [line.record if isinstance(line, TargetRead) else line
                for line in record.lines
                if not isinstance(line, TargetRead) or line.storage in self.written]

    def records_for_compiler(self) -> tuple[list, list, list, list]:
        """What ``_native.compile_records`` takes: the records of the
        storages and the targets; the type table; the string table; and per
        name in arrival order ``(name, type, ops)``, its records."""
        records = self.records
        # Nearly every name is a record's own tuple; the rest are looked at
        # again below.
        checkpoints: list[tuple | None] = [
            record.checkpoint if (record := records.get(name)) is not None and not record.reads
            else None
            for name in self.metas]
        names = list(self.metas)
        for index in [i for i, c in enumerate(checkpoints) if c is None]:
            name = names[index]
            record = records.get(name)
            if record is None:  # its loader never saw it
                meta = self.metas[name]
                checkpoints[index] = (name, self.type_id(tuple(meta.shape), meta.dtype), ())
            else:
                checkpoints[index] = (name, record.checkpoint[1], self._items(record))
        declarations = self.targets.records(self.string_id, self.type_id)
        return declarations, self.types, self.strings, checkpoints

    def ir(self, title: str) -> str:
        """The whole capture as IR text: the module its records build, as
        MLIR prints it, below the title."""
        return f"// {title}\n" + _native.records_ir(*self.records_for_compiler())
