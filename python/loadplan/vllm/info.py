"""What the two sides of the ``loadplan`` backend share: its name and
logger, and what they tell each other: the trainer's init info, the
worker's init info (which the trainer builds and vLLM's control plane
carries as a dict) and the per-update info. All plain JSON, so vLLM's HTTP
routes carry them unchanged."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from vllm.distributed.weight_transfer.base import (
    TrainerInitInfo,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)

from ..serving import (  # noqa: F401 - the backend's names
    TRANSPORTS,
    WireParams,
    check_wire,
    draft_session,
    endpoint_name,
    epoch_key,
    plan_version_key,
)
from ..trainer import TrainerInfo

BACKEND = "loadplan"
# A child of vLLM's logger (``init_logger`` names): what the backend logs
# reaches a vLLM process's output with vLLM's own lines.
LOGGER_NAME = "vllm.loadplan"


@dataclass
class LoadplanTrainerInitInfo(TrainerInitInfo, TrainerInfo):
    """Trainer-side init info of the ``loadplan`` backend: loadplan's
    ``TrainerInfo`` (see there for every field), which vLLM's trainer
    factory reads the backend of."""

    backend: ClassVar[str] = BACKEND


@dataclass(kw_only=True)
class LoadplanWeightTransferInitInfo(WeightTransferInitInfo, WireParams):
    """Worker-side init info: the rendezvous and the wire parameters, as the
    trainer chose them. ``rank_offset`` is the number of trainer ranks;
    ``session`` keeps this trainer's keys in the store apart from an
    earlier one's."""

    master_address: str
    master_port: int
    world_size: int
    rank_offset: int
    session: str

    def __post_init__(self) -> None:
        check_wire(self.engine, self.world_size, self.rank_offset, self.master_port,
                   self.transport, self.timeout)
        if not self.session:
            raise ValueError("load plan: the init info names no session")


@dataclass
class LoadplanWeightTransferUpdateInfo(WeightTransferUpdateInfo):
    """One update. ``epoch`` numbers the trainer's set of transfer
    endpoints: workers make new ones when it changes (after a failed update,
    or when a worker's plan changed). ``names``, ``dtype_names`` and
    ``shapes`` declare every checkpoint tensor in the order the trainer
    sends them; empty lists keep the previous update's. ``draft``: the
    update is the speculative draft model's (vLLM's
    ``start_draft_weight_update`` started it); the draft keeps its own
    plan, declared checkpoint and endpoints. ``release_mappings``
    (transport ``ipc``): once the update is done, each worker closes its
    mappings of the trainer's memory (``Receiver.release_mappings``), so
    that the trainer may give that memory back; the next update maps it
    again."""

    epoch: int
    names: list[str] = field(default_factory=list)
    dtype_names: list[str] = field(default_factory=list)
    shapes: list[list[int]] = field(default_factory=list)
    draft: bool = False
    release_mappings: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.epoch, int) or self.epoch < 0:
            raise ValueError(f"load plan: epoch must be a non-negative int, got {self.epoch!r}")
        for flag in ("draft", "release_mappings"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"load plan: {flag} must be a bool, got "
                                 f"{getattr(self, flag)!r}")
        if not len(self.names) == len(self.dtype_names) == len(self.shapes):
            raise ValueError(
                f"load plan: {len(self.names)} names, {len(self.dtype_names)} dtypes and "
                f"{len(self.shapes)} shapes; they must pair up")

