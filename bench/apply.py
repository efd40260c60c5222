"""One weight update of a Llama-3-8B-shaped model at TP=2, rank 0, applied
through the runtime (``load_planned``) against the same bytes copied with
memcpy, against the model's own ``load_weights``, and against a Python loop
of ``copy_`` over ``get_dest`` pairs. Run it as ``bench/apply``.

The model is ``loadplan.examples.llama`` with Llama-3-8B sizes (vocabulary
128256, hidden 4096, intermediate 14336, 32 heads, 8 KV heads, untied
lm_head), with as many of the 32 layers as half the available memory holds
(``--layers`` to choose). The trainer's tensors of one layer are sent for
every layer (the same source tensors under each layer's names), so the
sources take one layer's memory; each layer's are far larger than any cache,
so no method reads them from cache.

Every method moves the same bytes (``moved``: what this rank's parameters
take). Each round runs every method once, in random order; the medians of
``--repeat`` rounds are compared, so the ratios come from one run on the
same, shared machine. ``memcpy`` is the fastest of libc ``memmove`` and
torch ``copy_`` (one thread and all threads) of contiguous bytes into the
same parameter storages. A binding made with ``LOADPLAN_RUNTIME_STREAMING=0``
shows what the executor's non-temporal stores gain. torch runs with one
thread otherwise
(``torch.set_num_threads(1)``, as the Python tests do: its intra-op threads
only wait on each other on a busy machine), the runtime with its default
(all hardware threads); a one-thread runtime line is printed too.

The last line is ``ratio_vs_memcpy=A speedup_vs_load_weights=B
speedup_vs_copy_loop=C``: memcpy's time over the runtime's, and so on
(higher is better for all three).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import statistics
import sys
import time
from collections.abc import Callable

import torch

import loadplan
from loadplan import _runtime
from loadplan.examples import llama

LLAMA_8B = dict(
    vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_heads=32,
    num_kv_heads=8, tie_word_embeddings=False,
)
GIB = 1 << 30


def available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 8 * GIB


def footprint(layers: int, tp_size: int, tp_rank: int) -> int:
    """Bytes of the live model plus the sources (one layer's and the rest)."""
    model, metas = llama.make(tp_rank, tp_size, num_layers=layers, device="meta", **LLAMA_8B)
    live = sum(p.numel() * p.element_size() for p in model.parameters())
    sources = sum(
        m.dtype.itemsize * torch.Size(m.shape).numel()
        for m in metas
        if ".layers." not in m.name or ".layers.0." in m.name
    )
    return live + sources


def choose_layers(tp_size: int, tp_rank: int) -> int:
    budget = available_bytes() // 2
    layers = 32
    while layers > 1 and footprint(layers, tp_size, tp_rank) > budget:
        layers -= 1
    return layers


def shared_sources(metas: list[loadplan.ParamMeta]) -> list[tuple[str, torch.Tensor]]:
    """Random bytes per name; every layer's names share layer 0's tensors."""
    g = torch.Generator().manual_seed(0)
    made: dict[str, torch.Tensor] = {}
    weights = []
    for m in metas:
        key = m.name
        if ".layers." in m.name:
            key = m.name.split(".", 3)[3]  # model.layers.<i>.<rest> -> <rest>
        if key not in made:
            t = torch.empty(m.shape, dtype=m.dtype)
            t.view(torch.int16).random_(generator=g)  # any bits: bf16 NaNs too
            made[key] = t
        weights.append((m.name, made[key]))
    return weights


def checksum(model: torch.nn.Module) -> list[int]:
    """One int per parameter: the wrapping sum of its bytes as int64 words
    (int16 words where the size is not a multiple of 8)."""
    sums = []
    with torch.no_grad():
        for p in model.parameters():
            words = p.view(-1).view(torch.uint8)
            words = words.view(torch.int64) if words.numel() % 8 == 0 else words.view(torch.int16)
            sums.append(int(words.sum()))
    return sums


def timed(fn: Callable[[], None]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, help="decoder layers (default: what memory allows, <= 32)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds (medians are compared)")
    ap.add_argument("--threads", type=int, help="runtime threads (default: all hardware threads)")
    ap.add_argument("--tp-size", type=int, default=2)
    ap.add_argument("--tp-rank", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    all_threads = os.cpu_count() or 1

    layers = args.layers or choose_layers(args.tp_size, args.tp_rank)
    t0 = time.perf_counter()
    model, metas = llama.make(args.tp_rank, args.tp_size, num_layers=layers, **LLAMA_8B)
    plan = loadplan.plan_loads(model, metas)
    planned = time.perf_counter() - t0
    weights = shared_sources(metas)
    moved = sum(e.nbytes for e in plan.entries.values() if e.kind == "direct")
    live = sum(p.numel() * p.element_size() for p in model.parameters())
    assert moved == live, (moved, live)  # every parameter byte is written once
    kinds = {k: sum(e.kind == k for e in plan.entries.values()) for k in ("direct", "fallback", "unneeded")}
    unique = {id(t): t for _, t in weights}.values()
    sources = sum(t.numel() * t.element_size() for t in unique)
    print(
        f"llama 8B shapes, {layers} of 32 layers, TP={args.tp_size} rank {args.tp_rank}: "
        f"{len(metas)} names {kinds}, {moved / GIB:.2f} GiB moved per update, "
        f"{sources / GIB:.2f} GiB of sources; planned in {planned:.1f} s"
    )

    binding = plan.bind(num_threads=args.threads)
    one_thread = _runtime.Binding(plan.native, plan.target_tensors, num_threads=1)
    # The same executor with plain stores: what streaming stores gain.
    os.environ["LOADPLAN_RUNTIME_STREAMING"] = "0"
    plain = _runtime.Binding(plan.native, plan.target_tensors, num_threads=args.threads)
    del os.environ["LOADPLAN_RUNTIME_STREAMING"]
    direct = [(n, t) for n, t in weights if plan.entries[n].kind == "direct"]
    pairs = []  # (live view, source part) per destination, made once
    for name, full in weights:
        for box, view in plan.get_dest(name) or ():
            part = full[tuple(slice(a, b) for a, b in box)]
            pairs.append((view, part.view(view.shape) if part.shape != view.shape else part))
    # memcpy: contiguous bytes into every parameter's storage, read from the
    # front of the largest source (every storage fits in it).
    source = max((t for _, t in weights), key=lambda t: t.numel() * t.element_size())
    source_bytes = source.view(-1).view(torch.uint8)
    storages = [p.detach().view(-1).view(torch.uint8) for p in model.parameters()]
    assert all(s.numel() <= source_bytes.numel() for s in storages)

    def runtime_apply() -> None:
        loadplan.load_planned(model, plan, weights)

    def runtime_one_thread() -> None:
        one_thread.apply_tensors(direct)

    def runtime_plain_stores() -> None:
        plain.apply_tensors(direct)

    def load_weights() -> None:
        with torch.no_grad():
            model.load_weights(weights)

    def copy_loop() -> None:
        with torch.no_grad():
            for view, part in pairs:
                view.copy_(part)

    def libc_memmove() -> None:
        src = source_bytes.data_ptr()
        for s in storages:
            ctypes.memmove(s.data_ptr(), src, s.numel())

    def torch_copy(threads: int) -> Callable[[], None]:
        def run() -> None:
            torch.set_num_threads(threads)
            try:
                for s in storages:
                    s.copy_(source_bytes[: s.numel()])
            finally:
                torch.set_num_threads(1)

        return run

    methods: dict[str, Callable[[], None]] = {
        f"runtime ({binding.num_threads} threads)": runtime_apply,
        "runtime (1 thread, binding only)": runtime_one_thread,
        f"runtime ({plain.num_threads} threads, plain stores)": runtime_plain_stores,
        "load_weights": load_weights,
        "copy_ loop over get_dest": copy_loop,
        "memcpy: libc memmove": libc_memmove,
        "memcpy: torch copy_, 1 thread": torch_copy(1),
        f"memcpy: torch copy_, {all_threads} threads": torch_copy(all_threads),
    }

    # Warm up (pages faulted in, pools started), and check that the runtime
    # writes what load_weights writes.
    for fn in methods.values():
        fn()
    load_weights()
    want = checksum(model)
    runtime_apply()
    if checksum(model) != want:
        print("apply: the runtime's update differs from load_weights'", file=sys.stderr)
        return 1
    print(f"checked: the runtime writes what load_weights writes ({len(want)} parameters)")

    times: dict[str, list[float]] = {name: [] for name in methods}
    rng = random.Random(0)
    for _ in range(args.repeat):
        order = list(methods)
        rng.shuffle(order)
        for name in order:
            times[name].append(timed(methods[name]))
    median = {name: statistics.median(ts) for name, ts in times.items()}
    for name, ts in times.items():
        print(
            f"  {name:38} median {median[name] * 1e3:8.1f} ms  {moved / median[name] / 1e9:6.2f} GB/s"
            f"  (best {min(ts) * 1e3:.1f} ms)"
        )
    # What does not scale with bytes: the same names at tiny shapes.
    small, small_metas = llama.make(args.tp_rank, args.tp_size, num_layers=layers)
    small_plan = loadplan.plan_loads(small, small_metas)
    small_weights = loadplan.random_weights(small_metas, seed=0)

    def small_load_weights() -> None:
        with torch.no_grad():
            small.load_weights(small_weights)

    fixed = {
        "load_weights": small_load_weights,
        "load_planned": lambda: loadplan.load_planned(small, small_plan, small_weights),
    }
    fixed_ms = {}
    for name, fn in fixed.items():
        fn()
        fixed_ms[name] = min(timed(fn) for _ in range(20)) * 1e3
    print(
        f"fixed cost per update ({len(small_metas)} names at tiny shapes): "
        + ", ".join(f"{name} {ms:.2f} ms" for name, ms in fixed_ms.items())
    )

    runtime = median[f"runtime ({binding.num_threads} threads)"]
    memcpy = min(t for name, t in median.items() if name.startswith("memcpy"))
    print(
        f"ratio_vs_memcpy={memcpy / runtime:.2f} "
        f"speedup_vs_load_weights={median['load_weights'] / runtime:.2f} "
        f"speedup_vs_copy_loop={median['copy_ loop over get_dest'] / runtime:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
