"""Noticing, while a rank waits in the rendezvous store, that another rank
of its session is gone.

Each rank of a session (a trainer and its engine's workers) listens on a
socket of its own, which it never accepts on, and appends where to one key
of the store. A rank that waits for others (the set-up of new endpoints:
the schedule's agreement, Gloo's rendezvous) connects to every rank that
has said where and looks at the connections between slices of its wait:
however a process ends (it exits, crashes, is killed), the kernel closes
its listening socket and the connections queued on it, so the connection
reads end of file or a reset, and a new one is refused. No thread and no
message: the waiting rank notices within one slice. A slice costs the
store one read while some rank has not said where yet, none after; each
rank holds at most one connection to each other rank.

A rank that has not yet said where (it has not joined the session), one
that hangs, or a host that vanishes without closing anything, is still
noticed only at the timeout.
"""

from __future__ import annotations

import contextlib
import errno
import socket

SLICE_MS = 250
"""How long a wait in the store runs between two looks at the peers."""


class PeerGone(Exception):
    """A rank of the session is gone (the message says which and how)."""


def _facing(address: str, port: int) -> str:
    """This host's address on the way to ``address`` (no packet is sent)."""
    with contextlib.suppress(OSError):
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((address, port or 9))
            return s.getsockname()[0]
    return address


class Liveness:
    """This rank's end of a session's liveness watch (see the module doc).

    ``store``: the session's store; ``prefix``: its keys' prefix (the
    session); ``address``, ``port``: where the store is served, to find the
    address the other ranks reach this one at."""

    def __init__(self, store, prefix: str, rank: int, world_size: int, *, address: str,
                 port: int = 0):
        self.store, self.rank, self.world_size = store, rank, world_size
        host = _facing(address, port)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.bind((host, 0))
        # Connections wait in the kernel's queue: none is ever accepted.
        self._listener.listen(max(world_size, 128))
        self.where = f"{host}|{self._listener.getsockname()[1]}"
        self._key = f"{prefix}/alive"
        self._where: dict[int, tuple[str, int]] = {}  # the ranks that said where
        self._peers: dict[int, socket.socket] = {}
        self._gone: dict[int, str] = {}
        store.append(self._key, f"{rank}|{self.where};")

    def _read_where(self) -> None:
        """Where the ranks that joined since the last read listen."""
        if len(self._where) >= self.world_size or not self.store.check([self._key]):
            return
        for entry in self.store.get(self._key).decode().split(";"):
            if entry:
                rank, host, port = entry.split("|")
                self._where[int(rank)] = (host, int(port))

    def check(self) -> None:
        """Raises PeerGone naming the first rank of the session found gone."""
        self._read_where()
        for rank in range(self.world_size):
            if rank == self.rank:
                continue
            if rank not in self._gone:
                self._look(rank)
            if rank in self._gone:
                raise PeerGone(self._gone[rank])

    def _look(self, rank: int) -> None:
        peer = self._peers.get(rank)
        if peer is None:
            if rank not in self._where:
                return  # not joined yet
            host, port = self._where[rank]
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            peer = socket.socket(family, socket.SOCK_STREAM)
            peer.settimeout(SLICE_MS / 1000)
            try:
                peer.connect((host, port))
            except ConnectionRefusedError:
                peer.close()
                self._gone[rank] = (f"rank {rank} is gone: its process ended (nothing listens "
                                    f"at {host}:{port}, where it said it would)")
                return
            except OSError:
                peer.close()  # unreachable for now: looked at again later
                return
            peer.setblocking(False)
            self._peers[rank] = peer
        try:
            data = peer.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return  # alive: nothing to read, nothing closed
        except OSError as e:
            if e.errno not in (errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE):
                return
            data = b""
        if not data:
            self._gone[rank] = (f"rank {rank} is gone: its process ended (its connection "
                                "closed)")

    def close(self) -> None:
        """Stops: the other ranks see this one gone."""
        for peer in self._peers.values():
            peer.close()
        self._peers.clear()
        self._listener.close()
