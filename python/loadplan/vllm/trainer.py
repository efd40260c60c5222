"""The trainer's side of the ``loadplan`` backend: a vLLM
``TrainerWeightTransferEngine`` over a ``WeightSource``. It is
``loadplan.trainer.Trainer`` (see there for what each rank sends and
how rank 0 drives the workers) made through vLLM's trainer factory, which
picks it by ``LoadplanTrainerInitInfo``'s backend, and logging to vLLM's
logger."""

from __future__ import annotations

from typing import Self

from vllm.distributed.weight_transfer.base import (
    TrainerWeightTransferEngine,
    VLLMWeightSyncClient,
    WeightSource,
)
from vllm.logger import init_logger

from ..trainer import Trainer
from .info import LOGGER_NAME, LoadplanTrainerInitInfo


class LoadplanTrainerWeightTransferEngine(Trainer,
                                          TrainerWeightTransferEngine[LoadplanTrainerInitInfo]):
    """Sends each update as the workers' plans say."""

    init_info_cls = LoadplanTrainerInitInfo
    log = init_logger(LOGGER_NAME)

    @classmethod
    def trainer_init(cls, init_info: LoadplanTrainerInitInfo, *, client: VLLMWeightSyncClient,
                     source: WeightSource | None = None) -> Self:
        if source is None:
            raise ValueError("load plan: the loadplan trainer engine needs a WeightSource")
        return cls.start(init_info, client=client, source=source)
