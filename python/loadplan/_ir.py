"""Spelling of loadplan IR text: dtypes, tensor types, strings, layouts.

The capture writes IR as text (the compiler parses it), so everything that
reaches the text goes through here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from . import _native, _runtime

INT64_MAX = (1 << 63) - 1

# torch dtype -> MLIR element type, from the runtime's one dtype table
# (LOADPLAN_DTYPES in runtime/include/loadplan/plan_format.h).
_ELEMENT_TYPES: dict[torch.dtype, str] = {
    dtype: _native.dtype_mlir_type(code) for dtype, code in _runtime.DTYPE_CODES.items()
}


def has_element_type(dtype: torch.dtype) -> bool:
    """Whether the IR (and so a plan) can hold tensors of ``dtype``."""
    return dtype in _ELEMENT_TYPES


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
