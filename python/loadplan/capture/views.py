"""View handlers: one loadplan view op per torch view op a loader applies
to a trace."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _ir
from .ops import aten, normalize

if TYPE_CHECKING:
    from .trace import Sink, TraceTensor


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
    return normalize(_arg(args, kwargs, i, name, default), rank)


def _slice(sink: Sink, func, src: TraceTensor, args, kwargs):
    out = sink.meta_view(func, src, args, kwargs)
    dim = _dim(args, kwargs, 0, src.dim())
    start = _arg(args, kwargs, 1, "start", None)
    end = _arg(args, kwargs, 2, "end", None)
    step = _arg(args, kwargs, 3, "step", 1)
    start = 0 if start is None else int(start)
    end = _ir.INT64_MAX if end is None else min(int(end), _ir.INT64_MAX)
    return sink.view_op(src, out, "slice", dim, start, end, int(step))


def _select(sink: Sink, func, src, args, kwargs):
    out = sink.meta_view(func, src, args, kwargs)
    dim = _dim(args, kwargs, 0, src.dim())
    index = int(_arg(args, kwargs, 1, "index"))
    return sink.view_op(src, out, "select", dim, index)


def _narrow(sink: Sink, func, src, args, kwargs):
    out = sink.meta_view(func, src, args, kwargs)
    dim = _dim(args, kwargs, 0, src.dim())
    start = int(_arg(args, kwargs, 1, "start"))
    if start < 0:
        start += src.shape[dim]
    end = start + int(_arg(args, kwargs, 2, "length"))
    return sink.view_op(src, out, "slice", dim, start, end, 1)


def _transpose(sink: Sink, func, src, args, kwargs):
    out = sink.meta_view(func, src, args, kwargs)
    rank = src.dim()
    if rank == 0:
        return sink.view_op(src, out, "alias")
    d0 = _dim(args, kwargs, 0, rank, "dim0")
    d1 = _dim(args, kwargs, 1, rank, "dim1")
    return sink.view_op(src, out, "transpose", d0, d1)


def _t(sink: Sink, func, src, args, kwargs):
    out = sink.meta_view(func, src, args, kwargs)
    if src.dim() == 2:
        return sink.view_op(src, out, "transpose", 0, 1)
    return sink.view_op(src, out, "alias")


def _permute(sink: Sink, func, src, args, kwargs):
    out = sink.meta_view(func, src, args, kwargs)
    dims = [normalize(d, src.dim()) for d in _arg(args, kwargs, 0, "dims")]
    return sink.view_op(src, out, "permute", *dims)


def _expand(sink: Sink, func, src, args, kwargs):
    out = sink.meta_view(func, src, args, kwargs)
    same = tuple(out.shape) == tuple(src.shape)
    return sink.view_op(src, out, "alias" if same else "expand")


def _unsqueeze(sink: Sink, func, src, args, kwargs):
    out = sink.meta_view(func, src, args, kwargs)
    dim = _dim(args, kwargs, 0, src.dim() + 1)
    return sink.view_op(src, out, "unsqueeze", dim)


def _squeeze(sink: Sink, func, src, args, kwargs):
    out = sink.meta_view(func, src, args, kwargs)
    rank = src.dim()
    requested = _arg(args, kwargs, 0, "dim", None)
    if requested is None:
        requested = range(rank)
    elif isinstance(requested, int):
        requested = [requested]
    requested = {normalize(d, rank) for d in requested} if rank else set()
    # The dims that really go: listed, and of size 1 (torch keeps others).
    removed = [d for d in range(rank) if d in requested and src.shape[d] == 1]
    if not removed:
        return sink.view_op(src, out, "alias")
    return sink.view_op(src, out, "squeeze", *removed)


def _flatten(sink: Sink, func, src, args, kwargs):
    out = sink.meta_view(func, src, args, kwargs)
    rank = src.dim()
    if rank == 0:  # flatten of a scalar is a view as [1]
        return sink.view_op(src, out, "view")
    if tuple(out.shape) == tuple(src.shape):
        return sink.view_op(src, out, "alias")
    start = _dim(args, kwargs, 0, rank, "start_dim", 0)
    end = _dim(args, kwargs, 1, rank, "end_dim", -1)
    return sink.view_op(src, out, "flatten", start, end)


def _unflatten(sink: Sink, func, src, args, kwargs):
    out = sink.meta_view(func, src, args, kwargs)
    return sink.view_op(src, out, "unflatten", _dim(args, kwargs, 0, src.dim()))


def _view(sink: Sink, func, src, args, kwargs):
    out = sink.meta_view(func, src, args, kwargs)
    if out.dtype != src.dtype:  # view(dtype): a bitcast, not a layout
        return sink.apply(func, args, kwargs, [src])
    return sink.view_op(src, out, "view")


def _reshape(sink: Sink, func, src, args, kwargs):
    out = sink.meta_view(func, src, args, kwargs)
    return sink.view_op(src, out, "reshape")


def _as_strided(sink: Sink, func, src, args, kwargs):
    out = sink.meta_view(func, src, args, kwargs)
    # torch's default offset is the input's own; the IR spells it out.
    return sink.view_op(src, out, "as_strided", out.storage_offset(), *out.stride())


def _alias(sink: Sink, func, src, args, kwargs):
    out = sink.meta_view(func, src, args, kwargs)
    return sink.view_op(src, out, "alias")


def _split(sink: Sink, func, src, args, kwargs):
    """split / split_with_sizes / chunk: one slice per output."""
    outs = sink.meta_view(func, src, args, kwargs)
    dim = _dim(args, kwargs, 1, src.dim())
    views, start = [], 0
    for o in outs:
        end = start + o.shape[dim]
        views.append(
            sink.view_op(src, o, "slice", dim, start, end, 1)
        )
        start = end
    return type(outs)(views) if isinstance(outs, tuple) else views


def _unbind(sink: Sink, func, src, args, kwargs):
    outs = sink.meta_view(func, src, args, kwargs)
    dim = _dim(args, kwargs, 0, src.dim())
    views = [
        sink.view_op(src, o, "select", dim, i) for i, o in enumerate(outs)
    ]
    return type(outs)(views) if isinstance(outs, tuple) else views


VIEW_HANDLERS = {
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
