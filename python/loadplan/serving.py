"""What the engine integrations (``loadplan.vllm``, ``loadplan.sglang``)
and the trainer (``loadplan.trainer``) share: the wire parameters the
trainer chooses for both sides, the names both sides of a session use in
the rendezvous store and for their endpoints, the checkpoint's dtypes by
name, and on the receiving side the Receiver kept while the trainer's
endpoints stay the same, and the refusal of an update a worker cannot
plan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import torch

from .transfer import DEFAULT_STAGING_CAP, ENGINES, Receiver
from .transfer.endpoints import refuse

TRANSPORTS = ("gloo", "nccl", "ipc")


@dataclass(kw_only=True)
class WireParams:
    """What both sides must agree on, which the trainer chooses and hands
    to the workers: the transfer engine (``"m_to_n"``, ``"sliced"``,
    ``"full"``), each rank's staging cap in bytes, ``atomic`` (live memory
    changes only once every rank has all of an update), the timeout in
    seconds, the transport (``"gloo"``, ``"nccl"``; None picks by the
    device; ``"ipc"``: trainer and engine on one machine, the workers reading
    the trainer's tensors in its shared memory, see ``endpoint_transport``)
    and where workers keep their plans (None: ``$LOADPLAN_PLAN_DIR``
    or ``~/.cache/loadplan/plans``)."""

    engine: str = "m_to_n"
    staging_cap: int = DEFAULT_STAGING_CAP
    atomic: bool = True
    timeout: float = 300.0
    transport: str | None = None
    plan_dir: str | None = None


WIRE_KEYS = tuple(f.name for f in fields(WireParams))


def check_wire(engine: str, world_size: int, trainer_ranks: int, port: int,
               transport: str | None, timeout: float) -> None:
    """Raises ValueError naming what is wrong with a session's parameters."""
    if engine not in ENGINES:
        raise ValueError(f"load plan: engine {engine!r} is not one of {sorted(ENGINES)}")
    if not 0 < trainer_ranks < world_size:
        raise ValueError(f"load plan: {trainer_ranks} trainer ranks leave no inference "
                         f"worker among world_size {world_size}")
    if not 0 < port < 65536:
        raise ValueError(f"load plan: master_port {port} is not a port")
    if transport is not None and transport not in TRANSPORTS:
        raise ValueError(f"load plan: transport {transport!r} is not one of {TRANSPORTS}")
    if not timeout > 0:
        raise ValueError(f"load plan: timeout must be positive, got {timeout}")


def endpoint_transport(transport: str | None, device: torch.device) -> dict:
    """The ``backend`` and ``colocated`` arguments of a session's Sender or
    Receiver on ``device``. ``"ipc"``: colocated transfers, the workers
    reading the trainer's tensors where they lie: CPU tensors in shared
    memory, CUDA tensors through CUDA IPC; either way the communicator is
    Gloo's, carrying only tables and agreements."""
    if transport == "ipc":
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"load plan: transport 'ipc' reads CPU or CUDA memory, not "
                             f"{device.type}")
        return {"backend": "gloo", "colocated": True}
    return {"backend": transport or ("nccl" if device.type == "cuda" else "gloo"),
            "colocated": False}


def epoch_key(session: str, round_: int) -> str:
    """The store key where trainer rank 0 tells the other trainer ranks the
    epoch of an update."""
    return f"{session}/epoch/{round_}"


def plan_version_key(session: str, worker_rank: int) -> str:
    """The store key where a worker publishes how many plans it has made
    (the trainer makes new endpoints when it changes)."""
    return f"{session}/plan-version/{worker_rank}"


def endpoint_name(session: str, epoch: int) -> str:
    """The name of the transfer endpoints (Sender, Receiver) of an epoch."""
    return f"{session}.e{epoch}"


def draft_session(session: str) -> str:
    """The names of a session's updates of the engine's speculative draft
    (its endpoints, epochs and plan versions): the draft has a plan and
    endpoints of its own, beside the model's."""
    return f"{session}.draft"


def endpoint_session(name: str) -> str:
    """The session of the endpoints named ``name`` (``endpoint_name``'s)."""
    return name.rpartition(".e")[0]


# An engine's update request names its endpoints; this suffix on the name
# asks the workers to close their mappings of the trainer's memory after
# the update (transport "ipc"; ``Receiver.release_mappings``), where the
# request has no field of its own for it (SGLang's).
RELEASE_SUFFIX = "+release"


def release_requested(name: str) -> tuple[str, bool]:
    """``name`` without ``RELEASE_SUFFIX``, and whether it had it."""
    if name.endswith(RELEASE_SUFFIX):
        return name[:-len(RELEASE_SUFFIX)], True
    return name, False


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
                timeout: float, watch=None) -> None:
    """Fails the set-up of the endpoints ``name`` on every rank with why
    this worker cannot plan the update (the trainer is waiting for its
    endpoint); the caller raises ``error``."""
    refuse(f"load plan: cannot plan the update: {str(error).removeprefix('load plan: ')}",
           rank=rank, world_size=world_size, store=store, name=name, timeout=timeout,
           watch=watch)
