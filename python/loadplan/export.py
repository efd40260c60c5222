"""Export a module's loader as a ``torch.export`` program (``.pt2``).

``export_loader(model, metadata, path)`` exports ``model.load_weights`` run
over the declared checkpoint tensors: the program's user inputs are the
checkpoint tensors (one ``dict`` argument, keyed by checkpoint name, in
arrival order), its parameters and buffers are the model's, and its effect
is the loader's writes into them, as ``torch.export`` records mutations
(``PARAMETER_MUTATION`` / ``BUFFER_MUTATION`` outputs of a functionalized
graph: ``copy``, ``slice_scatter``, ``select_scatter`` chains). The C++
importer (``loadplan-translate --import-torch-export``, or
``loadplan plan --from-export``) turns that program back into loadplan IR,
which the same pipeline compiles into a plan. See docs/torch-export.md.

What torch.export cannot follow is listed there; the main points:

- it traces with fake tensors and cannot branch on values: a loader whose
  control flow depends on checkpoint data (``if w.abs().max() > 0``,
  ``assert torch.isfinite(param).all()``) does not export;
- ``.item()`` exports as an unbacked symbol, which the importer records as a
  value read (the name falls back, as with capture);
- parameters are replaced by plain fake tensors while tracing: their Python
  attributes (``weight_loader``, ``output_dim``, ...) are carried over here,
  and the methods and properties of a ``Parameter`` subclass are bound to the
  traced tensor, but ``isinstance`` checks against the subclass fail;
- a tensor that is neither a parameter nor a buffer is a constant to
  torch.export, and writes into it are refused by torch.export.
"""

from __future__ import annotations

import logging
import os
import subprocess
import types
from collections.abc import Iterable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .checks import check_plannable
from .plan import ParamMeta, declare
from .planning import compile_ir
from .tools import find_tool

logger = logging.getLogger("loadplan")

# Members of torch.Tensor and nn.Parameter: never re-bound on a traced tensor.
_TENSOR_MEMBERS = set(dir(torch.nn.Parameter)) | set(dir(torch.Tensor))


class _DataAsDetach(TorchFunctionMode):
    """``t.data`` as ``t.detach()`` while tracing.

    torch.export does not trace ``.data`` (it makes a tensor outside the
    graph, which export then refuses as a fake constant), but vLLM's loaders
    write through it everywhere (``param.data.copy_(w)``). ``detach`` is a
    view that functionalization follows, so a write through it lands in the
    parameter, as ``.data`` does at run time."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__self__", None) is torch._C.TensorBase.data and args:
            return args[0].detach()
        return func(*args, **(kwargs or {}))


def _class_members(cls: type) -> dict[str, Any]:
    """Methods and properties a ``Parameter`` subclass adds (most derived
    first wins, as attribute lookup does)."""
    members: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass in (object, torch.Tensor, torch.nn.Parameter, torch._C.TensorBase):
            continue
        for name, value in vars(klass).items():
            if name.startswith("__") or name in _TENSOR_MEMBERS:
                continue
            if isinstance(value, (types.FunctionType, property, staticmethod, classmethod)):
                members[name] = value
    return members


class _ParamAttrs:
    """What a loader may look up on a parameter or buffer besides its data:
    its ``__dict__`` (``weight_loader``, ``output_dim``, ...) and, for a
    ``Parameter`` subclass, the methods and properties of its class. torch.export
    swaps every parameter for a fake tensor that has none of these, so they
    are put back on the fake before the loader runs."""

    def __init__(self, model: torch.nn.Module):
        self.attrs: dict[str, dict[str, Any]] = {}
        self.members: dict[str, dict[str, Any]] = {}
        named = list(model.named_parameters(remove_duplicate=False))
        named += list(model.named_buffers(remove_duplicate=False))
        for name, t in named:
            if t is None:
                continue
            self.attrs[name] = dict(getattr(t, "__dict__", {}))
            self.members[name] = _class_members(type(t))

    def restore(self, model: torch.nn.Module) -> None:
        named = list(model.named_parameters(remove_duplicate=False))
        named += list(model.named_buffers(remove_duplicate=False))
        for name, t in named:
            if t is None:
                continue
            for key, value in self.attrs.get(name, {}).items():
                if key not in t.__dict__:
                    setattr(t, key, value)
            members = self.members.get(name, {})
            for key, value in members.items():
                if key in t.__dict__:
                    continue
                if isinstance(value, property):
                    # Evaluated once on the traced tensor: the attributes it
                    # reads are back in its __dict__ by now.
                    setattr(t, key, value.__get__(t))
                elif isinstance(value, staticmethod):
                    setattr(t, key, value.__func__)
                elif isinstance(value, classmethod):
                    setattr(t, key, types.MethodType(value.__func__, type(model)))
                else:
                    setattr(t, key, types.MethodType(value, t))


def _loader_forward(attrs: _ParamAttrs):
    def forward(self: torch.nn.Module, weights: dict[str, torch.Tensor]) -> torch.Tensor:
        attrs.restore(self)
        with _DataAsDetach():
            self.load_weights(iter(weights.items()))
        # torch.export.save refuses a program without outputs, which a loader
        # is when its writes stay in place (not functionalized) or it writes
        # nothing: one scalar output, which the importer ignores.
        return torch.zeros(())

    return forward


def export_loader(
    model: torch.nn.Module,
    metadata: Iterable[ParamMeta],
    path: str | os.PathLike | None = None,
    *,
    functionalize: bool = True,
) -> torch.export.ExportedProgram:
    """Export ``model.load_weights`` over the declared checkpoint tensors as a
    functionalized ``torch.export`` program, and save it to ``path`` (a
    ``.pt2`` archive) when given.

    The program takes one argument, a dict from checkpoint name to tensor (in
    the order of ``metadata``, which is the arrival order), and returns
    nothing; what the loader writes into the model's parameters and buffers
    are its mutation outputs. Tracing uses fake tensors: nothing is read from
    or written into the model's tensors. Module state the loader sets (Python
    attributes) stays, as after ``load_weights``.

    ``functionalize`` (the default) turns the loader's in-place writes into
    mutation outputs (``run_decompositions({})``, which decomposes nothing).
    torch 2.14 cannot functionalize a program whose parameters alias one
    another (tied embeddings: ``lm_head`` is ``embed_tokens``); such a
    program, or any with ``functionalize=False``, is saved as torch.export
    traced it, with the writes in place (``copy_`` into views of the
    parameters). The importer reads both forms.

    Raises:
        ValueError: a name is declared twice, or has a dtype no plan holds.
        RuntimeError: the model cannot be planned, or torch.export cannot
            trace its loader (the message says why; see
            docs/torch-export.md).
    """
    check_plannable(model)
    metas = declare(metadata)
    example = {
        name: torch.empty(meta.shape, dtype=meta.dtype) for name, meta in metas.items()
    }
    attrs = _ParamAttrs(model)
    had_forward = "forward" in model.__dict__
    saved_forward = model.__dict__.get("forward")
    # torch.export calls the module itself: its forward becomes the loader
    # for the export, so that the program's parameters and buffers keep the
    # model's own names.
    model.forward = types.MethodType(_loader_forward(attrs), model)
    try:
        with torch.no_grad():
            program = torch.export.export(model, (example,), strict=False)
    except Exception as e:
        raise RuntimeError(
            f"load plan: torch.export cannot export {type(model).__name__}.load_weights: "
            f"{type(e).__name__}: {_first_line(e)} (see docs/torch-export.md)"
        ) from e
    finally:
        if had_forward:
            model.forward = saved_forward
        else:
            del model.forward
    if functionalize:
        try:
            # In-place writes become the mutation outputs the importer reads
            # (copy / *_scatter chains); no op is decomposed.
            program = program.run_decompositions({})
        except Exception as e:  # aliased parameters: keep the writes in place
            logger.info("load plan: torch.export cannot functionalize %s.load_weights "
                        "(%s); saving it with in-place writes", type(model).__name__,
                        _first_line(e))
    if path is not None:
        torch.export.save(program, os.fspath(path))
    return program


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


# ---------------------------------------------------------------------------
# Import: the C++ importer, then the same pipeline as plan_loads
# ---------------------------------------------------------------------------


def find_translate() -> str:
    """The ``loadplan-translate`` binary, as ``loadplan.tools.find_tool``
    finds it: ``$LOADPLAN_TRANSLATE``, else ``$LOADPLAN_BUILD_DIR/bin``
    (default ``build/bin`` of the source tree this package runs from), else
    ``PATH``.

    Raises:
        RuntimeError: there is none (it is built only where LibTorch is
            found; see docs/torch-export.md).
    """
    found = find_tool("loadplan-translate")
    if found:
        return found
    raise RuntimeError(
        "load plan: loadplan-translate is not built (scripts/build builds it when "
        ".venv has torch); set LOADPLAN_TRANSLATE or LOADPLAN_BUILD_DIR"
    )


def import_export(path: str | os.PathLike) -> str:
    """The loadplan IR of an exported loader (``loadplan-translate
    --import-torch-export``).

    Raises:
        RuntimeError: the archive cannot be imported; the message is the
            importer's.
    """
    done = subprocess.run(
        [find_translate(), "--import-torch-export", os.fspath(path)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        message = done.stderr.strip() or f"exit status {done.returncode}"
        raise RuntimeError(f"load plan: {message}")
    return done.stdout


def compile_export(path: str | os.PathLike, print_ir: bool = False) -> dict:
    """Imports an exported loader and compiles it in process, as
    ``plan_loads`` compiles a capture: the dict has 'json', 'plan' (bytes),
    'report', 'remarks' and, with ``print_ir``, 'ir' (compiled) and
    'imported' (the IR loadplan-translate printed).

    Raises:
        RuntimeError: the archive cannot be imported, or its loader does not
            compile (``PlanError``).
    """
    ir = import_export(path)
    out = compile_ir(ir, os.fspath(path), print_ir=print_ir)
    if print_ir:
        out["imported"] = ir
    return out


__all__ = ["compile_export", "export_loader", "find_translate", "import_export"]
