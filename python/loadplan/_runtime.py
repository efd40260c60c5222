"""The runtime from Python: open a plan, bind it to live torch tensors, apply
updates.

The runtime's C API (runtime/include/loadplan/runtime.h) is linked into
``loadplan._native`` (``Plan``, ``Binding``; python/native/Plan.cpp and
Binding.cpp), which takes plain integers. This module reads those off torch
tensors: the live layout of each target (``data_ptr``, byte offset, storage
size, dtype code, shape, stride) and the pointer, dtype and shape of each
incoming tensor, and passes a whole batch in one call. It knows nothing of load
plans' Python side (plan.py), so transfer code can bind and apply with it too.

Errors are the runtime's: ``StatusError`` (a ``RuntimeError``, with
``code`` and ``code_name``), and its subclasses ``InvalidPlan`` and
``InvalidUpdate`` (also ``ValueError``s) and ``FingerprintMismatch``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from math import prod

import torch

from . import _native

StatusError = _native.StatusError
InvalidPlan = _native.InvalidPlan
InvalidUpdate = _native.InvalidUpdate
FingerprintMismatch = _native.FingerprintMismatch
Plan = _native.Plan
UpdateCheck = _native.UpdateCheck
"""An update batch's check against a plan, for a plan with no binding:
``UpdateCheck(plan).check(batch)`` raises what ``Binding.check_update``
does and returns the fallback pairs; ``direct()`` the direct ones."""

STATUS_CODES: dict[str, int] = dict(_native.STATUS_CODES)
"""The runtime's status codes (loadplan_status_code_t) by name."""


def status_code(name: str) -> int:
    """The runtime's code of status ``name`` ("invalid_update", ...)."""
    return STATUS_CODES[name]


DEVICE_CPU, DEVICE_CUDA = 0, 1

# torch dtype <-> loadplan_dtype_t: the runtime names each code as torch does.
DTYPE_CODES: dict[torch.dtype, int] = {}
for _code in range(1, _native.DTYPE_COUNT):
    _dtype = getattr(torch, _native.dtype_name(_code), None)
    if isinstance(_dtype, torch.dtype):
        DTYPE_CODES[_dtype] = _code
DTYPES: dict[int, torch.dtype] = {c: d for d, c in DTYPE_CODES.items()}

def _torch_reader():
    """loadplan._torch_read's table: tensors read through torch's C++ API
    (built against the torch the build found). None where it is not built
    or does not load against this torch (LOADPLAN_TORCH_READ=0 also turns
    it off): the checks then read torch's Python properties, about a
    microsecond a tensor slower."""
    if os.environ.get("LOADPLAN_TORCH_READ", "1") == "0":
        return None
    try:
        from ._torch_read import API
    except ImportError:
        return None
    return API


_TORCH_READER = _torch_reader()
_native.set_torch_types(torch.Tensor, torch.strided, DTYPE_CODES, _TORCH_READER)
TORCH_READ: bool = _TORCH_READER is not None
"""Whether tensors are read through torch's C++ API (loadplan._torch_read)."""


def use_torch_read(on: bool) -> bool:
    """Reads tensors through torch's C++ API (``on``, where it loaded) or
    through torch's Python properties; returns whether it did before. For
    tests, which check that both reads agree."""
    before = _native.torch_read_loaded()
    _native.set_torch_types(torch.Tensor, torch.strided, DTYPE_CODES,
                            _TORCH_READER if on else None)
    return before

KINDS: tuple[str, ...] = tuple(_native.KIND_NAMES)
"""The kinds of a plan's names, by code: ("direct", "fallback", "unneeded"),
from the runtime's table (LOADPLAN_KINDS in plan_format.h)."""


def dtype_code(dtype: torch.dtype) -> int:
    try:
        return DTYPE_CODES[dtype]
    except KeyError:
        raise ValueError(f"load plan: the runtime has no dtype {dtype}") from None


def dtype_of(code: int) -> torch.dtype:
    try:
        return DTYPES[code]
    except KeyError:
        raise ValueError(f"load plan: unknown dtype code {code} in the plan") from None


def open_plan(source: bytes | str | os.PathLike) -> Plan:
    """Checks plan bytes, or reads and checks a plan file.

    Raises:
        InvalidPlan: the bytes are malformed (the message names what).
        StatusError: the file cannot be read.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return Plan.from_bytes(bytes(source))
    return Plan.from_file(os.fspath(source))


def fingerprint_mismatch(message: str) -> FingerprintMismatch:
    """The runtime's error for a layout found wrong before asking it."""
    error = FingerprintMismatch(message)
    error.code = status_code("fingerprint_mismatch")
    error.code_name = "fingerprint_mismatch"
    return error


def layout(t: torch.Tensor) -> tuple:
    """A target as the runtime binds it: (data, byte_offset, storage_size,
    dtype, shape, stride). ``data`` is the tensor's first byte."""
    return (
        t.data_ptr(),
        t.storage_offset() * t.element_size(),
        t.untyped_storage().nbytes(),
        dtype_code(t.dtype),
        tuple(t.shape),
        tuple(t.stride()),
    )


def device_of(tensors: Sequence[torch.Tensor]) -> torch.device:
    """The one device of ``tensors`` (the CPU when there are none).

    Raises:
        ValueError: they are on several devices, or on one the runtime has
            no executor for.
    """
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise ValueError(
            "load plan: the targets are on several devices "
            f"({', '.join(sorted(map(str, devices)))}); a binding has one"
        )
    device = devices.pop() if devices else torch.device("cpu")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"load plan: the runtime has no executor for {device.type} tensors")
    return device


class Binding:
    """A plan bound to live torch tensors, one per plan target in plan
    order. The tensors must stay where they are while the binding lives
    (the runtime holds their addresses); the binding keeps them alive.

    CPU: ``num_threads`` executor threads (None: all hardware threads).
    CUDA: copies run on torch's current stream of the targets' device."""

    def __init__(
        self, plan: Plan, targets: Sequence[torch.Tensor], *, num_threads: int | None = None
    ):
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"load plan: num_threads must be at least 1, got {num_threads}")
        self.targets = tuple(targets)
        self.device = device_of(self.targets)  # a CUDA tensor's device has an index
        cuda = self.device.type == "cuda"
        self._native = _native.Binding(
            plan,
            [layout(t) for t in self.targets],
            DEVICE_CUDA if cuda else DEVICE_CPU,
            self.device.index if cuda else 0,
            num_threads or 0,
        )

    @property
    def num_threads(self) -> int:
        """CPU executor threads (1 for CUDA)."""
        return self._native.num_threads

    def stats(self) -> dict[str, int]:
        """What the applies so far did, as the runtime counts it:
        ``applies`` (those that passed their checks), and what CUDA applies
        enqueued, ``kernel_launches`` and ``memcpy_calls`` (0 on the CPU)."""
        return self._native.stats()

    def close(self) -> None:
        self._native.close()

    def _stream(self) -> int:
        if self.device.type != "cuda":
            return 0
        return torch.cuda.current_stream(self.device).cuda_stream

    def _source(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` where the executor can read it, contiguous: CPU memory for
        the CPU; for CUDA memory of the device or pinned host memory (a
        kernel cannot read pageable memory)."""
        if self.device.type == "cpu":
            if t.device.type != "cpu":
                t = t.cpu()
        elif t.device != self.device and not (t.device.type == "cpu" and t.is_pinned()):
            t = t.to(self.device)
        return t.contiguous()

    def check_update(self, batch: list) -> list:
        """The fast path of an update: checks every (name, tensor) pair of
        ``batch`` in one native call and holds the direct ones for
        ``apply_checked``; returns the fallback pairs in order. Writes
        nothing.

        Raises:
            InvalidUpdate (a ValueError): naming the first pair that is not
                one of the plan's names, sent once, with its declared dtype
                and shape and dense bytes.
        """
        return self._native.check_update(batch)

    def apply_checked(self) -> None:
        """Applies what ``check_update`` held, in one runtime call; direct
        tensors it could not read where the executor does (another device,
        pageable memory for CUDA) are moved with torch first.

        Raises:
            InvalidUpdate: the runtime refused the batch; nothing was written.
        """
        if self._native.check_ready:
            self._native.apply_checked(self._stream())
        else:
            self.apply_tensors(self._native.checked_direct())

    def apply_tensors(self, tensors: Sequence[tuple[str, torch.Tensor]]) -> None:
        """Copies full checkpoint tensors into their destinations, in one
        runtime call: every name a direct entry, sent once, with the plan's
        dtype and shape. Nothing is written unless the whole batch is valid.

        Raises:
            InvalidUpdate: the batch was refused; the message says why.
        """
        sources = [(name, self._source(t)) for name, t in tensors]
        inputs = [
            (name, t.data_ptr(), dtype_code(t.dtype), tuple(t.shape)) for name, t in sources
        ]
        self._native.apply_tensors(inputs, self._stream())
        del sources  # (CUDA) stream-ordered frees of any staged copies

    def apply_boxes(
        self, boxes: Sequence[tuple[str, tuple[tuple[int, int], ...], torch.Tensor]]
    ) -> None:
        """Copies packed boxes, ``(name, box, elements)`` each with ``box``
        as ``LoadPlan.get_boxes`` lists it, in one runtime call: every named
        entry with all its boxes, each once. All or nothing.

        Raises:
            InvalidUpdate: the batch was refused; the message says why.
        """
        inputs = []
        sources = []
        for name, box, t in boxes:
            starts = tuple(a for a, _ in box)
            stops = tuple(b for _, b in box)
            # The runtime reads the box's volume from the pointer: refuse
            # fewer elements here, where the tensor's size is known.
            if t.numel() != prod(b - a for a, b in box):
                raise InvalidUpdate(
                    f"load plan: box {list(box)} of {name!r} has {prod(b - a for a, b in box)} "
                    f"elements but its tensor {t.numel()}; nothing was written"
                )
            t = self._source(t)
            sources.append(t)
            inputs.append((name, t.data_ptr(), dtype_code(t.dtype), starts, stops))
        self._native.apply_boxes(inputs, self._stream())
        del sources


def cuda_available() -> bool:
    """Whether the runtime has a CUDA executor and sees a device."""
    return _native.cuda_device_count() > 0
