"""What the capture knows of aten ops: which read a tensor's values, which
read only its metadata, which write a constant, which the aten view table
lowers into records, and helpers over their arguments."""

from __future__ import annotations

from typing import Any

import torch

from .. import _native

aten = torch.ops.aten
META = torch.device("meta")

# The aten view table (include/loadplan/Records/AtenViews.h, which the
# torch.export importer follows too) by packet: the index of each op it
# holds, for _native.lower_view. Ops this torch lacks are left out.
VIEW_OPS: dict[Any, int] = {
    op: index
    for index, packet in enumerate(_native.ATEN_VIEWS)
    if (op := getattr(aten, packet.removeprefix("aten."), None)) is not None
}
# Any other view in its input's dtype is the as_strided torch computed.
ANY_VIEW = VIEW_OPS[aten.as_strided]

def op_name(func: Any) -> str:
    """``aten.mul.Tensor``; the default overload without its suffix."""
    name = str(func)
    return name.removesuffix(".default")


# Ops that read a trace's values.
VALUE_READS = {
    aten._local_scalar_dense,
    aten.item,
    aten.equal,
    aten.is_nonzero,
    aten.allclose,
}
# Queries a dispatcher may route through a subclass; they read no values.
METADATA_QUERIES = {
    aten.sym_size,
    aten.sym_stride,
    aten.sym_numel,
    aten.sym_storage_offset,
    aten.size,
    aten.stride,
    aten.is_same_size,
}
# Ops that read only their arguments' metadata.
METADATA_OPS = METADATA_QUERIES | {
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
CONSTANT_WRITES = {aten.fill_, aten.zero_, aten.copy_}


def normalize(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


_REQUIRED = object()


def arg(args: tuple, kwargs: dict, i: int, name: str, default: Any = _REQUIRED) -> Any:
    """Argument ``i`` (after the input) of an aten op, by position or name."""
    if len(args) > i + 1:
        return args[i + 1]
    if name in kwargs:
        return kwargs[name]
    if default is _REQUIRED:
        raise TypeError(f"load plan: missing argument {name!r}")
    return default


def written_args(func: Any, args: tuple, kwargs: dict) -> list[tuple[int, Any]]:
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


def leaves(args: tuple, kwargs: dict) -> list:
    """The values of an aten call's arguments: aten arguments are tensors,
    scalars and lists of them, so one level of list or tuple is all there
    is (no pytree walk)."""
    out = []
    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)):
            out.extend(value)
        else:
            out.append(value)
    return out


def map_args(fn: Any, args: tuple) -> tuple:
    """``args`` with ``fn`` applied to every value, lists and tuples one
    level down."""
    return tuple(
        type(a)(fn(v) for v in a) if isinstance(a, (list, tuple)) else fn(a) for a in args
    )

