"""What the engine integrations (``loadplan.vllm``, ``loadplan.sglang``)
share: the names both sides of a session use in the rendezvous store and
for their endpoints, the checkpoint's dtypes by name, and on the receiving
side the Receiver kept while the trainer's endpoints stay the same, and the
refusal of an update a worker cannot plan."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .transfer import Receiver
from .transfer.endpoints import refuse


def plan_version_key(session: str, worker_rank: int) -> str:
    """The store key where a worker publishes how many plans it has made
    (the trainer makes new endpoints when it changes)."""
    return f"{session}/plan-version/{worker_rank}"


def endpoint_name(session: str, epoch: int) -> str:
    """The name of the transfer endpoints (Sender, Receiver) of an epoch."""
    return f"{session}.e{epoch}"


def endpoint_session(name: str) -> str:
    """The session of the endpoints named ``name`` (``endpoint_name``'s)."""
    return name.rpartition(".e")[0]


def dtype_named(name: str) -> torch.dtype:
    """The torch dtype a checkpoint declares by name (``"bfloat16"``)."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"load plan: {name!r} is not a torch dtype")
    return dtype


class Receiving:
    """A worker's Receiver, kept while the trainer's endpoints keep their
    name and made anew when it changes (a new epoch: after a failed update,
    or a new plan)."""

    def __init__(self):
        self._receiver: Receiver | None = None
        self._name: str | None = None

    def get(self, name: str, make: Callable[[], Receiver]) -> Receiver:
        """The Receiver of the endpoints ``name`` (``make`` makes it)."""
        if self._receiver is not None and self._name == name:
            return self._receiver
        self.drop()
        self._receiver = make()
        self._name = name
        return self._receiver

    def receive(self, name: str, make: Callable[[], Receiver], **kwargs):
        """One update over the endpoints ``name``: ``(receiver, stats)``. A
        failed update drops the Receiver (the next update makes new
        endpoints) and raises."""
        receiver = self.get(name, make)
        try:
            return receiver, receiver.receive(**kwargs)
        except Exception:
            self.drop()
            raise

    def drop(self) -> None:
        receiver, self._receiver, self._name = self._receiver, None, None
        if receiver is not None:
            receiver.close()


def refuse_plan(error: Exception, *, rank: int, world_size: int, store, name: str,
                timeout: float) -> None:
    """Fails the set-up of the endpoints ``name`` on every rank with why
    this worker cannot plan the update (the trainer is waiting for its
    endpoint); the caller raises ``error``."""
    refuse(f"load plan: cannot plan the update: {str(error).removeprefix('load plan: ')}",
           rank=rank, world_size=world_size, store=store, name=name, timeout=timeout)
