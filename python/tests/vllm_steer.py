"""Steering vLLM onto its GPU weight-processing paths on the CPU (a test
fixture beside ``vllm_tiny``: no module of the package imports it).

On an NVIDIA GPU vLLM picks, per layer, a kernel whose post-load
processing rearranges or requantizes the checkpoint's tensors (DeepGEMM's
UE8M0 requant for block-fp8 linears, FlashInfer's MoE layouts). That
processing is torch code; only the choice of it reads the GPU. A
*profile* makes vLLM choose it on the CPU, by the conditions vLLM reads
(the platform's DeepGEMM support, the MoE oracles' backend lists, the
experts classes' device checks), and stands in for a CUDA-only step with
its torch reference (``loadplan.vllm.kernel_refs``). vLLM's own classes
then take the GPU path's ``process_weights_after_loading`` on the CPU.

``apply(steer)`` once per process, after ``vllm_tiny.cpu_kernels`` and
before any model is built, identically in every process of a test (the
model the backend updates and both references); ``steer`` is a profile or
several joined by ``+``. ``taken(steer, model)`` says whether a built and
loaded model took each profile's path, naming what it found where it did
not. Profiles:

- ``deepgemm-sm90`` / ``deepgemm-sm100``: block-fp8 linears get vLLM's
  ``DeepGemmFp8BlockScaledMMKernel`` with E8M0 scales (vLLM's default on
  Hopper and Blackwell): every 128x128 block requantized with a
  power-of-two scale, in place; on SM100 the scales become DeepGEMM's
  packed UE8M0 int32 layout (``kernel_refs``). vLLM's
  ``per_block_cast_to_fp8`` is ``torch.compile``d; the profile runs it
  eager (TorchDynamo off), the same in every process.
- ``fi-trtllm-bf16-moe``: bf16 MoE layers get FlashInfer's TRT-LLM experts
  (Blackwell's default): the intermediate size rounded up to 128 at
  allocation, the padding zeroed and the rows permuted into BlockMajorK
  order in place after loading. The experts' kernel object (a CUDA
  runner) is not made: these models are loaded, not run.
- ``fi-cutlass-fp8-moe``: block-fp8 MoE layers get FlashInfer's CUTLASS
  experts (Hopper's with expert parallelism): w13's gate and up halves
  swapped, weights and scales, the scales clamped at 1e-10. Also not made:
  the kernel object.
- ``fi-trtllm-fp8-moe``: block-fp8 MoE layers get FlashInfer's TRT-LLM
  experts (Blackwell's default): the swap and the clamp, then each
  expert's rows shuffled in groups of 16 and its weights rearranged into
  BlockMajorK order, ``(E, K/128, M, 128)``, new 4-d tensors. Not made: the
  kernel object.
- ``fi-trtllm-mxfp4-moe``: gpt-oss's mxfp4 MoE layers get FlashInfer's
  TRT-LLM experts with bf16 activations (Blackwell's default): the hidden
  size rounded up to 256 and the intermediate to 128 at allocation; after
  loading, the biases converted to fp32, w13's gate and up rows swapped in
  pairs (weights, scales, biases), each expert's rows shuffled for the
  kernel's transposed output, and its block scales interleaved into
  128x4 tiles (FlashInfer's ``block_scale_interleave``, a CUDA kernel:
  its torch reference, ``kernel_refs.block_scale_interleave``). Not made:
  the kernel object.
- ``marlin-int4-moe``: int4 W4A16 MoE layers (compressed-tensors, Kimi-K2's
  experts) get vLLM's Marlin experts (Blackwell's default for them):
  after loading, each expert's packed weights and scales transposed to
  K-first, the intermediate size zero-padded to Marlin's thread tile where
  it is not a multiple of 64, the 4-bit values repacked into Marlin's
  tiles (vLLM's ``gptq_marlin_moe_repack``: its loop over experts of the
  CUDA kernel ``torch.ops._C.gptq_marlin_repack``, defined here with its
  torch reference, ``kernel_refs.gptq_marlin_repack``, as the kernel the
  GPU build registers) and the scales permuted, new tensors. Not made: the
  kernel object.
- ``marlin-int4-linear``: int4 W4A16 linear layers (compressed-tensors,
  dense models) get vLLM's ``MarlinLinearKernel`` (NVIDIA's choice for
  them on Ampere, Ada and Blackwell; Hopper's is Machete): each weight
  transposed K-first, padded to Marlin's tiles and repacked (vLLM's
  ``gptq_marlin_repack``, which calls the CUDA kernel
  ``torch.ops._C.gptq_marlin_repack``, defined here as for
  ``marlin-int4-moe``), its scales permuted. The kernel's own checks but
  the device's stay.
- ``fi-attn-sinks``: attention layers with sinks (gpt-oss) process them as
  vLLM's FlashInfer backend does (``FlashInferImpl``'s own
  ``process_weights_after_loading`` on the CPU backend's object): the
  kernel reads an fp32 copy of the sinks kept on the backend object, not
  on any module, made at the first load and copied into on each later
  one.
"""

from __future__ import annotations

import functools
import os

import torch

PROFILES = ("deepgemm-sm90", "deepgemm-sm100", "fi-trtllm-bf16-moe", "fi-cutlass-fp8-moe",
            "fi-trtllm-fp8-moe", "fi-trtllm-mxfp4-moe", "marlin-int4-moe", "marlin-int4-linear",
            "fi-attn-sinks")

_APPLIED: list[str] = []


def profiles(steer: str) -> list[str]:
    """The profiles of ``steer``: ``""`` (none), one profile, or several
    joined by ``+`` (e.g. ``deepgemm-sm90+fi-cutlass-fp8-moe``: a Hopper
    with expert parallelism serving a block-fp8 MoE model)."""
    out = [p for p in steer.split("+") if p]
    unknown = [p for p in out if p not in PROFILES]
    if unknown:
        raise ValueError(f"unknown steering profile {unknown[0]!r}; one of {PROFILES}")
    if sum(p.startswith("deepgemm-") for p in out) > 1:
        raise ValueError(f"{steer!r}: one DeepGEMM architecture at a time")
    if sum(p.endswith("-fp8-moe") for p in out) > 1:
        raise ValueError(f"{steer!r}: one block-fp8 MoE backend at a time")
    return out


def steers_fp8_linears(steer: str) -> bool:
    """Whether ``steer`` chooses the kernel of block-fp8 linear layers
    (else ``vllm_tiny.cpu_kernels(fp8=True)`` must, for an fp8 model)."""
    return any(p.startswith("deepgemm-") for p in profiles(steer))


def apply(steer: str) -> None:
    """Steers this process onto the paths of ``steer`` (see ``profiles``
    and the module doc). Once per process; again with the same
    ``steer`` does nothing."""
    if _APPLIED:
        if _APPLIED[0] != steer:
            raise RuntimeError(f"this process is steered onto {_APPLIED[0]!r} already")
        return
    for profile in profiles(steer):
        if profile.startswith("deepgemm-"):
            _deepgemm(arch_major=9 if profile == "deepgemm-sm90" else 10)
        elif profile == "fi-trtllm-bf16-moe":
            _fi_trtllm_bf16_moe()
        elif profile == "fi-cutlass-fp8-moe":
            _fi_cutlass_fp8_moe()
        elif profile == "fi-trtllm-fp8-moe":
            _fi_trtllm_fp8_moe()
        elif profile == "fi-trtllm-mxfp4-moe":
            _fi_trtllm_mxfp4_moe()
        elif profile == "marlin-int4-moe":
            _marlin_int4_moe()
        elif profile == "marlin-int4-linear":
            _marlin_int4_linear()
        elif profile == "fi-attn-sinks":
            _fi_attn_sinks()
    _APPLIED.append(steer)


def _eager() -> None:
    """vLLM's torch.compile'd helpers run eager (the CPU's inductor would
    compile C++ for each; eager is the same computation in every
    process)."""
    os.environ["TORCHDYNAMO_DISABLE"] = "1"
    import torch._dynamo

    torch._dynamo.config.disable = True


def _deepgemm(arch_major: int) -> None:
    import vllm.model_executor.kernels.linear as linear
    import vllm.utils.deep_gemm as dg
    from vllm.model_executor.kernels.linear.scaled_mm.deep_gemm import (
        DeepGemmFp8BlockScaledMMKernel,
    )
    from vllm.platforms import PlatformEnum, current_platform

    from loadplan.vllm import kernel_refs

    _eager()
    # VLLM_USE_DEEP_GEMM and VLLM_USE_DEEP_GEMM_E8M0 keep their defaults
    # (on): setting VLLM_USE_DEEP_GEMM at all would also force DeepGEMM
    # onto the fp8 MoE layers.
    # What is_deep_gemm_supported reads: the platform's DeepGEMM support
    # and the package's presence.
    type(current_platform).support_deep_gemm = classmethod(lambda cls: True)
    dg.has_deep_gemm = lambda: True
    # The DeepGEMM entry points vLLM resolves in _lazy_init; with one set,
    # _lazy_init returns before importing the CUDA extension.
    dg._fp8_gemm_nt_impl = kernel_refs.fp8_gemm_nt
    dg._transform_sf_into_required_layout_impl = functools.partial(
        kernel_refs.transform_sf_into_required_layout, arch_major=arch_major)
    dg.is_deep_gemm_supported.cache_clear()
    dg.is_deep_gemm_e8m0_used.cache_clear()
    # The activation scale format DeepGEMM wants on this architecture.
    dg.DeepGemmQuantScaleFMT._oracle_cache = (
        dg.DeepGemmQuantScaleFMT.FLOAT32_CEIL_UE8M0 if arch_major == 9
        else dg.DeepGemmQuantScaleFMT.UE8M0)
    # The kernel's own check is is_cuda(); the rest of its checks
    # (can_implement: bf16 output, (1, 128) activation groups, N % 64 and
    # K % 128) stay. A linear it cannot implement gets the CPU's kernels,
    # as another shape on a GPU gets another kernel.
    DeepGemmFp8BlockScaledMMKernel.is_supported = classmethod(
        lambda cls, compute_capability=None: (True, None))
    cpu = linear._POSSIBLE_FP8_BLOCK_KERNELS[PlatformEnum.CPU]
    linear._POSSIBLE_FP8_BLOCK_KERNELS[PlatformEnum.CPU] = [DeepGemmFp8BlockScaledMMKernel,
                                                          *cpu]


def _no_kernel_object(method_class, maker: str = "_init_moe_kernel") -> None:
    """The MoE method makes no kernel object (a CUDA runner, used only to
    run the layer) in its method ``maker``; the weights' processing, which
    runs before it, is untouched."""

    def make(self, layer) -> None:
        self.moe_quant_config = self.get_fused_moe_quant_config(layer)
        self.moe_kernel = _NoKernel()

    setattr(method_class, maker, make)


class _NoKernel:
    """Stands for a MoE kernel object that is not made on the CPU: it has
    no post-load step of its own (FlashInfer's TRT-LLM bf16 experts have
    none; its CUTLASS experts' step is for nvfp4 only, and the fp8 MoE
    method does not call it), and running it is an error."""

    class _Experts:
        def process_weights_after_loading(self, layer) -> None:
            pass

    fused_experts = _Experts()

    def apply(self, *args, **kwargs):
        raise RuntimeError("a steered MoE layer is loaded, not run, on the CPU")

    apply_monolithic = apply


def _fi_trtllm_bf16_moe() -> None:
    import vllm.model_executor.layers.fused_moe.oracle.unquantized as oracle
    from vllm.model_executor.layers.fused_moe.experts import trtllm_bf16_moe
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import (
        UnquantizedFusedMoEMethod,
    )

    original = oracle._get_priority_backends

    def priority(moe_config):
        # Blackwell's order: FlashInfer TRT-LLM first.
        return [oracle.UnquantizedMoeBackend.FLASHINFER_TRTLLM, *original(moe_config)]

    oracle._get_priority_backends = priority
    trtllm_bf16_moe.TrtLlmBf16ExpertsBase._supports_current_device = staticmethod(
        lambda: True)
    _no_kernel_object(UnquantizedFusedMoEMethod)


def _fp8_moe_first(oracle, backend) -> None:
    """The fp8 MoE oracle tries ``backend`` first (the method's
    ``torch.compile``d helpers run eager)."""
    _eager()
    original = oracle._get_priority_backends

    def priority(moe_config, weight_key, activation_key):
        backends = original(moe_config, weight_key, activation_key)
        backends.remove(backend)
        return [backend, *backends]

    oracle._get_priority_backends = priority


def _fi_cutlass_fp8_moe() -> None:
    import vllm.model_executor.layers.fused_moe.oracle.fp8 as oracle
    from vllm.model_executor.layers.fused_moe.experts.flashinfer_cutlass_moe import (
        FlashInferExperts,
    )
    from vllm.model_executor.layers.quantization.fp8 import Fp8MoEMethod
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        kFp8Dynamic128Sym,
        kFp8Static128BlockSym,
    )

    # Hopper's order for block fp8 with expert parallelism: FlashInfer
    # CUTLASS first.
    _fp8_moe_first(oracle, oracle.Fp8MoeBackend.FLASHINFER_CUTLASS)
    FlashInferExperts._supports_current_device = staticmethod(lambda: True)
    # Block fp8 with dynamic (1, 128) activations: what the experts take
    # on SM90 (their scheme check also reads the capability).
    FlashInferExperts._supports_quant_scheme = staticmethod(
        lambda weight_key, activation_key:
        (weight_key, activation_key) == (kFp8Static128BlockSym, kFp8Dynamic128Sym))
    _no_kernel_object(Fp8MoEMethod)


def _fi_trtllm_fp8_moe() -> None:
    import vllm.model_executor.layers.fused_moe.oracle.fp8 as oracle
    from vllm.model_executor.layers.fused_moe.experts import trtllm_fp8_moe
    from vllm.model_executor.layers.quantization.fp8 import Fp8MoEMethod

    # Blackwell's order for block fp8: FlashInfer TRT-LLM first.
    _fp8_moe_first(oracle, oracle.Fp8MoeBackend.FLASHINFER_TRTLLM)
    trtllm_fp8_moe.TrtLlmFp8ExpertsBase._supports_current_device = staticmethod(lambda: True)
    _no_kernel_object(Fp8MoEMethod)


def _fi_trtllm_mxfp4_moe() -> None:
    import flashinfer.fp4_quantization as fp4
    import vllm.model_executor.layers.quantization.mxfp4 as mxfp4
    from vllm.model_executor.layers.fused_moe.experts import trtllm_mxfp4_moe

    from loadplan.vllm import kernel_refs

    # gpt-oss's order puts FlashInfer TRT-LLM (bf16 activations) first;
    # only the device check keeps the CPU off it.
    trtllm_mxfp4_moe.TrtLlmMxfp4ExpertsBase._supports_current_device = staticmethod(
        lambda: True)
    # The method makes its kernel object after the weights' processing.
    mxfp4.make_mxfp4_moe_kernel = lambda **_: _NoKernel()
    # vLLM imports it from here when it processes the weights.
    fp4.nvfp4_block_scale_interleave = kernel_refs.block_scale_interleave
    fp4.block_scale_interleave = kernel_refs.block_scale_interleave


def _marlin_int4_moe() -> None:
    import vllm._custom_ops as ops
    import vllm.model_executor.layers.fused_moe.oracle.int_wna16 as oracle
    from vllm.model_executor.layers.fused_moe.experts.marlin_moe import MarlinExpertsBase
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe \
        .compressed_tensors_moe_wna16 import CompressedTensorsWNA16MoEMethod

    from loadplan.vllm import kernel_refs

    # Blackwell's order for int4 W4A16 experts: Marlin first (Hopper's
    # puts Humming before it). The CPU's own list has no Marlin.
    oracle._get_priority_backends = lambda: [oracle.WNA16MoEBackend.MARLIN]
    MarlinExpertsBase._supports_current_device = staticmethod(lambda: True)
    _define_marlin_repack()
    _no_kernel_object(CompressedTensorsWNA16MoEMethod, "_setup_kernel")


_MARLIN_REPACK_SCHEMA = ("gptq_marlin_repack(Tensor b_q_weight, SymInt size_k, SymInt size_n, "
                         "int num_bits, bool is_a_8bit=False) -> Tensor")


def _define_marlin_repack() -> None:
    """``torch.ops._C.gptq_marlin_repack`` as vLLM's GPU build registers it
    (its schema, and a fake that gives the shape), computed on the CPU by
    its torch reference: vLLM's own code calls it, and a trace of the
    processing sees the kernel's op, as on a GPU. Once per process."""
    import torch

    from loadplan.vllm import kernel_refs

    if hasattr(torch.ops._C, "gptq_marlin_repack"):
        return
    lib = torch.library.Library("_C", "FRAGMENT")
    _LIBRARIES.append(lib)
    lib.define(_MARLIN_REPACK_SCHEMA)

    def repack(b_q_weight, size_k, size_n, num_bits, is_a_8bit=False):
        return kernel_refs.gptq_marlin_repack(b_q_weight, size_k, size_n, num_bits, is_a_8bit)

    lib.impl("gptq_marlin_repack", repack, "CPU")

    def fake(b_q_weight, size_k, size_n, num_bits, is_a_8bit=False):
        return b_q_weight.new_empty((size_k // 16, size_n * 16 // (32 // num_bits)))

    torch.library.register_fake("_C::gptq_marlin_repack", fake, lib=lib)


_LIBRARIES: list = []  # the libraries defined here, alive as long as the process


class _CudaPlatform:
    """The platform as Marlin's linear kernel module reads it: CUDA."""

    def __init__(self, platform) -> None:
        self._platform = platform

    def is_cuda(self) -> bool:
        return True

    def __getattr__(self, name):
        return getattr(self._platform, name)


def _marlin_int4_linear() -> None:
    import vllm.model_executor.kernels.linear as linear
    import vllm.model_executor.kernels.linear.mixed_precision.marlin as marlin
    from vllm.platforms import PlatformEnum

    # NVIDIA's order puts CUTLASS W4A8 and Machete (Hopper only) before
    # Marlin: W4A16 on Ampere, Ada and Blackwell takes Marlin. Its checks
    # but the device's stay.
    marlin.current_platform = _CudaPlatform(marlin.current_platform)
    cpu = linear._POSSIBLE_KERNELS[PlatformEnum.CPU]
    linear._POSSIBLE_KERNELS[PlatformEnum.CPU] = [marlin.MarlinLinearKernel, *cpu]
    _define_marlin_repack()


def _fi_attn_sinks() -> None:
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl
    from vllm.v1.attention.backends.flashinfer import FlashInferImpl

    init = CPUAttentionBackendImpl.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        # What FlashInferImpl.__init__ keeps: the sinks as the model holds
        # them; its processing makes the fp32 copy the kernel reads.
        self._sinks_source = self.sinks

    CPUAttentionBackendImpl.__init__ = __init__
    CPUAttentionBackendImpl.process_weights_after_loading = \
        FlashInferImpl.process_weights_after_loading


def taken(steer: str, model: torch.nn.Module) -> list[str]:
    """What of ``model`` (built and loaded under ``steer``) shows each
    profile's path taken, one line per profile, e.g.
    ``'DeepGemmFp8BlockScaledMMKernel (E8M0): 14 layers, scales int32'``;
    raises AssertionError, naming what it found, where a layer a profile
    steers took another path."""
    out = []
    for profile in profiles(steer):
        if profile.startswith("deepgemm-"):
            out += _deepgemm_taken(profile, model)
        elif profile == "fi-trtllm-bf16-moe":
            out += _moe_taken(model, "unquantized_backend", "FLASHINFER_TRTLLM", pad=128)
        elif profile == "fi-cutlass-fp8-moe":
            out += _moe_taken(model, "fp8_backend", "FLASHINFER_CUTLASS")
        elif profile == "fi-trtllm-fp8-moe":
            out += _moe_taken(model, "fp8_backend", "FLASHINFER_TRTLLM", block_major_k=True)
        elif profile == "fi-trtllm-mxfp4-moe":
            out += _mxfp4_taken(model)
        elif profile == "marlin-int4-moe":
            out += _marlin_taken(model)
        elif profile == "marlin-int4-linear":
            out += _marlin_linear_taken(model)
        elif profile == "fi-attn-sinks":
            out += _sinks_taken(model)
    return out


def _kernels_on(model: torch.nn.Module, kernel_of, kernel_class: type, what: str,
                which: str) -> dict[str, tuple[torch.nn.Module, object]]:
    """``{name: (module, kernel)}`` of the modules ``kernel_of`` finds a
    linear kernel object on; raises AssertionError where there is none, or
    where one is not a ``kernel_class``."""
    kernels = {}
    for name, module in model.named_modules():
        kernel = kernel_of(module)
        if kernel is not None:
            kernels[name] = (module, kernel)
    if not kernels:
        raise AssertionError(f"no {what} layer in the model")
    other = {n: type(k).__name__ for n, (_, k) in kernels.items()
             if not isinstance(k, kernel_class)}
    if other:
        raise AssertionError(f"{what}s not on {which}: {other}")
    return kernels


def _deepgemm_taken(profile: str, model: torch.nn.Module) -> list[str]:
    from vllm.model_executor.kernels.linear.scaled_mm.deep_gemm import (
        DeepGemmFp8BlockScaledMMKernel,
    )

    kernels = _kernels_on(
        model, lambda m: getattr(getattr(m, "quant_method", None), "fp8_linear", None),
        DeepGemmFp8BlockScaledMMKernel, "fp8 linear", "DeepGEMM")
    want = torch.float32 if profile == "deepgemm-sm90" else torch.int32
    for name, (module, kernel) in kernels.items():
        if not kernel.use_deep_gemm_e8m0:
            raise AssertionError(f"{name}: DeepGEMM without E8M0 scales")
        scale, weight = module.weight_scale_inv, module.weight
        if scale.dtype != want:
            raise AssertionError(f"{name}: scales {scale.dtype}, expected {want}")
        n, k = weight.shape
        if want == torch.int32:  # packed UE8M0: [N, ceil(K / 512)], MN-major
            shape = (n, -(-k // 512))
            if tuple(scale.shape) != shape or scale.stride(0) != 1:
                raise AssertionError(f"{name}: scales {tuple(scale.shape)} stride "
                                     f"{scale.stride()}, expected {shape} MN-major")
        else:  # requantized in place: every scale a power of two
            mantissa = scale.view(torch.int32) & 0x7FFFFF
            if bool(mantissa.any()):
                raise AssertionError(f"{name}: a block scale is no power of two")
    return [f"DeepGemmFp8BlockScaledMMKernel (E8M0): {len(kernels)} layers, "
            f"scales {str(want).removeprefix('torch.')}"]


def _moe_taken(model: torch.nn.Module, attribute: str, backend: str,
               pad: int | None = None, block_major_k: bool = False) -> list[str]:
    """Every MoE layer's method chose ``backend``; with ``pad``, its
    intermediate size per rank was rounded up to a multiple of ``pad``
    (w13 [E, 2P, H], w2 [E, H, P]); with ``block_major_k``, its weights are
    in BlockMajorK order (w13 [E, H/128, 2I, 128], w2 [E, I/128, H, 128])."""
    methods = {}
    for name, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        if hasattr(method, attribute):
            methods[name] = (module, getattr(method, attribute).name)
    if not methods:
        raise AssertionError(f"no MoE layer with a {attribute}")
    other = {n: b for n, (_, b) in methods.items() if b != backend}
    if other:
        raise AssertionError(f"MoE layers not on {backend}: {other}")
    line = f"{attribute} {backend}: {len(methods)} layers"
    if block_major_k:
        for name, (module, _) in methods.items():
            w13, w2 = module.w13_weight, module.w2_weight
            i = module.moe_config.intermediate_size_per_partition
            h = module.moe_config.hidden_dim
            e = w13.shape[0]
            if (tuple(w13.shape), tuple(w2.shape)) != ((e, h // 128, 2 * i, 128),
                                                       (e, i // 128, h, 128)):
                raise AssertionError(f"{name}: w13 {tuple(w13.shape)}, w2 {tuple(w2.shape)}, "
                                     "not in BlockMajorK order")
        line += ", BlockMajorK"
    if pad is not None:
        sizes = set()
        for name, (module, _) in methods.items():
            padded = module.moe_config.intermediate_size_per_partition
            unpadded = module.moe_config.intermediate_size_per_partition_unpadded
            w13, w2 = module.w13_weight, module.w2_weight
            if padded % pad or w13.shape[1] != 2 * padded or w2.shape[2] != padded:
                raise AssertionError(f"{name}: intermediate {padded} (w13 {tuple(w13.shape)}, "
                                     f"w2 {tuple(w2.shape)}), not padded to {pad}")
            sizes.add((unpadded, padded))
        line += ", intermediate " + ", ".join(f"{u} padded to {p}" for u, p in sorted(sizes))
    return [line]


def _mxfp4_taken(model: torch.nn.Module) -> list[str]:
    """Every mxfp4 MoE layer chose FlashInfer TRT-LLM with bf16
    activations, and holds its tensors as that path leaves them: the
    weights uint8 ``[E, 2I, H/2]``, ``[E, H, I/2]``, the scales fp8-typed
    bytes of the same rows, the biases fp32."""
    layers = _layers_on(model, "mxfp4_backend", "FLASHINFER_TRTLLM_MXFP4_BF16", "mxfp4 MoE")
    for name, m in layers.items():
        e, two_i, half_h = m.w13_weight.shape
        _check_tensors(name, m, {
            "w13_weight": (torch.uint8, (e, two_i, half_h)),
            "w2_weight": (torch.uint8, (e, 2 * half_h, two_i // 4)),
            "w13_weight_scale": (torch.float8_e4m3fn, (e, two_i, half_h // 16)),
            "w2_weight_scale": (torch.float8_e4m3fn, (e, 2 * half_h, two_i // 64)),
            "w13_bias": (torch.float32, (e, two_i)),
            "w2_bias": (torch.float32, (e, 2 * half_h))})
    return [f"mxfp4_backend FLASHINFER_TRTLLM_MXFP4_BF16: {len(layers)} layers, biases fp32"]


def _layers_on(model: torch.nn.Module, attribute: str, backend: str,
               what: str) -> dict[str, torch.nn.Module]:
    """The layers whose quantization method has a backend enum
    ``attribute``; raises AssertionError where there is none, or where one
    chose another backend than ``backend``."""
    methods = {}
    for name, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        if hasattr(method, attribute):
            methods[name] = (module, getattr(method, attribute).name)
    if not methods:
        raise AssertionError(f"no {what} layer")
    other = {n: b for n, (_, b) in methods.items() if b != backend}
    if other:
        raise AssertionError(f"{what} layers not on {backend}: {other}")
    return {n: m for n, (m, _) in methods.items()}


def _check_tensors(name: str, module: torch.nn.Module, want: dict) -> None:
    """Each tensor of ``want`` (its name -> (dtype, shape)) has that dtype
    and shape in ``module``, else AssertionError."""
    for tensor, (dtype, shape) in want.items():
        t = getattr(module, tensor)
        if (t.dtype, tuple(t.shape)) != (dtype, shape):
            raise AssertionError(f"{name}.{tensor}: {t.dtype} {tuple(t.shape)}, expected "
                                 f"{dtype} {shape}")


def _marlin_taken(model: torch.nn.Module) -> list[str]:
    """Every int4 MoE layer chose Marlin and holds its weights as Marlin's
    repack leaves them: int32 ``[E, K/16, 2N]`` for each ``[N, K]`` of the
    checkpoint (w13: K the hidden size, N twice the intermediate; w2: K
    the intermediate, N the hidden size; the intermediate padded to 64),
    the scales K-first ``[E, K/group, N]``."""
    layers = _layers_on(model, "wna16_backend", "MARLIN", "int4 W4A16 MoE")
    sizes = set()
    for name, m in layers.items():
        e, h = m.w13_weight_packed.shape[0], m.moe_config.hidden_dim
        i = m.moe_config.intermediate_size_per_partition_unpadded
        p = -(-i // 64) * 64
        g = m.quant_method.group_size
        _check_tensors(name, m, {
            "w13_weight_packed": (torch.int32, (e, h // 16, 2 * 2 * p)),
            "w2_weight_packed": (torch.int32, (e, p // 16, 2 * h)),
            "w13_weight_scale": (m.w13_weight_scale.dtype, (e, h // g, 2 * p)),
            "w2_weight_scale": (m.w2_weight_scale.dtype, (e, p // g, h))})
        sizes.add((i, p))
    return [f"wna16_backend MARLIN: {len(layers)} layers, intermediate "
            + ", ".join(f"{i} padded to {p}" if i != p else str(i) for i, p in sorted(sizes))]


def _marlin_linear_taken(model: torch.nn.Module) -> list[str]:
    """Every int4 W4A16 linear took Marlin's kernel and holds its weight
    as Marlin's repack leaves it: int32 ``[K/16, 2N]`` (N and K padded to
    Marlin's tiles)."""
    from vllm.model_executor.kernels.linear.mixed_precision.marlin import MarlinLinearKernel

    kernels = _kernels_on(
        model, lambda m: getattr(getattr(m, "scheme", None), "kernel", None)
        if hasattr(m, "weight_packed") else None,
        MarlinLinearKernel, "int4 W4A16 linear", "Marlin")
    for name, (module, kernel) in kernels.items():
        k, n = kernel.config.partition_weight_shape
        w = module.weight_packed
        if w.dtype != torch.int32 or w.shape[0] != -(-k // 16) or w.shape[1] < 2 * n:
            raise AssertionError(f"{name}: weight {w.dtype} {tuple(w.shape)}, not Marlin's "
                                 f"[K/16, 2N] of K={k}, N={n}")
    return [f"MarlinLinearKernel: {len(kernels)} layers"]


def _sinks_taken(model: torch.nn.Module) -> list[str]:
    """Every attention layer with sinks keeps an fp32 copy of them on its
    backend object, equal to the sinks the model holds."""
    layers = {}
    for name, module in model.named_modules():
        impl = getattr(module, "impl", None)
        source = getattr(impl, "_sinks_source", None)
        if source is None:
            continue
        if impl.sinks is None or impl.sinks.dtype != torch.float32 or impl.sinks is source:
            raise AssertionError(f"{name}: no fp32 copy of the sinks on {type(impl).__name__}")
        if not torch.equal(impl.sinks, source.float()):
            raise AssertionError(f"{name}: the fp32 sinks differ from the model's")
        layers[name] = source.dtype
    if not layers:
        raise AssertionError("no attention layer with sinks")
    dtypes = ", ".join(sorted({str(d).removeprefix("torch.") for d in layers.values()}))
    return [f"fp32 sinks on the attention backend: {len(layers)} layers (from {dtypes})"]
