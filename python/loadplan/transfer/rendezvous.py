"""How the ranks of a transfer meet and swap their set-up data: a
torch.distributed process group, a torch Store, or one made from an
``init_method``; and the store that the runtime's rendezvous (Gloo's, and
the schedule's agreement, loadplan_schedule_agree) goes through."""

from __future__ import annotations

import contextlib
import datetime
import itertools
import logging
import os
import random
import socket
import time
from pathlib import Path
from typing import Any

from .liveness import SLICE_MS, PeerGone

# A watched wait in the store asks for its key after pauses that double
# from POLL_MIN_S to POLL_MAX_S.
POLL_MIN_S = 0.0005
POLL_MAX_S = 0.005
from .schedule import TransferError, transfer_error

logger = logging.getLogger("loadplan")

_SEQUENCE: dict[tuple[str, int], itertools.count] = {}
_PORTS_GIVEN: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free now, for a store to listen on
    (a trainer's ``master_port``, say).

    A port from ``bind((host, 0))`` comes from the kernel's ephemeral
    range, where every outgoing connection and every Gloo pair also takes
    its local port: picked, closed and bound again by a store seconds
    later, it may be taken meanwhile (``EADDRINUSE``). This one comes from
    below that range, where nothing is handed out without asking for it by
    number, and is not given out twice by one process.

    Raises:
        RuntimeError: no port there is free.
    """
    lo, hi = _ephemeral_range()
    ports = range(max(1024, lo - 12288), lo) if lo - 1024 >= 4096 else range(hi + 1, 65536)
    rng = random.SystemRandom()
    for _ in range(500):
        port = rng.choice(ports)
        if port in _PORTS_GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _PORTS_GIVEN.add(port)
        return port
    raise RuntimeError(f"load plan: no free port in {ports.start}..{ports.stop - 1} on {host}")


class Rendezvous:
    """How ranks meet and swap set-up data: a torch.distributed process
    group (``group``; objects through it, and a TCPStore that rank 0
    starts for Gloo's rendezvous), or a torch Store (``store``, or one made
    from ``init_method``: ``tcp://host:port`` or ``file:///path``)."""

    def __init__(self, rank: int | None, world_size: int | None, *, group: Any,
                 store: Any, init_method: str | None, name: str, host: str | None,
                 timeout: float, watch: Any = None):
        import torch.distributed as dist

        self.dist = dist
        self.group = group
        self.watch = watch
        """The session's Liveness: waits look at the other ranks between
        slices (None: they wait their whole timeout)."""
        self.store_error: str | None = None
        """What the store raised when it could not be reached (the
        runtime's message of a lost store cannot hold it)."""
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

    def store_set(self, key: str, value: bytes) -> None:
        """The runtime's rendezvous (Gloo's, the schedule's agreement):
        stores ``value``; raises when the store cannot be reached."""
        try:
            self.store.set(key, value)
        except Exception as e:  # the runtime reports a lost store
            self._lost(e)
            raise

    def store_get(self, key: str, timeout_ms: int) -> bytes | None:
        """The runtime's rendezvous: waits for ``key`` and returns its
        value, or None when it did not come in time; raises when the store
        cannot be reached (a dead TCPStore server)."""
        if self.watch is None:
            try:
                self.store.wait([key], datetime.timedelta(milliseconds=max(1, timeout_ms)))
                return self.store.get(key)
            except self.dist.DistNetworkError as e:  # the runtime reports a lost store
                self._lost(e)
                raise
            except self.dist.DistStoreError as e:  # a timeout: the runtime names who is late
                logger.debug("load plan: store get of %s timed out: %s", key, e)
                return None
        # Watched: the store is asked whether the key is there, with pauses
        # growing to POLL_MAX_S, and the peers looked at every SLICE_MS. A
        # blocking wait in slices would do, but torch's store client logs a
        # warning for every slice that times out.
        start = time.monotonic()
        deadline, look = start + timeout_ms / 1000, start + SLICE_MS / 1000
        pause = POLL_MIN_S
        while True:
            try:
                if self.store.check([key]):
                    return self.store.get(key)
            except self.dist.DistNetworkError as e:  # the runtime reports a lost store
                self._lost(e)
                raise
            now = time.monotonic()
            if now >= deadline:  # a timeout: the runtime names who is late
                logger.debug("load plan: store get of %s timed out after %d ms", key,
                             timeout_ms)
                return None
            time.sleep(min(pause, deadline - now))
            pause = min(2 * pause, POLL_MAX_S)
            if time.monotonic() < look:
                continue
            look = time.monotonic() + SLICE_MS / 1000
            try:
                self.watch.check()
            except PeerGone as e:  # the runtime reports a gone peer
                if self.store_error is None:
                    self.store_error = str(e)
                raise
            except self.dist.DistNetworkError as e:
                self._lost(e)
                raise

    def _lost(self, error: Exception) -> None:
        logger.debug("load plan: the store failed: %s", error)
        if self.store_error is None:
            self.store_error = f"{type(error).__name__}: {error}"

    def with_store_error(self, error: TransferError) -> TransferError:
        """``error`` of the runtime, with what the store raised when it
        was lost (as this module's own errors say it)."""
        if error.code_name != "io_error" or self.store_error is None:
            return error
        return transfer_error(f"{error} ({self.store_error})", "io_error")

    @contextlib.contextmanager
    def _store_errors(self, doing: str, keys: dict[int, str] | None = None):
        """The store's errors as TransferErrors that say what this rank was
        doing and, for a timeout, which ranks it waited for (``keys``: rank
        -> the key each was to set)."""
        dist = self.dist
        try:
            yield
        except dist.DistNetworkError as e:
            raise transfer_error(
                f"load plan: rank {self.rank} lost the rendezvous store while {doing}: the "
                f"process that serves it is gone (rank 0's, where rank 0 made it: it exited or "
                f"was killed) ({type(e).__name__}: {e})", "io_error") from None
        except dist.DistStoreError as e:
            waited = ""
            if keys:
                with contextlib.suppress(Exception):
                    late = [r for r, k in keys.items() if not self.store.check([k])]
                    waited = f" for ranks {late}" if late else ""
            raise transfer_error(
                f"load plan: rank {self.rank} waited {self.timeout.total_seconds():g} s{waited} "
                f"while {doing}, in vain ({type(e).__name__}: {e})", "io_error") from None

    def broadcast(self, payload: bytes | None, what: str) -> bytes:
        """Rank 0's payload, on every rank."""
        if self.group is not None:
            box = [payload]
            self.dist.broadcast_object_list(box, src=self._global(0), group=self.group)
            return box[0]
        key = f"{self.prefix}/{what}"
        with self._store_errors(f"waiting for rank 0's {what}", {0: key}):
            if self.rank == 0:
                self.store.set(key, payload)
                return payload
            self.store.wait([key], self.timeout)
            return self.store.get(key)
