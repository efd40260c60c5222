"""loadplan inside SGLang's weight updates.

Installed with loadplan, ``register`` runs in every SGLang process through
SGLang's ``sglang.srt.plugins`` entry point and hooks SGLang's weight
updater (its hook registry wraps the methods below), so that SGLang's own
control calls, over HTTP or its Python ``Engine``, drive loadplan:

- ``init_weights_update_group`` with ``backend="loadplan"``: each TP rank
  joins the trainer's rendezvous store (``master_address:master_port``;
  ``group_name`` is the trainer's session) as worker
  ``rank_offset + tp_rank`` (worker.Worker);
- ``update_weights_from_distributed`` with ``load_format="loadplan"``,
  between ``begin_weight_update`` and ``end_weight_update`` as every update
  of SGLang's: the request's names, dtypes and shapes declare the
  checkpoint (empty lists: the previous update's), its ``group_name`` names
  the update's transfer endpoints (a ``+release`` suffix: close the
  mappings of the trainer's memory after it); every rank receives the
  update as its plan says; ``end_weight_update`` runs SGLang's post-load
  processing;
- ``destroy_weights_update_group`` of the session closes it.

A failed update reports ``success: false`` with the cause on every rank and
closes the update session: with ``atomic`` the model is as before, and no
processing runs over it. The trainer's side is ``client.SGLangClient``
(docs/sglang.md).
"""

from __future__ import annotations

import logging

from ..serving import endpoint_session, release_requested
from .worker import BACKEND, LOGGER_NAME

logger = logging.getLogger(LOGGER_NAME)

_UPDATER = "sglang.srt.model_executor.model_runner_components.weight_updater.WeightUpdater"
_MANAGER = ("sglang.srt.managers.scheduler_components.weight_updater."
            "SchedulerWeightUpdaterManager")

# Each hooked WeightUpdater's workers by session. SGLang's WeightUpdater is a
# frozen, slotted dataclass: its workers are kept here, by its id, beside it.
_WORKERS: dict[int, tuple[object, dict]] = {}


def workers_of(updater) -> dict:
    """The loadplan workers (session -> worker.Worker) of a WeightUpdater."""
    entry = _WORKERS.get(id(updater))
    return entry[1] if entry is not None and entry[0] is updater else {}


class _Received(list):
    """What a loadplan update hands SGLang in place of received tensors:
    nothing left to load (the update is in live memory already)."""

    def __init__(self, updater, message: str):
        super().__init__()
        self.updater, self.message = updater, message


def _device(updater):
    import torch

    if updater.device == "cuda":
        return torch.device("cuda", updater.gpu_id)
    return torch.device(updater.device)


def _init_group(original, self, master_address, master_port, rank_offset, world_size,
                group_name, backend="nccl"):
    if backend != BACKEND:
        return original(self, master_address, master_port, rank_offset, world_size,
                        group_name, backend)
    from .worker import Worker

    try:
        if not group_name:
            raise ValueError("load plan: the group name (the trainer's session) is empty")
        # One trainer at a time: a new session (a restarted trainer) ends
        # the earlier ones.
        workers = _WORKERS.setdefault(id(self), (self, {}))[1]
        for old in list(workers):
            workers.pop(old).close()
        workers[group_name] = Worker(
            self.get_model(), tp_rank=self.tp_rank, device=_device(self),
            master_address=master_address, master_port=int(master_port),
            rank_offset=int(rank_offset), world_size=int(world_size), session=group_name)
    except Exception as e:  # noqa: BLE001 - SGLang reports it to the caller
        message = f"load plan: TP rank {self.tp_rank} could not join session {group_name!r}: {e}"
        logger.error("%s", message)
        return False, message
    return True, f"load plan: joined session {group_name!r}"


def _destroy_group(original, self, group_name):
    worker = workers_of(self).pop(group_name, None)
    if worker is None:
        return original(self, group_name)
    worker.close()
    return True, f"load plan: closed session {group_name!r}"


def _receive(original, self, *, names, dtypes, shapes, group_name, load_format=None):
    if load_format != BACKEND:
        return original(self, names=names, dtypes=dtypes, shapes=shapes,
                        group_name=group_name, load_format=load_format)
    endpoint, release = release_requested(group_name)
    session = endpoint_session(endpoint)
    worker = workers_of(self).get(session)
    if worker is None:
        raise RuntimeError(f"load plan: no loadplan session {session!r} on TP rank "
                           f"{self.tp_rank}: call init_weights_update_group with "
                           f"backend={BACKEND!r} first")
    worker.receive(names, dtypes, shapes, endpoint, release_mappings=release)
    return _Received(self, f"load plan: update {endpoint} received")


def _load(original, self, named_tensors):
    if not isinstance(named_tensors, _Received):
        return original(self, named_tensors)
    if named_tensors.updater is not self:
        # A draft model's runner: its tensors are not the plan's.
        return False, ("load plan: only the target model is updated through loadplan: "
                       "a draft model is not supported yet")
    return True, named_tensors.message


def _manager_update(original, self, recv_req):
    out = original(self, recv_req)
    if getattr(recv_req, "load_format", None) == BACKEND and not out.success \
            and self._session is not None and not self._session.loaded_weights:
        # Nothing was written (with atomic), or the model is as the failure
        # left it: the session ends without SGLang's processing running over
        # it, and the next update begins a new one.
        self._session = None
        out.message = f"{out.message} (the weight-update session is closed)"
    return out


def register() -> None:
    """Registers the hooks (SGLang's plugin entry point; runs once per
    process, before SGLang applies its registry's hooks)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for target, hook in ((f"{_UPDATER}.init_weights_update_group", _init_group),
                         (f"{_UPDATER}.destroy_weights_update_group", _destroy_group),
                         (f"{_UPDATER}.receive_weights_from_distributed", _receive),
                         (f"{_UPDATER}.load_weights_from_distributed", _load),
                         (f"{_MANAGER}.update_weights_from_distributed", _manager_update)):
        HookRegistry.register(target, hook, HookType.AROUND)
