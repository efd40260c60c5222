"""An engine worker's plan on disk, for the engine integrations (vLLM's,
SGLang's): the binary plan file (its fingerprint guards the live layout)
and beside it what else it was made for: the checkpoint the trainer
declares, the layers the engine processes after loading, and a key of the
model, parallel layout and versions that the engine's integration makes
(``plan_key``). A restarted worker of the same model and layout reads it back
instead of tracing the loader again."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .plan import LoadPlan, ParamMeta


# The store's format, in every key: a new sidecar field or plan file format
# (6: plan files of version 4, with transforming writes) bumps it, so plans
# stored before are keyed apart and made again, not refused on opening.
FORMAT = 6


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


def quant_methods(model: torch.nn.Module) -> list[str]:
    """Each kind of quantization method among the model's layers, with the
    kernel classes and backends it chose (enums, classes and objects named
    ``*Kernel`` or ``*Experts`` among its attributes, and among those of
    the layer's ``scheme``, where compressed-tensors keeps its kernel):
    what decides what the engine's processing does to the layers."""
    import enum

    def chosen(owner) -> list[str]:
        parts = [f"{type(owner).__module__}.{type(owner).__qualname__}"]
        for attr, value in sorted(vars(owner).items()) if hasattr(owner, "__dict__") else ():
            if isinstance(value, enum.Enum):
                parts.append(f"{attr}={value}")
            elif isinstance(value, type):
                parts.append(f"{attr}={value.__qualname__}")
            elif type(value).__name__.endswith(("Kernel", "Experts")):
                parts.append(f"{attr}={type(value).__qualname__}")
        return parts

    kinds = set()
    for module in model.modules():
        method = getattr(module, "quant_method", None)
        if method is None:
            continue
        parts = chosen(method)
        scheme = getattr(module, "scheme", None)
        if scheme is not None:
            parts += ["scheme", *chosen(scheme)]
        kinds.add(" ".join(parts))
    return sorted(kinds)


def plan_key(parts: dict) -> str:
    """A plan's key: the digest of what makes two workers' plans
    interchangeable (``parts``, JSON-able; the engine's integration says
    what), with this store's format and loadplan's version."""
    from importlib.metadata import version

    parts = {"format": FORMAT, "loadplan": version("loadplan"), **parts}
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
