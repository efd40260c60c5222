"""Spelling of loadplan IR text: dtypes, tensor types, strings, layouts;
and the codes of records.

The capture records its ops as int tuples where it can (the compiler
builds those into its module directly, and their text is what MLIR's
printer prints of the ops built) and as lines of IR text otherwise, which
are spelt here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from . import _native, _runtime

# torch dtype -> MLIR element type, from the runtime's one dtype table
# (LOADPLAN_DTYPES in runtime/include/loadplan/plan_format.h).
_ELEMENT_TYPES: dict[torch.dtype, str] = {
    dtype: _native.dtype_mlir_type(code) for dtype, code in _runtime.DTYPE_CODES.items()
}


def has_element_type(dtype: torch.dtype) -> bool:
    """Whether the IR (and so a plan) can hold tensors of ``dtype``."""
    return dtype in _ELEMENT_TYPES


def dtype_code(dtype: torch.dtype) -> int:
    """The runtime's code of ``dtype``, which records carry."""
    try:
        return _runtime.DTYPE_CODES[dtype]
    except KeyError:
        raise ValueError(f"load plan: dtype {dtype} is not supported") from None


def target_symbol(index: int) -> str:
    """The symbol of target ``index`` (``@t<index>`` in the IR)."""
    return f"t{index}"


def value_name(v: int) -> str:
    """``%w`` (-1: the incoming tensor) or ``%<v>``."""
    return "%w" if v < 0 else f"%{v}"


def element_type(dtype: torch.dtype) -> str:
    try:
        return _ELEMENT_TYPES[dtype]
    except KeyError:
        raise ValueError(f"load plan: dtype {dtype} is not supported") from None


_TENSOR_TYPES: dict[tuple, str] = {}


def tensor_type(shape: Sequence[int], dtype: torch.dtype) -> str:
    """``tensor<4x6xbf16>``; ``tensor<bf16>`` for a 0-dim tensor."""
    key = (tuple(shape), dtype)
    text = _TENSOR_TYPES.get(key)
    if text is None:
        dims = "".join(f"{n}x" for n in shape)
        text = _TENSOR_TYPES[key] = f"tensor<{dims}{element_type(dtype)}>"
    return text


def ints(values: Iterable[int]) -> str:
    """``[1, 2, 3]``, as DenseI64ArrayAttr and box/layout attributes print."""
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def layout(offset: int, shape: Sequence[int], stride: Sequence[int]) -> str:
    return f"<offset = {int(offset)}, shape = {ints(shape)}, stride = {ints(stride)}>"


def string(text: str) -> str:
    """An MLIR string literal. The lexer knows ``\\"``, ``\\\\`` and ``\\XX``
    (two hex digits, one byte); everything outside printable ASCII goes as
    its UTF-8 bytes."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'  # nothing to escape: the common case
    out = ['"']
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{byte:02X}")
    out.append('"')
    return "".join(out)


def string_array(texts: Iterable[str]) -> str:
    return "[" + ", ".join(string(t) for t in texts) + "]"


# -- records -----------------------------------------------------------------
#
# The ops nearly every loader is made of, the view ops and copy_, are
# recorded as int tuples, not text: the compiler builds them into its
# module directly (``_native.compile_records``), and their text is made
# only when someone asks for the IR (``_native.records_ir``). A record's
# layout is in include/loadplan/Records/RecordOps.h: (code, result, input,
# input type, result type, ints...) for a view op, (code, source, source
# type, target, dtype code, offset, shape..., stride...) for a copy. Values
# count from 0 in their block, -1 being the incoming tensor ``%w``; types
# index a capture's table of (shape, dtype code).

RECORD_OPS: tuple[str, ...] = tuple(_native.RECORD_OPS)
OP_CODES: dict[str, int] = {name: code for code, name in enumerate(RECORD_OPS)}
COPY = OP_CODES["copy"]
