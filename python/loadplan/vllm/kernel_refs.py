"""Torch references of the CUDA-only steps in vLLM's post-load processing.

Where vLLM's processing of a layer on a GPU calls a CUDA kernel (a JIT
extension, no torch fallback shipped with vLLM), this module holds what
that kernel computes, written in torch from its documented semantics: so
that the processing runs where the kernel does not (on the CPU, in the
tests that steer vLLM onto its GPU paths, and on meta tensors when a
processing step is traced). Each function names the kernel it stands for;
``python/tests/test_kernel_refs_cuda.py`` checks them against it on a GPU
machine with vLLM, DeepGEMM and FlashInfer (``bench/gpu_all.sh`` runs it;
without those packages it skips).

DeepGEMM (vLLM's ``vllm.utils.deep_gemm`` wraps it):

- ``transform_sf_into_required_layout``: a scale factor (SF) tensor in the
  layout DeepGEMM's GEMMs read, by the GPU's architecture. For weights
  (``is_sfa=False``) with 128x128 fp32 blocks: unchanged on SM90 (it only
  checks the layout); on SM100/SM120 each block's scale is broadcast to its
  128 rows, its exponent byte taken (``bits >> 23``: UE8M0) and 4 of them
  packed into an int32, K-block ``4c + b`` in byte ``b`` of word ``c``, in
  an MN-major tensor whose MN stride is aligned to 4 elements (16 bytes).
- ``fp8_gemm_nt``: ``D = A @ B.T`` (+ ``C``) of fp8 operands with their
  scales; here, each operand dequantized to fp32 and multiplied in fp32.
  The kernel's order of accumulation is its own: this is the operation,
  not the kernel's rounding.

FlashInfer (TensorRT-LLM's kernels, which vLLM's FlashInfer TRT-LLM MoE
experts use):

- ``block_scale_interleave`` (``nvfp4_block_scale_interleave``): a block
  scale tensor ``[(E,) R, C]`` (uint8 or bfloat16) as the flat buffer the
  FP4 GEMMs read, each expert's ``R`` padded with zeros to a multiple of
  128 and ``C`` to a multiple of 4, in tiles of 128 rows by 4 columns
  ("SWIZZLED_128x4": row ``r`` and column ``c`` of an expert at
  ``(r // 128, c // 4, r % 32, (r % 128) // 32, c % 4)`` of a row-major
  ``[R/128, C/4, 32, 4, 4]``; TensorRT-LLM's ``computeSFIndex``).

Marlin (vLLM's ``gptq_marlin_repack``; ``gptq_marlin_moe_repack`` repacks
each expert):

- ``gptq_marlin_repack``: a GPTQ weight ``[K / pack, N]`` (``pack = 32 /
  bits`` values along K in each int32 word, row ``k = pack * r + i`` in
  bits ``bits * i`` of word ``r``) as the ``[K / 16, N * 16 / pack]`` words
  Marlin's GEMM reads. The weight is cut into tiles of 16 rows of K by 64
  columns (one output row per 16 rows of K, the tiles of N in order). In a
  tile, lane ``4c + r`` of a warp holds, for each of its 4 subtiles of 16
  columns ``w``, the tensor-core fragment of columns ``16w + c`` and
  ``16w + 8 + c``, rows ``2r``, ``2r + 1``, ``2r + 8``, ``2r + 9``. Its 8
  values of subtile ``w`` make word ``4 * lane + w`` (4-bit), interleaved:
  value (column half ``b``, row half ``h``, row parity ``s``) in nibble
  ``4s + 2b + h``; with 8-bit values, the column halves are 2 words
  ``8 * lane + 2w + b``, row ``(h, s)`` in byte ``2s + h``. With 8-bit
  activations (``is_a_8bit``) the tiles are 32 rows by 32 columns (two
  output rows), lane ``4c + r`` takes rows ``4r + q`` and ``16 + 4r + q``
  of columns ``16j + c`` and ``16j + 8 + c`` (subtile ``j``, half ``b``),
  one word per ``(j, b)`` (4-bit: row ``16g + 4r + q`` in nibble
  ``2q + g``) or per ``(j, b, g)`` (8-bit: byte ``q``).
- ``marlin_w4_transform`` (the runtime's ``marlin_w4`` transforming
  write, not a vLLM kernel): the 4-bit repack as a map of atoms. A box of
  a pack-quantized checkpoint weight, int32 ``[N, K / 8]`` (row ``n`` an
  output channel, value ``k`` in bits ``4 * (k % 8)`` of word ``k // 8``:
  the transpose of the GPTQ weight above), is cut into atoms of 16 rows by
  2 words; atom ``(t, q)`` (words ``2t``, ``2t + 1``, rows ``16q`` to
  ``16q + 15``) becomes the 32 words of one subtile of a tile, lane ``4c +
  r`` holding value ``k = 16t + 8h + 2r + s`` of row ``n = 16q + 8b + c``
  in nibble ``4s + 2b + h``. In the repack of the whole matrix, atom ``(t,
  q)`` with ``q = 4m + w`` lands in row ``t``, words ``128m + 4 * lane +
  w``: ``marlin_w4_regions`` says where a box's atoms go.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

TMA_ALIGNMENT_BYTES = 16  # DeepGEMM aligns the MN stride of SF tensors to this


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def tma_aligned_size(n: int, element_size: int) -> int:
    """``n`` elements rounded up to a whole number of 16 bytes."""
    step = TMA_ALIGNMENT_BYTES // element_size
    return _ceil_div(n, step) * step


def row_major(t: torch.Tensor) -> torch.Tensor:
    """A row-major copy of ``t``, strides included: ``contiguous()`` keeps
    an MN-major ``[MN, 1]`` tensor as it is (a size-1 dim's stride does not
    count), and viewing its words as bytes needs the last stride 1."""
    return torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t)


def _batched(sf: torch.Tensor) -> torch.Tensor:
    if sf.dim() not in (2, 3):
        raise ValueError(f"a scale tensor has 2 or 3 dims, not {sf.dim()}")
    return sf.unsqueeze(0) if sf.dim() == 2 else sf


def mn_major_tma_aligned(sf: torch.Tensor) -> torch.Tensor:
    """DeepGEMM ``get_mn_major_tma_aligned_tensor``: the fp32 SF tensor
    ``[(G,) MN, SF_K]`` with the same values, MN-major, its SF_K stride the
    MN size aligned to 16 bytes. A tensor already so laid out is returned
    as it is."""
    if sf.dtype != torch.float32:
        raise ValueError(f"mn_major_tma_aligned: float32 scales, not {sf.dtype}")
    batched = _batched(sf)
    groups, mn, sf_k = batched.shape
    aligned = tma_aligned_size(mn, 4)
    if ((batched.stride(0) == aligned * sf_k or sf.dim() == 2) and batched.stride(1) == 1
            and batched.stride(2) == aligned):
        return sf
    out = torch.empty_strided((groups, mn, sf_k), (aligned * sf_k, 1, aligned),
                              dtype=sf.dtype, device=sf.device)
    out.copy_(batched)
    return out.squeeze(0) if sf.dim() == 2 else out


def mn_major_tma_aligned_packed_ue8m0(sf: torch.Tensor) -> torch.Tensor:
    """DeepGEMM ``get_mn_major_tma_aligned_packed_ue8m0_tensor`` (the CUDA
    kernel ``transpose_and_pack_fp32_into_ue8m0``): fp32 scales ``[(G,) MN,
    SF_K]``, each a power of two, as int32 ``[(G,) MN, ceil(SF_K / 4)]``
    whose byte ``b`` of word ``(n, c)`` is the UE8M0 exponent byte
    (``bits >> 23``, sign dropped) of ``sf[n, 4c + b]``, 0 past SF_K;
    MN-major, its word stride the MN size aligned to 4. The rows past MN
    that alignment adds are storage only (never read)."""
    if sf.dtype != torch.float32:
        raise ValueError(f"packed UE8M0 scales: float32 input, not {sf.dtype}")
    batched = _batched(sf)
    groups, mn, sf_k = batched.shape
    words = _ceil_div(sf_k, 4)
    aligned = tma_aligned_size(mn, 4)
    exponents = torch.zeros((groups, mn, words * 4), dtype=torch.uint8, device=sf.device)
    exponents[:, :, :sf_k] = (batched.contiguous().view(torch.int32) >> 23).to(torch.uint8)
    packed = exponents.view(torch.int32)  # little-endian: K-block 4c + b in byte b
    out = torch.zeros((groups, words, aligned), dtype=torch.int32, device=sf.device)
    out = out.transpose(1, 2)[:, :mn, :]
    out.copy_(packed)
    return out.squeeze(0) if sf.dim() == 2 else out


def _check_sf_shape(sf: torch.Tensor, mn: int, k: int, gran_mn: int, gran_k: int,
                    num_groups: int | None) -> None:
    per_word = 1 if sf.dtype == torch.float32 else 4
    want = ((num_groups,) if num_groups is not None else ()) + (
        _ceil_div(mn, gran_mn), _ceil_div(k, gran_k * per_word))
    if tuple(sf.shape) != want:
        raise ValueError(f"scale tensor of shape {tuple(sf.shape)} for mn={mn}, k={k} with "
                         f"granularity ({gran_mn}, {gran_k}): expected {want}")


def transform_sf_into_required_layout(sf: torch.Tensor, mn: int, k: int,
                                      recipe: tuple[int, ...], num_groups: int | None = None,
                                      is_sfa: bool | None = None,
                                      disable_ue8m0_cast: bool = False, *,
                                      arch_major: int) -> torch.Tensor:
    """DeepGEMM ``transform_sf_into_required_layout`` on a GPU of
    ``arch_major`` (9: Hopper, 10/12: Blackwell), as vLLM calls it
    (``recipe`` (1, 128, 128) with ``is_sfa``, or a (gran_mn, gran_k)
    pair without). See the module doc."""
    if len(recipe) == 3:
        if is_sfa is None:
            raise ValueError("a 3-element recipe needs is_sfa")
        gran_mn, gran_k = (recipe[0] if is_sfa else recipe[1]), recipe[2]
    elif len(recipe) == 2:
        if is_sfa is not None:
            raise ValueError("a 2-element recipe takes no is_sfa")
        gran_mn, gran_k = recipe
    else:
        raise ValueError(f"invalid recipe {recipe}")
    if sf.dtype not in (torch.float32, torch.int32):
        raise ValueError(f"scales are float32 or packed int32, not {sf.dtype}")
    _check_sf_shape(sf, mn, k, gran_mn, gran_k, num_groups)
    fp32 = sf.dtype == torch.float32
    sm90_like = arch_major == 9 or disable_ue8m0_cast
    if fp32 and gran_mn == 1 and gran_k == 128 and sm90_like:
        return mn_major_tma_aligned(sf)
    if fp32 and gran_mn == 128 and gran_k == 128 and sm90_like:
        # SM90 reads the weights' block scales as they are, row- or
        # column-major, groups contiguous.
        rows, cols = sf.shape[-2], sf.shape[-1]
        if num_groups is not None and sf.stride(-3) != rows * cols:
            raise ValueError("SM90 block scales: groups must be contiguous")
        if not ((sf.stride(-1) == 1 and sf.stride(-2) == cols)
                or (sf.stride(-1) == rows and sf.stride(-2) == 1)):
            raise ValueError("SM90 block scales: row- or column-major only")
        return sf
    if fp32 and gran_k in (32, 128) and arch_major in (10, 12):
        rows = torch.arange(mn, device=sf.device) // gran_mn
        broadcast = sf if gran_mn == 1 else sf.index_select(-2, rows)
        return mn_major_tma_aligned_packed_ue8m0(broadcast)
    if not fp32 and gran_mn == 1 and gran_k in (32, 128) and arch_major in (10, 12):
        if sf.stride(-2) != 1 and mn != 1:
            raise ValueError("packed UE8M0 scales: MN-major only")
        if sf.stride(-1) < tma_aligned_size(mn, 4) or sf.stride(-1) % 4:
            raise ValueError("packed UE8M0 scales: the word stride is not TMA-aligned")
        return sf
    raise ValueError(f"no scale transform for {sf.dtype} granularity ({gran_mn}, {gran_k}) "
                     f"on SM{arch_major}x (disable_ue8m0_cast={disable_ue8m0_cast})")


def _dequantize(x: torch.Tensor, sf: torch.Tensor, gran_mn: int, gran_k: int) -> torch.Tensor:
    """fp8 ``x`` [MN, K] times its scales, broadcast over their blocks."""
    mn, k = x.shape
    if sf.dtype == torch.int32:  # packed UE8M0: 4 exponent bytes per word
        sf = (row_major(sf).view(torch.uint8).to(torch.int32) << 23).view(torch.float32)
    rows = torch.arange(mn, device=x.device) // gran_mn
    cols = torch.arange(k, device=x.device) // gran_k
    return x.to(torch.float32) * sf[rows][:, cols]


def fp8_gemm_nt(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor],
                d: torch.Tensor, c: torch.Tensor | None = None,
                recipe: tuple[int, int, int] | None = None,
                disable_ue8m0_cast: bool = False, **_tuning) -> None:
    """DeepGEMM ``fp8_gemm_nt``: ``d = a @ b.T (+ c)`` of fp8 ``a`` [M, K]
    with per-(1, 128) scales and ``b`` [N, K] with per-(128, 128) (fp32) or
    per-(1, 128) (packed UE8M0) scales, in fp32 (see the module doc).
    Tuning keywords (``compiled_dims``, ...) change nothing here."""
    (xa, sfa), (xb, sfb) = a, b
    gran_b = (recipe[1] if recipe else (1 if sfb.dtype == torch.int32 else 128))
    out = _dequantize(xa, sfa, 1, 128) @ _dequantize(xb, sfb, gran_b, 128).T
    if c is not None:
        out = out + c.to(torch.float32)
    d.copy_(out.to(d.dtype))


SF_ROW_TILE = 128  # FlashInfer's SWIZZLED_128x4 layout: rows per tile
SF_COL_TILE = 4  # and columns per tile


def block_scale_interleave(sf: torch.Tensor) -> torch.Tensor:
    """FlashInfer ``block_scale_interleave`` (TensorRT-LLM
    ``BlockScaleInterleave``): see the module doc. Returns the flat buffer
    ``(E * pad(R, 128) * pad(C, 4),)`` of ``sf``'s dtype."""
    if sf.dtype not in (torch.uint8, torch.bfloat16):
        raise ValueError(f"block scales are uint8 or bfloat16, not {sf.dtype}")
    batched = _batched(sf)
    experts, rows, cols = batched.shape
    padded_rows = _ceil_div(rows, SF_ROW_TILE) * SF_ROW_TILE
    padded_cols = _ceil_div(cols, SF_COL_TILE) * SF_COL_TILE
    if (padded_rows, padded_cols) != (rows, cols):
        padded = torch.zeros((experts, padded_rows, padded_cols), dtype=sf.dtype,
                             device=sf.device)
        padded[:, :rows, :cols] = batched
        batched = padded
    tiles = batched.reshape(experts, padded_rows // SF_ROW_TILE, 4, 32,
                            padded_cols // SF_COL_TILE, SF_COL_TILE)
    return tiles.permute(0, 1, 4, 3, 2, 5).contiguous().reshape(-1)


MARLIN_TILE_K = 16  # Marlin's tile: 16 rows of K (32 with 8-bit activations)
MARLIN_TILE_N = 64  # by 64 columns of N (32 with 8-bit activations)

# The tile's axes as the input splits them, (K axes, N axes), and the order
# in which the output words hold them (the last axes within a word); see
# the module doc. Keyed by (num_bits, is_a_8bit).
_MARLIN_SPLIT = {
    False: ((2, 4, 2), (4, 2, 8)),  # k = 8h + 2r + s; n = 16w + 8b + c
    True: ((2, 4, 4), (2, 2, 8)),  # k = 16g + 4r + q; n = 16j + 8b + c
}
_MARLIN_ORDER = {  # axes: t h/g r s/q  m w/j b c  (t, m: tile of K, of N)
    (4, False): (0, 4, 7, 2, 5, 3, 6, 1),  # words (c, r, w), nibbles (s, b, h)
    (8, False): (0, 4, 7, 2, 5, 6, 3, 1),  # words (c, r, w, b), bytes (s, h)
    (4, True): (0, 4, 7, 2, 5, 6, 3, 1),  # words (c, r, j, b), nibbles (q, g)
    (8, True): (0, 4, 7, 2, 5, 6, 1, 3),  # words (c, r, j, b, g), bytes (q)
}


def unpack_gptq(words: torch.Tensor, num_bits: int) -> torch.Tensor:
    """The values ``[..., K, N]`` of GPTQ-packed int32 ``words``
    ``[..., K / pack, N]``: row ``pack * r + i`` is bits ``num_bits * i``
    of row ``r``."""
    pack = 32 // num_bits
    shifts = torch.arange(0, 32, num_bits, dtype=torch.int32, device=words.device)
    values = (words.unsqueeze(-2) >> shifts.view(pack, 1)) & ((1 << num_bits) - 1)
    return values.flatten(-3, -2)


def _pack_last(values: torch.Tensor, num_bits: int) -> torch.Tensor:
    """int32 words of ``values`` [..., pack]: value ``i`` in bits
    ``num_bits * i``."""
    words = values[..., 0]
    for i in range(1, values.shape[-1]):
        words = words | (values[..., i] << (num_bits * i))
    return words


def _marlin_tiles(size_k: int, size_n: int, num_bits: int, is_a_8bit: bool) -> tuple[int, int]:
    """Marlin's tile (rows of K, columns of N), after checking that the
    sizes are whole tiles and ``num_bits`` one Marlin repacks."""
    if num_bits not in (4, 8):
        raise ValueError(f"marlin repack: num_bits 4 or 8, not {num_bits}")
    tile_k, tile_n = (32, 32) if is_a_8bit else (MARLIN_TILE_K, MARLIN_TILE_N)
    if size_k % tile_k or size_n % tile_n:
        raise ValueError(f"marlin repack: size_k {size_k} and size_n {size_n} are not "
                         f"multiples of the {tile_k}x{tile_n} tile")
    return tile_k, tile_n


def _marlin_repack(b_q_weight: torch.Tensor, size_k: int, size_n: int, num_bits: int,
                   is_a_8bit: bool) -> torch.Tensor:
    """``gptq_marlin_repack`` of each ``[K / pack, N]`` matrix of
    ``b_q_weight`` [..., K / pack, N] (see the module doc)."""
    tile_k, tile_n = _marlin_tiles(size_k, size_n, num_bits, is_a_8bit)
    pack = 32 // num_bits
    lead = tuple(b_q_weight.shape[:-2])
    batch = torch.Size(lead).numel()
    if tuple(b_q_weight.shape[-2:]) != (size_k // pack, size_n):
        raise ValueError(f"marlin repack: a weight [{size_k // pack}, {size_n}] "
                         f"(size_k / {pack}, size_n), not {tuple(b_q_weight.shape[-2:])}")
    if b_q_weight.dtype != torch.int32:
        raise ValueError(f"marlin repack: an int32 weight, not {b_q_weight.dtype}")
    split_k, split_n = _MARLIN_SPLIT[is_a_8bit]
    values = unpack_gptq(b_q_weight, num_bits).reshape(
        batch, size_k // tile_k, *split_k, size_n // tile_n, *split_n)
    order = (0,) + tuple(1 + a for a in _MARLIN_ORDER[(num_bits, is_a_8bit)])
    ordered = values.permute(order).reshape(batch, size_k // 16, size_n * 16 // pack, pack)
    return _pack_last(ordered, num_bits).reshape(*lead, size_k // 16, size_n * 16 // pack)


def gptq_marlin_repack(b_q_weight: torch.Tensor, size_k: int, size_n: int, num_bits: int,
                       is_a_8bit: bool = False) -> torch.Tensor:
    """vLLM ``gptq_marlin_repack`` (``torch.ops._C``, no act-order
    permutation): the GPTQ int32 weight [size_k / pack, size_n] as
    Marlin's int32 [size_k / 16, size_n * 16 / pack] (see the module doc).
    Torch ops only: it runs on meta tensors."""
    if b_q_weight.dim() != 2:
        raise ValueError(f"gptq_marlin_repack: a 2-d weight, not {b_q_weight.dim()}-d")
    return _marlin_repack(b_q_weight, size_k, size_n, num_bits, is_a_8bit)


def gptq_marlin_moe_repack(b_q_weight: torch.Tensor, size_k: int, size_n: int,
                           num_bits: int, is_a_8bit: bool = False) -> torch.Tensor:
    """vLLM ``_custom_ops.gptq_marlin_moe_repack``: ``gptq_marlin_repack``
    of each expert of ``b_q_weight`` [E, size_k / pack, size_n], as
    [E, size_k / 16, size_n * num_bits / 2]."""
    if b_q_weight.dim() != 3:
        raise ValueError(f"gptq_marlin_moe_repack: a 3-d weight, not {b_q_weight.dim()}-d")
    return _marlin_repack(b_q_weight, size_k, size_n, num_bits, is_a_8bit)


MARLIN_W4_ATOM = (16, 2)  # marlin_w4's atom: rows of N, words of K (16 values)
MARLIN_W4_ATOM_WORDS = 32  # the words an atom becomes: one per lane of a warp


def marlin_w4_transform(box: torch.Tensor) -> torch.Tensor:
    """The runtime's ``marlin_w4`` transform of an int32 ``box`` [R, C] of
    a pack-quantized 4-bit weight [N, K / 8] (R a multiple of 16, C of 2):
    its atoms as Marlin's words, int32 [C / 2, R / 16, 32] (K-tile ``t``,
    N-subtile ``q``, lane ``4c + r``), word ``(t, q, 4c + r)`` holding in
    nibble ``4s + 2b + h`` bits ``4 * (2r + s)`` of ``box[16q + 8b + c,
    2t + h]`` (see the module doc). Torch ops only: it runs on meta
    tensors."""
    if box.dtype != torch.int32:
        raise ValueError(f"marlin_w4: an int32 box, not {box.dtype}")
    if box.dim() != 2:
        raise ValueError(f"marlin_w4: a 2-d box [rows of N, words of K], not {box.dim()}-d")
    rows, cols = box.shape
    atom_rows, atom_cols = MARLIN_W4_ATOM
    if rows % atom_rows or cols % atom_cols:
        raise ValueError(f"marlin_w4: a box of {rows} rows by {cols} words is not whole "
                         f"atoms of {atom_rows} rows by {atom_cols} words")
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=box.device)
    values = (box.unsqueeze(-1) >> shifts) & 0xF  # [n, word, k % 8]
    # n = 16q + 8b + c, word = 2t + h, k % 8 = 2r + s
    values = values.reshape(rows // 16, 2, 8, cols // 2, 2, 4, 2)
    # axes: q b c t h r s -> t q (c r: lane) (s b h: nibble)
    ordered = values.permute(3, 0, 2, 5, 6, 1, 4).reshape(cols // 2, rows // 16, 32, 8)
    return _pack_last(ordered, 4)


class MarlinW4Region(NamedTuple):
    """Where ``marlin_w4_transform`` of a box's rows ``row0`` to ``row0 +
    rows`` (of the whole weight; all the box's words) lands in the repack
    of the whole weight: ``torch.as_strided(out, size, stride, offset)``,
    ``size`` a split of the transform's [C / 2, rows / 16, 32] into [C / 2,
    tiles of N, subtiles, 32]."""

    row0: int
    rows: int
    offset: int
    size: tuple[int, int, int, int]
    stride: tuple[int, int, int, int]


def marlin_w4_regions(size_n: int, size_k: int, row0: int, col0: int, rows: int,
                      cols: int) -> list[MarlinW4Region]:
    """Where the box ``[row0:row0 + rows, col0:col0 + cols]`` of a
    pack-quantized weight int32 [size_n, size_k / 8] lands in its
    ``gptq_marlin_repack`` (``[size_k / 16, 2 * size_n]``, row-major),
    atom by atom as ``marlin_w4_transform`` orders them. Atom ``(t, q)`` of
    the box is atom ``(t + col0 / 2, q + row0 / 16)`` of the weight, in
    row ``t + col0 / 2`` at word ``128 * (Q // 4) + Q % 4`` (``Q = q + row0
    / 16``), its lanes 4 words apart. Subtiles of one tile of 64 rows are 1
    word apart, tiles 128: an affine region where the box's rows start and
    end on a tile's edge, else one region for each part of the box in a
    tile (its rows first and last, then the whole tiles between)."""
    atom_rows, atom_cols = MARLIN_W4_ATOM
    for what, v, step in (("row0", row0, atom_rows), ("rows", rows, atom_rows),
                          ("col0", col0, atom_cols), ("cols", cols, atom_cols)):
        if v % step:
            raise ValueError(f"marlin_w4: {what} {v} is not a multiple of {step}")
    _marlin_tiles(size_k, size_n, 4, False)
    if rows <= 0 or cols <= 0 or row0 < 0 or col0 < 0 or row0 + rows > size_n \
            or (col0 + cols) * 8 > size_k:
        raise ValueError(f"marlin_w4: box [{row0}:{row0 + rows}, {col0}:{col0 + cols}] is "
                         f"empty or outside the weight [{size_n}, {size_k // 8}]")
    row_stride = 2 * size_n
    tile_words = MARLIN_TILE_N * 2  # a tile of 64 rows: 128 words of an output row
    q, stop = row0 // atom_rows, (row0 + rows) // atom_rows
    regions = []
    while q < stop:
        # A part tile to the next tile edge, or the whole tiles up to the last.
        whole = (stop // 4 - q // 4) if q % 4 == 0 else 0
        tiles, subtiles = (whole, 4) if whole else (1, min(stop, q // 4 * 4 + 4) - q)
        regions.append(MarlinW4Region(
            q * atom_rows, tiles * subtiles * atom_rows,
            col0 // 2 * row_stride + q // 4 * tile_words + q % 4,
            (cols // 2, tiles, subtiles, MARLIN_W4_ATOM_WORDS), (row_stride, tile_words, 1, 4)))
        q += tiles * subtiles
    return regions
