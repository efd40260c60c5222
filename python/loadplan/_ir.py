"""Spelling of loadplan IR text: dtypes, tensor types, strings, layouts.

The capture writes IR as text (the compiler parses it), so everything that
reaches the text goes through here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

INT64_MAX = (1 << 63) - 1

# torch dtype -> MLIR element type, for every dtype the plan format has a code
# for (runtime/include/loadplan/plan_format.h).
_ELEMENT_TYPES: dict[torch.dtype, str] = {
    torch.bfloat16: "bf16",
    torch.float16: "f16",
    torch.float32: "f32",
    torch.float64: "f64",
    torch.bool: "i1",
    torch.int8: "i8",
    torch.uint8: "ui8",
    torch.int16: "i16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.complex64: "complex<f32>",
    torch.complex128: "complex<f64>",
}
for _name, _type in [
    ("float8_e4m3fn", "f8E4M3FN"),
    ("float8_e5m2", "f8E5M2"),
    ("float8_e4m3fnuz", "f8E4M3FNUZ"),
    ("float8_e5m2fnuz", "f8E5M2FNUZ"),
    ("float8_e8m0fnu", "f8E8M0FNU"),
    ("uint16", "ui16"),
    ("uint32", "ui32"),
    ("uint64", "ui64"),
]:
    if hasattr(torch, _name):  # older torch lacks some of these
        _ELEMENT_TYPES[getattr(torch, _name)] = _type

# The plan's dtype names (getDtypeCodeName in lib/Transforms/Plan.cpp) are
# torch's attribute names.
_BY_PLAN_NAME: dict[str, torch.dtype] = {
    str(dtype).removeprefix("torch."): dtype for dtype in _ELEMENT_TYPES
}


def has_element_type(dtype: torch.dtype) -> bool:
    """Whether the IR (and so a plan) can hold tensors of ``dtype``."""
    return dtype in _ELEMENT_TYPES


def element_type(dtype: torch.dtype) -> str:
    try:
        return _ELEMENT_TYPES[dtype]
    except KeyError:
        raise ValueError(f"load plan: dtype {dtype} is not supported") from None


def dtype_from_plan(name: str) -> torch.dtype:
    """The torch dtype of a plan's dtype name ("bfloat16", ...)."""
    try:
        return _BY_PLAN_NAME[name]
    except KeyError:
        raise ValueError(f"load plan: unknown dtype {name!r} in the plan") from None


def tensor_type(shape: Sequence[int], dtype: torch.dtype) -> str:
    """``tensor<4x6xbf16>``; ``tensor<bf16>`` for a 0-dim tensor."""
    dims = "".join(f"{n}x" for n in shape)
    return f"tensor<{dims}{element_type(dtype)}>"


def ints(values: Iterable[int]) -> str:
    """``[1, 2, 3]``, as DenseI64ArrayAttr and box/layout attributes print."""
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def layout(offset: int, shape: Sequence[int], stride: Sequence[int]) -> str:
    return f"<offset = {int(offset)}, shape = {ints(shape)}, stride = {ints(stride)}>"


def string(text: str) -> str:
    """An MLIR string literal. The lexer knows ``\\"``, ``\\\\`` and ``\\XX``
    (two hex digits, one byte); everything outside printable ASCII goes as
    its UTF-8 bytes."""
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
