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
import time
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


# The last after the trainer moved a tensor to a new buffer; before the
# second, the engine released its mappings (the trainer's table unchanged).
IPC_SEEDS = (41, 42, 43)


def _colocated_rank(rank: int, out: str, port: int, plan_dir: str, atomic: bool,
                    device: str) -> None:
    """One rank of the colocated tests below: rank 0 the trainer (every
    tensor whole), rank 1 the engine (llama-tp2-rank1), both on ``device``
    (``cuda``: GPU 0, read through CUDA IPC; ``cpu``: shared memory).
    Writes what it saw to ``out``/rank<r>.json."""
    from test_transfer import _mismatch

    cuda = device == "cuda"
    if cuda:
        torch.cuda.set_device(0)
    common = dict(rank=rank, world_size=2, num_senders=1, engine="m_to_n", backend="gloo",
                  device="cuda:0" if cuda else None, init_method=f"tcp://127.0.0.1:{port}",
                  timeout=60.0, colocated=True)
    example, kw = PLANS["llama-tp2-rank1"]
    result: dict = {"updates": []}
    if rank == 0:
        _, metas = example.make(**kw)
        held = {n: t.to(device) for n, t in loadplan.random_weights(metas, seed=IPC_SEEDS[0])}
        sender = loadplan.Sender(metas, **common)
        for seed in IPC_SEEDS:
            if seed == IPC_SEEDS[-1]:  # a reallocated buffer
                name = next(iter(held))
                held[name] = held[name].clone()
            with torch.no_grad():
                for n, t in loadplan.random_weights(metas, seed=seed):
                    held[n].copy_(t)
            # CPU tensors move into shared memory (once); CUDA ones stay.
            sender.send(held, share=True)
            result["updates"].append(sender.stats.bytes_sent)
        sender.close()
        # The engine closes its handles before the trainer's memory goes
        # (freeing CUDA memory another process has open is undefined).
        deadline = time.monotonic() + 30
        while not (Path(out) / "released").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        model, metas = started("llama-tp2-rank1", device)
        plan = loadplan.plan_or_load(model, metas, Path(plan_dir) / "llama-tp2-rank1.plan")
        receiver = loadplan.Receiver(model, plan, atomic=atomic, **common)
        for seed in IPC_SEEDS:
            receiver.receive()
            want, _ = started("llama-tp2-rank1", device)
            with torch.no_grad():
                want.load_weights([(n, t.to(device)) for n, t in
                                   loadplan.random_weights(metas, seed=seed)])
            if cuda:
                torch.cuda.synchronize()
            result["updates"].append({"differ": _mismatch(want, model),
                                      "mappings": receiver.stats.mappings})
            if seed == IPC_SEEDS[0]:
                # Every handle closed; the next update asks the trainer
                # for its table again, though it did not change.
                receiver.release_mappings()
                result["released"] = receiver.stats.mappings
        receiver.close()
        (Path(out) / "released").write_text("closed")
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(result))


def _colocated(device: str, atomic: bool, plan_dir: Path, tmp_path: Path) -> None:
    from loadplan.transfer import free_port
    from test_transfer import launch_ranks

    port = free_port()
    code = (f"import test_cuda as t; t._colocated_rank({{rank}}, {str(tmp_path)!r}, {port}, "
            f"{str(plan_dir)!r}, {atomic}, {device!r})")
    trainer, engine = launch_ranks(2, code, tmp_path, f"colocated on {device}")
    assert trainer["updates"] == [0, 0, 0], "the trainer sent bytes"
    assert engine["released"] == 0
    for update in engine["updates"]:
        assert update["differ"] is None, update
        assert update["mappings"] > 0


@needs_cuda
@pytest.mark.parametrize("atomic", [False, True])
def test_colocated_through_cuda_ipc(atomic, plan_dir, tmp_path):
    """A trainer process and an engine process sharing GPU 0, colocated: the
    engine reads the trainer's CUDA tensors through CUDA IPC, straight into
    its live tensors (atomic: through device staging), over three updates,
    the second after the engine closed its handles (release_mappings), the
    last after a tensor moved to a new buffer; after each the engine equals
    a second copy given the same weights by load_weights."""
    _colocated("cuda", atomic, plan_dir, tmp_path)


@needs_compiler
def test_colocated_the_same_on_the_cpu(plan_dir, tmp_path):
    """The same two processes with CPU tensors in shared memory, where the
    compiler is: the harness of the CUDA test above, checked here."""
    _colocated("cpu", True, plan_dir, tmp_path)
