"""Ports for the stores the tests start.

A port the kernel hands out for ``bind(("", 0))`` comes from the ephemeral
range, the same range every outgoing connection and every Gloo pair takes
its local port from. Picked that way, closed, and bound again by a
TCPStore a few seconds later, it can meanwhile be taken by one of the
test's own processes (EADDRINUSE). These ports come from below the
ephemeral range instead, where nothing is handed out without asking for
it by number."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_GIVEN: set[int] = set()
_RANDOM = random.SystemRandom()


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def _candidates() -> range:
    lo, hi = _ephemeral_range()
    if lo - 1024 >= 4096:
        return range(max(1024, lo - 12288), lo)
    return range(hi + 1, 65536)


def free_port() -> int:
    """A port on 127.0.0.1 that is free now, outside the ephemeral range,
    and not given out before by this process."""
    ports = _candidates()
    for _ in range(500):
        port = _RANDOM.choice(ports)
        if port in _GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    raise RuntimeError(f"no free port in {ports.start}..{ports.stop - 1}")
