"""The ``loadplan`` command.

``loadplan plan MODULE[:FACTORY] --tp-size N --tp-rank R [--json F] [--ir F]``
    Plans one rank of a model and prints the report. ``FACTORY`` (default
    ``make``) is called as ``FACTORY(tp_rank=R, tp_size=N)`` and returns
    ``(model, metadata)``: the model for that rank (a ``torch.nn.Module``
    with a vLLM-style ``load_weights``) and the checkpoint it loads, a list of
    ``loadplan.ParamMeta`` in the order the trainer sends them. The bundled
    examples (``loadplan.examples.llama`` ...) follow this convention.

``loadplan plan --from-export FILE.pt2 [--json F] [--plan F] [--ir F]``
    Plans a loader exported with ``loadplan.export_loader`` (a torch.export
    archive), through ``loadplan-translate`` and the same pipeline.

``loadplan schedule show FILE [--summary]``
    Prints a transfer schedule file (``loadplan.Schedule.save``): its
    summary and ranks, then every piece by (sender, receiver).

``loadplan demo``
    Plans the bundled Llama-style model at TP=2 for both ranks, prints each
    report, verifies each plan byte for byte against ``load_weights``, and
    times one update through ``load_planned`` (the runtime) against
    ``load_weights``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from .apply import load_planned
from .planning import plan_loads
from .verification import random_weights, verify

# Sizes for the demo: big enough that an update moves real bytes, small
# enough to plan, verify and time in seconds on a CPU. One KV head at TP=2
# shows KV-head replication.
DEMO_SIZES = dict(
    vocab_size=4096,
    hidden_size=256,
    intermediate_size=768,
    num_layers=16,
    num_heads=8,
    num_kv_heads=1,
)


def _factory(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise SystemExit(f"loadplan: cannot import {module_name!r}: {e}") from None
    factory = getattr(module, attr or "make", None)
    if not callable(factory):
        raise SystemExit(f"loadplan: {module_name} has no factory {attr or 'make'!r}")
    return factory


def _plan_export(args: argparse.Namespace) -> int:
    """``loadplan plan --from-export FILE.pt2``: the plan of an exported
    loader (docs/torch-export.md), through loadplan-translate and the same
    pipeline; no model is needed."""
    from .export import compile_export

    out = compile_export(args.from_export, print_ir=bool(args.ir))
    print(out["report"], end="")
    if args.json:
        Path(args.json).write_text(out["json"])
        print(f"plan (JSON): {args.json}")
    if args.plan:
        Path(args.plan).write_bytes(out["plan"])
        print(f"plan: {args.plan}")
    if args.ir:
        Path(args.ir).write_text(out["imported"])
        print(f"imported IR: {args.ir} (loadplan-opt --loadplan-pipeline {args.ir})")
    return 0


def _plan(args: argparse.Namespace) -> int:
    if args.from_export:
        return _plan_export(args)
    factory = _factory(args.factory)
    model, metadata = factory(tp_rank=args.tp_rank, tp_size=args.tp_size)
    plan = plan_loads(model, metadata, dump_ir=args.dump_ir)
    print(plan.report, end="")
    if args.json:
        Path(args.json).write_text(plan.json)
        print(f"plan (JSON): {args.json}")
    if args.plan:
        Path(args.plan).write_bytes(plan.plan_bytes)
        print(f"plan: {args.plan}")
    if args.ir:
        Path(args.ir).write_text(plan.ir)
        print(f"captured IR: {args.ir} (loadplan-opt --loadplan-pipeline {args.ir})")
    if args.names:
        for e in plan.entries.values():
            suffix = f": {e.reason}" if e.reason else ""
            print(f"  {e.kind:9} {e.name} boxes={list(e.boxes or ())}{suffix}")
    return 0


def _best_time(fn: Callable[[], None], repeat: int) -> float:
    fn()  # warm up
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _demo(args: argparse.Namespace) -> int:
    from .examples import llama

    # One thread: on a machine shared with other work, intra-op threads wait
    # on each other and swamp both timings.
    torch.set_num_threads(1)
    tp = args.tp_size
    print(f"== loadplan demo: loadplan.examples.llama at TP={tp} ({DEMO_SIZES})")
    ok = True
    for rank in range(tp):
        model, metadata = llama.make(tp_rank=rank, tp_size=tp, **DEMO_SIZES)
        print(f"-- rank {rank}")
        plan = plan_loads(model, metadata, dump_ir=args.dump_ir)
        print(plan.report, end="")

        result = verify(
            lambda: llama.make(tp_rank=rank, tp_size=tp, **DEMO_SIZES)[0], metadata
        )
        if result:
            print(f"rank {rank}: {result}")
        else:
            ok = False
            print(f"rank {rank}: NOT verified\n{result}")

        weights = random_weights(metadata, seed=rank)
        planned = _best_time(lambda: load_planned(model, plan, weights), args.repeat)
        with torch.no_grad():
            direct = _best_time(lambda: model.load_weights(weights), args.repeat)
        nbytes = sum(t.numel() * t.element_size() for _, t in weights)
        binding = plan.binding
        executor = f"runtime, {binding.num_threads} threads" if binding else "torch copies"
        print(
            f"rank {rank}: one update ({nbytes / (1 << 20):.1f} MiB sent): "
            f"load_planned ({executor}) {planned * 1e3:.2f} ms, "
            f"load_weights {direct * 1e3:.2f} ms ({direct / planned:.1f}x)"
        )
    return 0 if ok else 1


def _schedule_show(args: argparse.Namespace) -> int:
    from .transfer import Schedule, TransferError

    try:
        schedule = Schedule.load(args.file)
    except (OSError, TransferError) as e:
        print(f"loadplan: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(schedule.text(pieces=not args.summary))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="loadplan",
        description="Plan a model's weight loads, verify the plan, time an update.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every name")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="plan one rank of a model and print the report")
    p.add_argument("factory", metavar="MODULE[:FACTORY]", nargs="?")
    p.add_argument("--from-export", metavar="FILE.pt2",
                   help="plan a loader exported with loadplan.export_loader instead")
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--tp-rank", type=int, default=0)
    p.add_argument("--json", help="write the plan as JSON here")
    p.add_argument("--plan", help="write the binary plan file here")
    p.add_argument("--ir", help="write the captured IR here")
    p.add_argument("--dump-ir", help="write captured and compiled IR and JSON here")
    p.add_argument("--names", action="store_true", help="list every name")
    p.set_defaults(run=_plan)

    s = sub.add_parser("schedule", help="inspect transfer schedules")
    s_sub = s.add_subparsers(dest="schedule_command", required=True)
    show = s_sub.add_parser("show", help="print a schedule file")
    show.add_argument("file")
    show.add_argument("--summary", action="store_true", help="no per-piece listing")
    show.set_defaults(run=_schedule_show)

    d = sub.add_parser("demo", help="plan, verify and time the bundled Llama-style model")
    d.add_argument("--tp-size", type=int, default=2)
    d.add_argument("--repeat", type=int, default=5, help="timed updates per path")
    d.add_argument("--dump-ir", help="write captured and compiled IR and JSON here")
    d.set_defaults(run=_demo)

    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(name)s: %(message)s",
    )
    if args.command == "plan" and not (args.factory or args.from_export):
        parser.error("plan needs MODULE[:FACTORY] or --from-export FILE.pt2")
    if args.command == "plan" and not 0 <= args.tp_rank < args.tp_size:
        parser.error(f"--tp-rank must be in [0, {args.tp_size})")
    try:
        return args.run(args)
    except (RuntimeError, ValueError) as e:
        print(f"loadplan: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
