"""Quantizing on the trainer: a ``Sender`` given high-precision tensors for
names an engine serves as fp8 with block scales (an fp8 ``weight`` [N, K]
and an fp32 ``weight_scale_inv`` [ceil(N/bn), ceil(K/bk)], as DeepSeek-V3
and Qwen3 FP8 checkpoints ship them) quantizes each block it sends, scales
included, so that the engine's plan stays all direct and half the bytes of
bf16 move.

Per block of ``block`` = (bn, bk) elements (the last ones along a dim cut
short by the tensor's end), in float32:

    scale = max(amax(|block|), 1e-4) / max(dtype)
    q     = (block * (1 / scale)).to(dtype)       # round to nearest even

``weight_scale_inv`` holds ``scale`` (the engine computes ``q * scale``).
These are the operations, in this order, of the block quantization vLLM and
DeepGEMM use, so that the bytes equal theirs; a division by ``scale``
instead of the product with its reciprocal would round differently.

A sender holding a box of a weight must hold every block it sends whole:
the box starts on block boundaries and ends on one or at the tensor's end.
Its scale box is the blocks it holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

from ..plan import Box, ParamMeta

DEFAULT_BLOCK = (128, 128)
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
SOURCE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
SCALE_SUFFIX = "_scale_inv"
# The smallest amax a block's scale is made from (an all-zero block gets a
# finite scale).
MIN_AMAX = 1e-4


def _blocks(n: int, size: int) -> int:
    return -(-n // size)


def scale_shape(shape: tuple[int, ...], block: tuple[int, int]) -> tuple[int, int]:
    """The scales of a 2-D weight of ``shape`` in ``block``s:
    [ceil(N/bn), ceil(K/bk)]."""
    return _blocks(shape[0], block[0]), _blocks(shape[1], block[1])


def quantize_blocks(x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn,
                    block: tuple[int, int] = DEFAULT_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [N, K] (bf16, fp16 or fp32) quantized per ``block``: the fp8
    tensor [N, K] and the float32 scales [ceil(N/bn), ceil(K/bk)], on
    ``x``'s device."""
    if x.dim() != 2:
        raise ValueError(f"load plan: block quantization takes a 2-D tensor, not {x.dim()}-D")
    if dtype not in FP8_DTYPES:
        raise ValueError(f"load plan: cannot quantize to {dtype}; one of {FP8_DTYPES}")
    bn, bk = block
    n, k = x.shape
    rows, cols = scale_shape((n, k), block)
    # Zeros past the end leave each cut block's amax as it is.
    padded = torch.zeros(rows * bn, cols * bk, dtype=torch.float32, device=x.device)
    padded[:n, :k] = x
    tiles = padded.view(rows, bn, cols, bk)
    amax = tiles.abs().amax(dim=(1, 3), keepdim=True).clamp(min=MIN_AMAX)
    scale = amax / torch.finfo(dtype).max
    q = (tiles * (1.0 / scale)).to(dtype)
    return q.view(rows * bn, cols * bk)[:n, :k].contiguous(), scale.view(rows, cols)


@dataclass(frozen=True)
class BlockScaled:
    """One quantized weight: its name and dtype, its scale's name, the block
    shape, what this sender holds of both (None: whole)."""

    weight: str
    scale: str
    dtype: torch.dtype
    shape: tuple[int, int]
    block: tuple[int, int]
    held: Box | None
    scale_held: Box | None


def fp8_block_scales(metadata: Iterable[ParamMeta],
                     block: tuple[int, int] = DEFAULT_BLOCK) -> dict[str, str]:
    """weight name -> scale name for every 2-D fp8 name ``X`` of
    ``metadata`` with a float32 ``X_scale_inv`` of ``block``'s
    [ceil(N/bn), ceil(K/bk)]: what ``Sender(quantize=...)`` takes for a
    checkpoint quantized as DeepSeek-V3's."""
    metas = {m.name: m for m in metadata}
    out = {}
    for m in metas.values():
        s = metas.get(m.name + SCALE_SUFFIX)
        if (m.dtype in FP8_DTYPES and len(m.shape) == 2 and s is not None
                and s.dtype == torch.float32
                and tuple(s.shape) == scale_shape(m.shape, block)):
            out[m.name] = s.name
    return out


def quantized_metadata(metadata: Iterable[ParamMeta], names: Iterable[str],
                       dtype: torch.dtype = torch.float8_e4m3fn,
                       block: tuple[int, int] = DEFAULT_BLOCK
                       ) -> tuple[list[ParamMeta], dict[str, str]]:
    """A high-precision checkpoint's ``metadata`` as the engine serves it
    when each of ``names`` is block-quantized: that name as ``dtype``
    followed by its float32 ``<name>_scale_inv``, the others as they are;
    and the weight -> scale map ``Sender(quantize=...)`` takes. ValueError
    when a name is not a 2-D tensor of a dtype a sender quantizes from, or
    its scale name is declared already."""
    names = set(names)
    declared = {m.name for m in metadata}
    unknown = sorted(names - declared)
    if unknown:
        raise ValueError(f"load plan: quantize names {unknown[:5]}, which metadata does not "
                         "declare")
    out: list[ParamMeta] = []
    quantize: dict[str, str] = {}
    for m in metadata:
        if m.name not in names:
            out.append(m)
            continue
        shape = tuple(m.shape)
        if len(shape) != 2 or m.dtype not in SOURCE_DTYPES:
            raise ValueError(f"load plan: {m.name!r} is {m.dtype} {list(shape)}; a weight "
                             f"quantized in blocks is 2-D, one of {SOURCE_DTYPES}")
        scale = m.name + SCALE_SUFFIX
        if scale in declared:
            raise ValueError(f"load plan: {scale!r} is declared already; the scales of "
                             f"{m.name!r} are computed from it")
        out += [ParamMeta(m.name, shape, dtype),
                ParamMeta(scale, scale_shape(shape, block), torch.float32)]
        quantize[m.name] = scale
    return out, quantize


def _scale_box(name: str, box: Box, shape: tuple[int, int],
               block: tuple[int, int]) -> Box:
    """The blocks ``box`` of weight ``name`` covers; ValueError when it cuts
    one it does not hold whole."""
    out = []
    for (a, b), n, size, what in zip(box, shape, block, ("rows", "columns")):
        if a % size or (b % size and b != n):
            raise ValueError(
                f"load plan: {name!r}: the held box {[list(x) for x in box]} cuts a "
                f"{block[0]}x{block[1]} block ({what} {a}..{b} of {n}); a quantizing sender "
                f"must hold each block it sends whole")
        out.append((a // size, _blocks(b, size)))
    return tuple(out)


def plan_quantized(metadata: Mapping[str, ParamMeta], holdings: dict[str, Box | None],
                   quantize: Mapping[str, str], block: tuple[int, int]) -> list[BlockScaled]:
    """Checks ``quantize`` (weight -> scale name) against the metadata and
    this sender's holdings and sets each held weight's scale holding in
    ``holdings``; ValueError says what does not fit."""
    bn, bk = block
    if bn <= 0 or bk <= 0:
        raise ValueError(f"load plan: quantize_block {block} must be positive")
    out = []
    weights = {}
    for weight, scale in quantize.items():
        w, s = metadata.get(weight), metadata.get(scale)
        if w is None or s is None:
            raise ValueError(f"load plan: quantize names {weight!r} -> {scale!r}, which "
                             "metadata does not declare")
        shape = tuple(w.shape)
        expected = scale_shape(shape, block) if len(shape) == 2 else None
        if w.dtype not in FP8_DTYPES or len(shape) != 2:
            raise ValueError(f"load plan: quantize: {weight!r} is {w.dtype} {list(shape)}; "
                             f"a block-quantized weight is 2-D, one of {FP8_DTYPES}")
        if s.dtype != torch.float32 or tuple(s.shape) != expected:
            raise ValueError(f"load plan: quantize: {scale!r} is {s.dtype} {list(s.shape)}; "
                             f"the scales of {weight!r} in {bn}x{bk} blocks are "
                             f"torch.float32 {list(expected)}")
        weights[scale] = weight
        if weight not in holdings:
            continue
        held = holdings[weight]
        scale_held = None if held is None else _scale_box(weight, held, shape, block)
        out.append(BlockScaled(weight, scale, w.dtype, shape, block, held, scale_held))
    held_weights = {q.weight: q for q in out}
    for scale, weight in weights.items():
        if scale in holdings and weight not in held_weights:
            raise ValueError(f"load plan: this sender holds {scale!r} but not {weight!r}, "
                             "whose blocks it is computed from")
    for q in out:
        mine = holdings.get(q.scale, q.scale_held)
        if mine != q.scale_held:
            raise ValueError(f"load plan: this sender holds {mine} of {q.scale!r} but the "
                             f"blocks of {q.weight!r} it holds give {q.scale_held}")
        holdings[q.scale] = q.scale_held
    return out


def quantize_given(given: dict, quantized: list[BlockScaled],
                   device: torch.device) -> dict:
    """``given`` (name -> tensor, what ``Sender.send`` got) with each
    quantized weight's high-precision part replaced by its fp8 blocks and
    its scales added; ValueError when one is not as held."""
    out = dict(given)
    for q in quantized:
        if q.scale in given:
            raise ValueError(f"load plan: {q.scale!r} is computed from {q.weight!r} by this "
                             "quantizing sender; do not send it")
        t = given.get(q.weight)
        if t is None:
            continue  # send() says what is missing
        shape = q.shape if q.held is None else tuple(b - a for a, b in q.held)
        if (not isinstance(t, torch.Tensor) or t.dtype not in SOURCE_DTYPES
                or tuple(t.shape) != shape or t.device != device):
            what = (f"{t.dtype} {tuple(t.shape)} on {t.device}"
                    if isinstance(t, torch.Tensor) else type(t).__name__)
            raise ValueError(f"load plan: {q.weight!r} is {what}; this sender quantizes it "
                             f"from one of {SOURCE_DTYPES} {shape} on {device}")
        out[q.weight], out[q.scale] = quantize_blocks(t, q.dtype, q.block)
    return out
