"""The trainer's side of loadplan's engine integrations, free of any
engine: ``Trainer`` sends each update from a weight source to an inference
engine's workers, driving them through a client.

Every trainer rank is a sender: with ``engine="m_to_n"`` it sends the local
shards ``iter_local`` yields (the boxes its metadata's placements say),
with ``"sliced"`` or ``"full"`` the whole tensors ``iter_full`` yields of the
names it owns. Rank 0 serves the rendezvous store and drives the workers
through the client: ``start_weight_update``, then ``update_weights`` while
every rank sends, then ``finish_weight_update``.

The source is any object with

- ``metadata``: the same list on every rank and every update, one entry per
  checkpoint tensor with ``name``, ``dtype``, ``shape`` and optionally
  ``owners`` (the trainer ranks that hold it; None: every rank),
  ``mesh_shape`` (of the mesh over the owners; None: ``(len(owners),)``)
  and ``placements`` (one per mesh axis: a ``Shard(dim)``, which splits
  ``dim`` as ``torch.chunk`` does, outer axes first, or a ``Replicate()``;
  None: replicated). ``Param`` is such an entry; vLLM's ``ParamMeta`` is
  one too;
- ``iter_full()`` and/or ``iter_local()``: ``(name, tensor)`` pairs of the
  names this rank owns, in metadata order: whole tensors, or this rank's
  piece as the placements say.

vLLM's ``WeightSource`` is such a source. The client is vLLM's weight-sync
client (``loadplan.vllm``) or ``loadplan.sglang.client.SGLangClient``.

With ``draft``, each ``send_weights`` also updates the engine's
speculative draft model (vLLM's MTP or EAGLE drafter) from the same
source, as a second update that the client starts with
``start_draft_weight_update``: the draft has its own plan and endpoints,
and takes the names its loader reads (DeepSeek-V3's MTP layer, the shared
embedding) from the same checkpoint.

With ``quantize_fp8`` the trainer declares the matching weights as the fp8
block-quantized checkpoint the engine serves (each weight as
``float8_e4m3fn`` and its ``_scale_inv`` scales) and its ``Sender``
quantizes the source's tensors as it sends them.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import math
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from fnmatch import fnmatchcase
from typing import Any

import torch

from .plan import Box, ParamMeta
from .serving import (
    WireParams,
    check_wire,
    draft_session,
    endpoint_name,
    endpoint_transport,
    epoch_key,
    plan_version_key,
)
from .transfer import Sender, quantized_metadata
from .transfer.endpoints import refuse
from .transfer.liveness import Liveness


@dataclass(frozen=True)
class Replicate:
    """Every coordinate along this mesh axis holds the whole extent."""


@dataclass(frozen=True)
class Shard:
    """This mesh axis splits tensor dim ``dim`` as ``torch.chunk`` does."""

    dim: int


@dataclass(frozen=True)
class Param:
    """One checkpoint tensor of a source's metadata: name, dtype, whole
    shape, and which trainer ranks hold it how (see the module doc)."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    owners: tuple[int, ...] | None = field(default=None, kw_only=True)
    mesh_shape: tuple[int, ...] | None = field(default=None, kw_only=True)
    placements: tuple[Shard | Replicate, ...] | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        if self.owners is None:
            if self.mesh_shape is not None or self.placements is not None:
                raise ValueError(f"load plan: {self.name!r} has a mesh or placements but "
                                 "no owners")
            return
        owners = tuple(self.owners)
        if not owners or len(set(owners)) != len(owners) or any(
                not isinstance(r, int) or r < 0 for r in owners):
            raise ValueError(f"load plan: {self.name!r}'s owners {owners} are not distinct "
                             "ranks")
        mesh = tuple(self.mesh_shape or (len(owners),))
        if any(d <= 0 for d in mesh) or math.prod(mesh) != len(owners):
            raise ValueError(f"load plan: {self.name!r}'s mesh {mesh} does not cover its "
                             f"{len(owners)} owners")
        placements = self.placements
        if placements is not None:
            placements = tuple(placements)
            if len(placements) != len(mesh):
                raise ValueError(f"load plan: {self.name!r} has {len(placements)} placements "
                                 f"for a {len(mesh)}-D mesh")
            for p in placements:
                if isinstance(p, Shard) and not 0 <= p.dim < len(self.shape):
                    raise ValueError(f"load plan: {self.name!r} shards dim {p.dim} of a "
                                     f"{len(self.shape)}-D tensor")
                if not isinstance(p, Shard | Replicate):
                    raise TypeError(f"load plan: {self.name!r}'s placement {p!r} is neither "
                                    "Shard nor Replicate")
        object.__setattr__(self, "owners", owners)
        object.__setattr__(self, "mesh_shape", mesh)
        object.__setattr__(self, "placements", placements)


def _owners(meta, trainer_ranks: int) -> Sequence[int]:
    owners = getattr(meta, "owners", None)
    return range(trainer_ranks) if owners is None else owners


def _chunk(start: int, stop: int, index: int, count: int) -> tuple[int, int]:
    """Part ``index`` of ``count`` of ``[start, stop)`` as ``torch.chunk``
    cuts it (empty past the last non-empty chunk)."""
    n = stop - start
    size = -(-n // count) if n else 0
    a = min(n, index * size)
    b = min(n, (index + 1) * size)
    return start + a, start + max(a, b)


def owner_boxes(meta, trainer_ranks: int) -> dict[int, Box | None]:
    """Trainer rank -> the box of ``meta`` its ``iter_local`` yields (None:
    the whole tensor), for every owner. A rank whose share is empty holds
    nothing of it and is left out."""
    owners = _owners(meta, trainer_ranks)
    placements = getattr(meta, "placements", None)
    if placements is None:
        return {rank: None for rank in owners}
    mesh = tuple(getattr(meta, "mesh_shape", None) or (len(owners),))
    out: dict[int, Box | None] = {}
    for flat, rank in enumerate(owners):
        coords = []
        for size in reversed(mesh):
            coords.append(flat % size)
            flat //= size
        coords.reverse()
        box = [(0, n) for n in meta.shape]
        # Outer mesh axes cut first, as iter_local's placements say.
        for axis, placement in enumerate(placements):
            dim = getattr(placement, "dim", None)  # a Shard's; Replicate has none
            if dim is not None:
                a, b = box[dim]
                box[dim] = _chunk(a, b, coords[axis], mesh[axis])
        if all(b > a for a, b in box) or not meta.shape:
            out[rank] = tuple(box)
    return out


def holdings_of(metadata: Sequence, rank: int, trainer_ranks: int,
                local: bool) -> dict[str, Box | None]:
    """What trainer ``rank`` sends of each name: its local box (``local``:
    M-to-N, from ``iter_local``) or the whole tensor of each name it owns."""
    held: dict[str, Box | None] = {}
    for meta in metadata:
        if rank not in _owners(meta, trainer_ranks):
            continue
        if not local:
            held[meta.name] = None
            continue
        boxes = owner_boxes(meta, trainer_ranks)
        if rank in boxes:
            held[meta.name] = boxes[rank]
    return held


@dataclass
class TrainerInfo(WireParams):
    """What a trainer rank needs to start a session.

    ``world_size`` counts every trainer rank (``num_trainer_ranks``, ranks
    0..n-1; each sends what it holds) and every inference worker. Trainer
    rank 0 serves the rendezvous store at ``master_address:master_port`` and
    drives the workers through the client. The wire parameters
    (``WireParams``: ``engine``, ``staging_cap``, ``atomic``, ``timeout``,
    ``transport``, ``plan_dir``) go to the workers.

    ``quantize_fp8``: fnmatch patterns of the source's weight names that the
    engine serves fp8 (e4m3) block-quantized, as DeepSeek-V3 and Qwen3 FP8
    checkpoints ship them. The trainer declares each matching 2-D name as
    ``float8_e4m3fn`` with its float32 ``<name>_scale_inv``
    [ceil(N/bn), ceil(K/bk)] after it, and its ``Sender`` quantizes the
    source's bf16, fp16 or fp32 tensors per ``quantize_block`` (bn, bk)
    while it sends (see transfer/quantize.py): the source yields neither
    the fp8 tensors nor the scales. Every block a rank holds of such a
    weight must be whole.

    ``draft``: every update also goes to the engine's speculative draft
    model, from the same source (see the module doc); the client must
    have ``start_draft_weight_update``.
    """

    master_address: str
    master_port: int
    world_size: int
    num_trainer_ranks: int = 1
    quantize_fp8: tuple[str, ...] = ()
    quantize_block: tuple[int, int] = (128, 128)
    draft: bool = False
    rank: int = field(kw_only=True)

    def __post_init__(self) -> None:
        check_wire(self.engine, self.world_size, self.num_trainer_ranks, self.master_port,
                   self.transport, self.timeout)
        if isinstance(self.quantize_fp8, str):
            raise ValueError("load plan: quantize_fp8 takes a sequence of name patterns, "
                             f"not the string {self.quantize_fp8!r}")
        self.quantize_fp8 = tuple(self.quantize_fp8)
        if self.quantize_fp8 and self.transport == "ipc":
            raise ValueError("load plan: quantize_fp8 makes new tensors on every update, which "
                             "transport 'ipc' cannot read in place; it is not built yet")
        self.quantize_block = tuple(self.quantize_block)
        if (len(self.quantize_block) != 2
                or not all(isinstance(b, int) and b > 0 for b in self.quantize_block)):
            raise ValueError(f"load plan: quantize_block {self.quantize_block} is not two "
                             "positive ints (rows, columns)")
        if not 0 <= self.rank < self.num_trainer_ranks:
            raise ValueError(f"load plan: trainer rank {self.rank} is not in "
                             f"[0, {self.num_trainer_ranks})")

    @property
    def is_sender(self) -> bool:
        """Rank 0 serves the store and drives the workers."""
        return self.rank == 0


@dataclass
class _Target:
    """What a trainer rank keeps of one update target of the engine (the
    model, or its speculative draft): the names of its keys and endpoints
    in the store, its Sender and the epoch it was made for, the epoch rank
    0 chose last, the workers' plan versions it saw, the metadata the
    workers last planned for, and its updates' count."""

    session: str
    draft: bool = False
    sender: Sender | None = None
    epoch: int = -1
    last_epoch: int = -1
    versions: list[str | None] | None = None
    sent_meta: list | None = None
    round: int = 0


# What rank 0 writes in place of a session or an epoch when the engine
# refused what it asked: the error's message follows.
_REFUSED = "refused:"


def _tell_refusal(store, key: str, what: str, cause: Exception) -> RuntimeError:
    """Rank 0: the error of the engine's refusal of ``what``, written to
    ``key``, where the other trainer ranks wait for a value (``_told``)."""
    error = RuntimeError(f"load plan: the engine did not start {what}: "
                         f"{type(cause).__name__}: {cause}")
    store.set(key, _REFUSED + str(error))
    return error


def _told(value: str, rank: int) -> str:
    """A value rank 0 told the other trainer ranks through the store, or
    its refusal raised."""
    if value.startswith(_REFUSED):
        raise RuntimeError(f"{value.removeprefix(_REFUSED)} (told to trainer rank {rank} by "
                           "rank 0)")
    return value


def _implements(source: Any, mode: str) -> bool:
    """Whether ``source`` yields pairs by ``mode`` (``"iter_full"``,
    ``"iter_local"``): a vLLM WeightSource says so; another has the method."""
    says = getattr(source, f"implements_{mode}", None)
    return bool(says()) if callable(says) else callable(getattr(source, mode, None))


class Trainer:
    """Sends each update as the workers' plans say (see the module doc).
    ``Trainer.start`` on every trainer rank, then ``send_weights`` on every
    rank for each update, and ``shutdown`` at the end."""

    log = logging.getLogger("loadplan.trainer")

    def __init__(self, *, client: Any, source: Any, init_info: TrainerInfo, store,
                 session: str):
        self.client = client
        self.source = source
        self.rank = init_info.rank
        self.is_sender = init_info.is_sender
        self.init_info = init_info
        self.store = store
        self.session = session
        self.local = init_info.engine == "m_to_n"
        # Set-up notices a rank of the session gone within a fraction of a
        # second, not at the timeout.
        self.watch = Liveness(store, session, self.rank, init_info.world_size,
                              address=init_info.master_address, port=init_info.master_port)
        # The model's update, and the draft's after it where asked.
        self._targets = [_Target(session)]
        if init_info.draft:
            self._targets.append(_Target(draft_session(session), draft=True))
        self._made: tuple | None = None  # _checkpoint's
        self._executor: ThreadPoolExecutor | None = None  # rank 0's call to the workers
        self._call = None  # its last call's future

    @classmethod
    def start(cls, init_info: TrainerInfo, *, client: Any, source: Any = None) -> Trainer:
        """Joins (rank 0: serves) the rendezvous store and, on rank 0, asks
        the workers to join the session. On every trainer rank."""
        if source is None:
            raise ValueError("load plan: the loadplan trainer needs a weight source")
        if init_info.engine == "m_to_n" and not _implements(source, "iter_local"):
            raise TypeError(f"load plan: engine 'm_to_n' sends local shards, but "
                            f"{type(source).__name__} does not implement iter_local()")
        if init_info.engine != "m_to_n" and not _implements(source, "iter_full"):
            raise TypeError(f"load plan: engine {init_info.engine!r} sends whole tensors, but "
                            f"{type(source).__name__} does not implement iter_full()")
        if init_info.is_sender and init_info.draft and not callable(
                getattr(client, "start_draft_weight_update", None)):
            raise TypeError(f"load plan: draft=True updates the engine's draft model, which "
                            f"the client starts with start_draft_weight_update(); "
                            f"{type(client).__name__} has none")
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=init_info.timeout)
        store = dist.TCPStore(init_info.master_address, init_info.master_port,
                              is_master=init_info.is_sender, timeout=timeout,
                              wait_for_workers=False)
        # One session per start keeps this trainer's keys apart from an
        # earlier one's in a store that outlived it. Rank 0 hands it to the
        # other ranks once the engine took it, or its refusal if not.
        if init_info.is_sender:
            session = f"loadplan-{uuid.uuid4().hex[:12]}"
        else:
            store.wait(["loadplan/session"], timeout)
            session = _told(store.get("loadplan/session").decode(), init_info.rank)
        engine = cls(client=client, source=source, init_info=init_info, store=store,
                     session=session)
        if engine.is_sender:
            wire = {f.name: getattr(init_info, f.name) for f in fields(WireParams)}
            try:
                client.init_weight_transfer_engine(dict(
                    master_address=init_info.master_address,
                    master_port=init_info.master_port, world_size=init_info.world_size,
                    rank_offset=init_info.num_trainer_ranks, session=session, **wire))
            except Exception as e:
                error = _tell_refusal(store, "loadplan/session", "the weight transfer engine", e)
                engine.shutdown()
                raise error from e
            store.set("loadplan/session", session)
        return engine

    # -----------------------------------------------------------------------

    def _worker_versions(self, target: _Target) -> list[str | None]:
        """How many plans each worker has made for ``target`` (None: none
        yet)."""
        out = []
        for rank in range(self.init_info.num_trainer_ranks, self.init_info.world_size):
            key = plan_version_key(target.session, rank)
            out.append(self.store.get(key).decode() if self.store.check([key]) else None)
        return out

    def _agree_on_epoch(self, target: _Target, declaring: bool) -> int:
        """Rank 0 decides whether this update needs new endpoints (none yet,
        the last update failed, a worker planned anew, or this update
        declares the checkpoint, which the workers plan for) and tells the
        others."""
        key = epoch_key(target.session, target.round)
        if self.is_sender:
            versions = self._worker_versions(target)
            epoch = target.last_epoch
            if target.sender is None or versions != target.versions or declaring:
                epoch += 1
            target.versions = versions
            target.last_epoch = epoch
            self.store.set(key, str(epoch))
            return epoch
        self.store.wait([key], datetime.timedelta(seconds=self.init_info.timeout))
        return int(_told(self.store.get(key).decode(), self.rank))

    def _start_engine(self, target: _Target) -> None:
        """Rank 0: the engine's start of this update; if it fails, every
        trainer rank fails this update with its error (told through this
        round's epoch key, which they wait for), rather than wait for
        endpoints the workers, never asked, do not make."""
        try:
            if target.draft:
                self.client.start_draft_weight_update()
            else:
                self.client.start_weight_update()
        except Exception as e:
            error = _tell_refusal(self.store, epoch_key(target.session, target.round),
                                  "the update", e)
            self._drop_sender(target)
            raise error from e

    def _declared(self, meta: list) -> tuple[list[ParamMeta], dict[str, str]]:
        """The checkpoint the workers are told of (the source's, with the
        ``quantize_fp8`` weights as fp8 and their scales) and the weight ->
        scale names the sender quantizes."""
        metas = [ParamMeta(m.name, tuple(m.shape), m.dtype) for m in meta]
        patterns = self.init_info.quantize_fp8
        if not patterns:
            return metas, {}
        names = [m.name for m in metas
                 if len(m.shape) == 2 and any(fnmatchcase(m.name, p) for p in patterns)]
        unmatched = [p for p in patterns if not any(fnmatchcase(n, p) for n in names)]
        if unmatched:
            raise ValueError(f"load plan: quantize_fp8 patterns {unmatched} match no 2-D "
                             "weight of the source's metadata")
        return quantized_metadata(metas, names, torch.float8_e4m3fn,
                                  self.init_info.quantize_block)

    def _ensure_sender(self, target: _Target, epoch: int, declared: list[ParamMeta],
                       quantize: dict[str, str], held: dict, device: torch.device) -> Sender:
        if target.sender is not None and target.epoch == epoch:
            return target.sender
        self._drop_sender(target)
        info = self.init_info
        try:
            transport = endpoint_transport(info.transport, device)
        except ValueError as e:
            self._refuse(target, epoch, e)
        # A quantized weight's scales are held as the blocks of the weight
        # this rank holds (the Sender sets them).
        target.sender = Sender(
            declared, holdings=held,
            rank=self.rank, world_size=info.world_size, num_senders=info.num_trainer_ranks,
            engine=info.engine, **transport,
            device=device if device.type == "cuda" else None, store=self.store,
            name=endpoint_name(target.session, epoch), timeout=info.timeout,
            staging_cap=info.staging_cap, quantize=quantize,
            quantize_block=info.quantize_block, watch=self.watch)
        target.epoch = epoch
        return target.sender

    def _refuse(self, target: _Target, epoch: int, error: Exception) -> None:
        """Fails this update on every rank with ``error``, before any byte
        moves (over this epoch's endpoints, or in their set-up), then raises
        it."""
        if target.sender is not None and target.epoch == epoch:
            target.sender.fail(error)  # raises it
        info = self.init_info
        refuse(str(error), rank=self.rank, world_size=info.world_size, store=self.store,
               name=endpoint_name(target.session, epoch), timeout=info.timeout,
               watch=self.watch)
        raise error

    @staticmethod
    def _drop_sender(target: _Target) -> None:
        sender, target.sender = target.sender, None
        if sender is not None:
            sender.close()

    def _checkpoint(self, meta: list) -> tuple:
        """What this rank makes of the source's metadata, the same on every
        rank: the declared checkpoint, the quantized names and this rank's
        holdings. Per name, so made once per metadata list (a source's is
        the same list on every update)."""
        if self._made is None or meta is not self._made[0]:
            declared, quantize = self._declared(meta)
            held = holdings_of(meta, self.rank, self.init_info.num_trainer_ranks, self.local)
            self._made = (meta, declared, quantize, held)
        return self._made[1:]

    def _call_thread(self) -> ThreadPoolExecutor:
        """Rank 0's thread for the workers' update call, kept across updates
        unless its last call has not returned (it timed out): then a new one."""
        if self._executor is not None and self._call is not None and not self._call.done():
            self._executor.shutdown(wait=False)
            self._executor = None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1)
        return self._executor

    def send_weights(self, *, release_mappings: bool = False) -> None:
        """One update, on every trainer rank: every worker's parameters
        (with ``draft``, its draft model's too) are the source's when it
        returns, or it raises (and so does every other rank). The draft's
        update follows the model's: if it fails, the model has the new
        weights and the draft the old until the next update.

        ``release_mappings`` (transport ``ipc``): once the update is done,
        the workers close their mappings of this trainer's memory, which
        it may then give back (offloading its parameters, emptying torch's
        CUDA cache: CUDA calls freeing memory that another process still
        has open undefined); the next update maps it again. Every trainer
        rank passes the same."""
        if release_mappings and self.init_info.transport != "ipc":
            raise ValueError("load plan: release_mappings is for transport 'ipc' (the "
                             "workers map the trainer's memory only there)")
        for target in self._targets:
            self._send(target, release_mappings)

    def _send(self, target: _Target, release_mappings: bool = False) -> None:
        """One update of ``target`` (the model, or its draft)."""
        meta = self.source.metadata
        declared, quantize, held = self._checkpoint(meta)
        target.round += 1
        declaring = meta is not target.sent_meta and meta != target.sent_meta
        if self.is_sender:
            self._start_engine(target)
        try:
            epoch = self._agree_on_epoch(target, declaring)
        except RuntimeError:
            self._drop_sender(target)  # the next update makes new endpoints
            raise
        update: dict = {"epoch": epoch, "names": [], "dtype_names": [], "shapes": []}
        if target.draft:
            update["draft"] = True
        if release_mappings:
            update["release_mappings"] = True
        if declaring:
            update.update(names=[m.name for m in declared],
                          dtype_names=[str(m.dtype).removeprefix("torch.") for m in declared],
                          shapes=[list(m.shape) for m in declared])
        future = None
        try:
            if self.is_sender:
                # The workers receive while every trainer rank sends.
                future = self._call_thread().submit(self.client.update_weights, update)
                self._call = future
            # The source's pairs (every rank iterates it whole, in metadata
            # order: its collectives line up), read natively as they come;
            # the first says on which device the tensors are.
            source = type(self.source).__name__
            pairs = iter(self.source.iter_local() if self.local else self.source.iter_full())
            try:
                first = next(pairs, None)
            except Exception as e:
                self._refuse(target, epoch, RuntimeError(
                    f"load plan: trainer rank {self.rank} could not read its tensors from "
                    f"{source}: {type(e).__name__}: {e}"))
            device = first[1].device if first is not None else torch.device("cpu")
            sender = self._ensure_sender(target, epoch, declared, quantize, held, device)
            # The sender checks that they are the held ones, failing every
            # rank if not, and makes the scales; colocated, it moves into
            # shared memory those that are not there yet.
            sender.send(pairs if first is None else itertools.chain((first,), pairs),
                        source=source, share=self.init_info.transport == "ipc")
        except BaseException:
            self._drop_sender(target)  # the next update makes new endpoints
            if future is not None:
                # The workers failed the same update: surface their error
                # rather than wait for one that will not come.
                try:
                    future.result(timeout=self.init_info.timeout)
                except Exception as worker_error:
                    self.log.error("load plan: the workers failed the update: %s",
                                   worker_error)
            raise
        if future is not None:
            try:
                future.result(timeout=self.init_info.timeout)
            except BaseException:
                self._drop_sender(target)
                raise
            self.client.finish_weight_update()
        target.sent_meta = meta

    def shutdown(self) -> None:
        """Closes this rank's endpoints."""
        for target in self._targets:
            self._drop_sender(target)
        self.watch.close()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)
