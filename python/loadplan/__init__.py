"""loadplan: plan a model's weight loads once, then apply every update as copies.

    plan = loadplan.plan_loads(model, metadata)     # once
    loadplan.load_planned(model, plan, weights)     # every update
    assert loadplan.verify(make_model, metadata)    # byte for byte

See docs/python.md. The modules: plan.py (the data model), planning.py
(``plan_loads``), apply.py (``load_planned``), checks.py, capture/,
transfer/, verification.py, export.py (torch.export), cli.py, vllm/ (the
vLLM weight-transfer backend, docs/vllm.md).
"""

from .apply import load_planned
from .capture import capture
from .checks import check_plannable
from .export import export_loader
from .plan import Box, Entry, LoadPlan, ParamMeta, PlanError, Write
from .planning import compile_capture, compile_ir, plan_loads, plan_or_load
from .transfer import Receiver, Schedule, Sender, TransferError, TransferStats
from .verification import Mismatch, VerifyResult, random_weights, verify

__all__ = [
    "Box",
    "Entry",
    "LoadPlan",
    "Mismatch",
    "ParamMeta",
    "PlanError",
    "Receiver",
    "Schedule",
    "Sender",
    "TransferError",
    "TransferStats",
    "VerifyResult",
    "Write",
    "capture",
    "check_plannable",
    "compile_capture",
    "compile_ir",
    "export_loader",
    "load_planned",
    "plan_loads",
    "plan_or_load",
    "random_weights",
    "verify",
]
