"""Transfer schedules: what every rank moves in each round of an update,
computed once by the runtime from every sender's holdings and every
receiver's plan (schedule_format.h)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import _native, _runtime
from ..plan import Box, ParamMeta

ENGINES: dict[str, int] = dict(_native.ENGINES)
"""The runtime's engines by name: "full", "sliced", "m_to_n"."""
BACKENDS: dict[str, int] = dict(_native.BACKENDS)
"""The runtime's backends by name: "gloo", "nccl"."""
DEFAULT_STAGING_CAP: int = _native.DEFAULT_STAGING_CAP
DEFAULT_JOIN_BELOW: int = _native.DEFAULT_JOIN_BELOW
"""Pieces of fewer bytes between one sender and one receiver in a round
travel as one message, unless a schedule is made with another
``join_below``."""

TransferError = _native.TransferError
"""A transfer call failed; ``code`` and ``code_name`` are the runtime's
status. Raised on every rank of a failed collective, with the first failing
rank's message."""


def transfer_error(message: str, code_name: str) -> TransferError:
    """A TransferError of this side, with the runtime's code for
    ``code_name``."""
    error = TransferError(message)
    error.code, error.code_name = _runtime.status_code(code_name), code_name
    return error


def engine_code(engine: str) -> int:
    try:
        return ENGINES[engine]
    except KeyError:
        raise ValueError(
            f"load plan: unknown engine {engine!r}; use one of {list(ENGINES)}"
        ) from None


def backend_code(backend: str) -> int:
    try:
        return BACKENDS[backend]
    except KeyError:
        raise ValueError(
            f"load plan: unknown backend {backend!r}; use one of {list(BACKENDS)}"
        ) from None


def backend_available(backend: str) -> bool:
    """Whether ``backend`` ("gloo" or "nccl") can run in this process."""
    return _native.backend_available(backend_code(backend))


def nccl_library() -> str:
    """The path of the libnccl.so.2 the NCCL backend uses, loaded now if it
    was not: ``$LOADPLAN_NCCL_LIBRARY`` when set, else the one torch loaded,
    else the nvidia-nccl package beside loadplan, else the linker's search.
    No GPU is needed. Raises TransferError saying where it looked when none
    loads or the runtime was built without NCCL."""
    return _native.nccl_library()


def shard_box(shape: Sequence[int], dim: int, index: int, count: int) -> Box | None:
    """Part ``index`` of ``count`` of a tensor of ``shape`` cut along
    ``dim`` as ``torch.chunk`` cuts it; None when that part is empty."""
    n = shape[dim]
    size = -(-n // count)
    start, stop = min(n, index * size), min(n, (index + 1) * size)
    if start >= stop:
        return None
    return tuple((start, stop) if k == dim else (0, s) for k, s in enumerate(shape))


@dataclass(frozen=True)
class ScheduleSummary:
    """What a schedule moves (loadplan_schedule_summary_t)."""

    engine: str
    world_size: int
    fingerprint: int
    checksum: int
    num_tensors: int
    num_senders: int
    num_receivers: int
    num_rounds: int
    num_pieces: int
    num_messages: int
    overlap: bool
    join_below: int
    bytes_moved: int
    bytes_between_ranks: int
    bytes_needed: int
    bytes_in_place: int
    bytes_staged: int
    bytes_packed: int
    max_sender_staging: int
    max_receiver_staging: int


class Schedule:
    """A transfer schedule (schedule_format.h): computed once, run by every
    rank; ``str()`` lists it piece by piece."""

    def __init__(self, native: _native.Schedule):
        self.native = native

    @classmethod
    def from_bytes(cls, data: bytes) -> Schedule:
        """Checks schedule bytes.

        Raises:
            TransferError: the bytes are malformed (code ``invalid_plan``).
        """
        return cls(_native.Schedule.from_bytes(bytes(data)))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Schedule:
        return cls.from_bytes(Path(path).read_bytes())

    @classmethod
    def build(
        cls,
        engine: str,
        world_size: int,
        metadata: Sequence[ParamMeta],
        senders: Sequence[tuple[int, Mapping[str, Box | None], int]],
        receivers: Sequence[tuple[int, bytes, int, bool]],
        *,
        join_below: int = 0,
        overlap: bool = True,
    ) -> Schedule:
        """The schedule of ``engine`` for senders ``(comm_rank, holdings,
        staging_cap)`` (holdings: name -> box, None for the whole tensor)
        and receivers ``(comm_rank, plan_bytes, staging_cap, atomic)``.
        Pieces of fewer than ``join_below`` bytes (0:
        ``DEFAULT_JOIN_BELOW``; 1: none) between one sender and one
        receiver in a round travel as one message; with ``overlap``,
        consecutive rounds overlap in halves of each rank's staging.

        Raises:
            TransferError: no schedule serves these (code
                ``invalid_argument``; the message says why).
        """
        index = {m.name: i for i, m in enumerate(metadata)}
        tensors = [(m.name, _runtime.dtype_code(m.dtype), list(m.shape)) for m in metadata]
        specs = []
        for i, (rank, holdings, cap) in enumerate(senders):
            held = []
            for name, box in holdings.items():
                if name not in index:
                    raise ValueError(
                        f"load plan: sender {i} holds {name!r}, which no metadata declares")
                if box is None:
                    held.append((index[name], None, None))
                else:
                    held.append((index[name], [a for a, _ in box], [b for _, b in box]))
            specs.append((rank, cap, held))
        try:
            plans = [(rank, cap, bool(atomic), _runtime.open_plan(plan_bytes))
                     for rank, plan_bytes, cap, atomic in receivers]
        except _runtime.StatusError as e:
            raise transfer_error(f"load plan: {e}", e.code_name) from None
        return cls(_native.Schedule.build(engine_code(engine), world_size, tensors, specs,
                                          plans, int(join_below), not overlap))

    def to_bytes(self) -> bytes:
        return self.native.to_bytes()

    def save(self, path: str | os.PathLike) -> None:
        Path(path).write_bytes(self.to_bytes())

    @property
    def summary(self) -> ScheduleSummary:
        return ScheduleSummary(**self.native.summary())

    def text(self, pieces: bool = True) -> str:
        """The summary and ranks, and (``pieces``) every piece by (sender,
        receiver)."""
        return self.native.text(pieces)

    def __str__(self) -> str:
        return self.text()
