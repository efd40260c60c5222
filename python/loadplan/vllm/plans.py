"""A vLLM worker's plan on disk (``loadplan.stored``), keyed by what makes
two vLLM workers' plans interchangeable (``model_key``)."""

from __future__ import annotations

import torch

from ..stored import (  # noqa: F401 - the worker's names for them
    FORMAT,
    Stored,
    metadata_digest,
    paths,
    plan_dir,
    quant_methods,
    save,
    stored,
)
from ..stored import plan_key


def processing_signature(model: torch.nn.Module) -> list[str]:
    """The choices that decide what vLLM's processing does to the model's
    layers, which a plan's processed, computed and staged layers follow:
    each kind of quantization method with the kernel classes and backends
    it chose (DeepGEMM's or another fp8 linear kernel, the fused-MoE
    backend and experts), whether DeepGEMM uses UE8M0 scales, and the
    device's capability."""
    out = quant_methods(model)
    try:
        from vllm.platforms import current_platform
        from vllm.utils.deep_gemm import is_deep_gemm_e8m0_used

        out.append(f"capability={current_platform.get_device_capability()}")
        out.append(f"deep_gemm_e8m0={is_deep_gemm_e8m0_used()}")
    except Exception as e:  # noqa: BLE001 - a platform that cannot say
        out.append(f"platform: {type(e).__name__}")
    return out


def model_key(vllm_config, model: torch.nn.Module, worker_rank: int, *,
              model_config=None) -> str:
    """What makes two workers' plans interchangeable: the model class and
    its config, dtype, the parallel layout and this worker's place in it,
    what vLLM's processing chose for its layers (``processing_signature``),
    and the versions of vLLM and loadplan. ``model_config``: the model's
    (a speculative draft's; None: ``vllm_config``'s)."""
    import vllm

    model_config = model_config or vllm_config.model_config
    parallel = vllm_config.parallel_config
    hf = model_config.hf_config
    return plan_key({
        "vllm": vllm.__version__,
        "class": f"{type(model).__module__}.{type(model).__qualname__}",
        "config": hf.to_json_string(use_diff=False) if hasattr(hf, "to_json_string") else repr(hf),
        "dtype": str(model_config.dtype),
        "quantization": str(model_config.quantization),
        "tp": parallel.tensor_parallel_size,
        "pp": parallel.pipeline_parallel_size,
        "dp": parallel.data_parallel_size,
        "ep": bool(parallel.enable_expert_parallel),
        "rank": parallel.rank,
        "dp_index": getattr(parallel, "data_parallel_index", 0),
        "worker": worker_rank,
        "processing": processing_signature(model),
    })
