"""What bench/'s Python scripts do first: an interpreter without loadplan
(a fresh shell's python3) runs the script again with the repository's .venv,
which scripts/setup makes."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv" / "bin" / "python"


def use(script: str) -> None:
    """Re-executes ``script`` with the .venv's interpreter where this one
    cannot import loadplan; returns otherwise."""
    if importlib.util.find_spec("loadplan") is not None or Path(sys.executable) == VENV:
        return
    if not VENV.exists():
        sys.exit(f"{script}: {VENV} is missing; run scripts/setup first")
    os.execv(str(VENV), [str(VENV), script, *sys.argv[1:]])
