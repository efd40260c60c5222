"""The torch references of CUDA-only processing steps
(``loadplan.vllm.kernel_refs``), against vLLM's own torch functions where
vLLM has one: the UE8M0 scales of ``per_block_cast_to_fp8``, the exponent
byte decoding of ``_upcast_e8m0_to_fp32`` and DeepGEMM's
``unpack_ue8m0_from_int`` (vendored with vLLM), ``scaled_dequantize``,
the inverse of FlashInfer's scale swizzle in vLLM's NVFP4 emulation
(``convert_swizzled_to_linear``).
On a GPU, ``bench/gpu_all.sh`` compares them with the CUDA kernels."""

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
