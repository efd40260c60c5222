"""loadplan as a vLLM weight-transfer backend named ``loadplan``.

Installed with loadplan, the backend registers itself through vLLM's
``vllm.general_plugins`` entry point (``register``), so that
``WeightTransferConfig(backend="loadplan")`` selects it in the engine and
``LoadplanTrainerInitInfo`` in the trainer:

- worker.py: ``LoadplanWeightTransferEngine`` (vLLM's ``WeightTransferEngine``);
- trainer.py: ``LoadplanTrainerWeightTransferEngine`` over a ``WeightSource``;
- info.py: what both sides share: the backend's name and logger, the init
  and update infos;
- clients.py: vLLM's HTTP and Ray weight-sync clients with the draft
  model's start (``draft=True``);
- layout.py: trainer ranks' boxes from vLLM's placements;
- processing.py: vLLM's post-load processing, observed and re-run;
- plans.py: a worker's plan on disk (loadplan.stored), keyed for vLLM, for restarts.

The tiny vLLM models the tests and benchmarks build are a test fixture,
``python/tests/vllm_tiny.py``.

See docs/vllm.md.
"""

from __future__ import annotations


def register() -> None:
    """Registers the backend in vLLM's worker and trainer factories (once
    per process; vLLM may load plugins several times)."""
    from vllm.distributed.weight_transfer.factory import (
        WeightTransferEngineFactory,
        WeightTransferTrainerFactory,
    )

    from .info import BACKEND

    # vLLM's factories refuse a name registered twice and offer no public
    # way to ask whether one is: this is the one place that reads their
    # registries.
    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(
            BACKEND, "loadplan.vllm.worker", "LoadplanWeightTransferEngine")
    if BACKEND not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine(
            BACKEND, "loadplan.vllm.trainer", "LoadplanTrainerWeightTransferEngine")


def __getattr__(name: str):
    # The engines and infos import vLLM; only on use.
    if name in ("LoadplanTrainerInitInfo", "LoadplanWeightTransferInitInfo",
                "LoadplanWeightTransferUpdateInfo"):
        from . import info

        return getattr(info, name)
    if name in ("HTTPWeightSyncClient", "RayWeightSyncClient"):
        from . import clients

        return getattr(clients, name)
    if name == "LoadplanWeightTransferEngine":
        from .worker import LoadplanWeightTransferEngine

        return LoadplanWeightTransferEngine
    if name == "LoadplanTrainerWeightTransferEngine":
        from .trainer import LoadplanTrainerWeightTransferEngine

        return LoadplanTrainerWeightTransferEngine
    raise AttributeError(name)
