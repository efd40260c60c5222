"""Which box of each checkpoint tensor a trainer rank holds, from vLLM's
``ParamMeta`` (owners, mesh shape and placements: what
``WeightSource.iter_local`` yields on each owner)."""

from __future__ import annotations

from collections.abc import Sequence

from vllm.distributed.weight_transfer.base import ParamMeta as VllmParamMeta
from vllm.distributed.weight_transfer.base import Shard

from ..plan import Box, ParamMeta
from ..serving import dtype_named  # noqa: F401 - the worker's name for it


def to_loadplan(meta: VllmParamMeta) -> ParamMeta:
    return ParamMeta(meta.name, tuple(meta.shape), meta.dtype)


def _chunk(start: int, stop: int, index: int, count: int) -> tuple[int, int]:
    """Part ``index`` of ``count`` of ``[start, stop)`` as ``torch.chunk``
    cuts it (empty past the last non-empty chunk)."""
    n = stop - start
    size = -(-n // count) if n else 0
    a = min(n, index * size)
    b = min(n, (index + 1) * size)
    return start + a, start + max(a, b)


def owner_boxes(meta: VllmParamMeta, trainer_ranks: int) -> dict[int, Box | None]:
    """Trainer rank -> the box of ``meta`` its ``iter_local`` yields (None:
    the whole tensor), for every owner. A rank whose share is empty holds
    nothing of it and is left out."""
    owners: Sequence[int] = meta.owners if meta.owners is not None else range(trainer_ranks)
    if meta.placements is None:
        return {rank: None for rank in owners}
    mesh = meta.mesh_shape
    out: dict[int, Box | None] = {}
    for flat, rank in enumerate(owners):
        coords = []
        for size in reversed(mesh):
            coords.append(flat % size)
            flat //= size
        coords.reverse()
        box = [(0, n) for n in meta.shape]
        # Outer mesh axes cut first, as iter_local's placements say.
        for axis, placement in enumerate(meta.placements):
            if isinstance(placement, Shard):
                a, b = box[placement.dim]
                box[placement.dim] = _chunk(a, b, coords[axis], mesh[axis])
        if all(b > a for a, b in box) or not meta.shape:
            out[rank] = tuple(box)
    return out


def holdings_of(metadata: Sequence[VllmParamMeta], rank: int, trainer_ranks: int,
                local: bool) -> dict[str, Box | None]:
    """What trainer ``rank`` sends of each name: its local box (``local``:
    M-to-N, from ``iter_local``) or the whole tensor of each name it owns."""
    held: dict[str, Box | None] = {}
    for meta in metadata:
        owners = meta.owners if meta.owners is not None else range(trainer_ranks)
        if rank not in owners:
            continue
        if not local:
            held[meta.name] = None
            continue
        boxes = owner_boxes(meta, trainer_ranks)
        if rank in boxes:
            held[meta.name] = boxes[rank]
    return held
