"""The trainer's side of the ``loadplan`` backend: a vLLM
``TrainerWeightTransferEngine`` over a ``WeightSource``.

Every trainer rank is a sender: with ``engine="m_to_n"`` it sends the local
shards ``iter_local`` yields (the boxes its ``ParamMeta`` placements say),
with ``"sliced"`` or ``"full"`` the whole tensors ``iter_full`` yields of the
names it owns. Rank 0 serves the rendezvous store and drives the workers
through the client: ``start_weight_update``, then ``update_weights`` while
every rank sends, then ``finish_weight_update``.

With ``quantize_fp8`` the trainer declares the matching weights as the fp8
block-quantized checkpoint the engine serves (each weight as
``float8_e4m3fn`` and its ``_scale_inv`` scales) and its ``Sender``
quantizes the source's tensors as it sends them.
"""

from __future__ import annotations

import datetime
import itertools
import uuid
from fnmatch import fnmatchcase
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, fields
from typing import Self

import torch
from vllm.distributed.weight_transfer.base import (
    ParamMeta as VllmParamMeta,
)
from vllm.distributed.weight_transfer.base import (
    TrainerWeightTransferEngine,
    VLLMWeightSyncClient,
    WeightSource,
)
from vllm.logger import init_logger

from ..plan import ParamMeta
from ..transfer import Sender, quantized_metadata
from ..transfer.endpoints import refuse
from .info import (
    LOGGER_NAME,
    LoadplanTrainerInitInfo,
    LoadplanWeightTransferInitInfo,
    LoadplanWeightTransferUpdateInfo,
    WireParams,
    endpoint_name,
    epoch_key,
    plan_version_key,
)
from .layout import holdings_of, to_loadplan

logger = init_logger(LOGGER_NAME)


class LoadplanTrainerWeightTransferEngine(TrainerWeightTransferEngine[LoadplanTrainerInitInfo]):
    """Sends each update as the workers' plans say (see the module doc)."""

    init_info_cls = LoadplanTrainerInitInfo

    def __init__(self, *, client: VLLMWeightSyncClient, source: WeightSource,
                 init_info: LoadplanTrainerInitInfo, store, session: str):
        super().__init__(client=client, source=source, is_sender=init_info.is_sender,
                         rank=init_info.rank)
        self.init_info = init_info
        self.store = store
        self.session = session
        self.local = init_info.engine == "m_to_n"
        self._sender: Sender | None = None
        self._epoch = -1  # of the current sender
        self._last_epoch = -1  # the last one rank 0 chose
        self._versions: list[str | None] | None = None
        self._sent_meta: list[VllmParamMeta] | None = None
        self._made: tuple | None = None  # _checkpoint's
        self._round = 0

    @classmethod
    def trainer_init(cls, init_info: LoadplanTrainerInitInfo, *, client: VLLMWeightSyncClient,
                     source: WeightSource | None = None) -> Self:
        if source is None:
            raise ValueError("load plan: the loadplan trainer engine needs a WeightSource")
        if init_info.engine == "m_to_n" and not source.implements_iter_local():
            raise TypeError(f"load plan: engine 'm_to_n' sends local shards, but "
                            f"{type(source).__name__} does not implement iter_local()")
        if init_info.engine != "m_to_n" and not source.implements_iter_full():
            raise TypeError(f"load plan: engine {init_info.engine!r} sends whole tensors, but "
                            f"{type(source).__name__} does not implement iter_full()")
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=init_info.timeout)
        store = dist.TCPStore(init_info.master_address, init_info.master_port,
                              is_master=init_info.is_sender, timeout=timeout,
                              wait_for_workers=False)
        # One session per trainer_init keeps this trainer's keys apart from an
        # earlier one's in a store that outlived it.
        if init_info.is_sender:
            session = f"loadplan-{uuid.uuid4().hex[:12]}"
            store.set("loadplan/session", session)
        else:
            store.wait(["loadplan/session"], timeout)
            session = store.get("loadplan/session").decode()
        engine = cls(client=client, source=source, init_info=init_info, store=store,
                     session=session)
        if engine.is_sender:
            wire = {f.name: getattr(init_info, f.name) for f in fields(WireParams)}
            client.init_weight_transfer_engine(asdict(LoadplanWeightTransferInitInfo(
                master_address=init_info.master_address, master_port=init_info.master_port,
                world_size=init_info.world_size, rank_offset=init_info.num_trainer_ranks,
                session=session, **wire)))
        return engine

    # -----------------------------------------------------------------------

    def _worker_versions(self) -> list[str | None]:
        """How many plans each worker has made (None: none yet)."""
        out = []
        for rank in range(self.init_info.num_trainer_ranks, self.init_info.world_size):
            key = plan_version_key(self.session, rank)
            out.append(self.store.get(key).decode() if self.store.check([key]) else None)
        return out

    def _agree_on_epoch(self, declaring: bool) -> int:
        """Rank 0 decides whether this update needs new endpoints (none yet,
        the last update failed, a worker planned anew, or this update
        declares the checkpoint, which the workers plan for) and tells the
        others."""
        key = epoch_key(self.session, self._round)
        if self.is_sender:
            versions = self._worker_versions()
            epoch = self._last_epoch
            if self._sender is None or versions != self._versions or declaring:
                epoch += 1
            self._versions = versions
            self._last_epoch = epoch
            self.store.set(key, str(epoch))
            return epoch
        self.store.wait([key], datetime.timedelta(seconds=self.init_info.timeout))
        return int(self.store.get(key))

    def _declared(self, meta: list[VllmParamMeta]) -> tuple[list[ParamMeta], dict[str, str]]:
        """The checkpoint the workers are told of (the source's, with the
        ``quantize_fp8`` weights as fp8 and their scales) and the weight ->
        scale names the sender quantizes."""
        metas = [to_loadplan(m) for m in meta]
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

    def _ensure_sender(self, epoch: int, meta: list[VllmParamMeta], declared: list[ParamMeta],
                       quantize: dict[str, str], held: dict, device: torch.device) -> Sender:
        if self._sender is not None and self._epoch == epoch:
            return self._sender
        self._drop_sender()
        info = self.init_info
        transport = info.transport or ("nccl" if device.type == "cuda" else "gloo")
        # A quantized weight's scales are held as the blocks of the weight
        # this rank holds (the Sender sets them).
        self._sender = Sender(
            declared, holdings=held,
            rank=self.rank, world_size=info.world_size, num_senders=info.num_trainer_ranks,
            engine=info.engine, backend=transport,
            device=device if device.type == "cuda" else None, store=self.store,
            name=endpoint_name(self.session, epoch), timeout=info.timeout,
            staging_cap=info.staging_cap, quantize=quantize,
            quantize_block=info.quantize_block)
        self._epoch = epoch
        return self._sender

    def _refuse(self, epoch: int, error: Exception) -> None:
        """Fails this update on every rank with ``error``, before any byte
        moves (over this epoch's endpoints, or in their set-up), then raises
        it."""
        if self._sender is not None and self._epoch == epoch:
            self._sender.fail(error)  # raises it
        info = self.init_info
        refuse(str(error), rank=self.rank, world_size=info.world_size, store=self.store,
               name=endpoint_name(self.session, epoch), timeout=info.timeout)
        raise error

    def _drop_sender(self) -> None:
        sender, self._sender = self._sender, None
        if sender is not None:
            sender.close()

    def _checkpoint(self, meta: list[VllmParamMeta]) -> tuple:
        """What this rank makes of the source's metadata, the same on every
        rank: the declared checkpoint, the quantized names and this rank's
        holdings. Per name, so made once per metadata list (a WeightSource's
        is a cached_property: the same list on every update)."""
        if self._made is None or meta is not self._made[0]:
            declared, quantize = self._declared(meta)
            held = holdings_of(meta, self.rank, self.init_info.num_trainer_ranks, self.local)
            self._made = (meta, declared, quantize, held)
        return self._made[1:]

    def send_weights(self) -> None:
        meta = self.source.metadata
        declared, quantize, held = self._checkpoint(meta)
        self._round += 1
        declaring = meta is not self._sent_meta and meta != self._sent_meta
        epoch = self._agree_on_epoch(declaring)
        update = LoadplanWeightTransferUpdateInfo(epoch=epoch)
        if declaring:
            update = LoadplanWeightTransferUpdateInfo(
                epoch=epoch, names=[m.name for m in declared],
                dtype_names=[str(m.dtype).removeprefix("torch.") for m in declared],
                shapes=[list(m.shape) for m in declared])
        executor = future = None
        try:
            if self.is_sender:
                self.client.start_weight_update()
                executor = ThreadPoolExecutor(max_workers=1)
                # The workers receive while every trainer rank sends.
                future = executor.submit(self.client.update_weights, asdict(update))
            # The source's pairs (every rank iterates it whole, in metadata
            # order: its collectives line up), read natively as they come;
            # the first says on which device the tensors are.
            source = type(self.source).__name__
            pairs = iter(self.source.iter_local() if self.local else self.source.iter_full())
            try:
                first = next(pairs, None)
            except Exception as e:
                self._refuse(epoch, RuntimeError(
                    f"load plan: trainer rank {self.rank} could not read its tensors from "
                    f"{source}: {type(e).__name__}: {e}"))
            device = first[1].device if first is not None else torch.device("cpu")
            sender = self._ensure_sender(epoch, meta, declared, quantize, held, device)
            # The sender checks that they are the held ones, failing every
            # rank if not, and makes the scales.
            sender.send(pairs if first is None else itertools.chain((first,), pairs),
                        source=source)
        except BaseException:
            self._drop_sender()  # the next update makes new endpoints
            if future is not None:
                # The workers failed the same update: surface their error
                # rather than wait for one that will not come.
                try:
                    future.result(timeout=self.init_info.timeout)
                except Exception as worker_error:
                    logger.error("load plan: the workers failed the update: %s", worker_error)
            raise
        finally:
            if executor is not None:
                executor.shutdown(wait=False)
        if future is not None:
            try:
                future.result(timeout=self.init_info.timeout)
            except BaseException:
                self._drop_sender()
                raise
            self.client.finish_weight_update()
        self._sent_meta = meta

    def shutdown(self) -> None:
        self._drop_sender()
