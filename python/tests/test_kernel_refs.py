"""The torch references of CUDA-only processing steps
(``loadplan.vllm.kernel_refs``), against vLLM's own torch functions where
vLLM has one: the UE8M0 scales of ``per_block_cast_to_fp8``, the exponent
byte decoding of ``_upcast_e8m0_to_fp32`` and DeepGEMM's
``unpack_ue8m0_from_int`` (vendored with vLLM), ``scaled_dequantize``,
the inverse of FlashInfer's scale swizzle in vLLM's NVFP4 emulation
(``convert_swizzled_to_linear``).
The comparison with the CUDA kernels is ``test_kernel_refs_cuda.py``, on a
GPU machine with vLLM (the lent ones have none: docs/vllm.md). The
runtime's own transform (``marlin_w4``) is checked on a GPU by
``Cuda.TransformingWrites`` (``bench/gpu_all.sh``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402

from loadplan.vllm import kernel_refs  # noqa: E402


@pytest.fixture(autouse=True)
def _eager():
    """vLLM's torch.compile'd per_block_cast_to_fp8, eager: the same
    computation, without the CPU's inductor compiling C++ for it."""
    import torch._dynamo

    with torch._dynamo.config.patch(disable=True):
        yield


def _ue8m0_blocks(n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A random fp8 weight [n, k] and its power-of-two 128x128 block scales,
    as vLLM's requant makes them (``per_block_cast_to_fp8``, UE8M0)."""
    from vllm.utils.deep_gemm import per_block_cast_to_fp8

    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen) * torch.logspace(-3, 1, n).unsqueeze(1)
    return per_block_cast_to_fp8(w, [128, 128], use_ue8m0=True)


def _deep_gemm_math():
    """DeepGEMM's ``utils/math.py`` as vLLM vendors it: torch only, loaded
    by path (the package itself imports the CUDA extension)."""
    import vllm

    path = Path(vllm.__file__).parent / "third_party" / "deep_gemm" / "utils" / "math.py"
    spec = importlib.util.spec_from_file_location("deep_gemm_math", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("n,k", [(256, 256), (198, 640), (64, 1152)])
def test_sm100_scales_pack_each_rows_block_exponents_mn_major(n, k):
    from vllm.model_executor.layers.quantization.utils.fp8_utils import _upcast_e8m0_to_fp32

    _, sf = _ue8m0_blocks(n, k)
    assert sf.shape == (-(-n // 128), -(-k // 128))
    packed = kernel_refs.transform_sf_into_required_layout(
        sf.unsqueeze(0), n, k, (1, 128, 128), num_groups=1, is_sfa=False, arch_major=10)
    words = -(-sf.shape[1] // 4)
    aligned = -(-n // 4) * 4
    assert packed.dtype == torch.int32
    assert packed.shape == (1, n, words)
    assert packed.stride() == (words * aligned, 1, aligned)  # MN-major, TMA-aligned
    # Each row's word c holds the exponent bytes of K-blocks 4c..4c+3 of
    # its 128-row block, little-endian, zero past the last K-block.
    rows = torch.arange(n) // 128
    want = torch.zeros(n, words * 4)
    want[:, :sf.shape[1]] = sf[rows]
    words_row_major = kernel_refs.row_major(packed[0])
    assert torch.equal(_upcast_e8m0_to_fp32(words_row_major.view(torch.uint8)), want)
    assert torch.equal(_deep_gemm_math().unpack_ue8m0_from_int(words_row_major), want)


def test_sm90_block_scales_are_kept_as_they_are():
    _, sf = _ue8m0_blocks(256, 384)
    out = kernel_refs.transform_sf_into_required_layout(
        sf.unsqueeze(0), 256, 384, (1, 128, 128), num_groups=1, is_sfa=False, arch_major=9)
    assert out.data_ptr() == sf.data_ptr() and torch.equal(out[0], sf)
    # ... and so with the UE8M0 cast off, on any architecture.
    out = kernel_refs.transform_sf_into_required_layout(
        sf, 256, 384, (128, 128), disable_ue8m0_cast=True, arch_major=10)
    assert out is sf


def test_activation_scales_become_mn_major_and_tma_aligned():
    sf = torch.rand(3, 5)  # 3 tokens, 5 K-groups of 128
    out = kernel_refs.transform_sf_into_required_layout(
        sf, 3, 640, (1, 128, 128), is_sfa=True, arch_major=9)
    assert out.stride() == (1, 4) and torch.equal(out, sf)
    assert kernel_refs.mn_major_tma_aligned(out) is out


def test_the_transform_refuses_what_deepgemm_refuses():
    _, sf = _ue8m0_blocks(256, 256)
    with pytest.raises(ValueError, match=r"expected \(3, 2\)"):
        kernel_refs.transform_sf_into_required_layout(
            sf, 384, 256, (1, 128, 128), is_sfa=False, arch_major=9)
    with pytest.raises(ValueError, match="needs is_sfa"):
        kernel_refs.transform_sf_into_required_layout(sf, 256, 256, (1, 128, 128),
                                                      arch_major=9)
    with pytest.raises(ValueError, match="no scale transform"):
        kernel_refs.transform_sf_into_required_layout(
            sf, 256, 256, (1, 128, 128), is_sfa=False, arch_major=8)


@pytest.mark.parametrize("packed", [False, True])
def test_the_gemm_is_the_product_of_the_dequantized_operands(packed):
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        GroupShape,
        scaled_dequantize,
    )

    m, n, k = 5, 256, 384
    b, sfb = _ue8m0_blocks(n, k, seed=1)
    gen = torch.Generator().manual_seed(2)
    a = (torch.randn(m, k, generator=gen) * 4).to(torch.float8_e4m3fn)
    sfa = torch.exp2(torch.randint(-4, 4, (m, k // 128), generator=gen).float())
    want = (scaled_dequantize(a, sfa, GroupShape(1, 128))
            @ scaled_dequantize(b, sfb, GroupShape(128, 128)).T).to(torch.bfloat16)
    if packed:  # SM100: the weights' scales in DeepGEMM's packed layout
        sfb = kernel_refs.transform_sf_into_required_layout(
            sfb, n, k, (1, 128, 128), is_sfa=False, arch_major=10)
    d = torch.empty(m, n, dtype=torch.bfloat16)
    kernel_refs.fp8_gemm_nt((a, sfa), (b, sfb), d)
    assert torch.equal(d, want)


def _sf_index(row: int, col: int, cols: int) -> int:
    """TensorRT-LLM's ``computeSFIndex`` for ``SWIZZLED_128x4`` (the host
    loop FlashInfer's ``BlockScaleInterleave`` runs on CPU tensors), as
    its source writes it."""
    padded_cols = -(-cols // 4) * 4
    return (col % 4 + (col // 4) * (4 * 128) + (row % 32) * 16 + ((row % 128) // 32) * 4
            + (row // 128) * (128 * padded_cols))


@pytest.mark.parametrize("experts, rows, cols", [(1, 128, 8), (3, 256, 4), (2, 100, 6)])
def test_block_scales_interleave_into_128x4_tiles(experts, rows, cols):
    from vllm.model_executor.layers.quantization.utils.nvfp4_emulation_utils import (
        convert_swizzled_to_linear,
    )

    g = torch.Generator().manual_seed(rows + cols)
    sf = torch.randint(1, 256, (experts, rows, cols), dtype=torch.uint8, generator=g)
    out = kernel_refs.block_scale_interleave(sf)
    padded_rows, padded_cols = -(-rows // 128) * 128, -(-cols // 4) * 4
    assert out.shape == (experts * padded_rows * padded_cols,) and out.dtype == torch.uint8
    per_expert = out.view(experts, -1)
    # Every element where TensorRT-LLM's index puts it; the padding zero.
    want = torch.zeros_like(per_expert)
    for r in range(rows):
        for c in range(cols):
            want[:, _sf_index(r, c, cols)] = sf[:, r, c]
    assert torch.equal(per_expert, want)
    # vLLM's own inverse (its NVFP4 emulation reads swizzled scales back;
    # it keeps the padded columns).
    for e in range(experts):
        back = convert_swizzled_to_linear(per_expert[e], rows, cols * 16, 16)
        assert torch.equal(back[:, :cols], sf[e])
    # 2-d scales: one expert; bfloat16 too.
    assert torch.equal(kernel_refs.block_scale_interleave(sf[0]), per_expert[0])
    assert torch.equal(kernel_refs.block_scale_interleave(sf.to(torch.bfloat16)),
                       out.to(torch.bfloat16))
    with pytest.raises(ValueError, match="uint8 or bfloat16"):
        kernel_refs.block_scale_interleave(sf.float())


def _gptq_pack(values: torch.Tensor, num_bits: int) -> torch.Tensor:
    """GPTQ's packing, written out: row ``pack * r + i`` of the values
    [K, N] in bits ``num_bits * i`` of row ``r`` of int32 words."""
    pack = 32 // num_bits
    k, n = values.shape
    words = torch.zeros(k // pack, n, dtype=torch.int64)
    for i in range(pack):
        words |= values[i::pack].to(torch.int64) << (num_bits * i)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def _marlin_want(values: torch.Tensor, num_bits: int, is_a_8bit: bool) -> torch.Tensor:
    """vLLM's torch reference of the repack (its kernel test's)."""
    from vllm.model_executor.layers.quantization.utils.marlin_utils_test import (
        get_weight_perm,
        marlin_weights,
    )

    k, n = values.shape
    return marlin_weights(values, k, n, num_bits, get_weight_perm(num_bits, is_a_8bit),
                          is_a_8bit=is_a_8bit)


def _random_values(k: int, n: int, num_bits: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 1 << num_bits, (k, n), dtype=torch.int32, generator=g)


@pytest.mark.parametrize("is_a_8bit", [False, True])
@pytest.mark.parametrize("num_bits", [4, 8])
@pytest.mark.parametrize("size_k, size_n", [(64, 64), (128, 256), (256, 128), (64, 192)])
def test_marlin_repack_is_vllms_reference_layout(size_k, size_n, num_bits, is_a_8bit):
    values = _random_values(size_k, size_n, num_bits, size_k + size_n + num_bits)
    packed = _gptq_pack(values, num_bits)
    out = kernel_refs.gptq_marlin_repack(packed, size_k, size_n, num_bits, is_a_8bit)
    pack = 32 // num_bits
    assert out.shape == (size_k // 16, size_n * 16 // pack) and out.dtype == torch.int32
    assert torch.equal(out, _marlin_want(values, num_bits, is_a_8bit))
    # The unpacking is GPTQ's packing undone.
    assert torch.equal(kernel_refs.unpack_gptq(packed, num_bits), values)


def test_marlin_layouts_differ_and_bad_shapes_are_refused():
    values = _random_values(64, 64, 4, 1)
    packed = _gptq_pack(values, 4)
    plain = kernel_refs.gptq_marlin_repack(packed, 64, 64, 4)
    assert not torch.equal(plain, kernel_refs.gptq_marlin_repack(packed, 64, 64, 4, True))
    assert not torch.equal(plain, packed.reshape(plain.shape))
    with pytest.raises(ValueError, match="num_bits 4 or 8"):
        kernel_refs.gptq_marlin_repack(packed, 64, 64, 2)
    with pytest.raises(ValueError, match="tile"):
        kernel_refs.gptq_marlin_repack(_gptq_pack(values[:, :32], 4), 64, 32, 4)
    with pytest.raises(ValueError, match="a weight"):
        kernel_refs.gptq_marlin_repack(packed, 128, 64, 4)


@pytest.mark.parametrize("num_bits, is_a_8bit", [(4, False), (8, False), (4, True)])
def test_marlin_moe_repack_repacks_each_expert(num_bits, is_a_8bit):
    experts, size_k, size_n = 3, 128, 64
    packed = torch.stack([_gptq_pack(_random_values(size_k, size_n, num_bits, e), num_bits)
                          for e in range(experts)])
    out = kernel_refs.gptq_marlin_moe_repack(packed, size_k, size_n, num_bits, is_a_8bit)
    # The shape vLLM's gptq_marlin_moe_repack allocates.
    assert out.shape == (experts, size_k // 16, size_n * (num_bits // 2))
    assert out.dtype == torch.int32
    for e in range(experts):
        assert torch.equal(out[e], kernel_refs.gptq_marlin_repack(
            packed[e], size_k, size_n, num_bits, is_a_8bit))
    assert not torch.equal(out[0], out[1])


@pytest.mark.parametrize("num_bits", [4, 8])
def test_marlin_repack_runs_on_meta_tensors(num_bits):
    pack = 32 // num_bits
    w = torch.empty(4096 // pack, 2048, dtype=torch.int32, device="meta")
    out = kernel_refs.gptq_marlin_repack(w, 4096, 2048, num_bits)
    assert out.device.type == "meta" and out.dtype == torch.int32
    assert out.shape == (4096 // 16, 2048 * 16 // pack)
    moe = kernel_refs.gptq_marlin_moe_repack(
        torch.empty(8, 256 // pack, 512, dtype=torch.int32, device="meta"), 256, 512, num_bits,
        is_a_8bit=True)
    assert moe.device.type == "meta" and moe.shape == (8, 256 // 16, 512 * (num_bits // 2))


def _random_words(*shape: int, seed: int) -> torch.Tensor:
    """Random int32 words, every bit pattern (negative words too)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-2**31, 2**31, shape, dtype=torch.int64, generator=g).to(torch.int32)


def _marlin_w4_words(box: torch.Tensor) -> torch.Tensor:
    """The marlin_w4 transform of ``box`` [R, C], a word at a time, as its
    definition writes it: word (t, q, 4c + r) holds in nibble 4s + 2b + h
    the value k = 16t + 8h + 2r + s of row n = 16q + 8b + c."""
    rows, cols = box.shape
    words = box.tolist()
    out = []
    for t in range(cols // 2):
        for q in range(rows // 16):
            for c in range(8):
                for r in range(4):
                    word = 0
                    for s in range(2):
                        for b in range(2):
                            for h in range(2):
                                value = (words[16 * q + 8 * b + c][2 * t + h] >> 4 * (2 * r + s))
                                word |= (value & 0xF) << 4 * (4 * s + 2 * b + h)
                    out.append(word - 2**32 if word >= 2**31 else word)
    return torch.tensor(out, dtype=torch.int32).reshape(cols // 2, rows // 16, 32)


@pytest.mark.parametrize("rows, cols", [(16, 2), (32, 4), (48, 2), (16, 6)])
def test_marlin_w4_transform_is_its_definition(rows, cols):
    box = _random_words(rows, cols, seed=rows + cols)
    out = kernel_refs.marlin_w4_transform(box)
    assert out.shape == (cols // 2, rows // 16, 32) and out.dtype == torch.int32
    assert torch.equal(out, _marlin_w4_words(box))
    # A strided box (a sub-block of a larger weight) reads the same.
    big = _random_words(rows + 16, cols + 4, seed=3)
    big[16:, 2:cols + 2] = box
    assert torch.equal(kernel_refs.marlin_w4_transform(big[16:, 2:cols + 2]), out)


def _place_whole(words: torch.Tensor, size_n: int, size_k: int) -> torch.Tensor:
    """The transform of a whole weight [N, K/8] placed as Marlin's repack
    [K/16, 2N]: atom (t, 4m + w) at row t, words 128m + 4 * lane + w."""
    out = torch.zeros(size_k // 16, 2 * size_n, dtype=torch.int32)
    torch.as_strided(out, (size_k // 16, size_n // 64, 4, 32), (2 * size_n, 128, 1, 4)).copy_(
        words.view(size_k // 16, size_n // 64, 4, 32))
    return out


@pytest.mark.parametrize("size_n, size_k", [(64, 16), (128, 64), (192, 96), (64, 256)])
def test_marlin_w4_transform_of_a_whole_weight_is_its_marlin_repack(size_n, size_k):
    ckpt = _random_words(size_n, size_k // 8, seed=size_n + size_k)
    out = _place_whole(kernel_refs.marlin_w4_transform(ckpt), size_n, size_k)
    want = kernel_refs.gptq_marlin_repack(ckpt.t().contiguous(), size_k, size_n, 4)
    assert torch.equal(out, want)
    if (size_n, size_k) == (128, 64):  # and vLLM's own reference of the repack
        values = kernel_refs.unpack_gptq(ckpt.t(), 4)
        assert torch.equal(out, _marlin_want(values, 4, False))
    # The regions say the same: one, the whole weight.
    (region,) = kernel_refs.marlin_w4_regions(size_n, size_k, 0, 0, size_n, size_k // 8)
    assert region == (0, size_n, 0, (size_k // 16, size_n // 64, 4, 32), (2 * size_n, 128, 1, 4))


def _place_atoms(out: torch.Tensor, words: torch.Tensor, row0: int, col0: int) -> None:
    """The transform ``words`` [C/2, R/16, 32] of the box at row ``row0``,
    word ``col0`` of a weight, written into that weight's repack ``out``
    [K/16, 2N] an atom at a time: atom (t, q) of the box is atom (T, Q) =
    (t + col0 / 2, q + row0 / 16) of the weight, at row T, words
    128 * (Q // 4) + 4 * lane + Q % 4."""
    for t in range(words.shape[0]):
        for q in range(words.shape[1]):
            big_t, big_q = t + col0 // 2, q + row0 // 16
            start = 128 * (big_q // 4) + big_q % 4
            out[big_t, start:start + 128:4] = words[t, q]


def _place_regions(out: torch.Tensor, box: torch.Tensor, size_n: int, size_k: int, row0: int,
                   col0: int) -> None:
    """``box`` at (``row0``, ``col0``) of a weight [size_n, size_k / 8]
    written into its repack ``out`` by ``marlin_w4_regions``."""
    rows, cols = box.shape
    for region in kernel_refs.marlin_w4_regions(size_n, size_k, row0, col0, rows, cols):
        part = box[region.row0 - row0:region.row0 - row0 + region.rows]
        torch.as_strided(out, region.size, region.stride, region.offset).copy_(
            kernel_refs.marlin_w4_transform(part).view(region.size))


# Each shard's rows [start, stop) cut into boxes of these rows and words.
_SHARD_BOXES = {
    # N=192 as 2 tensor-parallel shards of 96 rows (6 subtiles), K=96.
    (192, 96, 2): ([0, 32, 96], [0, 4, 6, 12]),
    # N=320 as 2 shards of 160 (10 subtiles): boxes across a tile's edge.
    (320, 64, 2): ([0, 16, 80, 144, 160], [0, 2, 8]),
    # N=256 as 1 shard, no padding; boxes of whole tiles and part tiles.
    (256, 32, 1): ([0, 64, 112, 256], [0, 2, 4]),
}


@pytest.mark.parametrize("size_n, size_k, shards", list(_SHARD_BOXES))
@pytest.mark.parametrize("by_regions", [False, True])
def test_marlin_w4_boxes_of_a_shard_make_its_padded_repack(size_n, size_k, shards, by_regions):
    ckpt = _random_words(size_n, size_k // 8, seed=size_n * size_k)
    row_cuts, col_cuts = _SHARD_BOXES[(size_n, size_k, shards)]
    shard_n = size_n // shards
    padded_n = -(-shard_n // 64) * 64  # vLLM pads a shard's rows to whole tiles of 64
    for shard in range(shards):
        rows = ckpt[shard * shard_n:(shard + 1) * shard_n]
        padded = torch.nn.functional.pad(rows, (0, 0, 0, padded_n - shard_n))
        want = kernel_refs.gptq_marlin_repack(padded.t().contiguous(), size_k, padded_n, 4)
        out = torch.zeros(size_k // 16, 2 * padded_n, dtype=torch.int32)
        for r0, r1 in zip(row_cuts, row_cuts[1:]):
            for c0, c1 in zip(col_cuts, col_cuts[1:]):
                box = rows[r0:r1, c0:c1]
                if by_regions:
                    _place_regions(out, box, padded_n, size_k, r0, c0)
                else:
                    _place_atoms(out, kernel_refs.marlin_w4_transform(box), r0, c0)
        assert torch.equal(out, want)
        # The padding's words: zero in the repack, written by no box.
        pad_words = torch.zeros_like(out, dtype=torch.bool)
        _place_atoms(pad_words, torch.ones(size_k // 16, (padded_n - shard_n) // 16, 32,
                                           dtype=torch.bool), shard_n, 0)
        assert int(pad_words.sum()) == (padded_n - shard_n) * size_k // 8
        assert not out[pad_words].any()
        assert out[~pad_words].any()


def test_marlin_w4_regions_split_at_tile_edges():
    # Rows 16..176 of N=256: subtiles 1-3 (tile 0), tile 1, subtiles 8-10 (tile 2).
    regions = kernel_refs.marlin_w4_regions(256, 64, 16, 2, 160, 4)
    assert regions == [(16, 48, 512 + 1, (2, 1, 3, 32), (512, 128, 1, 4)),
                       (64, 64, 512 + 128, (2, 1, 4, 32), (512, 128, 1, 4)),
                       (128, 48, 512 + 256, (2, 1, 3, 32), (512, 128, 1, 4))]
    # Within one tile: one region.
    assert kernel_refs.marlin_w4_regions(256, 64, 144, 0, 32, 8) == [
        (144, 32, 128 * 2 + 1, (4, 1, 2, 32), (512, 128, 1, 4))]


def test_marlin_w4_runs_on_meta_tensors_and_refuses_what_is_not_whole_atoms():
    out = kernel_refs.marlin_w4_transform(
        torch.empty(4096, 512, dtype=torch.int32, device="meta"))
    assert out.device.type == "meta" and out.dtype == torch.int32
    assert out.shape == (256, 256, 32)
    assert kernel_refs.MARLIN_W4_ATOM == (16, 2)
    with pytest.raises(ValueError, match="int32 box"):
        kernel_refs.marlin_w4_transform(torch.zeros(16, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="2-d box"):
        kernel_refs.marlin_w4_transform(torch.zeros(2, 16, 2, dtype=torch.int32))
    for rows, cols in ((8, 2), (16, 3), (24, 4)):
        with pytest.raises(ValueError, match="not whole atoms"):
            kernel_refs.marlin_w4_transform(torch.zeros(rows, cols, dtype=torch.int32))
    with pytest.raises(ValueError, match="row0 8"):
        kernel_refs.marlin_w4_regions(128, 64, 8, 0, 16, 2)
    with pytest.raises(ValueError, match="cols 3"):
        kernel_refs.marlin_w4_regions(128, 64, 0, 0, 16, 3)
    with pytest.raises(ValueError, match="outside the weight"):
        kernel_refs.marlin_w4_regions(128, 64, 0, 6, 16, 4)
    with pytest.raises(ValueError, match="tile"):
        kernel_refs.marlin_w4_regions(96, 64, 0, 0, 16, 2)
