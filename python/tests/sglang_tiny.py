"""Tiny SGLang models on the CPU: SGLang's own classes built from the tiny
Hugging Face checkpoints ``vllm_tiny.save`` writes (a test fixture beside
``vllm_tiny``; no module of the package imports it).

SGLang 0.5.23 builds its models on the CPU once its process state is set
as a TP worker's is: the runtime context reset and published from
``ServerArgs`` (``device="cpu"``, the TP and EP sizes), then its
distributed environment and model-parallel groups over Gloo. Its groups
would ask for CUDA through PyNccl where a group has more than one rank:
this process makes them without it (``use_pynccl=False``), as SGLang's
own CPU and NPU platforms do.

``build(directory, tp_size=..., rank=..., init_method=..., ep_size=...)``
returns ``(None, model)`` (vllm_tiny's shape: SGLang has no config object
to enter around loading), not loaded; ``load`` is what SGLang's loader does
at start-up: ``load_weights``, then every quantization method's
``process_weights_after_loading``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import torch

_DISTRIBUTED: list[tuple[int, int, int]] = []


def init_distributed(tp_size: int, rank: int, init_method: str, ep_size: int = 1,
                     moe_runner_backend: str = "auto") -> None:
    """SGLang's process state and distributed groups over Gloo, once per
    process, as its scheduler process makes them: the server's arguments
    published, the MoE configuration read from them (``moe_runner_backend``
    steers SGLang's fused MoE layers onto a GPU backend's weight layout,
    e.g. ``"flashinfer_trtllm"``), then the groups."""
    if _DISTRIBUTED:
        if _DISTRIBUTED[0] != (tp_size, rank, ep_size, moe_runner_backend):
            raise RuntimeError(f"this process is rank {_DISTRIBUTED[0][1]} of TP "
                               f"{_DISTRIBUTED[0][0]} (EP {_DISTRIBUTED[0][2]}, MoE runner "
                               f"{_DISTRIBUTED[0][3]}) already")
        return
    from sglang.srt import runtime_context
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
    from sglang.srt.distributed import parallel_state
    from sglang.srt.layers.moe.utils import initialize_moe_config
    from sglang.srt.server_args import ServerArgs

    make_group = parallel_state.init_model_parallel_group

    def without_pynccl(*args, **kwargs):
        kwargs["use_pynccl"] = False
        return make_group(*args, **kwargs)

    parallel_state.init_model_parallel_group = without_pynccl
    runtime_context.reset_context()
    runtime_context.publish(
        ServerArgs(model_path="dummy", device="cpu", tp_size=tp_size, ep_size=ep_size,
                   moe_runner_backend=moe_runner_backend),
        role="scheduler", ranks=runtime_context.SpawnRanks(world_rank=rank))
    initialize_moe_config()
    init_distributed_environment(world_size=tp_size, rank=rank, local_rank=rank,
                                 distributed_init_method=init_method, backend="gloo")
    initialize_model_parallel(backend="gloo")
    _DISTRIBUTED.append((tp_size, rank, ep_size, moe_runner_backend))


def _quant_config(hf_config):
    """SGLang's quantization config of the checkpoint, if it has one."""
    from sglang.srt.layers.quantization import get_quantization_config

    quantization = getattr(hf_config, "quantization_config", None)
    if quantization is None:
        return None
    if not isinstance(quantization, dict):
        quantization = quantization.to_dict()
    return get_quantization_config(quantization["quant_method"]).from_config(quantization)


def build(directory: str | os.PathLike, *, tp_size: int = 1, rank: int = 0,
          init_method: str = "tcp://127.0.0.1:29541", ep_size: int = 1,
          dtype: torch.dtype = torch.bfloat16, moe_runner_backend: str = "auto"):
    """SGLang's model of the Hugging Face model in ``directory`` on this
    rank (not loaded): ``(None, model)``."""
    import transformers
    from sglang.srt.models.registry import ModelRegistry

    init_distributed(tp_size, rank, init_method, ep_size, moe_runner_backend)
    hf_config = transformers.AutoConfig.from_pretrained(str(directory))
    model_class, _ = ModelRegistry.resolve_model_cls(hf_config.architectures)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        model = model_class(config=hf_config, quant_config=_quant_config(hf_config))
    finally:
        torch.set_default_dtype(previous)
    return None, model.eval()


def load(_config, model: torch.nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """What SGLang's loader does at start-up: ``load_weights``, then each
    quantization method's post-load processing."""
    with torch.no_grad():
        model.load_weights(iter(list(weights)))
        for module in model.modules():
            method = getattr(module, "quant_method", None)
            if method is not None and hasattr(method, "process_weights_after_loading"):
                method.process_weights_after_loading(module)


def load_weights(_config, model: torch.nn.Module,
                 weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """SGLang's ``load_weights`` alone (an update of weights already
    processed as loaded)."""
    with torch.no_grad():
        model.load_weights(iter(list(weights)))
