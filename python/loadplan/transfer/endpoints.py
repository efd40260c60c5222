"""The ends of a weight transfer: ``Sender`` (a trainer rank) and
``Receiver`` (an inference rank), over the runtime's communicators and
transfer engines (``loadplan._native``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .. import _native, _runtime
from ..plan import Box, LoadPlan, ParamMeta
from .quantize import DEFAULT_BLOCK, plan_quantized, quantize_given
from .rendezvous import Rendezvous
from .schedule import DEFAULT_STAGING_CAP, Schedule, TransferError, backend_code, engine_code


@dataclass(frozen=True)
class TransferStats:
    """One update on one rank (loadplan_transfer_stats_t): bytes sent to and
    received from other ranks, copied locally, received in place or into
    staging, packed before sending; messages; rounds; seconds; and the
    link probe made at set-up (``probe_seconds`` to move ``probe_bytes``,
    the same bytes as one message per pair of ranks; 0 without a probe)."""

    bytes_sent: int
    bytes_received: int
    bytes_local: int
    bytes_in_place: int
    bytes_staged: int
    bytes_packed: int
    messages_sent: int
    messages_received: int
    rounds: int
    updates: int
    seconds: float
    probe_seconds: float
    probe_bytes: int
    mappings: int = 0

    @property
    def over_probe(self) -> float | None:
        """The update's seconds over the probe's: what it cost over its
        bytes moved as one message (None without a probe)."""
        return self.seconds / self.probe_seconds if self.probe_seconds > 0 else None

    def line(self) -> str:
        """One line for a log: bytes, messages, rounds, seconds and the
        ratio to the probe."""
        ratio = "" if self.over_probe is None else \
            f" probe_s={self.probe_seconds:.4f} over_probe={self.over_probe:.2f}"
        return (f"bytes={self.bytes_sent + self.bytes_received + self.bytes_local} "
                f"messages={self.messages_sent + self.messages_received} "
                f"rounds={self.rounds} seconds={self.seconds:.4f}{ratio}")


class Endpoint:
    """The part Sender and Receiver share: meeting the other ranks, the
    communicator, the schedule (built on rank 0), the engine."""

    role: str

    def __init__(self, *, rank: int | None, world_size: int | None, num_senders: int,
                 engine: str, backend: str, device: torch.device | str | int | None,
                 group: Any, store: Any, init_method: str | None, name: str,
                 host: str | None, timeout: float, staging_cap: int,
                 num_threads: int | None, debug_fail_round: int, join_below: int,
                 overlap: bool, link_probe: bool, watch: Any, colocated: bool = False):
        engine_code(engine)
        backend_code(backend)
        self._transfer: _native.Transfer | None = None
        self._comm: _native.Comm | None = None
        self.engine, self.backend = engine, backend
        self.staging_cap = int(staging_cap)
        self.join_below, self.overlap = int(join_below), bool(overlap)
        self.link_probe = bool(link_probe)
        self.colocated = bool(colocated)
        if self.colocated and backend != "gloo":
            raise ValueError("load plan: colocated transfers run on the gloo backend, which "
                             "carries only their tables and agreements: CPU tensors are read "
                             "in shared memory, CUDA tensors (device=) through CUDA IPC")
        self._num_threads = num_threads or 0
        self._debug_fail_round = debug_fail_round
        self._rv = Rendezvous(rank, world_size, group=group, store=store,
                              init_method=init_method, name=name, host=host, timeout=timeout,
                              watch=watch)
        self.rank, self.world_size = self._rv.rank, self._rv.world_size
        if not 0 < num_senders < self.world_size:
            raise ValueError(f"load plan: num_senders {num_senders} must leave room for "
                             f"receivers among {self.world_size} ranks")
        self.num_senders = num_senders
        expected = "sender" if self.rank < num_senders else "receiver"
        if expected != self.role:
            raise ValueError(f"load plan: rank {self.rank} is a {expected} (ranks "
                             f"0..{num_senders - 1} send, the others receive), not a {self.role}")
        self.device = self._device(device)
        self._timeout_ms = int(timeout * 1000)
        self._host = host or "127.0.0.1"

    def _device(self, device: Any) -> torch.device:
        if self.backend == "gloo":
            if device is None or torch.device(device).type == "cpu":
                return torch.device("cpu")
            if not self.colocated:
                raise ValueError("load plan: the gloo backend moves CPU tensors (colocated "
                                 "transfers read CUDA tensors too)")
        if device is None:
            device = torch.cuda.current_device()
        device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        if device.type != "cuda" or device.index is None:
            raise ValueError(f"load plan: {self.backend} needs a CUDA device with an index, "
                             f"got {device}")
        return device

    def _connect(self) -> None:
        if self.backend == "gloo":
            self._comm = _native.Comm.gloo(
                self.rank, self.world_size, self._host, self._rv.store_set,
                self._rv.store_get, f"{self._rv.prefix}/gloo/", self._timeout_ms)
        else:
            unique = _native.nccl_unique_id() if self.rank == 0 else None
            unique = self._rv.broadcast(unique, "nccl_id")
            self._comm = _native.Comm.nccl(self.rank, self.world_size, unique,
                                           self.device.index, self._timeout_ms)

    def _offer(self) -> dict:
        """This rank's part of the schedule: ``sender=`` or ``receiver=`` of
        ``_native.Schedule.agree``."""
        raise NotImplementedError

    def _agree_on_schedule(self) -> Schedule:
        """Rank 0 gathers every rank's offer, builds the schedule and hands
        it (or why there is none) to all (loadplan_schedule_agree)."""
        try:
            return Schedule(_native.Schedule.agree(
                self.rank, self.world_size, self.num_senders, engine_code(self.engine),
                self._rv.store_set, self._rv.store_get, f"{self._rv.prefix}/",
                self._timeout_ms, self.join_below, not self.overlap, **self._offer()))
        except TransferError as e:
            raise self._rv.with_store_error(e) from None

    def _start(self, plan: _runtime.Plan | None = None, layouts: list | None = None,
               fallbacks: list | None = None) -> None:
        # The schedule first: a rank that cannot take part (its inputs, or
        # refuse()) fails every rank's set-up before any connects.
        self.schedule = self._agree_on_schedule()
        self._connect()
        self._transfer = _native.Transfer(
            self._comm, self.schedule.native, plan, layouts or [], fallbacks or [],
            self._num_threads, self._debug_fail_round, self.link_probe, self.colocated,
            self.device.index if self.colocated and self.device.type == "cuda" else -1)

    def _update(self, held: list) -> TransferStats:
        if self._transfer is None:
            raise RuntimeError(f"load plan: this {self.role} is closed")
        stream = 0
        if self.device.type == "cuda":
            stream = torch.cuda.current_stream(self.device).cuda_stream
        self._transfer.update(held, stream)
        return self.stats

    def fail(self, error: Exception, code_name: str = "invalid_update") -> None:
        """Collective: fails this update on every rank with ``error`` (this
        rank cannot take part: its inputs are bad, say), then raises
        ``error`` here. The other ranks' error says that this rank refused
        the update, and why."""
        if self._transfer is not None:
            try:
                self._transfer.fail(_runtime.status_code(code_name), str(error))
            except TransferError:
                pass  # the agreed error; this rank's own is more precise
        raise error

    @property
    def stats(self) -> TransferStats:
        """Of the last update on this rank."""
        return TransferStats(**self._transfer.stats())

    def close(self) -> None:
        """Releases the engine and the communicator (not collective)."""
        transfer, self._transfer = getattr(self, "_transfer", None), None
        comm, self._comm = getattr(self, "_comm", None), None
        if transfer is not None:
            transfer.close()
        if comm is not None:
            comm.close()

    def __del__(self) -> None:
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def refuse(message: str, *, rank: int, world_size: int, group: Any = None, store: Any = None,
           init_method: str | None = None, name: str = "loadplan", host: str | None = None,
           timeout: float = 60.0, watch: Any = None) -> None:
    """What a rank that cannot make its Sender or Receiver calls instead:
    it joins the other ranks' set-up only to fail it, on every rank, with
    ``message`` (so no rank waits for it). Returns once they know; the
    caller raises its own error."""
    rv = Rendezvous(rank, world_size, group=group, store=store, init_method=init_method,
                    name=name, host=host, timeout=timeout, watch=watch)
    # The runtime's agreement raises the refusal on every rank, this one too.
    with contextlib.suppress(TransferError):
        _native.Schedule.agree(rv.rank, rv.world_size, 0, 0, rv.store_set, rv.store_get,
                               f"{rv.prefix}/", int(timeout * 1000),
                               refusal=message.removeprefix("load plan: "))


class Sender(Endpoint):
    """A trainer rank's end of weight updates: holds ``holdings[name]`` (a
    box, or None for the whole tensor; default: every name whole) of each
    checkpoint tensor of ``metadata``, and sends it on each ``send``.

    Ranks ``0 .. num_senders-1`` of the sync group (``rank`` of
    ``world_size``, or ``group``) send; the others are ``Receiver``s. Making
    one is collective: every rank of the group must make its Sender or
    Receiver with the same ``engine``, ``num_senders`` and ``name``.

    Args:
        engine: "full", "sliced" or "m_to_n".
        backend: "gloo" (CPU tensors) or "nccl" (CUDA tensors of ``device``).
        group: a torch.distributed process group of exactly the sync ranks
            (True: the default group); set-up data goes through it.
        store / init_method: otherwise, a torch.distributed Store, or
            "tcp://host:port" (rank 0 serves it) / "file:///path".
        host: the address this rank listens on for Gloo (default 127.0.0.1).
        staging_cap: bytes this rank may use to pack boxes that are not
            contiguous in what it holds.
        timeout: seconds any transfer may take before it fails.
        join_below: pieces of fewer bytes between one sender and one
            receiver in a round travel as one message (0: the runtime's
            default, 256 KiB; 1: every piece alone). Every rank gives the
            same.
        overlap: consecutive rounds overlap (each rank's staging split in
            halves); False runs them one after another. Every rank gives the
            same.
        link_probe: time, at set-up, this rank's bytes of an update moved as
            one message per pair of ranks (``stats.probe_seconds``).
        watch: the session's ``liveness.Liveness``: while setting up, this
            rank notices within a fraction of a second that another rank
            that joined the session is gone (None: at the timeout).
        quantize: weight name -> scale name (``fp8_block_scales(metadata)``
            finds them) of the fp8 block-quantized names this sender makes
            from high-precision tensors: ``send`` takes a weight in bf16,
            fp16 or fp32 and sends its fp8 blocks and their float32 scales
            (see transfer/quantize.py); the scales are not given.
        quantize_block: the blocks' shape, (rows, columns).
        colocated: every rank is on this machine, and receivers read what
            this rank holds where it lies instead of receiving it: CPU
            tensors in shared memory (``share_memory(tensors)`` once, or
            torch's ``share_memory_()``), CUDA tensors (``device=`` a CUDA
            device, on the gloo backend) through CUDA IPC, from their
            ``cudaMalloc`` allocations (see docs/transfers.md). Every rank
            gives the same.

    Raises:
        TransferError: on every rank, when a rank cannot set up (the message
            is the first failing rank's).
        ValueError: on this rank, when ``quantize`` does not fit the
            metadata or the holdings (a held box cutting a block); every
            other rank's set-up fails with the message.
    """

    role = "sender"

    def __init__(self, metadata: Iterable[ParamMeta], *, holdings: Mapping[str, Box | None]
                 | None = None, rank: int | None = None, world_size: int | None = None,
                 num_senders: int, engine: str = "m_to_n", backend: str = "gloo",
                 device: Any = None, group: Any = None, store: Any = None,
                 init_method: str | None = None, name: str = "loadplan",
                 host: str | None = None, timeout: float = 60.0,
                 staging_cap: int = DEFAULT_STAGING_CAP, num_threads: int | None = None,
                 quantize: Mapping[str, str] | None = None,
                 quantize_block: tuple[int, int] = DEFAULT_BLOCK,
                 join_below: int = 0, overlap: bool = True, link_probe: bool = True,
                 watch: Any = None, debug_fail_round: int = -1, colocated: bool = False):
        self.metadata = {m.name: m for m in metadata}
        if holdings is None:
            holdings = {name: None for name in self.metadata}
        undeclared = [n for n in holdings if n not in self.metadata]
        if undeclared:
            raise ValueError(f"load plan: holdings name {undeclared[:5]}, which metadata does not "
                             "declare")
        self.holdings = {
            n: None if box is None else tuple((int(a), int(b)) for a, b in box)
            for n, box in holdings.items()
        }
        try:
            self._quantized = plan_quantized(self.metadata, self.holdings, quantize or {},
                                             tuple(quantize_block))
        except ValueError as e:
            # Before anything is sent: every rank's set-up fails with it.
            refuse(str(e), rank=rank, world_size=world_size,
                   group=group, store=store,
                   init_method=init_method, name=name, host=host, timeout=timeout,
                   watch=watch)
            raise
        super().__init__(rank=rank, world_size=world_size, num_senders=num_senders,
                         engine=engine, backend=backend, device=device, group=group,
                         store=store, init_method=init_method, name=name, host=host,
                         timeout=timeout, staging_cap=staging_cap, num_threads=num_threads,
                         debug_fail_round=debug_fail_round, join_below=join_below,
                         overlap=overlap, link_probe=link_probe, watch=watch,
                         colocated=colocated)
        self._batch = _native.SendBatch([
            (n, _runtime.dtype_code(self.metadata[n].dtype),
             list(self.metadata[n].shape if box is None else (b - a for a, b in box)))
            for n, box in self.holdings.items()], self.rank, str(self.device))
        self._start()

    def _transfer_batch(self) -> None:
        if self._transfer is None:
            raise RuntimeError(f"load plan: this {self.role} is closed")
        stream = 0
        if self.device.type == "cuda":
            stream = torch.cuda.current_stream(self.device).cuda_stream
        self._transfer.update_batch(self._batch, stream)

    def _offer(self) -> dict:
        index = {name: i for i, name in enumerate(self.metadata)}
        return {"sender": (
            self.staging_cap,
            [(m.name, _runtime.dtype_code(m.dtype), list(m.shape))
             for m in self.metadata.values()],
            [(index[n], None, None) if b is None else
             (index[n], [a for a, _ in b], [z for _, z in b])
             for n, b in self.holdings.items()],
        )}

    def send(self, tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
             *, source: str = "the given pairs", share: bool = False) -> TransferStats:
        """Collective: one update. ``tensors`` has this rank's part of every
        name it holds: the box's shape, the declared dtype, on this rank's
        device (dense); for a name it quantizes, the weight in bf16, fp16 or
        fp32 and not its scales. A dict, or (name, tensor) pairs (a
        WeightSource's iterator: read as they come, names not held passed
        over); ``source`` names the pairs in the error when they raise.
        ``share`` (colocated): first move each tensor whose bytes are not
        in shared memory there (``share_memory_()``: the same tensor, now
        backed by a shared file), found in one native call; a source that
        keeps its tensors pays this once, one that makes new ones on every
        update a copy of each.

        Raises:
            ValueError: a tensor is missing, extra, or of the wrong shape,
                dtype or device (checked before any rank moves a byte).
            RuntimeError: reading the pairs raised; every other rank's
                update fails with the message.
            TransferError: the update failed on some rank; every rank
                raises it.
        """
        if self._quantized or isinstance(tensors, Mapping) and not isinstance(tensors, dict):
            tensors = dict(tensors.items() if isinstance(tensors, Mapping) else tensors)
        if self._quantized:
            try:
                tensors = quantize_given(tensors, self._quantized, self.device)
            except ValueError as e:
                self.fail(e, "invalid_update")  # on every rank
        cuda = self.device.type == "cuda"
        device = (_runtime.DEVICE_CUDA if cuda else _runtime.DEVICE_CPU,
                  self.device.index if cuda else 0)
        try:
            # One native call reads and checks every held tensor; nothing
            # per name here.
            if isinstance(tensors, dict):
                self._batch.read(tensors, *device)
            else:
                self._batch.read_pairs(tensors, *device)
            if share and self.colocated and not cuda:  # CUDA memory: through IPC
                moved = self._batch.unshared()
                for t in moved:
                    t.share_memory_()
                if moved:
                    self._batch.refresh(*device)
        except Exception as e:
            if not self._batch.source_failed and isinstance(e, ValueError):
                self.fail(e, "invalid_update")  # on every rank
            self.fail(RuntimeError(
                f"load plan: sender rank {self.rank} could not read its tensors from "
                f"{source}: {type(e).__name__}: {e}"), "invalid_update")
        self._transfer_batch()
        return self.stats


class Receiver(Endpoint):
    """An inference rank's end of weight updates: receives into ``model``
    what ``plan`` (its ``plan_loads``) needs, straight into the live
    tensors where they are contiguous, and hands fallback names in full to
    ``model.load_weights``. Rank ``num_senders`` and above of the sync
    group; the arguments are ``Sender``'s.

    Args:
        atomic: stage the whole update and write live memory only after
            every rank has succeeded (staging then holds all this rank
            receives); otherwise a failed update may leave it partial.
        staging_cap: bytes this rank may use for receives that cannot land
            in place (not atomic).
        colocated: read each piece from the sender's shared memory, mapped
            here, straight into the live tensors (atomic: into staging, then
            into them once every rank succeeded); see ``Sender``.
    """

    role = "receiver"

    def __init__(self, model: torch.nn.Module, plan: LoadPlan, *, rank: int | None = None,
                 world_size: int | None = None, num_senders: int, engine: str = "m_to_n",
                 atomic: bool = False, backend: str = "gloo", device: Any = None,
                 group: Any = None, store: Any = None, init_method: str | None = None,
                 name: str = "loadplan", host: str | None = None, timeout: float = 60.0,
                 staging_cap: int = DEFAULT_STAGING_CAP, num_threads: int | None = None,
                 join_below: int = 0, overlap: bool = True, link_probe: bool = True,
                 watch: Any = None, debug_fail_round: int = -1, colocated: bool = False):
        self.model, self.plan, self.atomic = model, plan, bool(atomic)
        plan.check_layout(model)
        super().__init__(rank=rank, world_size=world_size, num_senders=num_senders,
                         engine=engine, backend=backend, device=device, group=group,
                         store=store, init_method=init_method, name=name, host=host,
                         timeout=timeout, staging_cap=staging_cap, num_threads=num_threads,
                         debug_fail_round=debug_fail_round, join_below=join_below,
                         overlap=overlap, link_probe=link_probe, watch=watch,
                         colocated=colocated)
        targets = plan.target_tensors
        devices = {t.device for t in targets}
        if devices - {self.device}:
            raise ValueError(f"load plan: the model's tensors are on {sorted(map(str, devices))} "
                             f"but this receiver moves {self.device} memory")
        # The fallback names arrive whole, for load_weights.
        self.fallbacks = {
            e.name: torch.empty(e.shape, dtype=e.dtype, device=self.device)
            for e in plan.entries.values() if e.kind == "fallback"
        }
        self._start(
            plan.native,
            [_runtime.layout(t) for t in targets],
            [(name, b.data_ptr(), b.numel() * b.element_size())
             for name, b in self.fallbacks.items()],
        )

    def _offer(self) -> dict:
        return {"receiver": (self.staging_cap, self.atomic, self.plan.native,
                             self.plan.plan_bytes)}

    def receive(self, *, load_fallbacks: bool = True) -> TransferStats:
        """Collective: one update, then ``model.load_weights`` of the
        fallback names (only once every rank has succeeded). With
        ``load_fallbacks=False`` the caller loads ``self.fallbacks`` (name ->
        the whole tensor received) itself.

        Raises:
            RuntimeError: the model's tensors are not where the plan saw
                them (checked before any rank moves a byte; the other ranks
                fail the update with this message).
            TransferError: the update failed on some rank; every rank
                raises it.
        """
        try:
            self.plan.check_layout(self.model)
        except RuntimeError as e:
            self.fail(e, "fingerprint_mismatch")  # on every rank
        stats = self._update([])
        if self.fallbacks and load_fallbacks:
            with torch.no_grad():
                self.model.load_weights(list(self.fallbacks.items()))
        return stats

    def release_mappings(self) -> None:
        """Colocated, between updates (not collective): closes every
        mapping this receiver holds of the senders' memory (CUDA IPC
        handles, shared files; ``stats.mappings`` drops to 0). Call it
        before a colocated trainer gives its memory back (offloading its
        parameters, ``torch.cuda.empty_cache()``): CUDA calls freeing memory
        another process still has open undefined. The next ``receive`` asks
        every sender for its table again and maps what it names."""
        if self._transfer is None:
            raise RuntimeError("load plan: the receiver is closed")
        self._transfer.release_mappings()


def share_memory(tensors: Mapping[str, torch.Tensor] | Iterable[torch.Tensor]):
    """Moves each CPU tensor's storage into shared memory, in place (torch's
    ``share_memory_()``: the same tensor objects, now backed by a shared
    file), so that a colocated ``Sender`` can send them: receivers on this
    machine read them where they lie. Once, before the first update: the
    first call copies each storage once, later calls do nothing. Returns
    ``tensors``."""
    values = tensors.values() if isinstance(tensors, Mapping) else tensors
    for t in values:
        if not t.is_cpu:
            raise ValueError(f"load plan: share_memory moves CPU tensors, not {t.device} ones")
        share_storage(t)
    return tensors


def share_storage(t: torch.Tensor) -> None:
    """``t.share_memory_()`` unless its storage is shared already. Asked
    of the storage itself: ``Tensor.is_shared()`` goes through the typed
    storage and costs several times as much, per tensor, on every update of
    a colocated sender."""
    if not t.untyped_storage().is_shared():
        t.share_memory_()
