"""Planning: ``plan_loads`` captures ``model.load_weights`` over data-free
traces (capture/), compiles the IR in process (``loadplan._native``, the
same pipeline as ``loadplan-opt --loadplan-pipeline``) and returns the
:class:`~loadplan.plan.LoadPlan` the compiler's binary plan describes.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from . import _native, _runtime, checks
from .capture import Capture, Redirect, Targets, capture
from .plan import LoadPlan, ParamMeta, PlanError, declare, log_report

logger = logging.getLogger("loadplan")


def _dump_paths(dump: str | os.PathLike) -> dict[str, Path]:
    """A path ending in .mlir names the captured IR file; the compiled IR and
    the JSON plan go beside it. Any other path is a folder that gets
    plan-<k>.captured.mlir etc., with the first unused k."""
    path = Path(dump)
    if path.suffix == ".mlir":
        stem = path.with_suffix("")
        path.parent.mkdir(parents=True, exist_ok=True)
        captured = path
    else:
        path.mkdir(parents=True, exist_ok=True)
        k = 0
        while (path / f"plan-{k}.captured.mlir").exists():
            k += 1
        stem = path / f"plan-{k}"
        captured = Path(f"{stem}.captured.mlir")
    return {
        "captured": captured,
        "compiled": Path(f"{stem}.compiled.mlir"),
        "json": Path(f"{stem}.plan.json"),
    }


def compile_ir(ir: str, source_name: str = "<captured>", print_ir: bool = False,
               print_json: bool = True) -> dict:
    """Compiles captured IR in process; the dict has 'json' (when
    ``print_json``), 'plan' (bytes), 'report', 'ir' (when ``print_ir``) and
    'remarks'.

    Raises:
        PlanError: the IR does not compile; the message is the compiler's.
    """
    return _compiled(_native.compile, ir, source_name, print_ir, print_json)


def compile_capture(captured: Capture, source_name: str = "<captured>",
                    print_ir: bool = False, print_json: bool = True) -> dict:
    """Compiles a capture in process as ``compile_ir`` compiles its IR
    text, but from its records: the module is built in memory, without
    text. Returns and raises what ``compile_ir`` does."""
    return _compiled(_native.compile_records, *captured.records(), source_name, print_ir,
                     print_json)


def _compiled(compile_fn, *args) -> dict:
    """``compile_fn(*args)``, its CompileError as a PlanError."""
    try:
        return compile_fn(*args)
    except _native.CompileError as e:
        raise PlanError(f"load plan: {e}", list(getattr(e, "diagnostics", []))) from None


def plan_loads(
    model: torch.nn.Module,
    metadata: Iterable[ParamMeta],
    *,
    dump_ir: str | os.PathLike | None = None,
    fallback_modules: dict[str, str] | None = None,
    fallback_tensors: dict[str, str] | None = None,
    targets: Targets | None = None,
    redirects: Mapping[int, Redirect] | None = None,
) -> LoadPlan:
    """Trace ``model.load_weights`` over the declared checkpoint tensors once
    and return where each lands on this rank.

    Incoming tensors are data-free traces, so nothing is loaded; constant
    writes (``fill_``, ``zero_``) happen, and module state a loader sets
    stays, as after ``load_weights``. ``dump_ir`` (or the environment
    variable ``LOADPLAN_DUMP_IR``) writes the captured IR, the compiled IR
    and the JSON plan there, to rerun with ``loadplan-opt``.
    ``fallback_modules`` (qualified module name -> reason) makes every name
    whose loader copies into a tensor of one of those modules a fallback
    with that reason: for modules whose tensors must be loaded by
    ``load_weights`` (ones an engine processes after loading, say).
    ``fallback_tensors`` does the same for single tensors (qualified tensor
    name -> reason). ``targets`` and ``redirects``: as ``capture`` takes
    them (copies into tensors that stand in for others).

    Raises:
        ValueError: a name is declared twice, or has a dtype no plan holds.
        RuntimeError: the model cannot be planned (``PlanError`` when the
            compiler refuses it, ``FingerprintMismatch`` when the compiled
            plan names other targets than captured).
    """
    checks.check_plannable(model)
    metas = declare(metadata)
    t0 = time.perf_counter()
    captured = capture(model, metas, fallback_modules=fallback_modules,
                       fallback_tensors=fallback_tensors, targets=targets, redirects=redirects)
    traced = time.perf_counter() - t0

    dump = dump_ir if dump_ir is not None else os.environ.get("LOADPLAN_DUMP_IR") or None
    paths = _dump_paths(dump) if dump else {}
    if paths:
        paths["captured"].write_text(captured.ir)
        logger.info("load plan: captured IR in %s", paths["captured"])
        # From the dumped text, so that diagnostics cite its lines.
        out = compile_ir(captured.ir, str(paths["captured"]), print_ir=True, print_json=True)
        paths["compiled"].write_text(out["ir"])
        paths["json"].write_text(out["json"])
        logger.info(
            "load plan: compiled IR in %s, plan in %s", paths["compiled"], paths["json"]
        )
    else:
        out = compile_capture(captured, print_json=False)
    for remark in out["remarks"]:
        logger.debug("load plan: %s", remark)

    native = _runtime.open_plan(out["plan"])
    report = out["report"].rstrip("\n") + f"; traced in {traced:.2f} s\n"
    # LoadPlan refuses a compiled plan that names other targets than captured.
    plan = LoadPlan(native, out["plan"], captured.targets.targets, model, report=report,
                    capture=captured, dumped=paths)
    log_report(plan)
    return plan


def plan_or_load(
    model: torch.nn.Module,
    metadata: Iterable[ParamMeta],
    path: str | os.PathLike,
    **kwargs,
) -> LoadPlan:
    """The plan in the file ``path`` if there is one, read and bound to
    ``model`` (``LoadPlan.load``: no tracing, no compiler); else
    ``plan_loads(model, metadata, **kwargs)``, saved to ``path``.

    For a process that restarts with the same model and rank, and for a
    machine whose ``loadplan._native`` was built without the compiler
    (``LOADPLAN_BUILD_COMPILER=OFF``), given plans made and saved elsewhere
    with the same call. As with ``LoadPlan.load``, the file says nothing of
    which rank it was made for (one path per rank), and ``model`` should
    have been loaded once by its own loader when the file is read.

    Raises:
        ValueError: the file was made for another checkpoint than
            ``metadata`` (names, dtypes or shapes).
        And what ``LoadPlan.load`` and ``plan_loads`` raise.
    """
    path = Path(path)
    if not path.exists():
        plan = plan_loads(model, metadata, **kwargs)
        path.parent.mkdir(parents=True, exist_ok=True)
        plan.save(path)
        return plan
    plan = LoadPlan.load(path, model)
    plan.check_checkpoint(metadata, str(path))
    return plan
