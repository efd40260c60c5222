"""loadplan: plan a model's weight loads once, then apply every update as copies.

    plan = loadplan.plan_loads(model, metadata)     # once
    loadplan.load_planned(model, plan, weights)     # every update
    assert loadplan.verify(make_model, metadata)    # byte for byte

See docs/python.md.
"""

from .api import (
    Box,
    Entry,
    LoadPlan,
    ParamMeta,
    PlanError,
    Write,
    check_plannable,
    compile_ir,
    load_planned,
    plan_loads,
)
from .capture import capture
from .export import export_loader
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
    "compile_ir",
    "export_loader",
    "load_planned",
    "plan_loads",
    "random_weights",
    "verify",
]
