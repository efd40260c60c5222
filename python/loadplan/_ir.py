"""The codes of records, and the dtypes the IR holds.

The capture records every op of a loader, and the storages and targets it
writes, as int tuples: the compiler builds them into its module directly
(``_native.compile_records``), and their IR text is what MLIR's printer
prints of the ops built, made only when someone asks for it
(``_native.records_ir``). A record's fields are listed in
include/loadplan/Records/RecordOps.h. Values count from 0 in their block,
-1 being the incoming tensor ``%w``; types index a capture's table of
(shape, dtype code), and op names, reasons and other strings its string
table.
"""

from __future__ import annotations

import torch

from . import _native, _runtime

# The dtypes the IR has an element type for, from the runtime's one dtype
# table (LOADPLAN_DTYPES in runtime/include/loadplan/plan_format.h).
_IR_DTYPES: frozenset[torch.dtype] = frozenset(
    dtype for dtype, code in _runtime.DTYPE_CODES.items() if _native.dtype_mlir_type(code))


def has_element_type(dtype: torch.dtype) -> bool:
    """Whether the IR (and so a plan) can hold tensors of ``dtype``."""
    return dtype in _IR_DTYPES


def dtype_code(dtype: torch.dtype) -> int:
    """The runtime's code of ``dtype``, which records carry."""
    try:
        return _runtime.DTYPE_CODES[dtype]
    except KeyError:
        raise ValueError(f"load plan: dtype {dtype} is not supported") from None


RECORD_OPS: tuple[str, ...] = tuple(_native.RECORD_OPS)
OP_CODES: dict[str, int] = {name: code for code, name in enumerate(RECORD_OPS)}
COPY = OP_CODES["copy"]

TRANSFORMS: dict[str, tuple[int, int, int, int, int]] = {
    name: tuple(entry) for name, entry in _native.TRANSFORMS.items()}
"""The transforms a copy may write through (LOADPLAN_TRANSFORMS in
runtime/include/loadplan/plan_format.h), by name: (code, dtype code, atom
rows, atom columns, atom words). A copy record through one ends with its
code."""
