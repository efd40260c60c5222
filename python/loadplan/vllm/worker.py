"""The inference worker's side of the ``loadplan`` backend: a vLLM
``WeightTransferEngine``.

At the first update the worker plans the model as vLLM built it, from the
checkpoint the trainer declares, and saves the plan; a restarted worker of
the same model and layout reads it back. Each update then receives every
direct name straight into live memory over the runtime's transfers and only
the fallbacks whole, which go through ``load_weights``; layers vLLM must
process after loading go through vLLM's own reload machinery (see
processing.py). With ``atomic``, live memory changes only once every rank
has all of the update.
"""

from __future__ import annotations

import datetime
import time

import torch
from vllm.config import set_current_vllm_config
from vllm.distributed.weight_transfer.base import WeightTransferEngine
from vllm.logger import init_logger
from vllm.model_executor.model_loader.mtp_validation import disable_mtp_completeness_check
from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

from ..plan import LoadPlan, ParamMeta
from ..planning import plan_loads
from ..transfer import Receiver
from ..transfer.endpoints import refuse
from . import plans, processing
from .info import (
    LoadplanWeightTransferInitInfo,
    LoadplanWeightTransferUpdateInfo,
    plan_version_key,
)
from .layout import dtype_named

logger = init_logger("loadplan.vllm")


def worker_rank(rank_offset: int, parallel_config) -> int:
    """This worker's rank among trainer ranks and workers: after the
    trainer's, one per worker across data-parallel groups (as vLLM's NCCL
    engines number them)."""
    dp = getattr(parallel_config, "data_parallel_index", 0)
    return rank_offset + dp * parallel_config.world_size + parallel_config.rank


class LoadplanWeightTransferEngine(
    WeightTransferEngine[LoadplanWeightTransferInitInfo, LoadplanWeightTransferUpdateInfo]
):
    """Receives weight updates as a load plan says (see the module doc)."""

    init_info_cls = LoadplanWeightTransferInitInfo
    update_info_cls = LoadplanWeightTransferUpdateInfo
    # The plan is bound to the model it was made for.
    supports_draft_weight_update = False

    def __init__(self, config, vllm_config, device: torch.device, model: torch.nn.Module):
        super().__init__(config, vllm_config, device, model)
        self.info: LoadplanWeightTransferInitInfo | None = None
        self.rank = -1
        self.plan: LoadPlan | None = None
        self.processed: list[str] = []  # modules reloaded through vLLM
        self._store = None
        self._receiver: Receiver | None = None
        self._epoch: int | None = None
        self._metas: list[ParamMeta] | None = None
        self._observer: processing.Observer | None = None
        self._watching = False  # this update is the one the observer watches
        self._reloading = False
        self._plans_made = 0

    # -- set-up -------------------------------------------------------------

    def init_transfer_engine(self, init_info: LoadplanWeightTransferInitInfo) -> None:
        """Joins the trainer's rendezvous store. The transfer endpoints are
        made at the first update, once the plan exists."""
        self.shutdown()
        import torch.distributed as dist

        self.info = init_info
        self.rank = worker_rank(init_info.rank_offset, self.parallel_config)
        if not init_info.rank_offset <= self.rank < init_info.world_size:
            raise ValueError(f"load plan: worker rank {self.rank} is not in "
                             f"[{init_info.rank_offset}, {init_info.world_size})")
        self._store = dist.TCPStore(
            init_info.master_address, init_info.master_port, is_master=False,
            timeout=datetime.timedelta(seconds=init_info.timeout))

    def _transport(self) -> str:
        if self.info.transport:
            return self.info.transport
        return "nccl" if self.device.type == "cuda" else "gloo"

    def _name(self, epoch: int) -> str:
        return f"{self.info.session}.e{epoch}"

    # -- planning -----------------------------------------------------------

    def _declared(self, update: LoadplanWeightTransferUpdateInfo) -> list[ParamMeta]:
        if update.names:
            return [ParamMeta(n, tuple(s), dtype_named(d))
                    for n, d, s in zip(update.names, update.dtype_names, update.shapes)]
        if self._metas is None:
            raise ValueError("load plan: the first update must declare the checkpoint "
                             "(names, dtype_names, shapes)")
        return self._metas

    def _capture(self, metas: list[ParamMeta], processed: list[str]) -> LoadPlan:
        modules = dict(self.model.named_modules())
        with set_current_vllm_config(self.vllm_config), \
                processing.checkpoint_format([modules[n] for n in processed]):
            return plan_loads(self.model, metas, fallback_modules=processing.reasons(processed))

    def _load(self, path, processed: list[str]) -> LoadPlan:
        modules = dict(self.model.named_modules())
        with processing.checkpoint_format([modules[n] for n in processed]):
            return LoadPlan.load(path, self.model)

    def _ensure_plan(self, metas: list[ParamMeta]) -> None:
        if self.plan is not None and metas == self._metas:
            return
        t0 = time.perf_counter()
        key = plans.model_key(self.vllm_config, self.model, self.rank)
        digest = plans.metadata_digest(metas)
        directory = plans.plan_dir(self.info.plan_dir)
        stored = plans.stored(directory, key, digest)
        plan = None
        if stored is not None and stored.observed:
            path, _ = plans.paths(directory, key)
            try:
                plan = self._load(path, list(stored.processed))
                if [(e.name, e.dtype, e.shape) for e in plan.entries.values()] != \
                        [(m.name, m.dtype, m.shape) for m in metas]:
                    raise ValueError("its checkpoint is not the declared one")
                self.processed = list(stored.processed)
                self._observer = None
                how = f"read {path}"
            except (RuntimeError, ValueError, OSError) as e:
                logger.warning("load plan: not reusing %s: %s", path, e)
                plan = None
        if plan is None:
            # Until the first update shows which layers vLLM's processing
            # changes, every layer with a processing step is reloaded through
            # vLLM, and watched.
            candidates = processing.candidates(self.model)
            self.processed = list(candidates)
            self._observer = processing.Observer(candidates)
            plan = self._capture(metas, self.processed)
            how = "traced"
        self.plan, self._metas = plan, metas
        self._drop_receiver()
        self._publish()
        logger.info("load plan: worker rank %d %s its plan in %.2f s (%d modules reloaded "
                    "through vLLM)", self.rank, how, time.perf_counter() - t0,
                    len(self.processed))
        for line in plan.report.splitlines():
            logger.info("%s", line)

    def _refine(self) -> None:
        """After the watched update: plan again with only the layers whose
        processing changed a tensor reloaded through vLLM, and save it."""
        observer, self._observer = self._observer, None
        processed = observer.processed()
        try:
            plan = self._capture(self._metas, processed)
        except RuntimeError as e:
            # The loader takes the checkpoint only through vLLM's reload
            # (into the checkpoint format): keep reloading every layer so.
            logger.warning("load plan: worker rank %d keeps reloading every processed layer "
                           "through vLLM: %s", self.rank, e)
            return
        self.plan, self.processed = plan, processed
        key = plans.model_key(self.vllm_config, self.model, self.rank)
        path = plans.save(plans.plan_dir(self.info.plan_dir), key, plan,
                          plans.Stored(plans.metadata_digest(self._metas), tuple(processed), True))
        self._publish()
        logger.info("load plan: worker rank %d: vLLM's processing changes %d of %d layers; "
                    "plan saved to %s", self.rank, len(processed), len(observer.layers), path)
        for line in plan.report.splitlines():
            logger.info("%s", line)

    def _publish(self) -> None:
        """Tells the trainer this worker has a new plan (it makes new
        endpoints for the next update)."""
        self._plans_made += 1
        self._store.set(plan_version_key(self.info.session, self.rank), str(self._plans_made))

    # -- updates ------------------------------------------------------------

    def start_weight_update(self) -> None:
        """Nothing to prepare: nothing is touched before every rank has the
        update."""
        self._reloading = False

    def _ensure_receiver(self, epoch: int) -> Receiver:
        if self._receiver is not None and self._epoch == epoch:
            return self._receiver
        self._drop_receiver()
        info = self.info
        self._receiver = Receiver(
            self.model, self.plan, rank=self.rank, world_size=info.world_size,
            num_senders=info.rank_offset, engine=info.engine, atomic=info.atomic,
            backend=self._transport(), device=self.device if self.device.type == "cuda" else None,
            store=self._store, name=self._name(epoch), timeout=info.timeout,
            staging_cap=info.staging_cap)
        self._epoch = epoch
        return self._receiver

    def _drop_receiver(self) -> None:
        receiver, self._receiver, self._epoch = self._receiver, None, None
        if receiver is not None:
            receiver.close()

    def update_weights(self, update_info: dict) -> None:
        """One update (vLLM's ``update_weights``); waits for the device only
        where there is one."""
        self.receive_weights(self.parse_update_info(update_info))
        if self.device.type != "cpu":
            torch.accelerator.synchronize()

    def receive_weights(self, update_info: LoadplanWeightTransferUpdateInfo) -> None:
        if self.info is None:
            raise RuntimeError("load plan: call init_transfer_engine() first")
        try:
            metas = self._declared(update_info)
            self._ensure_plan(metas)
        except Exception as e:
            # The trainer is waiting for this rank's endpoint: fail the
            # set-up on every rank with this rank's reason.
            info = self.info
            refuse(f"load plan: worker rank {self.rank} cannot plan the update: {e}",
                   rank=self.rank, world_size=info.world_size, store=self._store,
                   name=self._name(update_info.epoch), timeout=info.timeout)
            raise
        receiver = self._ensure_receiver(update_info.epoch)
        try:
            receiver.receive(load_fallbacks=False)
        except Exception:
            self._drop_receiver()  # the next update makes new endpoints
            raise
        # Every rank has all of the update; the direct names are in place.
        self._load_fallbacks(receiver.fallbacks)

    def _load_fallbacks(self, fallbacks: dict[str, torch.Tensor]) -> None:
        modules = dict(self.model.named_modules())
        layers = [modules[n] for n in self.processed]
        if self._observer is not None:
            self._observer.__enter__()
            self._watching = True
        if layers:
            processing.begin_reload(self.model, layers)
            self._reloading = True
        if fallbacks:
            with set_current_vllm_config(self.vllm_config), disable_mtp_completeness_check(), \
                    torch.no_grad():
                self.model.load_weights(list(fallbacks.items()))

    def finish_weight_update(self) -> None:
        watching, self._watching = self._watching, False
        try:
            if self._reloading:
                with set_current_vllm_config(self.vllm_config):
                    finalize_layerwise_reload(self.model, self.model_config)
        finally:
            self._reloading = False
            if watching:
                self._observer.__exit__(None, None, None)
        if watching:
            self._refine()

    def shutdown(self) -> None:
        self._drop_receiver()
        self._store = None
        self._observer = None
