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

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from . import _ir

aten = torch.ops.aten
_META = torch.device("meta")

# The reason a copy gets when its destination cannot be written as elements
# of its own dtype relative to any target (see _Sink._copy).
ELEMENT_SIZE_REASON = "copies into a destination viewed with another element size"


def _op_name(func: Any) -> str:
    """``aten.mul.Tensor``; the default overload without its suffix."""
    name = str(func)
    return name.removesuffix(".default")


# ---------------------------------------------------------------------------
# Targets: the live tensors a loader may write
# ---------------------------------------------------------------------------


@dataclass
class Target:
    """A parameter or buffer of the live model, as a write destination."""

    symbol: str  # @t<i> in the IR
    module: str
    tensor: str
    real: torch.Tensor
    owner: torch.nn.Module  # the module that holds it as `tensor`
    storage: str  # @s<j> in the IR
    byte_offset: int  # of its first element in its storage
    byte_extent: int  # from its first byte to one past its last

    @property
    def qualified_name(self) -> str:
        return f"{self.module}.{self.tensor}" if self.module else self.tensor


def storage_key(t: torch.Tensor) -> int:
    """The identity of ``t``'s storage (shared by all views of it)."""
    return t.untyped_storage()._cdata


def _byte_extent(t: torch.Tensor) -> int:
    if t.numel() == 0:
        return 0
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return (last + 1) * t.element_size()


class Targets:
    """Every parameter and buffer the IR can hold, grouped by storage."""

    def __init__(self, model: torch.nn.Module):
        self.targets: list[Target] = []
        # storage key -> (symbol, size in bytes, targets by byte offset)
        self.storages: dict[int, tuple[str, int, list[Target]]] = {}
        seen: set[int] = set()
        tensors = itertools.chain(model.named_parameters(), model.named_buffers())
        for name, t in tensors:
            if t is None or id(t) in seen:
                continue
            seen.add(id(t))
            if t.is_meta or not _ir.has_element_type(t.dtype):
                continue  # nothing to write into, or no IR type for it
            key = storage_key(t)
            if key not in self.storages:
                size = t.untyped_storage().nbytes()
                self.storages[key] = (f"s{len(self.storages)}", size, [])
            symbol, _, on_storage = self.storages[key]
            module, _, tensor = name.rpartition(".")
            target = Target(
                symbol=f"t{len(self.targets)}",
                module=module,
                tensor=tensor,
                real=t,
                owner=model.get_submodule(module),
                storage=symbol,
                byte_offset=t.storage_offset() * t.element_size(),
                byte_extent=_byte_extent(t),
            )
            self.targets.append(target)
            on_storage.append(target)
        for _, _, on_storage in self.storages.values():
            on_storage.sort(key=lambda tg: tg.byte_offset)

    def on_storage(self, t: torch.Tensor) -> list[Target]:
        """The targets that share ``t``'s storage (none: not a target)."""
        entry = self.storages.get(storage_key(t))
        return entry[2] if entry else []

    def locate(self, t: torch.Tensor) -> tuple[Target | None, int | None]:
        """The target to write ``t`` relative to, and ``t``'s offset from its
        first byte in elements of ``t``'s dtype.

        Prefers the target that holds ``t``'s first byte; any earlier target
        of the storage does if its distance is a whole number of elements.
        ``(target, None)``: ``t`` is in a target storage but no target gives
        a whole offset; ``(None, None)``: ``t`` is in no target storage, or
        before every target of it.
        """
        on_storage = self.on_storage(t)
        start = t.storage_offset() * t.element_size()
        size = t.element_size()
        holding = aligned = None
        earlier = None
        for target in on_storage:
            if target.byte_offset > start:
                break
            earlier = target
            rel = start - target.byte_offset
            if rel % size:
                continue
            aligned = target
            if rel < target.byte_extent:
                holding = target
        chosen = holding or aligned
        if chosen is not None:
            return chosen, (start - chosen.byte_offset) // size
        return earlier, None

    def ir(self) -> list[str]:
        lines = []
        for symbol, size, _ in self.storages.values():
            lines.append(f"loadplan.storage @{symbol} size {size}")
        for tg in self.targets:
            t = tg.real
            lines.append(
                f"loadplan.target @{tg.symbol} module {_ir.string(tg.module)} "
                f"tensor {_ir.string(tg.tensor)} storage @{tg.storage} "
                f"byte_offset {tg.byte_offset} stride {_ir.ints(t.stride())} "
                f": {_ir.tensor_type(t.shape, t.dtype)}"
            )
        return lines


# ---------------------------------------------------------------------------
# Traces
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _TargetRead:
    """A ``read_target`` line, kept only if some name writes its storage:
    reading a buffer no checkpoint tensor goes into (an expert map, say) is
    the loader's own business."""

    storage: str
    line: str


class _Record:
    """One checkpoint name's block: the ops its traces went through."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: torch.dtype):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.lines: list[str | _TargetRead] = []
        self._next = 0

    def fresh(self) -> str:
        value = f"%{self._next}"
        self._next += 1
        return value


class TraceTensor(torch.Tensor):
    """A data-free stand-in for an incoming checkpoint tensor or a view of
    it. ``_meta`` is a meta tensor with the same layout (views of it keep
    torch's storage offsets, which ``as_strided`` needs); ``_value`` is its
    SSA value in its name's block."""

    _sink: _Sink
    _record: _Record
    _value: str
    _meta: torch.Tensor

    @staticmethod
    def __new__(cls, sink: _Sink, record: _Record, value: str, meta: torch.Tensor):
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            meta.shape,
            strides=meta.stride(),
            storage_offset=meta.storage_offset(),
            dtype=meta.dtype,
            device=_META,
            requires_grad=False,
        )
        r._sink = sink
        r._record = record
        r._value = value
        r._meta = meta
        return r

    def __init__(self, *args: Any, **kwargs: Any):
        pass

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        traces = [
            a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, TraceTensor)
        ]
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


class _Stopped(Exception):
    """A loader needs a trace's values, or an op on it fails on meta: the
    loader cannot go on. ``name`` is the trace's name."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class TraceUsedAfterPlanning(RuntimeError):
    """A trace was used after its capture ended."""


# Ops that read a trace's values.
_VALUE_READS = {
    aten._local_scalar_dense,
    aten.item,
    aten.equal,
    aten.is_nonzero,
    aten.allclose,
}
# Queries a dispatcher may route through a subclass; they read no values.
_METADATA_QUERIES = {
    aten.sym_size,
    aten.sym_stride,
    aten.sym_numel,
    aten.sym_storage_offset,
    aten.size,
    aten.stride,
    aten.is_same_size,
}
# Ops that read only their arguments' metadata.
_METADATA_OPS = _METADATA_QUERIES | {
    aten.empty_like,
    aten.zeros_like,
    aten.ones_like,
    aten.full_like,
    aten.new_empty,
    aten.new_empty_strided,
    aten.new_zeros,
    aten.new_ones,
    aten.new_full,
}
# Ops that write a constant, or a real tensor's values, into their first
# argument and read only the others.
_CONSTANT_WRITES = {aten.fill_, aten.zero_, aten.copy_}


def _normalize(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def _to_meta(a: Any) -> Any:
    if isinstance(a, TraceTensor):
        return a._meta
    if isinstance(a, torch.Tensor):
        return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=_META)
    if isinstance(a, torch.device):
        return _META
    return a


def _written_args(func: Any, args: tuple, kwargs: dict) -> list[tuple[int, Any]]:
    """(position, value) of the arguments ``func`` writes (in place or out=)."""
    schema = getattr(func, "_schema", None)
    out = []
    for i, arg in enumerate(getattr(schema, "arguments", ())):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
        if value is not None:
            out.append((i, value))
    return out


def _elem_type_or_bytes(t: torch.Tensor) -> str:
    """The IR type of a result without a layout. A dtype the IR lacks is
    spelt as i8: such a value is only ever a reason, never a write."""
    if _ir.has_element_type(t.dtype):
        return _ir.tensor_type(t.shape, t.dtype)
    return _ir.tensor_type(t.shape, torch.int8)


class _Sink:
    """One capture: the records of every name, and the handlers the traces
    and the guard call."""

    def __init__(self, targets: Targets, metas: Mapping[str, Any]):
        self.targets = targets
        self.metas = metas
        self.records: dict[str, _Record] = {}
        # The name last handed to load_weights, or last copied from: a real
        # op that reads a target is recorded in its block.
        self.current: _Record | None = None
        # Constant writes before the first name arrived.
        self.pending: list[str] = []
        # Storages a name writes (copy_ or an in-place op from a trace).
        self.written: set[str] = set()
        self.closed = False

    # -- names -------------------------------------------------------------

    def weights(self, names: list[str]) -> Iterator[tuple[str, torch.Tensor]]:
        for name in names:
            meta = self.metas[name]
            shape, dtype = tuple(meta.shape), meta.dtype
            # A name handed out again (the loader read ahead of a stop)
            # starts a fresh block: its earlier trace is never replayed.
            record = _Record(name, shape, dtype)
            if not self.records and self.pending:
                record.lines.extend(self.pending)
                self.pending.clear()
            self.records[name] = record
            self.current = record
            incoming = torch.empty(shape, dtype=dtype, device=_META)
            yield name, TraceTensor(self, record, "%w", incoming)

    def _check_open(self, trace: TraceTensor) -> None:
        if self.closed:
            raise TraceUsedAfterPlanning(
                f"load plan: a planning trace of {trace._record.name!r} was used "
                "after planning; a loader keeps an incoming tensor across "
                "load_weights calls, which the load plan does not support"
            )

    def _emit(self, record: _Record, line: str) -> None:
        record.lines.append(line)

    def _emit_current(self, line: str) -> None:
        if self.current is not None:
            self.current.lines.append(line)
        else:
            self.pending.append(line)

    # -- events that stop the loader ----------------------------------------

    def value_read(self, trace: TraceTensor, op: str) -> NoReturn:
        self._check_open(trace)
        t = trace._meta
        self._emit(
            trace._record,
            f"loadplan.value_read {trace._value} op {_ir.string(op)} "
            f": {_ir.tensor_type(t.shape, t.dtype)}",
        )
        raise _Stopped(trace._record.name)

    def _meta_failure(self, func: Any, traces: list[TraceTensor], error: Exception):
        record = traces[0]._record
        own = [t for t in traces if t._record is record]
        values = ", ".join(t._value for t in own)
        types = ", ".join(_ir.tensor_type(t.shape, t.dtype) for t in own)
        self._emit(
            record,
            f"loadplan.meta_failure {_ir.string(_op_name(func))} ({values}) : {types}",
        )
        raise _Stopped(record.name) from error

    # -- ops on traces -------------------------------------------------------

    def dispatch(self, func: Any, args: tuple, kwargs: dict, traces: list) -> Any:
        self._check_open(traces[0])
        packet = func.overloadpacket
        if packet in _VALUE_READS:
            self.value_read(traces[0], _op_name(func))
        if packet is aten.copy_:
            if not isinstance(args[0], TraceTensor):
                return self._copy(args[0], args[1], func, args, kwargs)
            return self._apply(func, args, kwargs, traces)
        if packet in _METADATA_QUERIES:
            return func(*pytree.tree_map(_to_meta, args), **kwargs)
        src = args[0] if args else None
        only_src = isinstance(src, TraceTensor) and len(traces) == 1
        if only_src:
            handler = _VIEW_HANDLERS.get(packet)
            if handler is not None:
                return handler(self, func, src, args, kwargs)
            if packet is aten.detach_:
                return src
            if packet is aten.clone:
                return self._unary(func, src, args, kwargs, "clone")
            if packet is aten._to_copy:
                return self._to_copy(func, src, args, kwargs)
            if func.is_view:
                view = self._generic_view(func, src, args, kwargs)
                if view is not None:
                    return view
        return self._apply(func, args, kwargs, traces)

    def _run_meta(self, func: Any, args: tuple, kwargs: dict) -> Any:
        return func(*pytree.tree_map(_to_meta, args), **pytree.tree_map(_to_meta, kwargs))

    def _new(self, record: _Record, value: str, meta: torch.Tensor) -> TraceTensor:
        return TraceTensor(self, record, value, meta)

    def _view_op(
        self, src: TraceTensor, out: torch.Tensor, op: str, attrs: str = ""
    ) -> TraceTensor:
        """Emits ``%r = loadplan.<op> %src <attrs> : in -> out``."""
        record = src._record
        value = record.fresh()
        attrs = f" {attrs}" if attrs else ""
        in_type = _ir.tensor_type(src.shape, src.dtype)
        if op in ("alias", "clone"):
            sig = in_type
        else:
            sig = f"{in_type} -> {_ir.tensor_type(out.shape, out.dtype)}"
        self._emit(record, f"{value} = loadplan.{op} {src._value}{attrs} : {sig}")
        return self._new(record, value, out)

    def _unary(self, func, src, args, kwargs, op: str) -> TraceTensor:
        out = self._run_meta(func, args, kwargs)
        return self._view_op(src, out, op)

    def _to_copy(self, func, src: TraceTensor, args, kwargs) -> TraceTensor:
        out = self._run_meta(func, args, {**kwargs, "device": _META})
        if out.dtype == src.dtype:
            return self._view_op(src, out, "clone")
        if not _ir.has_element_type(out.dtype):
            return self._apply(func, args, kwargs, [src])
        return self._view_op(src, out, "convert")

    def _generic_view(self, func, src: TraceTensor, args, kwargs):
        """Any other view in the input's dtype, as the as_strided torch
        computed (one per output)."""
        out = self._run_meta(func, args, kwargs)
        outs = out if isinstance(out, (list, tuple)) else [out]
        if not outs or not all(
            isinstance(o, torch.Tensor) and o.dtype == src.dtype for o in outs
        ):
            return None
        views = [
            self._view_op(
                src, o, "as_strided", _ir.layout(o.storage_offset(), o.shape, o.stride())
            )
            for o in outs
        ]
        return type(out)(views) if isinstance(out, (list, tuple)) else views[0]

    def _copy(self, dest: torch.Tensor, src: Any, func, args, kwargs) -> torch.Tensor:
        """``dest.copy_(src)`` with a real ``dest`` and a trace ``src``."""
        # torch's own checks (shapes that do not broadcast, ...), on meta.
        self._run_meta(func, args, kwargs)
        record = src._record
        self.current = record
        src_type = _ir.tensor_type(src.shape, src.dtype)
        target, offset = self.targets.locate(dest)
        op = _ir.string(_op_name(func))
        if target is None or not _ir.has_element_type(dest.dtype):
            self._emit(record, f"loadplan.write_other {op} ({src._value}) : {src_type}")
            return dest
        self.written.add(target.storage)
        if offset is None:
            # The IR holds destinations in elements of their own dtype from
            # a target's first byte; this one has no such offset.
            self._emit(
                record,
                f"loadplan.apply {op} ({src._value}) "
                f"{{reason = {_ir.string(ELEMENT_SIZE_REASON)}}} : ({src_type}) -> ()",
            )
            self._emit(
                record,
                f"loadplan.inplace_write {op} ({src._value}) into @{target.symbol} "
                f": {src_type}",
            )
        else:
            self._emit(
                record,
                f"loadplan.copy {src._value} to @{target.symbol} "
                f"{_ir.layout(offset, dest.shape, dest.stride())} "
                f"as {_ir.element_type(dest.dtype)} : {src_type}",
            )
        return dest

    def _apply(self, func, args: tuple, kwargs: dict, traces: list) -> Any:
        """Any other op: run on meta copies of its arguments, so it writes
        no real tensor; its tensor results are traces without a layout."""
        first = traces[0]
        record = first._record
        own = [t for t in traces if t._record is record]
        names = list(dict.fromkeys(t._record.name for t in traces if t._record is not record))
        flat, spec = pytree.tree_flatten((args, kwargs))
        meta_flat = [_to_meta(a) for a in flat]
        meta_args, meta_kwargs = pytree.tree_unflatten(meta_flat, spec)
        try:
            out = func(*meta_args, **meta_kwargs)
        except Exception as e:  # no meta kernel, a shape error, ...
            self._meta_failure(func, traces, e)
        originals = {id(m): a for m, a in zip(meta_flat, flat) if isinstance(a, torch.Tensor)}

        op = _ir.string(_op_name(func))
        values = ", ".join(t._value for t in own)
        in_types = ", ".join(_ir.tensor_type(t.shape, t.dtype) for t in own)
        written = [
            v
            for _, value in _written_args(func, args, kwargs)
            for v in pytree.tree_leaves(value)
            if isinstance(v, torch.Tensor) and not isinstance(v, TraceTensor)
        ]
        if written:
            # Writes a real tensor from a trace: the write happens on meta
            # only, and the name falls back.
            if names:
                self._emit(
                    record,
                    f"loadplan.apply {op} ({values}) {{names = {_ir.string_array(names)}}} "
                    f": ({in_types}) -> ()",
                )
            for real in written:
                target, _ = self.targets.locate(real)
                into = ""
                if target is not None:
                    into = f" into @{target.symbol}"
                    self.written.add(target.storage)
                self._emit(
                    record, f"loadplan.inplace_write {op} ({values}){into} : {in_types}"
                )

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
        attrs = []
        if names and not written:
            attrs.append(f"names = {_ir.string_array(names)}")
        attr_text = f" {{{', '.join(attrs)}}}" if attrs else ""
        if results or not written:
            out_types = ", ".join(_elem_type_or_bytes(o) for _, o in results)
            if len(results) != 1:
                out_types = f"({out_types})"
            lhs = f"{', '.join(result_values)} = " if results else ""
            self._emit(
                record,
                f"{lhs}loadplan.apply {op} ({values}){attr_text} : ({in_types}) -> {out_types}",
            )
        for (k, o), value in zip(results, result_values):
            if isinstance(wrapped[k], TraceTensor):
                wrapped[k]._value = value  # written in place: a new value
            else:
                wrapped[k] = self._new(record, value, o)
        return pytree.tree_unflatten(wrapped, out_spec)

    # -- real ops (from the guard) ------------------------------------------

    def check_reads(self, func: Any, args: tuple, kwargs: dict) -> None:
        """Records a real op's reads of target storages."""
        if self.current is None:
            return
        constant = func.overloadpacket in _CONSTANT_WRITES
        write_only = {
            i for i, _ in _written_args(func, args, kwargs) if constant
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
                line = (
                    f"loadplan.read_target @{on_storage[0].symbol} "
                    f"op {_ir.string(_op_name(func))}"
                )
                self.current.lines.append(_TargetRead(on_storage[0].storage, line))

    def constant_write(self, func: Any, dest: torch.Tensor) -> None:
        if not isinstance(dest, torch.Tensor) or not _ir.has_element_type(dest.dtype):
            return
        target, offset = self.targets.locate(dest)
        if target is None or offset is None:
            return  # only coverage needs it
        self._emit_current(
            f"loadplan.constant_write {_ir.string(_op_name(func))} @{target.symbol} "
            f"{_ir.layout(offset, dest.shape, dest.stride())} "
            f"as {_ir.element_type(dest.dtype)}"
        )

    # -- the IR --------------------------------------------------------------

    def ir(self, title: str) -> str:
        lines = [f"// {title}", "module {"]
        lines += [f"  {line}" for line in self.targets.ir()]
        for name, meta in self.metas.items():
            shape, dtype = tuple(meta.shape), meta.dtype
            lines.append(
                f"  loadplan.checkpoint {_ir.string(name)} "
                f": {_ir.tensor_type(shape, dtype)} (%w) {{"
            )
            record = self.records.get(name)
            for line in record.lines if record is not None else ():
                if isinstance(line, _TargetRead):
                    if line.storage not in self.written:
                        continue
                    line = line.line
                lines.append(f"    {line}")
            lines.append("  }")
        lines.append("}")
        return "\n".join(lines) + "\n"



# ---------------------------------------------------------------------------
# View handlers: one loadplan view op per torch view op
# ---------------------------------------------------------------------------


_REQUIRED = object()


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any = _REQUIRED) -> Any:
    """Argument ``i`` (after the input) of an aten op, by position or name."""
    if len(args) > i + 1:
        return args[i + 1]
    if name in kwargs:
        return kwargs[name]
    if default is _REQUIRED:
        raise TypeError(f"load plan: missing argument {name!r}")
    return default


def _dim(args: tuple, kwargs: dict, i: int, rank: int, name: str = "dim", default: Any = 0) -> int:
    return _normalize(_arg(args, kwargs, i, name, default), rank)


def _slice(sink: _Sink, func, src: TraceTensor, args, kwargs):
    out = sink._run_meta(func, args, kwargs)
    dim = _dim(args, kwargs, 0, src.dim())
    start = _arg(args, kwargs, 1, "start", None)
    end = _arg(args, kwargs, 2, "end", None)
    step = _arg(args, kwargs, 3, "step", 1)
    start = 0 if start is None else int(start)
    end = _ir.INT64_MAX if end is None else min(int(end), _ir.INT64_MAX)
    return sink._view_op(src, out, "slice", f"dim {dim} start {start} end {end} step {step}")


def _select(sink: _Sink, func, src, args, kwargs):
    out = sink._run_meta(func, args, kwargs)
    dim = _dim(args, kwargs, 0, src.dim())
    index = int(_arg(args, kwargs, 1, "index"))
    return sink._view_op(src, out, "select", f"dim {dim} index {index}")


def _narrow(sink: _Sink, func, src, args, kwargs):
    out = sink._run_meta(func, args, kwargs)
    dim = _dim(args, kwargs, 0, src.dim())
    start = int(_arg(args, kwargs, 1, "start"))
    if start < 0:
        start += src.shape[dim]
    end = start + int(_arg(args, kwargs, 2, "length"))
    return sink._view_op(src, out, "slice", f"dim {dim} start {start} end {end} step 1")


def _transpose(sink: _Sink, func, src, args, kwargs):
    out = sink._run_meta(func, args, kwargs)
    rank = src.dim()
    if rank == 0:
        return sink._view_op(src, out, "alias")
    d0 = _dim(args, kwargs, 0, rank, "dim0")
    d1 = _dim(args, kwargs, 1, rank, "dim1")
    return sink._view_op(src, out, "transpose", f"dim0 {d0} dim1 {d1}")


def _t(sink: _Sink, func, src, args, kwargs):
    out = sink._run_meta(func, args, kwargs)
    if src.dim() == 2:
        return sink._view_op(src, out, "transpose", "dim0 0 dim1 1")
    return sink._view_op(src, out, "alias")


def _permute(sink: _Sink, func, src, args, kwargs):
    out = sink._run_meta(func, args, kwargs)
    dims = [_normalize(d, src.dim()) for d in _arg(args, kwargs, 0, "dims")]
    return sink._view_op(src, out, "permute", f"dims {_ir.ints(dims)}")


def _expand(sink: _Sink, func, src, args, kwargs):
    out = sink._run_meta(func, args, kwargs)
    same = tuple(out.shape) == tuple(src.shape)
    return sink._view_op(src, out, "alias" if same else "expand")


def _unsqueeze(sink: _Sink, func, src, args, kwargs):
    out = sink._run_meta(func, args, kwargs)
    dim = _dim(args, kwargs, 0, src.dim() + 1)
    return sink._view_op(src, out, "unsqueeze", f"dim {dim}")


def _squeeze(sink: _Sink, func, src, args, kwargs):
    out = sink._run_meta(func, args, kwargs)
    rank = src.dim()
    requested = _arg(args, kwargs, 0, "dim", None)
    if requested is None:
        requested = range(rank)
    elif isinstance(requested, int):
        requested = [requested]
    requested = {_normalize(d, rank) for d in requested} if rank else set()
    # The dims that really go: listed, and of size 1 (torch keeps others).
    removed = [d for d in range(rank) if d in requested and src.shape[d] == 1]
    if not removed:
        return sink._view_op(src, out, "alias")
    return sink._view_op(src, out, "squeeze", f"dims {_ir.ints(removed)}")


def _flatten(sink: _Sink, func, src, args, kwargs):
    out = sink._run_meta(func, args, kwargs)
    rank = src.dim()
    if rank == 0:  # flatten of a scalar is a view as [1]
        return sink._view_op(src, out, "view")
    if tuple(out.shape) == tuple(src.shape):
        return sink._view_op(src, out, "alias")
    start = _dim(args, kwargs, 0, rank, "start_dim", 0)
    end = _dim(args, kwargs, 1, rank, "end_dim", -1)
    return sink._view_op(src, out, "flatten", f"start_dim {start} end_dim {end}")


def _unflatten(sink: _Sink, func, src, args, kwargs):
    out = sink._run_meta(func, args, kwargs)
    return sink._view_op(src, out, "unflatten", f"dim {_dim(args, kwargs, 0, src.dim())}")


def _view(sink: _Sink, func, src, args, kwargs):
    out = sink._run_meta(func, args, kwargs)
    if out.dtype != src.dtype:  # view(dtype): a bitcast, not a layout
        return sink._apply(func, args, kwargs, [src])
    return sink._view_op(src, out, "view")


def _reshape(sink: _Sink, func, src, args, kwargs):
    out = sink._run_meta(func, args, kwargs)
    return sink._view_op(src, out, "reshape")


def _as_strided(sink: _Sink, func, src, args, kwargs):
    out = sink._run_meta(func, args, kwargs)
    # torch's default offset is the input's own; the IR spells it out.
    layout = _ir.layout(out.storage_offset(), out.shape, out.stride())
    return sink._view_op(src, out, "as_strided", layout)


def _alias(sink: _Sink, func, src, args, kwargs):
    out = sink._run_meta(func, args, kwargs)
    return sink._view_op(src, out, "alias")


def _split(sink: _Sink, func, src, args, kwargs):
    """split / split_with_sizes / chunk: one slice per output."""
    outs = sink._run_meta(func, args, kwargs)
    dim = _dim(args, kwargs, 1, src.dim())
    views, start = [], 0
    for o in outs:
        end = start + o.shape[dim]
        views.append(
            sink._view_op(src, o, "slice", f"dim {dim} start {start} end {end} step 1")
        )
        start = end
    return type(outs)(views) if isinstance(outs, tuple) else views


def _unbind(sink: _Sink, func, src, args, kwargs):
    outs = sink._run_meta(func, args, kwargs)
    dim = _dim(args, kwargs, 0, src.dim())
    views = [
        sink._view_op(src, o, "select", f"dim {dim} index {i}") for i, o in enumerate(outs)
    ]
    return type(outs)(views) if isinstance(outs, tuple) else views


_VIEW_HANDLERS = {
    aten.slice: _slice,
    aten.select: _select,
    aten.narrow: _narrow,
    aten.transpose: _transpose,
    aten.t: _t,
    aten.permute: _permute,
    aten.expand: _expand,
    aten.unsqueeze: _unsqueeze,
    aten.squeeze: _squeeze,
    aten.flatten: _flatten,
    aten.unflatten: _unflatten,
    aten.view: _view,
    aten._unsafe_view: _view,
    aten._reshape_alias: _view,
    aten.reshape: _reshape,
    aten.as_strided: _as_strided,
    aten.alias: _alias,
    aten.detach: _alias,
    aten.lift_fresh: _alias,
    aten.split: _split,
    aten.unsafe_split: _split,
    aten.split_with_sizes: _split,
    aten.unsafe_split_with_sizes: _split,
    aten.chunk: _split,
    aten.unbind: _unbind,
}


# ---------------------------------------------------------------------------
# The guard over real ops, and the driver
# ---------------------------------------------------------------------------


class _TargetGuard(TorchDispatchMode):
    """Ops on real tensors alone run for real. One that reads a target (not
    a view, not only metadata) is recorded as ``read_target`` in the block of
    the name being loaded; ``fill_``/``zero_`` (and ``copy_`` of a real
    tensor) into a target as ``constant_write``. Reads that bypass the
    dispatcher (``tolist()`` or ``numpy()`` of a CPU tensor) go unseen."""

    def __init__(self, sink: _Sink):
        super().__init__()
        self.sink = sink

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(isinstance(a, TraceTensor) for a in pytree.tree_leaves((args, kwargs))):
            return func(*args, **kwargs)  # the trace's own handler
        packet = func.overloadpacket
        if func.is_view or packet in _METADATA_OPS:
            return func(*args, **kwargs)
        self.sink.check_reads(func, args, kwargs)
        out = func(*args, **kwargs)
        if packet in _CONSTANT_WRITES and args:
            self.sink.constant_write(func, args[0])
        return out


@dataclass
class Capture:
    """What one capture produced: the IR text, and the targets its symbols
    name (``@t<i>`` is ``targets.targets[i]``)."""

    ir: str
    targets: Targets


def capture(model: torch.nn.Module, metadata: Mapping[str, Any] | Iterable[Any]) -> Capture:
    """Runs ``model.load_weights`` over one trace per declared name and
    returns the captured IR. ``metadata`` is ``ParamMeta``s in arrival order
    (or a mapping from name to them); ``plan_loads`` checks it first.

    Raises:
        RuntimeError: the loader failed, or used a trace it kept across
            names or after planning.
    """
    if isinstance(metadata, Mapping):
        metas = dict(metadata)
    else:
        metas = {meta.name: meta for meta in metadata}
    targets = Targets(model)
    sink = _Sink(targets, metas)
    names = list(metas)
    start = 0
    try:
        with torch.no_grad(), _TargetGuard(sink):
            while start < len(names):
                try:
                    model.load_weights(sink.weights(names[start:]))
                    break
                except _Stopped as stop:
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
    return Capture(ir=sink.ir(title), targets=targets)
