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

from ..serving import endpoint_name, plan_version_key  # noqa: F401 - the backend's names
from ..transfer import DEFAULT_STAGING_CAP, ENGINES

BACKEND = "loadplan"
# A child of vLLM's logger (``init_logger`` names): what the backend logs
# reaches a vLLM process's output with vLLM's own lines.
LOGGER_NAME = "vllm.loadplan"

TRANSPORTS = ("gloo", "nccl")


def _check_common(engine: str, world_size: int, trainer_ranks: int, port: int,
                  transport: str | None, timeout: float) -> None:
    if engine not in ENGINES:
        raise ValueError(f"load plan: engine {engine!r} is not one of {sorted(ENGINES)}")
    if not 0 < trainer_ranks < world_size:
        raise ValueError(f"load plan: {trainer_ranks} trainer ranks leave no inference "
                         f"worker among world_size {world_size}")
    if not 0 < port < 65536:
        raise ValueError(f"load plan: master_port {port} is not a port")
    if transport is not None and transport not in TRANSPORTS:
        raise ValueError(f"load plan: transport {transport!r} is not one of {TRANSPORTS}")
    if not timeout > 0:
        raise ValueError(f"load plan: timeout must be positive, got {timeout}")


@dataclass(kw_only=True)
class WireParams:
    """What both sides must agree on, which the trainer chooses and hands
    to the workers (see LoadplanTrainerInitInfo)."""

    engine: str = "m_to_n"
    staging_cap: int = DEFAULT_STAGING_CAP
    atomic: bool = True
    timeout: float = 300.0
    transport: str | None = None
    plan_dir: str | None = None


@dataclass
class LoadplanTrainerInitInfo(TrainerInitInfo, WireParams):
    """Trainer-side init info of the ``loadplan`` backend.

    ``world_size`` counts every trainer rank (``num_trainer_ranks``, ranks
    0..n-1; each sends what it holds) and every inference worker. Trainer
    rank 0 serves the rendezvous store at ``master_address:master_port`` and
    drives the workers through the client. ``engine``: ``"m_to_n"`` (each
    trainer rank sends its local shards, ``WeightSource.iter_local``),
    ``"sliced"`` or ``"full"`` (whole tensors, ``iter_full``). ``atomic``:
    live memory changes only once every rank has all of an update.
    ``transport``: ``"gloo"`` (CPU memory) or ``"nccl"`` (CUDA memory);
    None picks by the device. ``plan_dir``: where workers keep their plans
    (None: ``$LOADPLAN_PLAN_DIR`` or ``~/.cache/loadplan/plans``).

    ``quantize_fp8``: fnmatch patterns of the source's weight names that the
    engine serves fp8 (e4m3) block-quantized, as DeepSeek-V3 and Qwen3 FP8
    checkpoints ship them. The trainer declares each matching 2-D name as
    ``float8_e4m3fn`` with its float32 ``<name>_scale_inv``
    [ceil(N/bn), ceil(K/bk)] after it, and its ``Sender`` quantizes the
    source's bf16, fp16 or fp32 tensors per ``quantize_block`` (bn, bk)
    while it sends (see transfer/quantize.py): the source yields neither
    the fp8 tensors nor the scales. Every block a rank holds of such a
    weight must be whole.
    """

    backend: ClassVar[str] = BACKEND

    master_address: str
    master_port: int
    world_size: int
    num_trainer_ranks: int = 1
    quantize_fp8: tuple[str, ...] = ()
    quantize_block: tuple[int, int] = (128, 128)

    def __post_init__(self) -> None:
        _check_common(self.engine, self.world_size, self.num_trainer_ranks, self.master_port,
                      self.transport, self.timeout)
        if isinstance(self.quantize_fp8, str):
            raise ValueError("load plan: quantize_fp8 takes a sequence of name patterns, "
                             f"not the string {self.quantize_fp8!r}")
        self.quantize_fp8 = tuple(self.quantize_fp8)
        self.quantize_block = tuple(self.quantize_block)
        if (len(self.quantize_block) != 2
                or not all(isinstance(b, int) and b > 0 for b in self.quantize_block)):
            raise ValueError(f"load plan: quantize_block {self.quantize_block} is not two "
                             "positive ints (rows, columns)")
        if not 0 <= self.rank < self.num_trainer_ranks:
            raise ValueError(f"load plan: trainer rank {self.rank} is not in "
                             f"[0, {self.num_trainer_ranks})")


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
        _check_common(self.engine, self.world_size, self.rank_offset, self.master_port,
                      self.transport, self.timeout)
        if not self.session:
            raise ValueError("load plan: the init info names no session")


@dataclass
class LoadplanWeightTransferUpdateInfo(WeightTransferUpdateInfo):
    """One update. ``epoch`` numbers the trainer's set of transfer
    endpoints: workers make new ones when it changes (after a failed update,
    or when a worker's plan changed). ``names``, ``dtype_names`` and
    ``shapes`` declare every checkpoint tensor in the order the trainer
    sends them; empty lists keep the previous update's."""

    epoch: int
    names: list[str] = field(default_factory=list)
    dtype_names: list[str] = field(default_factory=list)
    shapes: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.epoch, int) or self.epoch < 0:
            raise ValueError(f"load plan: epoch must be a non-negative int, got {self.epoch!r}")
        if not len(self.names) == len(self.dtype_names) == len(self.shapes):
            raise ValueError(
                f"load plan: {len(self.names)} names, {len(self.dtype_names)} dtypes and "
                f"{len(self.shapes)} shapes; they must pair up")


def epoch_key(session: str, round_: int) -> str:
    """The store key where trainer rank 0 tells the other trainer ranks the
    epoch of an update."""
    return f"{session}/epoch/{round_}"
