"""Weight transfers from trainer ranks to inference ranks: ``Sender`` and
``Receiver``.

A trainer rank holds one box of each checkpoint tensor (a full replica, a
TP shard, an FSDP row shard, some experts); an inference rank has a load
plan that says which boxes it needs and where they land. Once, all ranks
agree on a schedule (the runtime computes it from every sender's boxes and
every receiver's plan); then each update moves only the bytes each
receiver needs, straight into its live tensors where they are contiguous.

    # trainer rank r of the sync group (ranks 0..num_senders-1)
    sender = loadplan.Sender(metadata, holdings=my_boxes, rank=r, world_size=n,
                             num_senders=2, init_method="tcp://10.0.0.1:29600")
    sender.send(my_tensors)                     # every update

    # inference rank (ranks num_senders..n-1)
    receiver = loadplan.Receiver(model, plan, rank=r, world_size=n,
                                 num_senders=2, init_method="tcp://10.0.0.1:29600")
    receiver.receive()                          # every update

Engines: ``"full"`` (every receiver gets whole tensors; the baseline),
``"sliced"`` (each box from one sender holding it whole) and ``"m_to_n"``
(each box gathered from the senders' intersecting boxes). Backends:
``"gloo"`` (CPU tensors, TCP) and ``"nccl"`` (CUDA tensors). The C++ is the
runtime's (runtime/include/loadplan/transfer.h), reached with ctypes through
the shared library installed beside ``loadplan._native``. See
docs/transfers.md.

``python -m loadplan.transfer show FILE`` prints a schedule file.
"""

from __future__ import annotations

import base64
import ctypes
import datetime
import itertools
import json
import logging
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import torch

from . import _native, _runtime
from .api import Box, LoadPlan, ParamMeta, _check_layout, _not_dense

logger = logging.getLogger("loadplan")

__all__ = [
    "Receiver",
    "Schedule",
    "ScheduleSummary",
    "Sender",
    "TransferError",
    "TransferStats",
    "shard_box",
]

ENGINES = {"full": 0, "sliced": 1, "m_to_n": 2}
BACKENDS = {"gloo": 0, "nccl": 1}
DEFAULT_STAGING_CAP = 64 << 20


class TransferError(_runtime.StatusError):
    """A transfer call failed; ``code`` and ``code_name`` are the runtime's
    status. Raised on every rank of a failed collective, with the first
    failing rank's message."""

    def __init__(self, message: str, code: int = 0, code_name: str = ""):
        super().__init__(message)
        self.code = code
        self.code_name = code_name


# ---------------------------------------------------------------------------
# The C API


_i64p = ctypes.POINTER(ctypes.c_int64)


class _Layout(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
        ("storage_size", ctypes.c_uint64),
        ("dtype", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("shape", _i64p),
        ("stride", _i64p),
    ]


_StoreSet = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
    ctypes.c_size_t,
)
_StoreGet = ctypes.CFUNCTYPE(
    ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
    ctypes.c_size_t, ctypes.c_int64,
)


class _Store(ctypes.Structure):
    _fields_ = [("context", ctypes.c_void_p), ("set", _StoreSet), ("get", _StoreGet)]


class _GlooOptions(ctypes.Structure):
    _fields_ = [
        ("hostname", ctypes.c_char_p),
        ("store_path", ctypes.c_char_p),
        ("store", ctypes.POINTER(_Store)),
        ("prefix", ctypes.c_char_p),
        ("timeout_ms", ctypes.c_int64),
    ]


class _CheckpointTensor(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("name_size", ctypes.c_size_t),
        ("dtype", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("shape", _i64p),
    ]


class _Holding(ctypes.Structure):
    _fields_ = [("tensor", ctypes.c_uint32), ("starts", _i64p), ("stops", _i64p)]


class _SenderSpec(ctypes.Structure):
    _fields_ = [
        ("comm_rank", ctypes.c_int32),
        ("staging_cap", ctypes.c_uint64),
        ("holdings", ctypes.POINTER(_Holding)),
        ("num_holdings", ctypes.c_size_t),
    ]


class _ReceiverSpec(ctypes.Structure):
    _fields_ = [
        ("comm_rank", ctypes.c_int32),
        ("staging_cap", ctypes.c_uint64),
        ("atomic", ctypes.c_uint32),
        ("plan", ctypes.c_void_p),
    ]


class _ScheduleSpec(ctypes.Structure):
    _fields_ = [
        ("engine", ctypes.c_uint32),
        ("world_size", ctypes.c_int32),
        ("tensors", ctypes.POINTER(_CheckpointTensor)),
        ("num_tensors", ctypes.c_size_t),
        ("senders", ctypes.POINTER(_SenderSpec)),
        ("num_senders", ctypes.c_size_t),
        ("receivers", ctypes.POINTER(_ReceiverSpec)),
        ("num_receivers", ctypes.c_size_t),
    ]


class _Summary(ctypes.Structure):
    _fields_ = [
        ("engine", ctypes.c_uint32),
        ("world_size", ctypes.c_int32),
        ("fingerprint", ctypes.c_uint64),
        ("checksum", ctypes.c_uint64),
        ("num_tensors", ctypes.c_uint32),
        ("num_senders", ctypes.c_uint32),
        ("num_receivers", ctypes.c_uint32),
        ("num_rounds", ctypes.c_uint32),
        ("num_pieces", ctypes.c_uint64),
        ("bytes_moved", ctypes.c_uint64),
        ("bytes_between_ranks", ctypes.c_uint64),
        ("bytes_needed", ctypes.c_uint64),
        ("bytes_in_place", ctypes.c_uint64),
        ("bytes_staged", ctypes.c_uint64),
        ("bytes_packed", ctypes.c_uint64),
        ("max_sender_staging", ctypes.c_uint64),
        ("max_receiver_staging", ctypes.c_uint64),
    ]


class _Fallback(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("name_size", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("size_bytes", ctypes.c_uint64),
    ]


class _ReceiverArgs(ctypes.Structure):
    _fields_ = [
        ("plan", ctypes.c_void_p),
        ("layouts", ctypes.POINTER(_Layout)),
        ("num_layouts", ctypes.c_size_t),
        ("num_threads", ctypes.c_uint32),
        ("fallbacks", ctypes.POINTER(_Fallback)),
        ("num_fallbacks", ctypes.c_size_t),
    ]


class _Options(ctypes.Structure):
    _fields_ = [("num_threads", ctypes.c_uint32), ("debug_fail_round", ctypes.c_int32)]


class _Held(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("name_size", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("shape", _i64p),
    ]


class _Stats(ctypes.Structure):
    _fields_ = [
        ("bytes_sent", ctypes.c_uint64),
        ("bytes_received", ctypes.c_uint64),
        ("bytes_local", ctypes.c_uint64),
        ("bytes_in_place", ctypes.c_uint64),
        ("bytes_staged", ctypes.c_uint64),
        ("bytes_packed", ctypes.c_uint64),
        ("messages_sent", ctypes.c_uint64),
        ("messages_received", ctypes.c_uint64),
        ("rounds", ctypes.c_uint32),
        ("updates", ctypes.c_uint32),
        ("seconds", ctypes.c_double),
    ]


_P = ctypes.c_void_p
_SIGNATURES: dict[str, tuple[Any, list]] = {
    "loadplan_status_code": (ctypes.c_int, [_P]),
    "loadplan_status_message": (ctypes.c_char_p, [_P]),
    "loadplan_status_free": (None, [_P]),
    "loadplan_status_code_name": (ctypes.c_char_p, [ctypes.c_int]),
    "loadplan_plan_open_bytes": (_P, [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(_P)]),
    "loadplan_plan_release": (None, [_P]),
    "loadplan_backend_available": (_P, [ctypes.c_uint32, ctypes.POINTER(ctypes.c_int32)]),
    "loadplan_comm_create_gloo": (
        _P, [ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(_GlooOptions), ctypes.POINTER(_P)]
    ),
    "loadplan_nccl_unique_id": (_P, [ctypes.c_char_p]),
    "loadplan_comm_create_nccl": (
        _P,
        [ctypes.c_int32, ctypes.c_int32, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int64,
         ctypes.POINTER(_P)],
    ),
    "loadplan_comm_release": (None, [_P]),
    "loadplan_schedule_build": (_P, [ctypes.POINTER(_ScheduleSpec), ctypes.POINTER(_P)]),
    "loadplan_schedule_open_bytes": (_P, [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(_P)]),
    "loadplan_schedule_release": (None, [_P]),
    "loadplan_schedule_bytes": (
        _P, [_P, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
    ),
    "loadplan_schedule_summary": (_P, [_P, ctypes.POINTER(_Summary)]),
    "loadplan_schedule_text": (
        _P, [_P, ctypes.c_uint32, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t)]
    ),
    "loadplan_transfer_create": (
        _P, [_P, _P, ctypes.POINTER(_ReceiverArgs), ctypes.POINTER(_Options), ctypes.POINTER(_P)]
    ),
    "loadplan_transfer_release": (None, [_P]),
    "loadplan_transfer_update": (_P, [_P, ctypes.POINTER(_Held), ctypes.c_size_t, _P]),
    "loadplan_transfer_stats": (_P, [_P, ctypes.POINTER(_Stats)]),
    "loadplan_transfer_fail": (_P, [_P, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_size_t]),
}

_LIB: ctypes.CDLL | None = None


def _library_path() -> Path:
    """The runtime's shared library: $LOADPLAN_RUNTIME_LIBRARY, else the one
    installed beside loadplan._native."""
    explicit = os.environ.get("LOADPLAN_RUNTIME_LIBRARY")
    if explicit:
        return Path(explicit)
    here = Path(_native.__file__).parent
    for name in ("libloadplan_runtime.so", "libloadplan_runtime.so.0"):
        if (here / name).exists():
            return here / name
    raise TransferError(
        f"load plan: no libloadplan_runtime.so beside {_native.__file__}; reinstall the "
        "package (scripts/setup) or set LOADPLAN_RUNTIME_LIBRARY", 7, "unavailable",
    )


def _lib() -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        # RTLD_LOCAL (ctypes' default): the Gloo this library links stays
        # apart from the one inside torch.
        lib = ctypes.CDLL(str(_library_path()))
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        _LIB = lib
    return _LIB


def _check(status: int | None) -> None:
    """Raises the status as a TransferError (and frees it)."""
    if not status:
        return
    lib = _lib()
    code = lib.loadplan_status_code(status)
    message = lib.loadplan_status_message(status).decode(errors="replace")
    lib.loadplan_status_free(status)
    name = lib.loadplan_status_code_name(code).decode()
    raise TransferError(f"load plan: {message}", code, name)


def _ints(values: Sequence[int]) -> ctypes.Array:
    return (ctypes.c_int64 * max(len(values), 1))(*values)


def backend_available(backend: str) -> bool:
    """Whether ``backend`` ("gloo" or "nccl") can run in this process."""
    out = ctypes.c_int32(0)
    _check(_lib().loadplan_backend_available(_backend_code(backend), ctypes.byref(out)))
    return bool(out.value)


def _backend_code(backend: str) -> int:
    try:
        return BACKENDS[backend]
    except KeyError:
        raise ValueError(f"load plan: unknown backend {backend!r}; use one of {list(BACKENDS)}")


def _engine_code(engine: str) -> int:
    try:
        return ENGINES[engine]
    except KeyError:
        raise ValueError(f"load plan: unknown engine {engine!r}; use one of {list(ENGINES)}")


def shard_box(shape: Sequence[int], dim: int, index: int, count: int) -> Box | None:
    """Part ``index`` of ``count`` of a tensor of ``shape`` cut along
    ``dim`` as ``torch.chunk`` cuts it; None when that part is empty."""
    n = shape[dim]
    size = -(-n // count)
    start, stop = min(n, index * size), min(n, (index + 1) * size)
    if start >= stop:
        return None
    return tuple((start, stop) if k == dim else (0, s) for k, s in enumerate(shape))


# ---------------------------------------------------------------------------
# Schedules


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

    def __init__(self, handle: int):
        self._handle = handle

    def __del__(self) -> None:
        handle, self._handle = getattr(self, "_handle", None), None
        if handle and _LIB is not None:
            _LIB.loadplan_schedule_release(handle)

    @classmethod
    def from_bytes(cls, data: bytes) -> Schedule:
        """Checks schedule bytes.

        Raises:
            TransferError: the bytes are malformed (code ``invalid_plan``).
        """
        out = ctypes.c_void_p()
        _check(_lib().loadplan_schedule_open_bytes(bytes(data), len(data), ctypes.byref(out)))
        return cls(out.value)

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
    ) -> Schedule:
        """The schedule of ``engine`` for senders ``(comm_rank, holdings,
        staging_cap)`` (holdings: name -> box, None for the whole tensor)
        and receivers ``(comm_rank, plan_bytes, staging_cap, atomic)``.

        Raises:
            TransferError: no schedule serves these (code
                ``invalid_argument``; the message says why).
        """
        lib = _lib()
        keep: list[Any] = []
        index = {m.name: i for i, m in enumerate(metadata)}
        tensors = (_CheckpointTensor * max(len(metadata), 1))()
        for i, m in enumerate(metadata):
            name = m.name.encode()
            shape = _ints(m.shape)
            keep += [name, shape]
            tensors[i] = _CheckpointTensor(name, len(name), _runtime.dtype_code(m.dtype),
                                           len(m.shape), shape)
        sender_specs = (_SenderSpec * max(len(senders), 1))()
        for i, (rank, holdings, cap) in enumerate(senders):
            held = (_Holding * max(len(holdings), 1))()
            for k, (name, box) in enumerate(holdings.items()):
                if name not in index:
                    raise ValueError(f"load plan: sender {i} holds {name!r}, which no metadata declares")
                starts = stops = None
                if box is not None:
                    starts, stops = _ints([a for a, _ in box]), _ints([b for _, b in box])
                    keep += [starts, stops]
                held[k] = _Holding(index[name], starts, stops)
            keep.append(held)
            sender_specs[i] = _SenderSpec(rank, cap, held, len(holdings))
        plans = []
        receiver_specs = (_ReceiverSpec * max(len(receivers), 1))()
        try:
            for i, (rank, plan_bytes, cap, atomic) in enumerate(receivers):
                plan = ctypes.c_void_p()
                _check(lib.loadplan_plan_open_bytes(plan_bytes, len(plan_bytes), ctypes.byref(plan)))
                plans.append(plan.value)
                receiver_specs[i] = _ReceiverSpec(rank, cap, int(atomic), plan.value)
            spec = _ScheduleSpec(
                _engine_code(engine), world_size, tensors, len(metadata), sender_specs,
                len(senders), receiver_specs, len(receivers),
            )
            out = ctypes.c_void_p()
            _check(lib.loadplan_schedule_build(ctypes.byref(spec), ctypes.byref(out)))
            return cls(out.value)
        finally:
            for plan in plans:
                lib.loadplan_plan_release(plan)

    def to_bytes(self) -> bytes:
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        _check(_lib().loadplan_schedule_bytes(self._handle, ctypes.byref(data), ctypes.byref(size)))
        return ctypes.string_at(data, size.value)

    def save(self, path: str | os.PathLike) -> None:
        Path(path).write_bytes(self.to_bytes())

    @property
    def summary(self) -> ScheduleSummary:
        s = _Summary()
        _check(_lib().loadplan_schedule_summary(self._handle, ctypes.byref(s)))
        fields = {name: getattr(s, name) for name, _ in _Summary._fields_}
        fields["engine"] = next(k for k, v in ENGINES.items() if v == s.engine)
        return ScheduleSummary(**fields)

    def text(self, pieces: bool = True) -> str:
        """The summary and ranks, and (``pieces``) every piece by (sender,
        receiver)."""
        out, size = ctypes.c_char_p(), ctypes.c_size_t()
        _check(_lib().loadplan_schedule_text(self._handle, int(pieces), ctypes.byref(out),
                                             ctypes.byref(size)))
        return ctypes.string_at(out, size.value).decode()

    def __str__(self) -> str:
        return self.text()


# ---------------------------------------------------------------------------
# Rendezvous


def _store_callbacks(store: Any) -> tuple[_Store, list]:
    """A loadplan_store_t over a torch.distributed Store; the second value
    keeps the callbacks alive."""

    def set_(ctx: int, key: int, key_size: int, value: int, value_size: int) -> int:
        try:
            store.set(ctypes.string_at(key, key_size).decode(), ctypes.string_at(value, value_size))
            return 0
        except Exception as e:  # reported by the runtime as a failed set
            logger.debug("load plan: store set failed: %s", e)
            return -1

    def get(ctx: int, key: int, key_size: int, out: int, capacity: int, timeout_ms: int) -> int:
        try:
            name = ctypes.string_at(key, key_size).decode()
            store.wait([name], datetime.timedelta(milliseconds=timeout_ms))
            value = store.get(name)
            ctypes.memmove(out, value, min(len(value), capacity))
            return len(value)
        except Exception as e:  # reported by the runtime as a missing key
            logger.debug("load plan: store get failed: %s", e)
            return -1

    callbacks = [_StoreSet(set_), _StoreGet(get)]
    return _Store(None, callbacks[0], callbacks[1]), callbacks


_SEQUENCE: dict[tuple[str, int], itertools.count] = {}


class _Rendezvous:
    """How ranks meet and swap set-up data: a torch.distributed process
    group (``group``; objects through it, and a TCPStore that rank 0
    starts for Gloo's rendezvous), or a torch Store (``store``, or one made
    from ``init_method``: ``tcp://host:port`` or ``file:///path``)."""

    def __init__(self, rank: int | None, world_size: int | None, *, group: Any,
                 store: Any, init_method: str | None, name: str, host: str | None,
                 timeout: float):
        import torch.distributed as dist

        self.dist = dist
        self.group = group
        self.timeout = datetime.timedelta(seconds=timeout)
        if group is not None:
            if not dist.is_initialized():
                raise ValueError("load plan: group= needs torch.distributed to be initialized")
            group = None if group is True else group
            self.group = group
            self.rank = dist.get_rank(group)
            self.world_size = dist.get_world_size(group)
            if (rank is not None and rank != self.rank) or (
                world_size is not None and world_size != self.world_size
            ):
                raise ValueError("load plan: rank/world_size disagree with the group's")
            self._name(name)
            self.store = self._group_store(host or os.environ.get("MASTER_ADDR", "127.0.0.1"))
            return
        if rank is None or world_size is None:
            raise ValueError("load plan: give rank and world_size (or group=)")
        if not 0 <= rank < world_size:
            raise ValueError(f"load plan: rank {rank} is not in [0, {world_size})")
        self.rank, self.world_size = rank, world_size
        self._name(name)
        if store is None:
            if not init_method:
                raise ValueError("load plan: give group=, store= or init_method=")
            store = self._store_of(init_method)
        self.store = store

    def _name(self, name: str) -> None:
        # Every rank makes its sync objects in the same order: counting
        # them keeps the keys of a second one apart from the first's (per
        # rank, so that ranks may share a process).
        seq = next(_SEQUENCE.setdefault((name, self.rank), itertools.count()))
        self.prefix = f"{name}.{seq}"

    def _store_of(self, init_method: str) -> Any:
        dist = self.dist
        if init_method.startswith("tcp://"):
            host, _, port = init_method[len("tcp://"):].rpartition(":")
            return dist.TCPStore(host, int(port), self.world_size, self.rank == 0,
                                 timeout=self.timeout)
        if init_method.startswith("file://"):
            return dist.FileStore(init_method[len("file://"):], self.world_size)
        raise ValueError(f"load plan: init_method {init_method!r} is not tcp://host:port or "
                         "file:///path")

    def _group_store(self, host: str) -> Any:
        """A TCPStore of the group's ranks: rank 0 starts it on a free port
        and tells the others where through the group."""
        dist = self.dist
        if self.rank == 0:
            store = dist.TCPStore(host, 0, self.world_size, True, timeout=self.timeout,
                                  wait_for_workers=False)
            address = [(host, store.port)]
        else:
            address = [None]
        dist.broadcast_object_list(address, src=self._global(0), group=self.group)
        if self.rank != 0:
            store = dist.TCPStore(address[0][0], address[0][1], self.world_size, False,
                                  timeout=self.timeout)
        return store

    def _global(self, rank: int) -> int:
        return rank if self.group is None else self.dist.get_global_rank(self.group, rank)

    def gather(self, payload: bytes) -> list[bytes] | None:
        """Every rank's payload, on rank 0 (None elsewhere)."""
        key = f"{self.prefix}/desc"
        self.store.set(f"{key}/{self.rank}", payload)
        if self.rank != 0:
            return None
        keys = [f"{key}/{r}" for r in range(self.world_size)]
        self.store.wait(keys, self.timeout)
        return [self.store.get(k) for k in keys]

    def broadcast(self, payload: bytes | None, what: str) -> bytes:
        """Rank 0's payload, on every rank."""
        if self.group is not None:
            box = [payload]
            self.dist.broadcast_object_list(box, src=self._global(0), group=self.group)
            return box[0]
        key = f"{self.prefix}/{what}"
        if self.rank == 0:
            self.store.set(key, payload)
            return payload
        self.store.wait([key], self.timeout)
        return self.store.get(key)


# ---------------------------------------------------------------------------
# Endpoints


@dataclass(frozen=True)
class TransferStats:
    """One update on one rank (loadplan_transfer_stats_t): bytes sent to and
    received from other ranks, copied locally, received in place or into
    staging, packed before sending; messages; rounds; seconds."""

    bytes_sent: int
    bytes_received: int
    bytes_local: int
    bytes_in_place: int
    bytes_staged: int
    bytes_packed: int
    messages_sent: int
    messages_received: int
    rounds: int
    updates: int
    seconds: float


class _Endpoint:
    """The part Sender and Receiver share: meeting the other ranks, the
    communicator, the schedule (built on rank 0), the engine."""

    role: str

    def __init__(self, *, rank: int | None, world_size: int | None, num_senders: int,
                 engine: str, backend: str, device: torch.device | str | int | None,
                 group: Any, store: Any, init_method: str | None, name: str,
                 host: str | None, timeout: float, staging_cap: int,
                 num_threads: int | None, debug_fail_round: int):
        _engine_code(engine)
        _backend_code(backend)
        self._transfer: int | None = None
        self._comm: int | None = None
        self.engine, self.backend = engine, backend
        self.staging_cap = int(staging_cap)
        self._num_threads = num_threads or 0
        self._debug_fail_round = debug_fail_round
        self._rv = _Rendezvous(rank, world_size, group=group, store=store,
                               init_method=init_method, name=name, host=host, timeout=timeout)
        self.rank, self.world_size = self._rv.rank, self._rv.world_size
        if not 0 < num_senders < self.world_size:
            raise ValueError(f"load plan: num_senders {num_senders} must leave room for "
                             f"receivers among {self.world_size} ranks")
        self.num_senders = num_senders
        expected = "sender" if self.rank < num_senders else "receiver"
        if expected != self.role:
            raise ValueError(f"load plan: rank {self.rank} is a {expected} (ranks "
                             f"0..{num_senders - 1} send, the others receive), not a {self.role}")
        self.device = self._device(device)
        self._timeout_ms = int(timeout * 1000)
        self._host = host or "127.0.0.1"

    def _device(self, device: Any) -> torch.device:
        if self.backend == "gloo":
            if device is not None and torch.device(device).type != "cpu":
                raise ValueError("load plan: the gloo backend moves CPU tensors")
            return torch.device("cpu")
        if device is None:
            device = torch.cuda.current_device()
        device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        if device.type != "cuda" or device.index is None:
            raise ValueError(f"load plan: nccl needs a CUDA device with an index, got {device}")
        return device

    def _connect(self) -> None:
        lib = _lib()
        comm = ctypes.c_void_p()
        if self.backend == "gloo":
            store, keep = _store_callbacks(self._rv.store)
            options = _GlooOptions(self._host.encode(), None, ctypes.pointer(store),
                                   f"{self._rv.prefix}/gloo/".encode(), self._timeout_ms)
            _check(lib.loadplan_comm_create_gloo(self.rank, self.world_size, ctypes.byref(options),
                                                 ctypes.byref(comm)))
            del keep
        else:
            unique = None
            if self.rank == 0:
                buffer = ctypes.create_string_buffer(128)
                _check(lib.loadplan_nccl_unique_id(buffer))
                unique = buffer.raw
            unique = self._rv.broadcast(unique, "nccl_id")
            _check(lib.loadplan_comm_create_nccl(self.rank, self.world_size, unique,
                                                 self.device.index, self._timeout_ms,
                                                 ctypes.byref(comm)))
        self._comm = comm.value

    def _descriptor(self) -> dict:
        raise NotImplementedError

    def _agree_on_schedule(self) -> Schedule:
        """Rank 0 gathers every rank's descriptor, builds the schedule and
        hands it (or why there is none) to all."""
        mine = dict(self._descriptor(), engine=self.engine, rank=self.rank)
        gathered = self._rv.gather(json.dumps(mine).encode())
        payload = None
        if gathered is not None:
            try:
                payload = b"S" + _build_from(
                    [json.loads(d) for d in gathered], self.num_senders, self.world_size
                ).to_bytes()
            except (TransferError, ValueError) as e:
                payload = b"E" + str(e).encode()
        payload = self._rv.broadcast(payload, "schedule")
        if payload[:1] == b"E":
            raise TransferError(f"{payload[1:].decode()} (from rank 0)", 1, "invalid_argument")
        return Schedule.from_bytes(payload[1:])

    def _start(self, receiver: _ReceiverArgs | None) -> None:
        self._connect()
        self.schedule = self._agree_on_schedule()
        options = _Options(self._num_threads, self._debug_fail_round)
        out = ctypes.c_void_p()
        _check(_lib().loadplan_transfer_create(
            self._comm, self.schedule._handle,
            ctypes.byref(receiver) if receiver is not None else None,
            ctypes.byref(options), ctypes.byref(out),
        ))
        self._transfer = out.value

    def _update(self, held: ctypes.Array | None, count: int) -> TransferStats:
        if self._transfer is None:
            raise RuntimeError(f"load plan: this {self.role} is closed")
        stream = None
        if self.device.type == "cuda":
            stream = torch.cuda.current_stream(self.device).cuda_stream or None
        _check(_lib().loadplan_transfer_update(self._transfer, held, count, stream))
        return self.stats

    def _fail(self, error: Exception, code: int) -> None:
        """Fails the update on every rank with ``error`` (this rank cannot
        take part), then raises ``error`` here."""
        if self._transfer is not None:
            message = str(error).encode()
            try:
                _check(_lib().loadplan_transfer_fail(self._transfer, code, message, len(message)))
            except TransferError:
                pass  # the agreed error; this rank's own is more precise
        raise error

    @property
    def stats(self) -> TransferStats:
        """Of the last update on this rank."""
        s = _Stats()
        _check(_lib().loadplan_transfer_stats(self._transfer, ctypes.byref(s)))
        return TransferStats(**{name: getattr(s, name) for name, _ in _Stats._fields_})

    def close(self) -> None:
        """Releases the engine and the communicator (not collective)."""
        lib = _LIB
        transfer, self._transfer = getattr(self, "_transfer", None), None
        comm, self._comm = getattr(self, "_comm", None), None
        if lib is not None:
            if transfer:
                lib.loadplan_transfer_release(transfer)
            if comm:
                lib.loadplan_comm_release(comm)

    def __del__(self) -> None:
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _build_from(descriptors: list[dict], num_senders: int, world_size: int) -> Schedule:
    """Rank 0's part: the schedule of every rank's descriptor."""
    engines = {d["engine"] for d in descriptors}
    if len(engines) != 1:
        raise ValueError(f"load plan: ranks ask for different engines: {sorted(engines)}")
    senders = [d for d in descriptors if d["role"] == "sender"]
    receivers = [d for d in descriptors if d["role"] == "receiver"]
    if len(senders) != num_senders or any(d["rank"] >= num_senders for d in senders):
        raise ValueError(f"load plan: ranks disagree on num_senders ({num_senders} on rank 0)")
    metadata: dict[str, ParamMeta] = {}
    for d in senders:
        for name, code, shape in d["tensors"]:
            meta = ParamMeta(name, tuple(shape), _runtime.dtype_of(code))
            if metadata.setdefault(name, meta) != meta:
                raise ValueError(f"load plan: senders declare {name!r} differently: "
                                 f"{metadata[name]} and {meta}")
    return Schedule.build(
        engines.pop(),
        world_size,
        list(metadata.values()),
        [
            (d["rank"], {n: (None if b is None else tuple(map(tuple, b))) for n, b in d["holdings"]},
             d["staging_cap"])
            for d in senders
        ],
        [
            (d["rank"], base64.b64decode(d["plan"]), d["staging_cap"], d["atomic"])
            for d in receivers
        ],
    )


class Sender(_Endpoint):
    """A trainer rank's end of weight updates: holds ``holdings[name]`` (a
    box, or None for the whole tensor; default: every name whole) of each
    checkpoint tensor of ``metadata``, and sends it on each ``send``.

    Ranks ``0 .. num_senders-1`` of the sync group (``rank`` of
    ``world_size``, or ``group``) send; the others are ``Receiver``s. Making
    one is collective: every rank of the group must make its Sender or
    Receiver with the same ``engine``, ``num_senders`` and ``name``.

    Args:
        engine: "full", "sliced" or "m_to_n".
        backend: "gloo" (CPU tensors) or "nccl" (CUDA tensors of ``device``).
        group: a torch.distributed process group of exactly the sync ranks
            (True: the default group); set-up data goes through it.
        store / init_method: otherwise, a torch.distributed Store, or
            "tcp://host:port" (rank 0 serves it) / "file:///path".
        host: the address this rank listens on for Gloo (default 127.0.0.1).
        staging_cap: bytes this rank may use to pack boxes that are not
            contiguous in what it holds.
        timeout: seconds any transfer may take before it fails.

    Raises:
        TransferError: on every rank, when a rank cannot set up (the message
            is the first failing rank's).
    """

    role = "sender"

    def __init__(self, metadata: Iterable[ParamMeta], *, holdings: Mapping[str, Box | None]
                 | None = None, rank: int | None = None, world_size: int | None = None,
                 num_senders: int, engine: str = "m_to_n", backend: str = "gloo",
                 device: Any = None, group: Any = None, store: Any = None,
                 init_method: str | None = None, name: str = "loadplan",
                 host: str | None = None, timeout: float = 60.0,
                 staging_cap: int = DEFAULT_STAGING_CAP, num_threads: int | None = None,
                 debug_fail_round: int = -1):
        self.metadata = {m.name: m for m in metadata}
        if holdings is None:
            holdings = {name: None for name in self.metadata}
        undeclared = [n for n in holdings if n not in self.metadata]
        if undeclared:
            raise ValueError(f"load plan: holdings name {undeclared[:5]}, which metadata does not "
                             "declare")
        self.holdings = {
            n: None if box is None else tuple((int(a), int(b)) for a, b in box)
            for n, box in holdings.items()
        }
        super().__init__(rank=rank, world_size=world_size, num_senders=num_senders,
                         engine=engine, backend=backend, device=device, group=group,
                         store=store, init_method=init_method, name=name, host=host,
                         timeout=timeout, staging_cap=staging_cap, num_threads=num_threads,
                         debug_fail_round=debug_fail_round)
        self._start(None)

    def _descriptor(self) -> dict:
        return {
            "role": "sender",
            "staging_cap": self.staging_cap,
            "tensors": [
                (m.name, _runtime.dtype_code(m.dtype), list(m.shape))
                for m in self.metadata.values()
            ],
            "holdings": [(n, None if b is None else [list(x) for x in b])
                         for n, b in self.holdings.items()],
        }

    def send(self, tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]
             ) -> TransferStats:
        """Collective: one update. ``tensors`` has this rank's part of every
        name it holds: the box's shape, the declared dtype, on this rank's
        device (made contiguous if it is not).

        Raises:
            ValueError: a tensor is missing, extra, or of the wrong shape,
                dtype or device (checked before any rank moves a byte).
            TransferError: the update failed on some rank; every rank
                raises it.
        """
        try:
            given = dict(tensors.items() if isinstance(tensors, Mapping) else tensors)
            missing = [n for n in self.holdings if n not in given]
            extra = [n for n in given if n not in self.holdings]
            if missing or extra:
                raise ValueError(f"load plan: send needs exactly the held names; missing "
                                 f"{missing[:5]}, not held {extra[:5]}")
            for name, box in self.holdings.items():
                meta, t = self.metadata[name], given[name]
                shape = meta.shape if box is None else tuple(b - a for a, b in box)
                if (not isinstance(t, torch.Tensor) or tuple(t.shape) != shape
                        or t.dtype != meta.dtype or t.device != self.device):
                    what = (f"{t.dtype} {tuple(t.shape)} on {t.device}"
                            if isinstance(t, torch.Tensor) else type(t).__name__)
                    raise ValueError(f"load plan: {name!r} is {what}; this sender holds "
                                     f"{meta.dtype} {shape} on {self.device}")
                if problem := _not_dense(t):
                    raise ValueError(f"load plan: {name!r} is {problem}")
        except ValueError as e:
            self._fail(e, 5)  # invalid_update, on every rank
        held = (_Held * max(len(self.holdings), 1))()
        keep: list[Any] = []
        for i, (name, box) in enumerate(self.holdings.items()):
            meta = self.metadata[name]
            shape = meta.shape if box is None else tuple(b - a for a, b in box)
            t = given[name].contiguous()
            encoded = name.encode()
            dims = _ints(shape)
            keep += [t, encoded, dims]
            held[i] = _Held(encoded, len(encoded), t.data_ptr(), _runtime.dtype_code(t.dtype),
                            len(shape), dims)
        return self._update(held, len(self.holdings))


class Receiver(_Endpoint):
    """An inference rank's end of weight updates: receives into ``model``
    what ``plan`` (its ``plan_loads``) needs, straight into the live
    tensors where they are contiguous, and hands fallback names in full to
    ``model.load_weights``. Rank ``num_senders`` and above of the sync
    group; the arguments are ``Sender``'s.

    Args:
        atomic: stage the whole update and write live memory only after
            every rank has succeeded (staging then holds all this rank
            receives); otherwise a failed update may leave it partial.
        staging_cap: bytes this rank may use for receives that cannot land
            in place (not atomic).
    """

    role = "receiver"

    def __init__(self, model: torch.nn.Module, plan: LoadPlan, *, rank: int | None = None,
                 world_size: int | None = None, num_senders: int, engine: str = "m_to_n",
                 atomic: bool = False, backend: str = "gloo", device: Any = None,
                 group: Any = None, store: Any = None, init_method: str | None = None,
                 name: str = "loadplan", host: str | None = None, timeout: float = 60.0,
                 staging_cap: int = DEFAULT_STAGING_CAP, num_threads: int | None = None,
                 debug_fail_round: int = -1):
        self.model, self.plan, self.atomic = model, plan, bool(atomic)
        _check_layout(model, plan)
        super().__init__(rank=rank, world_size=world_size, num_senders=num_senders,
                         engine=engine, backend=backend, device=device, group=group,
                         store=store, init_method=init_method, name=name, host=host,
                         timeout=timeout, staging_cap=staging_cap, num_threads=num_threads,
                         debug_fail_round=debug_fail_round)
        targets = plan._targets
        devices = {t.device for t in targets}
        if devices - {self.device}:
            raise ValueError(f"load plan: the model's tensors are on {sorted(map(str, devices))} "
                             f"but this receiver moves {self.device} memory")
        # The fallback names arrive whole, for load_weights.
        self.fallbacks = {
            e.name: torch.empty(e.shape, dtype=e.dtype, device=self.device)
            for e in plan.entries.values() if e.kind == "fallback"
        }
        self._keep: list[Any] = []
        layouts = (_Layout * max(len(targets), 1))()
        for i, t in enumerate(targets):
            data, offset, size, code, shape, stride = _runtime.layout(t)
            dims, strides = _ints(shape), _ints(stride)
            self._keep += [dims, strides]
            layouts[i] = _Layout(data, offset, size, code, len(shape), dims, strides)
        fallbacks = (_Fallback * max(len(self.fallbacks), 1))()
        for i, (name, buffer) in enumerate(self.fallbacks.items()):
            encoded = name.encode()
            self._keep.append(encoded)
            fallbacks[i] = _Fallback(encoded, len(encoded), buffer.data_ptr(),
                                     buffer.numel() * buffer.element_size())
        self._keep += [layouts, fallbacks, targets]
        self._rt_plan = ctypes.c_void_p()
        _check(_lib().loadplan_plan_open_bytes(plan.plan_bytes, len(plan.plan_bytes),
                                               ctypes.byref(self._rt_plan)))
        args = _ReceiverArgs(self._rt_plan.value, layouts, len(targets), self._num_threads,
                             fallbacks, len(self.fallbacks))
        self._start(args)

    def _descriptor(self) -> dict:
        return {
            "role": "receiver",
            "staging_cap": self.staging_cap,
            "atomic": self.atomic,
            "plan": base64.b64encode(self.plan.plan_bytes).decode(),
        }

    def receive(self) -> TransferStats:
        """Collective: one update, then ``model.load_weights`` of the
        fallback names (only once every rank has succeeded).

        Raises:
            RuntimeError: the model's tensors are not where the plan saw
                them (checked before any rank moves a byte; the other ranks
                fail the update with this message).
            TransferError: the update failed on some rank; every rank
                raises it.
        """
        try:
            _check_layout(self.model, self.plan)
        except RuntimeError as e:
            self._fail(e, 4)  # fingerprint_mismatch, on every rank
        stats = self._update(None, 0)
        if self.fallbacks:
            with torch.no_grad():
                self.model.load_weights(list(self.fallbacks.items()))
        return stats

    def close(self) -> None:
        super().close()
        plan = getattr(self, "_rt_plan", None)
        if plan and plan.value and _LIB is not None:
            _LIB.loadplan_plan_release(plan.value)
            plan.value = None


def _main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m loadplan.transfer")
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="print a schedule file")
    show.add_argument("file")
    show.add_argument("--summary", action="store_true", help="no per-piece listing")
    args = parser.parse_args(argv)
    try:
        schedule = Schedule.load(args.file)
    except (OSError, TransferError) as e:
        print(f"loadplan: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(schedule.text(pieces=not args.summary))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
