"""The torch references of CUDA-only processing steps
(``loadplan.vllm.kernel_refs``) against the CUDA kernels they stand for, on
a GPU, through the entry points vLLM's processing calls:

- DeepGEMM's ``transform_sf_into_required_layout`` (the copy vLLM's wheel
  vendors, through ``vllm.utils.deep_gemm``, with vLLM's UE8M0 setting):
  the same shape, strides and words, on the GPU's architecture;
- DeepGEMM's ``fp8_gemm_nt``: close to the reference's product in fp32
  (the kernel accumulates in its own order), raw and packed scales;
- vLLM's Marlin ``gptq_marlin_repack`` and ``gptq_marlin_moe_repack``
  (``torch.ops._C``): the same words, 4- and 8-bit values, with 16-bit and
  8-bit activations;
- FlashInfer's ``block_scale_interleave`` (Blackwell): the same bytes,
  uint8 and bfloat16 scales, rows and columns padded or not, one expert
  or several.

Each skips, saying why, where its kernel is not there: without a CUDA
device, without vLLM's CUDA ops, DeepGEMM or FlashInfer, or on a GPU
whose architecture the kernel does not support. ``bench/gpu_check.sh``
runs them (the lent GPU machines carry none of the three packages, so
there they skip); on a GPU machine with vLLM installed:

    python -m pytest python/tests/test_kernel_refs_cuda.py
"""

from __future__ import annotations

import pytest
import torch

from loadplan.vllm import kernel_refs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

DEVICE = "cuda"


def _arch_major() -> int:
    return torch.cuda.get_device_capability()[0]


def _vllm_op(name: str):
    """vLLM's ``_custom_ops.NAME`` where its CUDA op is registered."""
    ops = pytest.importorskip("vllm._custom_ops", reason="needs vLLM")
    if not hasattr(torch.ops._C, name.replace("_moe", "")):
        pytest.skip(f"vLLM's torch.ops._C has no {name} (not a CUDA build of vLLM)")
    return getattr(ops, name)


def _deep_gemm():
    """vLLM's DeepGEMM wrappers, where DeepGEMM runs on this GPU."""
    dg = pytest.importorskip("vllm.utils.deep_gemm", reason="needs vLLM")
    if not dg.is_deep_gemm_supported():
        pytest.skip("vLLM says DeepGEMM is not supported here (no DeepGEMM, or not "
                    "Hopper or Blackwell)")
    return dg


def _ue8m0_blocks(n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random fp8 weight [n, k] on the GPU and its power-of-two 128x128
    block scales, as vLLM's requant makes them."""
    from vllm.utils.deep_gemm import per_block_cast_to_fp8

    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen) * torch.logspace(-3, 1, n).unsqueeze(1)
    return per_block_cast_to_fp8(w.to(DEVICE), [128, 128], use_ue8m0=True)


def _same_layout(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype
    assert tuple(got.shape) == tuple(want.shape)
    if got.numel() > 1:
        assert got.stride() == want.stride(), (got.stride(), want.stride())
    assert torch.equal(got.cpu(), want.cpu())


@pytest.mark.parametrize("n,k,groups", [(256, 256, None), (198, 640, None),
                                        (64, 1152, 1), (384, 512, 3)])
def test_deep_gemm_weight_scale_layout(n, k, groups):
    dg = _deep_gemm()
    if groups is None:
        _, sf = _ue8m0_blocks(n, k, seed=n + k)
    else:
        sf = torch.stack([_ue8m0_blocks(n, k, seed=n + k + g)[1] for g in range(groups)])
    kwargs = dict(mn=n, k=k, recipe=(1, 128, 128), num_groups=groups, is_sfa=False)
    got = dg.transform_sf_into_required_layout(sf=sf, **kwargs)
    want = kernel_refs.transform_sf_into_required_layout(
        sf, **kwargs, disable_ue8m0_cast=not dg.is_deep_gemm_e8m0_used(),
        arch_major=_arch_major())
    _same_layout(got, want)


@pytest.mark.parametrize("m", [1, 5, 64])
def test_deep_gemm_activation_scale_layout(m):
    dg = _deep_gemm()
    gen = torch.Generator().manual_seed(m)
    sf = torch.exp2(torch.randint(-6, 6, (m, 5), generator=gen).float()).to(DEVICE)
    kwargs = dict(mn=m, k=640, recipe=(1, 128, 128), is_sfa=True)
    got = dg.transform_sf_into_required_layout(sf=sf, **kwargs)
    want = kernel_refs.transform_sf_into_required_layout(
        sf, **kwargs, disable_ue8m0_cast=not dg.is_deep_gemm_e8m0_used(),
        arch_major=_arch_major())
    _same_layout(got, want)


@pytest.mark.parametrize("packed", [False, True])
def test_deep_gemm_fp8_gemm_is_the_dequantized_product(packed):
    dg = _deep_gemm()
    m, n, k = 64, 256, 384
    b, sfb = _ue8m0_blocks(n, k, seed=1)
    gen = torch.Generator().manual_seed(2)
    a = (torch.randn(m, k, generator=gen) * 4).to(torch.float8_e4m3fn).to(DEVICE)
    sfa = torch.exp2(torch.randint(-4, 4, (m, k // 128), generator=gen).float()).to(DEVICE)
    if packed:  # the weights' scales already in the layout the kernel reads
        sfb = dg.transform_sf_into_required_layout(sf=sfb, mn=n, k=k, recipe=(1, 128, 128),
                                                   is_sfa=False)
    got = torch.empty(m, n, dtype=torch.bfloat16, device=DEVICE)
    dg.fp8_gemm_nt((a, sfa), (b, sfb), got)
    want = torch.empty_like(got)
    kernel_refs.fp8_gemm_nt((a, sfa), (b, sfb), want)
    torch.testing.assert_close(got.float(), want.float(), rtol=1.6e-2, atol=1e-2)


def _gptq_words(lead: tuple[int, ...], size_k: int, size_n: int, num_bits: int,
                seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    shape = lead + (size_k * num_bits // 32, size_n)
    return torch.randint(-2**31, 2**31 - 1, shape, generator=gen, dtype=torch.int32)


@pytest.mark.parametrize("num_bits", [4, 8])
@pytest.mark.parametrize("is_a_8bit", [False, True])
def test_marlin_repack(num_bits, is_a_8bit):
    repack = _vllm_op("gptq_marlin_repack")
    size_k, size_n = 256, 192
    words = _gptq_words((), size_k, size_n, num_bits, seed=num_bits)
    got = repack(words.to(DEVICE), size_k, size_n, num_bits, is_a_8bit)
    want = kernel_refs.gptq_marlin_repack(words, size_k, size_n, num_bits, is_a_8bit)
    _same_layout(got.contiguous(), want)


@pytest.mark.parametrize("num_bits", [4, 8])
def test_marlin_moe_repack(num_bits):
    repack = _vllm_op("gptq_marlin_moe_repack")
    size_k, size_n = 128, 256
    words = _gptq_words((3,), size_k, size_n, num_bits, seed=10 + num_bits)
    got = repack(words.to(DEVICE), size_k, size_n, num_bits)
    want = kernel_refs.gptq_marlin_moe_repack(words, size_k, size_n, num_bits)
    _same_layout(got.contiguous(), want)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bfloat16])
@pytest.mark.parametrize("shape", [(128, 4), (130, 6), (2, 256, 8), (3, 96, 5)])
def test_flashinfer_block_scale_interleave(dtype, shape):
    fp4 = pytest.importorskip("flashinfer.quantization.fp4_quantization",
                              reason="needs FlashInfer")
    if _arch_major() < 10:  # vLLM swizzles scales only for Blackwell's kernels
        pytest.skip("FlashInfer's FP4 scale swizzle is Blackwell's (SM100 and later)")
    gen = torch.Generator().manual_seed(len(shape) * 100 + shape[-1])
    if dtype == torch.uint8:
        sf = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
    else:
        sf = torch.randn(shape, generator=gen).to(torch.bfloat16)
    got = fp4.block_scale_interleave(sf.to(DEVICE))
    want = kernel_refs.block_scale_interleave(sf)
    assert got.dtype == want.dtype
    assert got.numel() == want.numel()
    assert torch.equal(got.reshape(-1).cpu(), want)
