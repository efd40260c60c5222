"""The inference worker's side of the ``loadplan`` backend: a vLLM
``WeightTransferEngine``.

At the first update the worker plans the model as vLLM built it, from the
checkpoint the trainer declares, and saves the plan; a restarted worker of
the same model and layout reads it back. Each update then receives every
direct name straight into live memory over the runtime's transfers and only
the fallbacks whole, which go through ``load_weights``; layers vLLM must
process after loading are reloaded and processed, each as vLLM's own reload
does where that works and as a fresh load does where it does not (see
processing.py). The whole update happens in ``update_weights``: a trainer
that never calls ``finish_weight_update`` (it died) leaves no layer half
reloaded. With ``atomic``, live memory changes only once every rank has all
of the update.

A speculative draft model (vLLM names it with ``set_weight_update_target``
for a ``start_draft_weight_update``) is a target of its own: its plan,
endpoints and processing state are kept apart from the model's and
restored when vLLM switches back.
"""

from __future__ import annotations

import contextlib
import datetime
import time

import torch
from vllm.config import set_current_vllm_config
from vllm.distributed.weight_transfer.base import WeightTransferEngine
from vllm.logger import init_logger
from vllm.model_executor.model_loader.mtp_validation import disable_mtp_completeness_check

from ..plan import LoadPlan, ParamMeta
from ..planning import plan_loads
from ..serving import Receiving, endpoint_transport, refuse_plan
from ..transfer import Receiver
from ..transfer.liveness import Liveness
from ..capture import Targets
from . import plans, processing, rearrange
from .info import (
    LOGGER_NAME,
    LoadplanWeightTransferInitInfo,
    LoadplanWeightTransferUpdateInfo,
    draft_session,
    endpoint_name,
    plan_version_key,
)
from .layout import dtype_named

logger = init_logger(LOGGER_NAME)


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
    # Each target (the model, the speculative draft) has its own plan,
    # endpoints and processing state (``set_weight_update_target``).
    supports_draft_weight_update = True

    # What is the update target's own: saved and restored when vLLM
    # switches between the model and its draft.
    _PER_TARGET = ("plan", "processed", "refreshed", "recomputed", "staged", "rearranged",
                   "_layer_names", "_fresh", "_receiving", "_metas", "_observer", "_plans_made",
                   "_updates", "last_stats")

    def __init__(self, config, vllm_config, device: torch.device, model: torch.nn.Module):
        super().__init__(config, vllm_config, device, model)
        self.info: LoadplanWeightTransferInitInfo | None = None
        self.rank = -1
        self.plan: LoadPlan | None = None
        self.processed: list[str] = []  # modules reloaded on every update
        # Attention modules whose processing runs again after every update
        # (processing.refreshed).
        self.refreshed: list[str] = []
        # Quantization layers whose processing runs on the live tensors
        # after every update's direct writes (processing.recompute).
        self.recomputed: list[str] = []
        # Of those, the tensors loaded into their checkpoint format on each
        # update (processing.Staged), by module.
        self.staged: dict[str, list[str]] = {}
        # The quantization modules whose processing only moves elements: the
        # plan writes their names where it puts them, and their epilogues run
        # after every update (processing.rearranged).
        self.rearranged: dict[str, rearrange.Rearranged] = {}
        # Each processed module's names, and the processed modules vLLM's
        # reload does not load (loaded as a fresh load does).
        self._layer_names: dict[str, list[str]] = {}
        self._fresh: set[str] = set()
        self._store = None
        self._watch: Liveness | None = None  # the session's
        self._receiving = Receiving()
        self._metas: list[ParamMeta] | None = None
        # Until an update has run with it, the plan's processed layers are
        # assumed (every layer with a processing step) and the observer
        # watches each update: it outlives a failed update and a new trainer.
        self._observer: processing.Observer | None = None
        self._plans_made = 0
        self._updates = 0  # that this engine received
        # The TransferStats of this rank's last update that succeeded.
        self.last_stats = None
        # The other targets' state, by id of their model (_PER_TARGET).
        self._saved: dict[int, dict] = {}

    # -- targets ------------------------------------------------------------

    def _target_state(self) -> dict:
        return {a: getattr(self, a) for a in self._PER_TARGET}

    def _switch_to(self, model: torch.nn.Module) -> None:
        """Makes ``model`` the target whose state is on ``self`` (a new one
        starts with none: no plan, no endpoints)."""
        if model is self.model:
            return
        self._saved[id(self.model)] = self._target_state()
        state = self._saved.pop(id(model), None)
        if state is None:
            state = dict(plan=None, processed=[], refreshed=[], recomputed=[], staged={},
                         rearranged={}, _layer_names={}, _fresh=set(), _receiving=Receiving(),
                         _metas=None, _observer=None, _plans_made=0, _updates=0,
                         last_stats=None)
        for a, v in state.items():
            setattr(self, a, v)

    def set_weight_update_target(self, model: torch.nn.Module, model_config) -> None:
        """The model the next update goes to (vLLM's worker names its draft
        model here for ``start_draft_weight_update``): each target keeps its
        own plan, endpoints and processing state."""
        self._switch_to(model)
        super().set_weight_update_target(model, model_config)

    def reset_weight_update_target(self) -> None:
        self._switch_to(self._default_model)
        super().reset_weight_update_target()

    @property
    def is_draft(self) -> bool:
        """Whether the update target is the speculative draft."""
        return self.model is not self._default_model

    def _channel(self) -> str:
        """The target's part of the session's names (endpoints, plan
        versions): the model's are the session's, the draft's its own."""
        return draft_session(self.info.session) if self.is_draft else self.info.session

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
        self._watch = Liveness(self._store, init_info.session, self.rank,
                               init_info.world_size, address=init_info.master_address,
                               port=init_info.master_port)

    def _name(self, epoch: int) -> str:
        return endpoint_name(self._channel(), epoch)

    # -- planning -----------------------------------------------------------

    def _declared(self, update: LoadplanWeightTransferUpdateInfo) -> list[ParamMeta]:
        if update.names:
            return [ParamMeta(n, tuple(s), dtype_named(d))
                    for n, d, s in zip(update.names, update.dtype_names, update.shapes)]
        if self._metas is None:
            raise ValueError("load plan: the first update must declare the checkpoint "
                             "(names, dtype_names, shapes)")
        return self._metas

    def _capture(self, metas: list[ParamMeta], processed: list[str],
                 staged: dict[str, list[str]] | None = None,
                 rearranged: dict[str, rearrange.Rearranged] | None = None,
                 steps: dict[str, str] | None = None) -> LoadPlan:
        modules = dict(self.model.named_modules())
        staged, rearranged = staged or {}, rearranged or {}
        with set_current_vllm_config(self.vllm_config), \
                processing.checkpoint_format([modules[n] for n in processed]), \
                processing.staged_format(modules, staged):
            # The rearranged layers' live tensors are targets; the loader
            # writes into their checkpoint format, redirected to them.
            targets = Targets(self.model)
            with processing.checkpoint_format([modules[n] for n in rearranged]):
                plan = plan_loads(self.model, metas,
                                  fallback_modules=processing.reasons(processed, steps),
                                  fallback_tensors=processing.staged_reasons(staged),
                                  targets=targets,
                                  redirects=processing.redirects(self.model, targets, rearranged))
        self._layer_names = {n: plan.capture.module_names.get(n, []) for n in processed}
        return plan

    def _load(self, path, processed: list[str], staged: dict[str, list[str]]) -> LoadPlan:
        modules = dict(self.model.named_modules())
        with processing.checkpoint_format([modules[n] for n in processed]), \
                processing.staged_format(modules, staged):
            return LoadPlan.load(path, self.model)

    def _ensure_plan(self, metas: list[ParamMeta]) -> None:
        if self.plan is not None and (metas is self._metas or metas == self._metas):
            return
        t0 = time.perf_counter()
        key = self._model_key()
        digest = plans.metadata_digest(metas)
        directory = plans.plan_dir(self.info.plan_dir)
        stored = plans.stored(directory, key, digest)
        plan = None
        if stored is not None and stored.observed:
            path, _ = plans.paths(directory, key)
            try:
                staged = {m: list(n) for m, n in stored.staged.items()}
                plan = self._load(path, list(stored.processed), staged)
                # The sidecar says so; the plan file must too.
                plan.check_checkpoint(metas)
                self.processed = list(stored.processed)
                self._layer_names = {n: list(stored.layer_names.get(n, ()))
                                     for n in self.processed}
                self._fresh = set(stored.fresh)
                self.refreshed = list(stored.refreshed)
                self.recomputed = list(stored.recomputed)
                self.staged = staged
                self.rearranged = self._rearranged(stored.rearranged)
                self._observer = None
                how = f"read {path}"
            except (RuntimeError, ValueError, OSError) as e:
                logger.warning("load plan: not reusing %s: %s", path,
                               str(e).removeprefix("load plan: "))
                plan = None
        if plan is None:
            # Until an update shows which layers vLLM's processing changes,
            # every layer with a processing step is reloaded, and watched.
            candidates = processing.candidates(self.model)
            self.processed = list(candidates)
            self.refreshed = []  # every candidate is reloaded meanwhile
            self.recomputed = []
            self.staged = {}
            self.rearranged = {}
            self._observer = processing.Observer(candidates)
            plan = self._capture(metas, self.processed)
            how = "traced"
        self.plan, self._metas = plan, metas
        self._drop_receiver()
        self._publish()
        logger.info("load plan: worker rank %d %s its plan in %.2f s (%d modules reloaded "
                    "on every update)", self.rank, how, time.perf_counter() - t0,
                    len(self.processed))
        for line in plan.report.splitlines():
            logger.info("%s", line)

    def _rearranged(self, modules) -> dict[str, rearrange.Rearranged]:
        """What the processing of each of ``modules`` (a saved plan's
        rearranged layers) does, traced again.

        Raises:
            ValueError: one of them no longer only moves elements.
        """
        out = {}
        with set_current_vllm_config(self.vllm_config):
            for name in modules:
                found, why = processing.rearranged(self.model.get_submodule(name),
                                                   self.model_config.dtype)
                if found is None:
                    raise ValueError(f"load plan: vLLM's processing of {name} no longer only "
                                     f"moves elements: {why}")
                out[name] = found
        return out

    def _refine(self, received: dict[str, torch.Tensor]) -> None:
        """After the first update that ran with an assumed plan: plan again
        with only the layers whose processing changed a tensor reloaded,
        and save it. Of those, quantization layers whose processing only
        moves elements (``processing.rearranged``) have their names
        written where it puts them, and others whose processing
        ``processing.recomputes`` shows to run in place on the update's
        direct writes are computed after each update; each is proven on
        this update's weights (``received``, its fallbacks: all their
        names) against what vLLM's reload left, and reloaded if not."""
        observer, self._observer = self._observer, None
        changed = observer.processed()
        dtype = self.model_config.dtype
        rearranged, why = {}, {}
        with set_current_vllm_config(self.vllm_config):
            for n in changed:
                found, why[n] = processing.rearranged(observer.layers[n], dtype)
                if found is not None:
                    rearranged[n] = found
        in_place = {n: processing.in_place(observer.layers[n]) for n in changed}
        recomputed = [n for n in changed if n not in rearranged and in_place[n][1] is None]
        for n in changed:
            if n not in rearranged and in_place[n][1] is not None:
                # Why neither: the step that keeps the layer reloaded.
                moves = why[n]
                why[n] = in_place[n][1]
                if moves != processing.NO_QUANTIZATION:
                    why[n] += f" (and it does not only move elements: {moves})"
        try:
            while True:
                staged = {n: list(in_place[n][0]) for n in recomputed if in_place[n][0]}
                processed = [n for n in changed if n not in recomputed and n not in rearranged]
                plan = self._capture(self._metas, processed, staged, rearranged, why)
                failed = {}
                for n in rearranged:
                    names = plan.capture.module_names.get(n)
                    if names:
                        failed[n] = plan.entries[next(iter(names))].reason
                writers = processing.Writers(plan)
                with set_current_vllm_config(self.vllm_config), torch.no_grad():
                    for n in rearranged:
                        if n not in failed:
                            failed[n] = processing.rearranges(plan, writers, self.model, n,
                                                              rearranged[n], received,
                                                              self._load_weights)
                    for n in recomputed:
                        failed[n] = processing.recomputes(
                            plan, writers, self.model, n, staged.get(n, ()), received, dtype,
                            self._load_weights)
                failed = {n: r for n, r in failed.items() if r is not None}
                if not failed:
                    break
                why.update(failed)
                for n in failed:
                    if n in rearranged:
                        # Computed in place instead, where it may be.
                        del rearranged[n]
                        if in_place[n][1] is None:
                            recomputed.append(n)
                    else:
                        recomputed.remove(n)
        except RuntimeError as e:
            # The loader takes the checkpoint only through vLLM's reload
            # (into the checkpoint format): keep reloading every processed layer.
            logger.warning("load plan: worker rank %d keeps reloading every processed layer: %s",
                           self.rank, e)
            return
        for module in processed:
            logger.info("load plan: worker rank %d reloads %s on every update: its processing "
                        "cannot run after the update's direct writes: %s", self.rank, module,
                        why[module])
        self.plan, self.processed, self.recomputed = plan, processed, recomputed
        self.staged, self.rearranged = staged, rearranged
        self.refreshed = processing.refreshed(observer.layers, changed)
        key = self._model_key()
        fresh = tuple(n for n in processed if n in self._fresh)
        path = plans.save(plans.plan_dir(self.info.plan_dir), key, plan,
                          plans.Stored(plans.metadata_digest(self._metas), tuple(processed), True,
                                       self._layer_names, fresh, tuple(self.refreshed),
                                       tuple(recomputed), staged, tuple(rearranged)))
        self._drop_receiver()
        self._publish()
        logger.info("load plan: worker rank %d: vLLM's processing changes %d of %d layers "
                    "(%d of them written where it puts their elements, %d computed in place "
                    "after each update's direct writes, the others reloaded); %d attention "
                    "layers are processed again after each update; plan saved to %s",
                    self.rank, len(changed), len(observer.layers), len(rearranged),
                    len(recomputed), len(self.refreshed), path)
        for line in plan.report.splitlines():
            logger.info("%s", line)

    def _model_key(self) -> str:
        return plans.model_key(self.vllm_config, self.model, self.rank,
                               model_config=self.model_config)

    def _publish(self) -> None:
        """Tells the trainer this worker has a new plan for the target (it
        makes new endpoints for the target's next update)."""
        self._plans_made += 1
        self._store.set(plan_version_key(self._channel(), self.rank), str(self._plans_made))

    # -- updates ------------------------------------------------------------

    def start_weight_update(self) -> None:
        """Nothing to prepare: nothing is touched before every rank has the
        update."""

    def _make_receiver(self, epoch: int) -> Receiver:
        info = self.info
        return Receiver(
            self.model, self.plan, rank=self.rank, world_size=info.world_size,
            num_senders=info.rank_offset, engine=info.engine, atomic=info.atomic,
            **endpoint_transport(self.info.transport, self.device), device=self.device if self.device.type == "cuda" else None,
            store=self._store, name=self._name(epoch), timeout=info.timeout,
            staging_cap=info.staging_cap, watch=self._watch)

    def _drop_receiver(self) -> None:
        self._receiving.drop()

    def update_weights(self, update_info: dict) -> None:
        """One update (vLLM's ``update_weights``); waits for the device only
        where there is one."""
        self.receive_weights(self.parse_update_info(update_info))
        if self.device.type != "cpu":
            torch.accelerator.synchronize()

    def receive_weights(self, update_info: LoadplanWeightTransferUpdateInfo) -> None:
        """One whole update: the transfer, the fallbacks through
        ``load_weights``, the processed layers reloaded and processed. A
        plan whose processed layers were assumed is refined after its first
        update."""
        if self.info is None:
            raise RuntimeError("load plan: call init_transfer_engine() first")
        try:
            if update_info.draft != self.is_draft:
                raise ValueError(
                    "load plan: the trainer sends the update of the "
                    f"{'draft' if update_info.draft else 'model'}, but this worker's update "
                    f"goes to the {'draft' if self.is_draft else 'model'} (vLLM's "
                    f"{'start_draft_weight_update' if update_info.draft else 'start_weight_update'}"
                    " starts the draft's)")
            metas = self._declared(update_info)
            self._ensure_plan(metas)
        except Exception as e:
            refuse_plan(e, rank=self.rank, world_size=self.info.world_size, store=self._store,
                        name=self._name(update_info.epoch), timeout=self.info.timeout,
                        watch=self._watch)
            raise
        epoch = update_info.epoch
        receiver, stats = self._receiving.receive(
            self._name(epoch), lambda: self._make_receiver(epoch), load_fallbacks=False)
        self._updates += 1
        self.last_stats = stats
        logger.info("load plan: worker rank %d update %d%s: %s", self.rank, self._updates,
                    " of the draft" if self.is_draft else "", stats.line())
        # Every rank has all of the update; the direct names are in place.
        self._load_fallbacks(receiver.fallbacks)
        self._refresh()
        if self._observer is not None:
            self._refine(receiver.fallbacks)
        if update_info.release_mappings:
            # The trainer is about to give its memory back: close every
            # mapping of it now (the next update maps it again).
            receiver.release_mappings()
            self.last_stats = receiver.stats

    def _load_fallbacks(self, fallbacks: dict[str, torch.Tensor]) -> None:
        """The fallbacks through ``load_weights`` (the reloaded layers' through
        vLLM's reload), then the recomputed layers' processing, before the
        reloaded attention layers' (which may read them: MLA's reads
        ``kv_b_proj``)."""
        if not self.processed and not fallbacks:
            self._recompute()
            return
        modules = dict(self.model.named_modules())
        layers = {n: modules[n] for n in self.processed}
        reload = processing.Reload(self.model, layers, self._layer_names, self._fresh,
                                   self._load_weights, self.model_config.dtype)
        observer = self._observer if layers else None
        staged = processing.Staged({n: self.model.get_submodule(n) for n in self.staged},
                                   self.staged)
        with set_current_vllm_config(self.vllm_config), torch.no_grad(), \
                observer if observer is not None else contextlib.nullcontext():
            if layers:
                reload.begin()
            try:
                with staged:
                    reload.load(fallbacks)
                    self._recompute(staged)
            finally:
                if layers:
                    reload.finish(self.model_config)

    def _load_weights(self, pairs: list) -> None:
        with disable_mtp_completeness_check():
            self.model.load_weights(pairs)

    def _recompute(self, staged: processing.Staged | None = None) -> None:
        """The processing of the layers it computes in place, on the bytes
        the update wrote into them (processing.recompute), and the
        rearranged layers' epilogues."""
        if not self.recomputed and not self.rearranged:
            return
        layers = [self.model.get_submodule(n) for n in self.recomputed]
        with set_current_vllm_config(self.vllm_config), torch.no_grad():
            processing.recompute(layers, self.model_config.dtype, staged)
            for name, what in self.rearranged.items():
                what.run_epilogues(self.model.get_submodule(name))

    def _refresh(self) -> None:
        """Runs the processing of the attention layers that derive state
        from their tensors again, as vLLM's reload would (their own tensors
        it leaves as loaded, which the observation showed)."""
        if not self.refreshed:
            return
        # By path, not a walk of every module: this runs on every update.
        layers = [self.model.get_submodule(n) for n in self.refreshed]
        with set_current_vllm_config(self.vllm_config), torch.no_grad():
            processing.refresh(layers, self.model_config.dtype)

    def finish_weight_update(self) -> None:
        """Nothing left: ``update_weights`` did the whole update."""

    def shutdown(self) -> None:
        self._drop_receiver()
        for state in self._saved.values():
            state["_receiving"].drop()
        if self._watch is not None:
            self._watch.close()
        self._store = self._watch = None
