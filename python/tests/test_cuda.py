"""load_planned on CUDA tensors (the runtime's CUDA executor), and what a
``loadplan._native`` built without the compiler does (a GPU machine, where
bench/gpu_check.sh builds it so).

The CUDA tests apply plans read from files: ``plan_or_load`` makes each for
a CPU twin of its model and saves it in ``$LOADPLAN_PLANS`` (a temporary
folder when unset), and a module without the compiler reads it from there.
So bench/gpu_prepare.sh runs this file where the compiler is, with
``LOADPLAN_PLANS`` set, to make the plans that travel to the GPU machine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import loadplan
from loadplan import _native, _runtime
from loadplan.examples import llama, qwen2_moe
from test_runtime import same_bytes

# The plans the CUDA tests read: file name -> (example, its make() arguments).
PLANS = {
    "llama-tp2-rank1": (llama, dict(tp_rank=1, tp_size=2)),
    "qwen2_moe-tp2-rank1": (qwen2_moe, dict(tp_rank=1, tp_size=2)),
}

needs_cuda = pytest.mark.skipif(not _runtime.cuda_available(), reason="needs a CUDA device")
needs_compiler = pytest.mark.skipif(
    not _native.HAS_COMPILER, reason="loadplan._native was built without the compiler"
)


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory) -> Path:
    configured = os.environ.get("LOADPLAN_PLANS")
    return Path(configured) if configured else tmp_path_factory.mktemp("plans")


def started(name: str, device: str) -> tuple[torch.nn.Module, list]:
    """Plan ``name``'s model on ``device`` as an engine has it before
    updates: loaded once by its own loader (which also does the constant
    writes a plan file leaves out)."""
    example, kw = PLANS[name]
    model, metas = example.make(**kw, device=device)
    with torch.no_grad():
        model.load_weights(loadplan.random_weights(metas, seed=99))
    return model, metas


@pytest.mark.parametrize("name", sorted(PLANS))
def test_the_plans_are_made_or_found(name, plan_dir):
    """Where the compiler is, each plan is made and saved; everywhere it is
    read back into a CPU twin, which it then updates as load_weights does."""
    path = plan_dir / f"{name}.plan"
    if not _native.HAS_COMPILER:
        assert path.exists(), f"no {path}: bench/gpu_prepare.sh makes it where the compiler is"
    example, kw = PLANS[name]
    model, metas = example.make(**kw)
    loadplan.plan_or_load(model, metas, path)
    model, _ = started(name, "cpu")
    plan = loadplan.plan_or_load(model, metas, path)
    weights = loadplan.random_weights(metas, seed=3)
    loadplan.load_planned(model, plan, weights)
    want, _ = started(name, "cpu")
    with torch.no_grad():
        want.load_weights(weights)
    same_bytes(model, want)


@needs_cuda
@pytest.mark.parametrize("source", ["cuda", "pinned", "pageable"])
@pytest.mark.parametrize("name", sorted(PLANS))
def test_load_planned_on_cuda(name, source, plan_dir):
    model, metas = started(name, "cuda")
    plan = loadplan.plan_or_load(model, metas, plan_dir / f"{name}.plan")
    weights = loadplan.random_weights(metas, seed=8)
    if source == "cuda":
        sent = [(n, t.cuda()) for n, t in weights]
    elif source == "pinned":
        sent = [(n, t.pin_memory()) for n, t in weights]
    else:
        sent = weights
    loadplan.load_planned(model, plan, sent)
    torch.cuda.synchronize()
    assert plan.binding.device.type == "cuda"
    stats = plan.binding.stats()
    assert stats["applies"] == 1
    if source != "pinned":  # pageable sources are moved to the device first
        assert (stats["kernel_launches"], stats["memcpy_calls"]) == (1, 1), stats
    want, _ = started(name, "cuda")
    with torch.no_grad():
        want.load_weights([(n, t.cuda()) for n, t in weights])
    torch.cuda.synchronize()
    same_bytes(model.cpu(), want.cpu())


@needs_cuda
@needs_compiler
def test_plan_and_verify_on_cuda():
    _, metas = llama.make(tp_rank=1, tp_size=2)
    result = loadplan.verify(lambda: llama.make(tp_rank=1, tp_size=2, device="cuda")[0], metas)
    assert result, str(result)
    assert result.plan.entries["model.embed_tokens.weight"].kind == "direct"


@pytest.mark.skipif(_native.HAS_COMPILER, reason="loadplan._native has the compiler")
def test_without_the_compiler_planning_says_why(plan_dir):
    model, metas = llama.make()
    with pytest.raises(loadplan.PlanError, match="built without the compiler.*LoadPlan.load"):
        loadplan.plan_loads(model, metas)
    model, metas = started("llama-tp2-rank1", "cpu")
    plan = loadplan.plan_or_load(model, metas, plan_dir / "llama-tp2-rank1.plan")
    # The JSON is the runtime's: it needs no compiler.
    printed = json.loads(plan.json)
    assert printed["fingerprint"] == plan.fingerprint
    assert printed["stats"]["names"] == len(metas) == len(printed["entries"])
