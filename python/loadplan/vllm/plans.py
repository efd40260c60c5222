"""A worker's plan on disk: the binary plan file (its fingerprint guards the
live layout) and beside it what else it was made for: the checkpoint the
trainer declares, the layers vLLM processes after loading, and the model,
parallel layout and versions. A restarted worker of the same model and
layout reads it back instead of tracing the loader again."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from importlib.metadata import version as _version
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..plan import LoadPlan, ParamMeta

logger = logging.getLogger("loadplan")

FORMAT = 5


def plan_dir(configured: str | None) -> Path:
    """Where plans live: the init info's ``plan_dir``, else
    ``$LOADPLAN_PLAN_DIR``, else ``~/.cache/loadplan/plans``."""
    path = configured or os.environ.get("LOADPLAN_PLAN_DIR")
    if path:
        return Path(path)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "loadplan" / "plans"


def metadata_digest(metas: Sequence[ParamMeta]) -> str:
    h = hashlib.sha256()
    for m in metas:
        h.update(json.dumps([m.name, str(m.dtype), list(m.shape)]).encode())
    return h.hexdigest()


def processing_signature(model: torch.nn.Module) -> list[str]:
    """The choices that decide what vLLM's processing does to the model's
    layers, which a plan's processed, computed and staged layers follow:
    each kind of quantization method with the kernel classes and backends
    it chose (DeepGEMM's or another fp8 linear kernel, the fused-MoE
    backend and experts), whether DeepGEMM uses UE8M0 scales, and the
    device's capability."""
    import enum

    kinds = set()
    for module in model.modules():
        method = getattr(module, "quant_method", None)
        if method is None:
            continue
        parts = [f"{type(method).__module__}.{type(method).__qualname__}"]
        for attr, value in sorted(vars(method).items()):
            if isinstance(value, enum.Enum):
                parts.append(f"{attr}={value}")
            elif isinstance(value, type):
                parts.append(f"{attr}={value.__qualname__}")
            elif type(value).__name__.endswith(("Kernel", "Experts")):
                parts.append(f"{attr}={type(value).__qualname__}")
        kinds.add(" ".join(parts))
    out = sorted(kinds)
    try:
        from vllm.platforms import current_platform
        from vllm.utils.deep_gemm import is_deep_gemm_e8m0_used

        out.append(f"capability={current_platform.get_device_capability()}")
        out.append(f"deep_gemm_e8m0={is_deep_gemm_e8m0_used()}")
    except Exception as e:  # noqa: BLE001 - a platform that cannot say
        out.append(f"platform: {type(e).__name__}")
    return out


def model_key(vllm_config, model: torch.nn.Module, worker_rank: int) -> str:
    """What makes two workers' plans interchangeable: the model class and
    its config, dtype, the parallel layout and this worker's place in it,
    what vLLM's processing chose for its layers (``processing_signature``),
    and the versions of vLLM and loadplan."""
    import vllm

    model_config, parallel = vllm_config.model_config, vllm_config.parallel_config
    hf = model_config.hf_config
    parts = {
        "format": FORMAT,
        "vllm": vllm.__version__,
        "loadplan": _version("loadplan"),
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
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Stored:
    """What a plan file was made for."""

    metadata: str  # metadata_digest of the checkpoint
    processed: tuple[str, ...]  # the modules reloaded on every update
    observed: bool  # whether `processed` was observed, not assumed
    # Each processed module's names (the fallbacks that write into it).
    layer_names: dict[str, list[str]] = field(default_factory=dict)
    # The processed modules loaded as a fresh load does (vLLM's reload
    # does not load them).
    fresh: tuple[str, ...] = ()
    # The attention modules whose processing runs again after each update
    # (processing.refreshed).
    refreshed: tuple[str, ...] = ()
    # The quantization modules whose processing runs on the live tensors
    # after each update's direct writes (processing.recompute).
    recomputed: tuple[str, ...] = ()
    # Of those, the tensors loaded into their checkpoint format on each
    # update, by module (processing.Staged).
    staged: dict[str, list[str]] = field(default_factory=dict)
    # The quantization modules whose processing only moves elements: their
    # names are written straight to where it puts them, and its epilogue
    # (a clamp) runs after each update (processing.rearranged).
    rearranged: tuple[str, ...] = ()


def paths(directory: Path, key: str) -> tuple[Path, Path]:
    stem = directory / key[:24]
    return Path(f"{stem}.plan"), Path(f"{stem}.json")


def save(directory: Path, key: str, plan: LoadPlan, stored: Stored) -> Path:
    """Writes the plan and its sidecar, each to a temporary file renamed
    into place (a reader never sees half a file)."""
    directory.mkdir(parents=True, exist_ok=True)
    plan_path, meta_path = paths(directory, key)
    side = {"format": FORMAT, "key": key, "fingerprint": plan.fingerprint,
            "metadata": stored.metadata, "processed": list(stored.processed),
            "observed": stored.observed, "layer_names": stored.layer_names,
            "fresh": list(stored.fresh), "refreshed": list(stored.refreshed),
            "recomputed": list(stored.recomputed), "staged": stored.staged,
            "rearranged": list(stored.rearranged)}
    for path, data in ((plan_path, plan.plan_bytes), (meta_path, json.dumps(side).encode())):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return plan_path


def stored(directory: Path, key: str, metadata: str) -> Stored | None:
    """The sidecar of a plan for ``key`` and this checkpoint, if there is one
    and it is whole."""
    plan_path, meta_path = paths(directory, key)
    try:
        side = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    if (not plan_path.exists() or side.get("format") != FORMAT or side.get("key") != key
            or side.get("metadata") != metadata):
        return None
    layer_names, staged = side.get("layer_names", {}), side.get("staged", {})
    if not isinstance(layer_names, dict) or not isinstance(staged, dict):
        return None
    return Stored(metadata, tuple(side.get("processed", ())), bool(side.get("observed")),
                  {k: list(v) for k, v in layer_names.items()}, tuple(side.get("fresh", ())),
                  tuple(side.get("refreshed", ())), tuple(side.get("recomputed", ())),
                  {k: list(v) for k, v in staged.items()}, tuple(side.get("rearranged", ())))
