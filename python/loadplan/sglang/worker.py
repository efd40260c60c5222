"""The inference side of loadplan in SGLang: one ``Worker`` per SGLang
``WeightUpdater`` (a TP rank's model runner), made by SGLang's
``init_weights_update_group`` with ``backend="loadplan"`` and driven by its
``update_weights_from_distributed`` with ``load_format="loadplan"`` (the
hooks of ``loadplan.sglang``).

At the first update the worker plans the model as SGLang built and
processed it, from the checkpoint the trainer declares (the request's
names, dtypes and shapes), and saves the plan (``loadplan.stored``); a
restarted engine of the same model and layout reads it back. Each update then receives every direct name
straight into live memory over loadplan's transfers, and the fallbacks
whole, which go through the model's ``load_weights``. SGLang's
``end_weight_update`` then runs its post-load processing, as after its own
updates. With ``atomic``, live memory changes only once every rank has all
of the update.
"""

from __future__ import annotations

import datetime
import json
import logging
import time

import torch

from .. import stored
from ..plan import LoadPlan, ParamMeta
from ..planning import plan_loads
from ..serving import (
    WIRE_KEYS,
    Receiving,
    dtype_named,
    endpoint_session,
    endpoint_transport,
    plan_version_key,
    refuse_plan,
)
from ..transfer import Receiver
from ..transfer.liveness import Liveness

LOGGER_NAME = "loadplan.sglang"
BACKEND = "loadplan"  # init_weights_update_group's backend, the updates' load_format

logger = logging.getLogger(LOGGER_NAME)


def init_key(session: str) -> str:
    """The store key of a session's wire parameters."""
    return f"{session}/sglang-init"


def _dtype(name) -> torch.dtype:
    """A request's dtype: SGLang's Python callers may pass torch dtypes or
    their full names."""
    if isinstance(name, torch.dtype):
        return name
    return dtype_named(str(name).removeprefix("torch."))


class _NotFound(logging.Handler):
    """The warnings SGLang's loaders log while the plan is traced (a name
    they have no parameter for: "Parameter NAME not found in
    params_dict")."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "not found" in message:
            self.messages.append(message)

    def names(self, name: str) -> bool:
        return any(name in m for m in self.messages)

    def __enter__(self) -> "_NotFound":
        logging.getLogger("sglang").addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger("sglang").removeHandler(self)


class Worker:
    """One TP rank's receiving end (see the module doc)."""

    def __init__(self, model: torch.nn.Module, *, tp_rank: int, device: torch.device,
                 master_address: str, master_port: int, rank_offset: int, world_size: int,
                 session: str):
        import torch.distributed as dist

        self.model = model
        self.device = device
        self.session = session
        self.rank = rank_offset + tp_rank
        self.rank_offset = rank_offset
        self.world_size = world_size
        if not 0 < rank_offset <= self.rank < world_size:
            raise ValueError(f"load plan: worker rank {self.rank} (TP rank {tp_rank} after "
                             f"{rank_offset} trainer ranks) is not in [1, {world_size})")
        # The trainer serves the store; its client put the wire parameters
        # there before asking the engine to join.
        self._store = dist.TCPStore(master_address, master_port, is_master=False,
                                    timeout=datetime.timedelta(seconds=60))
        self._store.wait([init_key(session)])
        wire = json.loads(self._store.get(init_key(session)))
        unknown = set(wire) - set(WIRE_KEYS)
        if unknown:
            raise ValueError(f"load plan: unknown wire parameters {sorted(unknown)}")
        self.engine = wire.get("engine", "m_to_n")
        self.staging_cap = wire.get("staging_cap")
        self.atomic = bool(wire.get("atomic", True))
        self.timeout = float(wire.get("timeout", 300.0))
        self.transport = wire.get("transport")
        self.plan_dir = wire.get("plan_dir")
        self._store.set_timeout(datetime.timedelta(seconds=self.timeout))
        self._watch = Liveness(self._store, session, self.rank, world_size,
                               address=master_address, port=master_port)
        self.plan: LoadPlan | None = None
        self.how = ""  # how the plan was made: traced, or read from a file
        self._metas: list[ParamMeta] | None = None
        self._receiving = Receiving()
        self._plans_made = 0
        self._updates = 0
        # The TransferStats of this rank's last update that succeeded.
        self.last_stats = None

    # -- planning -----------------------------------------------------------

    def _declared(self, names, dtypes, shapes) -> list[ParamMeta]:
        if not len(names) == len(dtypes) == len(shapes):
            raise ValueError(f"load plan: {len(names)} names, {len(dtypes)} dtypes and "
                             f"{len(shapes)} shapes; they must pair up")
        if names:
            return [ParamMeta(n, tuple(int(x) for x in s), _dtype(d))
                    for n, d, s in zip(names, dtypes, shapes)]
        if self._metas is None:
            raise ValueError("load plan: the first update must declare the checkpoint "
                             "(names, dtypes, shapes)")
        return self._metas

    def _key(self) -> str:
        """What makes two TP ranks' plans interchangeable: SGLang's version,
        the model class and its config, its tensors' dtypes, the parallel
        layout and this rank's place in it, the quantization methods and
        the kernels they chose."""
        import sglang
        from sglang.srt.runtime_context import get_parallel

        parallel = get_parallel()
        config = getattr(self.model, "config", None)
        return stored.plan_key({
            "sglang": sglang.__version__,
            "class": f"{type(self.model).__module__}.{type(self.model).__qualname__}",
            "config": config.to_json_string(use_diff=False)
            if hasattr(config, "to_json_string") else repr(config),
            "dtypes": sorted({str(t.dtype) for t in self.model.state_dict().values()}),
            "parallel": {n: getattr(parallel, n, None) for n in (
                "tp_size", "tp_rank", "pp_size", "pp_rank", "attn_tp_size", "moe_tp_size",
                "moe_ep_size", "moe_ep_rank")},
            "worker": self.rank,
            "processing": stored.quant_methods(self.model),
        })

    def _ensure_plan(self, metas: list[ParamMeta]) -> None:
        if self.plan is not None and (metas is self._metas or metas == self._metas):
            return
        t0 = time.perf_counter()
        key, digest = self._key(), stored.metadata_digest(metas)
        directory = stored.plan_dir(self.plan_dir)
        plan = None
        if stored.stored(directory, key, digest) is not None:
            path, _ = stored.paths(directory, key)
            try:
                plan = LoadPlan.load(path, self.model)
                plan.check_checkpoint(metas)  # the sidecar says so; the plan file must too
                self.how = f"read {path}"
            except (RuntimeError, ValueError, OSError) as e:
                logger.warning("load plan: not reusing %s: %s", path,
                               str(e).removeprefix("load plan: "))
                plan = None
        if plan is None:
            plan = self._trace(metas)
            path = stored.save(directory, key, plan, stored.Stored(digest, (), True))
            self.how = f"traced (saved to {path})"
        self.plan, self._metas = plan, metas
        self._drop_receiver()
        self._plans_made += 1
        self._store.set(plan_version_key(self.session, self.rank), str(self._plans_made))
        logger.info("load plan: worker rank %d %s its plan in %.2f s", self.rank, self.how,
                    time.perf_counter() - t0)
        for line in plan.report.splitlines():
            logger.info("%s", line)

    def _trace(self, metas: list[ParamMeta]) -> LoadPlan:
        with torch.no_grad(), _NotFound() as not_found:
            plan = plan_loads(self.model, metas)
        # SGLang's loaders skip a name they have no parameter for, with a
        # warning: an update that says it succeeded would not have written
        # it. Such a name is refused.
        lost = [m.name for m in metas
                if plan.entries[m.name].kind == "unneeded" and not_found.names(m.name)]
        if lost:
            raise ValueError(f"load plan: SGLang's {type(self.model).__name__}.load_weights "
                             f"has no parameter for {len(lost)} declared names: "
                             f"{', '.join(lost[:5])}")
        return plan

    # -- updates ------------------------------------------------------------

    def _make_receiver(self, endpoint: str) -> Receiver:
        return Receiver(
            self.model, self.plan, rank=self.rank, world_size=self.world_size,
            num_senders=self.rank_offset, engine=self.engine, atomic=self.atomic,
            **endpoint_transport(self.transport, self.device), device=self.device if self.device.type == "cuda" else None,
            store=self._store, name=endpoint, timeout=self.timeout, watch=self._watch,
            **({} if self.staging_cap is None else {"staging_cap": self.staging_cap}))

    def _drop_receiver(self) -> None:
        self._receiving.drop()

    def receive(self, names, dtypes, shapes, endpoint: str, *,
                release_mappings: bool = False) -> None:
        """One whole update over the endpoints named ``endpoint``: the direct
        names into live memory, then the fallbacks through ``load_weights``.
        Raises on any failure (every rank fails the same update).
        ``release_mappings`` (transport ``ipc``): then close every mapping of
        the trainer's memory (the next update maps it again)."""
        if endpoint_session(endpoint) != self.session:
            raise ValueError(f"load plan: update {endpoint!r} is not of session "
                             f"{self.session!r}")
        try:
            self._ensure_plan(self._declared(names, dtypes, shapes))
        except Exception as e:
            refuse_plan(e, rank=self.rank, world_size=self.world_size, store=self._store,
                        name=endpoint, timeout=self.timeout, watch=self._watch)
            raise
        # The fallbacks, once every rank has all of the update, through the
        # model's load_weights.
        receiver, stats = self._receiving.receive(endpoint,
                                                  lambda: self._make_receiver(endpoint))
        self._updates += 1
        if release_mappings:
            receiver.release_mappings()
            stats = receiver.stats
        self.last_stats = stats
        logger.info("load plan: worker rank %d update %d: %s", self.rank, self._updates,
                    stats.line())

    def close(self) -> None:
        self._drop_receiver()
        self._watch.close()
        self._store = None
