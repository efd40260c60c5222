"""The compiler's command-line tools (``loadplan-opt``, ``loadplan-translate``):
where they are, and the ``loadplan-opt`` command a wheel installs."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def find_tool(name: str) -> str | None:
    """The ``name`` binary: ``$LOADPLAN_<NAME>`` (``loadplan-opt``:
    ``$LOADPLAN_OPT``), else the one a wheel holds (``loadplan/bin``), else
    ``$LOADPLAN_BUILD_DIR/bin`` (default ``build/bin`` of the source tree
    this package runs from), else ``PATH``; None if there is none."""
    explicit = os.environ.get(name.upper().replace("-", "_"))
    if explicit:
        return explicit
    bundled = _PACKAGE / "bin" / name
    if bundled.is_file():
        return str(bundled)
    build = Path(os.environ.get("LOADPLAN_BUILD_DIR", "build"))
    if not build.is_absolute():
        build = _PACKAGE.parents[1] / build
    candidate = build / "bin" / name
    if candidate.is_file():
        return str(candidate)
    return shutil.which(name)


def loadplan_opt() -> None:
    """``loadplan-opt``: runs the compiler's driver with this command's
    arguments (docs/compiler.md)."""
    tool = find_tool("loadplan-opt")
    if tool is None or Path(tool).resolve() == Path(sys.argv[0]).resolve():
        sys.exit("loadplan-opt: not in this installation (scripts/build builds it in "
                 "build/bin; the wheel holds it); set LOADPLAN_OPT")
    os.execv(tool, [tool, *sys.argv[1:]])
