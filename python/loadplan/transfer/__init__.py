"""Weight transfers from trainer ranks to inference ranks: ``Sender`` and
``Receiver``.

A trainer rank holds one box of each checkpoint tensor (a full replica, a
TP shard, an FSDP row shard, some experts); an inference rank has a load
plan that says which boxes it needs and where they land. Once, all ranks
agree on a schedule (the runtime computes it from every sender's boxes and
every receiver's plan); then each update moves only the bytes each
receiver needs, straight into its live tensors where they are contiguous.

    # trainer rank r of the sync group (ranks 0..num_senders-1)
    sender = loadplan.Sender(metadata, holdings=my_boxes, rank=r, world_size=n,
                             num_senders=2, init_method="tcp://10.0.0.1:29600")
    sender.send(my_tensors)                     # every update

    # inference rank (ranks num_senders..n-1)
    receiver = loadplan.Receiver(model, plan, rank=r, world_size=n,
                                 num_senders=2, init_method="tcp://10.0.0.1:29600")
    receiver.receive()                          # every update

Engines: ``"full"`` (every receiver gets whole tensors; the baseline),
``"sliced"`` (each box from one sender holding it whole) and ``"m_to_n"``
(each box gathered from the senders' intersecting boxes). Backends:
``"gloo"`` (CPU tensors, TCP) and ``"nccl"`` (CUDA tensors). The C++ is the
runtime's (runtime/include/loadplan/transfer.h), bound in
``loadplan._native`` beside the plans. See docs/transfers.md.

The package: schedule.py (schedules and the runtime's engine and backend
names), rendezvous.py (how ranks meet, and ``free_port`` for a store),
endpoints.py (Sender, Receiver),
quantize.py (fp8 block quantization on the sender, for fp8 engines fed by
bf16 trainers).
``loadplan schedule show FILE`` prints a schedule file.
"""

from .endpoints import Receiver, Sender, TransferStats, share_memory
from .quantize import fp8_block_scales, quantize_blocks, quantized_metadata
from .rendezvous import free_port
from .schedule import (
    BACKENDS,
    DEFAULT_JOIN_BELOW,
    DEFAULT_STAGING_CAP,
    ENGINES,
    Schedule,
    ScheduleSummary,
    TransferError,
    backend_available,
    nccl_library,
    shard_box,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_JOIN_BELOW",
    "DEFAULT_STAGING_CAP",
    "ENGINES",
    "Receiver",
    "Schedule",
    "ScheduleSummary",
    "Sender",
    "TransferError",
    "TransferStats",
    "backend_available",
    "fp8_block_scales",
    "free_port",
    "nccl_library",
    "quantize_blocks",
    "quantized_metadata",
    "shard_box",
    "share_memory",
]
