#!/usr/bin/env python3
"""One weight update on a GPU through ``load_planned`` against the model's
own ``load_weights`` on the same CUDA tensors, and against one
device-to-device copy of the same bytes, for each of:

- ``llama-8b``: ``loadplan.examples.llama`` with Llama-3-8B sizes (as
  bench/apply.py), TP=2 rank 0, all 32 layers: 291 names, 7.5 GiB;
- ``qwen1.5-moe``: ``loadplan.examples.qwen2_moe`` with Qwen1.5-MoE-A2.7B
  sizes, TP=2 rank 0: 24 layers of 60 experts, 4,659 names, 13 GiB;
- ``llama-tiny``: the Llama's 291 names at tiny shapes, where only the
  per-update cost of each method is left.

The plans come from ``plan_or_load`` (files in ``--plans``, default
``$LOADPLAN_PLANS``), so this runs where ``loadplan._native`` has no compiler
(bench/gpu_check.sh); ``--plan-only`` makes them, for CPU twins of the
models, where the compiler is (bench/gpu_prepare.sh) and exits. The sources
are random bytes on the device, distinct per name; before timing, each
model is loaded once by its own loader (as an engine is at start-up) and
``load_planned`` must leave every parameter as ``load_weights`` does. Each
round runs every method once in random order; the medians of ``--repeat``
rounds are compared, each a wall-clock time from a synchronized device to a
synchronized device. The runtime's counts give the launches per update.

The last line is ``load_weights_over_load_planned=A d2d_over_load_planned=B
moe_load_weights_over_load_planned=C fixed_load_weights_over_load_planned=D
launches_per_load_planned=N`` (for llama-8b unless named otherwise).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import loadplan
from loadplan.examples import llama, qwen2_moe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from apply import GIB, LLAMA_8B, checksum  # noqa: E402

MODELS = {
    "llama-8b": (llama, dict(num_layers=32, **LLAMA_8B)),
    "qwen1.5-moe": (qwen2_moe, dict(
        vocab_size=151936, hidden_size=2048, num_layers=24, num_heads=16, num_kv_heads=16,
        num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408,
        shared_expert_intermediate_size=5632)),
    "llama-tiny": (llama, dict(num_layers=32)),
}
TP_SIZE, TP_RANK = 2, 0


def plan_path(plans: Path, name: str) -> Path:
    return plans / f"{name}-tp{TP_SIZE}-rank{TP_RANK}.plan"


def device_weights(metas: list[loadplan.ParamMeta], device: str) -> list[tuple[str, torch.Tensor]]:
    """Random bytes per name on the device."""
    out = []
    for m in metas:
        t = torch.empty(m.shape, dtype=m.dtype, device=device)
        t.view(torch.uint8).random_(0, 256)
        out.append((m.name, t))
    return out


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def bench(name: str, plans: Path, repeat: int, device: str) -> dict[str, float]:
    example, kw = MODELS[name]
    model, metas = example.make(TP_RANK, TP_SIZE, device=device, **kw)
    with torch.no_grad():
        model.load_weights(device_weights(metas, device))  # start-up: constant writes too
    plan = loadplan.plan_or_load(model, metas, plan_path(plans, name))
    weights = device_weights(metas, device)
    moved = sum(e.nbytes for e in plan.entries.values() if e.kind == "direct")
    copy_from = torch.empty(moved, dtype=torch.uint8, device=device)
    copy_to = torch.empty_like(copy_from)

    def load_weights() -> None:
        with torch.no_grad():
            model.load_weights(weights)

    methods: dict[str, Callable[[], None]] = {
        "load_planned": lambda: loadplan.load_planned(model, plan, weights),
        "load_weights": load_weights,
        "memcpy d2d": lambda: copy_to.copy_(copy_from),
    }
    def synced(fn: Callable[[], None]) -> float:
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        return time.perf_counter() - t

    for fn in methods.values():  # warm-up: the binding, the caching allocator
        fn()
    load_weights()
    want = checksum(model)
    loadplan.load_planned(model, plan, weights)
    sync(device)
    if checksum(model) != want:
        raise SystemExit(f"apply_cuda.py: {name}: load_planned differs from load_weights")
    before = plan.binding.stats()
    times: dict[str, list[float]] = {m: [] for m in methods}
    rng = random.Random(0)
    for _ in range(repeat):
        order = list(methods)
        rng.shuffle(order)
        for m in order:
            times[m].append(synced(methods[m]))
    after = plan.binding.stats()
    applies = after["applies"] - before["applies"]
    launches = (after["kernel_launches"] - before["kernel_launches"]
                + after["memcpy_calls"] - before["memcpy_calls"]) / applies
    where = torch.cuda.get_device_name() if device == "cuda" else "the CPU"
    print(f"{name}: {where}, TP={TP_SIZE} rank {TP_RANK}, "
          f"{len(metas)} names, {moved / GIB:.2f} GiB moved per update; checked: "
          f"load_planned writes what load_weights writes; median of {repeat}")
    median = {m: statistics.median(ts) for m, ts in times.items()}
    for m, ts in times.items():
        print(f"  {m:14} median {median[m] * 1e3:9.3f} ms  {moved / median[m] / 1e9:8.1f} GB/s"
              f"  (best {min(ts) * 1e3:.3f} ms)")
    print(f"  launches per load_planned: {launches:.1f} (kernels and copies the runtime "
          f"enqueued in {applies} updates)")
    del model, plan, weights, copy_from, copy_to
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"load_weights": median["load_weights"] / median["load_planned"],
            "d2d": median["memcpy d2d"] / median["load_planned"], "launches": launches}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", default=os.environ.get("LOADPLAN_PLANS"),
                    help="the plans' folder (default: $LOADPLAN_PLANS)")
    ap.add_argument("--plan-only", action="store_true",
                    help="make the plans for CPU twins of the models, then exit")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: the same on the CPU, to try the script without a GPU")
    args = ap.parse_args(argv)
    if not args.plans:
        ap.error("give --plans or set LOADPLAN_PLANS")
    plans = Path(args.plans)
    if args.plan_only:
        for name in args.models:
            example, kw = MODELS[name]
            model, metas = example.make(TP_RANK, TP_SIZE, **kw)
            loadplan.plan_or_load(model, metas, plan_path(plans, name))
            print(f"apply_cuda.py: {plan_path(plans, name)}")
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("apply_cuda.py: no CUDA device")
        return 2
    torch.set_num_threads(1)
    r = {name: bench(name, plans, args.repeat, args.device) for name in args.models}
    line = []
    if "llama-8b" in r:
        line += [f"load_weights_over_load_planned={r['llama-8b']['load_weights']:.2f}",
                 f"d2d_over_load_planned={r['llama-8b']['d2d']:.3f}"]
    if "qwen1.5-moe" in r:
        line.append(f"moe_load_weights_over_load_planned={r['qwen1.5-moe']['load_weights']:.2f}")
    if "llama-tiny" in r:
        line.append(f"fixed_load_weights_over_load_planned={r['llama-tiny']['load_weights']:.2f}")
    if "llama-8b" in r:
        line.append(f"launches_per_load_planned={r['llama-8b']['launches']:.1f}")
    print(" ".join(line))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
