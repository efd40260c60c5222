"""vLLM's post-load processing, as the ``loadplan`` backend meets it.

After loading, vLLM runs each layer's ``process_weights_after_loading``
(quantization methods, and attention layers last): it may repack, requantize
or derive tensors (MLA's ``W_UK_T``/``W_UV`` from ``kv_b_proj``). vLLM's own
reload path restores each layer to its checkpoint format on the meta device,
loads into it, runs the processing and copies the result into the live
(kernel-format) tensors.

A layer whose processing leaves every tensor as loaded gains nothing from
that round trip: its names are written in place. A quantization layer
whose processing keeps its tensors' checkpoint layout (a requant, a swap, a
clamp, an in-place permutation) has its names written in place too, and
its processing runs on the live tensors after each update (``recompute``;
small tensors whose layout it changes are ``Staged``), once
``recomputes`` showed that this gives what vLLM's reload gives. Every
other layer is reloaded on every update, for that layer only (``Reload``):
through vLLM's layerwise reload where it can, and as a fresh load does
where it cannot (or as a first load does, where vLLM's MoE methods change
shapes only then: ``needs_first_load``).
vLLM's reload notices that a layer's weights arrived only through the
weight loaders it wraps; a loader that copies around them (gpt-oss's
experts) leaves the layer with its old weights there, and vLLM logs "Failed
to load weights". Such a layer is loaded into its checkpoint format,
processed and copied into the live tensors by ``Reload`` itself. Which
layers are which is observed on the first update, when every layer that has
a processing step is reloaded (``Observer``).

None of this reads state vLLM's reload leaves behind: it records each
layer's checkpoint format once, as meta tensors, and wraps their weight
loaders while it reloads (``online_process_loader``, left on the recorded
tensors after). ``checkpoint_format`` restores copies of them with the
original loaders, so that a trace after an update sees what the first
one saw.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping

import torch
from vllm.logger import init_logger
from vllm.model_executor.layers.attention import is_deferred_attention_layer
from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase
from vllm.model_executor.model_loader.reload import layerwise
from vllm.model_executor.model_loader.reload.meta import (
    materialize_layer,
    materialize_meta_tensor,
    restore_layer_on_meta,
)
from vllm.model_executor.model_loader.reload.sanitize import restore_layer_refs
from vllm.model_executor.model_loader.reload.types import LayerReloadingInfo
from vllm.model_executor.model_loader.reload.utils import (
    get_layer_params_buffers,
    get_layer_tensors,
)

from ..apply import copy_with_torch
from ..capture import Redirect, Targets, storage_key
from . import rearrange
from .info import LOGGER_NAME

logger = init_logger(LOGGER_NAME)

REASON = "vLLM processes {module} after loading (process_weights_after_loading); it is reloaded as vLLM reloads it"
# ... once the first update showed which of its steps the plan cannot take.
STEP_REASON = ("vLLM processes {module} after loading (process_weights_after_loading), and "
               "{step}; it is reloaded as vLLM reloads it")


def candidates(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """Every module that has a post-load processing step, by qualified name:
    a quantization method, or an attention layer that processes its weights
    (what vLLM's processing loop and its reload path run)."""
    out = {}
    for name, module in model.named_modules():
        quant_method = getattr(module, "quant_method", None)
        if isinstance(quant_method, QuantizeMethodBase) or is_deferred_attention_layer(module):
            out[name] = module
    return out


def reasons(names: list[str], steps: Mapping[str, str] | None = None) -> dict[str, str]:
    """The fallback reason of each processed module's names; where
    ``steps`` has the module, naming the step of its processing that is
    neither a rearrangement nor computable in place (why it is reloaded)."""
    steps = steps or {}
    return {name: STEP_REASON.format(module=name or "the model", step=steps[name])
            if steps.get(name) else REASON.format(module=name or "the model")
            for name in names}


def _recorded_copy(t: torch.Tensor) -> torch.Tensor:
    """A new meta tensor like vLLM's record ``t`` (class and attributes),
    with the weight loader the layer was built with."""
    new = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")
    new.__class__ = t.__class__
    new.__dict__ = t.__dict__.copy()
    original = layerwise._get_original_loader(t)
    if original is not layerwise._get_weight_loader(t):  # vLLM's wrapper is on it
        new.weight_loader = original
    return new


def _checkpoint_info(layer: torch.nn.Module) -> LayerReloadingInfo:
    """The layer's checkpoint format as vLLM recorded it, in tensors of its
    own (see the module doc)."""
    info = layerwise.get_layerwise_info(layer)
    params, buffers = info.restore_metadata
    return LayerReloadingInfo(
        restore_metadata=({n: _recorded_copy(t) for n, t in params.items()},
                          {n: _recorded_copy(t) for n, t in buffers.items()}),
        restore_device=info.restore_device)


@contextlib.contextmanager
def checkpoint_format(layers: list[torch.nn.Module]) -> Iterator[None]:
    """The layers in their checkpoint format on the meta device (as vLLM's
    reload restores them, with their original weight loaders), and back to
    their live tensors afterwards. For tracing the loader: processed layers
    then are no targets, and the loader sees the shapes it was written
    for."""
    saved = []
    try:
        for layer in layers:
            own = _checkpoint_info(layer)
            saved.append((layer, get_layer_params_buffers(layer),
                          set(layer._non_persistent_buffers_set)))
            restore_layer_on_meta(layer, own)
        yield
    finally:
        for layer, (params, buffers), non_persistent in saved:
            _place(layer, params, buffers, non_persistent)


def _place(layer: torch.nn.Module, params: dict, buffers: dict, non_persistent: set) -> None:
    for name in list(get_layer_tensors(layer)):
        delattr(layer, name)
    for name, param in params.items():
        layer.register_parameter(name, param)
    for name, buffer in buffers.items():
        layer.register_buffer(name, buffer, persistent=name not in non_persistent)


def needs_first_load(layer: torch.nn.Module) -> bool:
    """Whether the layer's processing gives its live tensors' shapes only at
    a first load: its quantization method keeps a fused-MoE kernel built
    then (``moe_kernel``), and its live tensors' shapes differ from the
    checkpoint format's. vLLM's MoE methods run their shape-changing steps
    (the CPU experts' zero padding of the intermediate to a multiple of 32)
    only while they have no kernel, so vLLM's reload of such a layer fails
    ("The size of tensor a (128) must match the size of tensor b (96)")."""
    method = getattr(layer, "quant_method", None)
    if getattr(method, "moe_kernel", None) is None:
        return False
    params, buffers = layerwise.get_layerwise_info(layer).restore_metadata
    live = get_layer_tensors(layer)
    return any(name in live and tuple(t.shape) != tuple(live[name].shape)
               for name, t in (params | buffers).items())


@contextlib.contextmanager
def _first_load(layer: torch.nn.Module) -> Iterator[None]:
    """The layer's processing as at a first load: its method's fused-MoE
    kernel and quant config set aside (the processing builds new ones, and
    runs the kernel's own processing), then put back, so that the kernel
    the engine runs stays the one it has."""
    method = getattr(layer, "quant_method", None)
    saved = {a: getattr(method, a) for a in ("moe_kernel", "moe_quant_config")
             if getattr(method, a, None) is not None}
    for a in saved:
        setattr(method, a, None)
    try:
        yield
    finally:
        for a, v in saved.items():
            setattr(method, a, v)


def _process(layer: torch.nn.Module, dtype: torch.dtype) -> None:
    """A layer's post-load processing as vLLM's loader runs it: its
    quantization method's, then an attention layer's own."""
    if hasattr(layer, "_already_called_process_weights_after_loading"):
        delattr(layer, "_already_called_process_weights_after_loading")
    quant_method = getattr(layer, "quant_method", None)
    if isinstance(quant_method, QuantizeMethodBase):
        quant_method.process_weights_after_loading(layer)
        if hasattr(layer, "update_param_tp_status"):
            layer.update_param_tp_status()
    if is_deferred_attention_layer(layer):
        layer.process_weights_after_loading(dtype)


def refreshed(layers: Mapping[str, torch.nn.Module], processed: Iterable[str]) -> list[str]:
    """The attention layers among ``layers`` that are not ``processed``:
    their processing leaves their own tensors as loaded, but derives state
    that is not theirs (FlashInfer's fp32 copy of the sinks on the backend
    object, host copies of the scales on the layer, MLA's ``W_UK_T`` and
    ``W_UV``), which a direct write leaves stale. Their processing is cheap
    and vLLM's reload runs it on every update; so does ``refresh``, after
    the update's direct writes."""
    skip = set(processed)
    return [name for name, layer in layers.items()
            if name not in skip and is_deferred_attention_layer(layer)]


def refresh(layers: Iterable[torch.nn.Module], dtype: torch.dtype) -> None:
    """Runs each attention layer's own processing again (what vLLM's loader
    runs for it last), so that what it derives follows the update."""
    for layer in layers:
        layer.process_weights_after_loading(dtype)


def _layouts(tensors: Mapping[str, torch.Tensor]) -> dict[str, tuple]:
    return {name: (tuple(t.shape), tuple(t.stride()), t.dtype) for name, t in tensors.items()}


# The largest share of a layer's bytes that may be staged (below).
STAGED_SHARE = 0.01

STAGED_REASON = ("vLLM changes the layout of {tensor} after loading; it is loaded into its "
                 "checkpoint format and processed in place")

NO_QUANTIZATION = "it is no quantization layer"


def in_place(layer: torch.nn.Module) -> tuple[tuple[str, ...], str | None]:
    """Whether ``recompute`` may run on the layer: ``(staged, None)`` if it
    may, else ``((), why not)``. It may where its processing is a
    quantization method's (attention layers' is ``refresh``'s) and its live
    tensors keep the names, shapes, strides and dtypes vLLM recorded as its
    checkpoint format (tensors it did not record, such as an expert map,
    stay as they are): then the loader writes into them as into the
    checkpoint format, and the processing runs on them in place. Tensors
    whose layout the processing changes (DeepGEMM's int32 scales on
    Blackwell) are ``staged`` where they are small (at most
    ``STAGED_SHARE`` of the layer's bytes): on each update their names
    are loaded into fresh tensors of the checkpoint format (``Staged``),
    which the processing turns into the live tensors' values."""
    if (not isinstance(getattr(layer, "quant_method", None), QuantizeMethodBase)
            or is_deferred_attention_layer(layer)):
        return (), NO_QUANTIZATION
    params, buffers = layerwise.get_layerwise_info(layer).restore_metadata
    recorded = params | buffers
    layouts, live = _layouts(recorded), _layouts(get_layer_tensors(layer))
    staged = []
    for name in sorted(layouts.keys() | live.keys()):
        if name not in live:
            return (), f"its processing removes {name}"
        if name not in layouts:
            # Not of the checkpoint format vLLM recorded (an expert map, a
            # correction bias the router shares): vLLM's reload leaves it as
            # it is, and so does ``recompute``; ``recomputes`` checks that
            # the processing agrees.
            continue
        if layouts[name] != live[name]:
            staged.append(name)
    nbytes = {n: t.numel() * t.element_size() for n, t in recorded.items()}
    share = sum(nbytes[n] for n in staged) / max(1, sum(nbytes.values()))
    if share > STAGED_SHARE:
        name = max(staged, key=nbytes.__getitem__)
        (shape, stride, dtype), (shape2, stride2, dtype2) = layouts[name], live[name]
        return (), (f"its processing changes {name} from {dtype} {list(shape)} (strides "
                    f"{list(stride)}) to {dtype2} {list(shape2)} (strides {list(stride2)}), "
                    f"{share:.0%} of the layer's bytes")
    return tuple(staged), None


def staged_reasons(staged: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """The fallback reason of the names of each staged tensor (qualified)."""
    return {f"{m}.{n}" if m else n: STAGED_REASON.format(tensor=f"{m}.{n}" if m else n)
            for m, names in staged.items() for n in names}


@contextlib.contextmanager
def staged_format(layers: Mapping[str, torch.nn.Module],
                  staged: Mapping[str, Iterable[str]]) -> Iterator[None]:
    """The staged tensors of the layers in their checkpoint format on the
    meta device (the layers' other tensors live), and back afterwards: for
    tracing the loader, which then writes them through ``load_weights``."""
    saved = []
    try:
        for module, names in staged.items():
            names = list(names)
            if not names:
                continue
            layer = layers[module]
            recorded = _recorded_tensors(layer)
            saved.append((layer, get_layer_params_buffers(layer),
                          set(layer._non_persistent_buffers_set)))
            for name in names:
                setattr(layer, name, restore_layer_refs(recorded[name], layer))
        yield
    finally:
        for layer, (params, buffers), non_persistent in saved:
            _place(layer, params, buffers, non_persistent)


def _recorded_tensors(layer: torch.nn.Module) -> dict[str, torch.Tensor]:
    params, buffers = _checkpoint_info(layer).restore_metadata
    return params | buffers


class Staged:
    """An update's staged tensors (``in_place``): while it is entered, each
    staged tensor of ``layers`` is a fresh zeroed tensor in its checkpoint
    format, which the update's ``load_weights`` loads into;
    ``recompute(..., staged=this)`` then puts the processed values into the
    live tensors, which the layers hold again on leaving, whatever
    happened."""

    def __init__(self, layers: Mapping[str, torch.nn.Module],
                 staged: Mapping[str, Iterable[str]]):
        self.layers = layers
        self.staged = {m: list(n) for m, n in staged.items() if n}
        self.kernel: dict[int, tuple[dict, dict, set]] = {}

    def __enter__(self) -> Staged:
        for module, names in self.staged.items():
            layer = self.layers[module]
            params, buffers = get_layer_params_buffers(layer)
            self.kernel[id(layer)] = (params, buffers, set(layer._non_persistent_buffers_set))
            info = _checkpoint_info(layer)
            params, buffers = info.restore_metadata
            recorded = params | buffers
            with info.restore_device:
                for name in names:
                    t = materialize_meta_tensor(restore_layer_refs(recorded[name], layer))
                    t.data.zero_()
                    setattr(layer, name, t)
        return self

    def __exit__(self, *exc: object) -> None:
        for module in self.staged:
            layer = self.layers[module]
            kernel = self.kernel.pop(id(layer), None)
            if kernel is not None:
                _place(layer, *kernel)


def recompute(layers: Iterable[torch.nn.Module], dtype: torch.dtype,
              staged: Staged | None = None) -> None:
    """The receiver's epilogue of layers whose processing computes in place
    (a requant, a swap of halves, a clamp: what ``recomputes`` showed to
    reproduce vLLM's reload): their live tensors hold the update's bytes in
    the checkpoint format, written directly; this runs the layer's
    processing on them, as vLLM's reload runs it on the checkpoint format,
    and puts the results into the same live tensors (vLLM's
    ``_copy_and_restore_kernel_tensors``): no address changes. With
    ``staged``, the layers it staged hold their staged tensors."""
    for layer in layers:
        kernel = staged.kernel.get(id(layer)) if staged is not None else None
        if kernel is None:
            kernel = (*get_layer_params_buffers(layer), set(layer._non_persistent_buffers_set))
        params, buffers, non_persistent = kernel
        _process(layer, dtype)
        _restore(layer, params, buffers, non_persistent)


def _restore(layer: torch.nn.Module, params: dict, buffers: dict, non_persistent: set) -> None:
    """The values the layer now holds copied into ``params`` and ``buffers``
    (the tensors it held before), which it holds again."""
    for name, t in (params | buffers).items():
        now = getattr(layer, name, None)
        if now is not None and now is not t:
            t.data.copy_(now)
    _place(layer, params, buffers, non_persistent)


def rearranged(layer: torch.nn.Module, dtype: torch.dtype
               ) -> tuple[rearrange.Rearranged | None, str | None]:
    """Whether the layer's processing only moves elements
    (``rearrange.trace``, run on its checkpoint format on the meta device,
    as vLLM's reload runs it, or as at a first load where that gives the
    live shapes: ``needs_first_load``): ``(what it does, None)`` if so,
    else ``(None, why not)``. Its MoE method's kernel is not rebuilt from
    the meta tensors."""
    if (not isinstance(getattr(layer, "quant_method", None), QuantizeMethodBase)
            or is_deferred_attention_layer(layer)):
        return None, NO_QUANTIZATION
    live = dict(get_layer_tensors(layer))

    def process() -> None:
        method = layer.quant_method
        if hasattr(method, "_init_moe_kernel"):
            method._init_moe_kernel = lambda layer: None  # the kernel: not weights
        _process(layer, dtype)

    first = needs_first_load(layer)
    with checkpoint_format([layer]):
        checkpoint = dict(get_layer_tensors(layer))
        try:
            with _first_load(layer) if first else contextlib.nullcontext(), torch.no_grad():
                return rearrange.trace(layer, checkpoint, live, process), None
        except rearrange.NotRearrangement as e:
            return None, str(e)


def redirects(model: torch.nn.Module, targets: Targets,
              layers: Mapping[str, rearrange.Rearranged]) -> dict[int, Redirect]:
    """While ``checkpoint_format`` holds the rearranged ``layers`` (by
    qualified name) in their checkpoint format: where a copy into each of
    their tensors goes in the live tensors (``targets``, made before)."""
    by_name = {t.qualified_name: t for t in targets.targets}
    out = {}
    for module, what in layers.items():
        layer = model.get_submodule(module)
        for name, t in get_layer_tensors(layer).items():
            if name not in what.places:
                continue

            def remap(offset, shape, stride, module=module, name=name, what=what):
                found = what.remap(name, offset, shape, stride)
                if isinstance(found, str):
                    return found
                return [(by_name[f"{module}.{live}" if module else live], *rest)
                        for live, *rest in found]

            out[storage_key(t)] = Redirect(module, name, t.dtype, remap,
                                           what.converted.get(name))
    return out


class Writers:
    """A plan's names by the target their direct writes go into, and its
    fallbacks by reason (one pass over the plan)."""

    def __init__(self, plan):
        self.direct: dict[str, list[str]] = {}
        self.by_reason: dict[str, list[str]] = {}
        for name, entry in plan.entries.items():
            if entry.kind == "direct":
                for target in dict.fromkeys(w.target for w in entry.writes):
                    self.direct.setdefault(target, []).append(name)
            elif entry.reason is not None:
                self.by_reason.setdefault(entry.reason, []).append(name)

    def into(self, module: str, tensors: Iterable[str]) -> list[str]:
        """The names written directly into ``module``'s ``tensors``."""
        targets = sorted(f"{module}.{n}" if module else n for n in tensors)
        return list(dict.fromkeys(n for t in targets for n in self.direct.get(t, ())))


def _unlike(layer: torch.nn.Module, after: Mapping[str, torch.Tensor]) -> str | None:
    """None if the layer's tensors equal ``after`` (vLLM's reload's), byte
    for byte; else the first that does not."""
    differ = [n for n, t in get_layer_tensors(layer).items()
              if n not in after or not _same_bytes(t, after[n])]
    return f"it leaves {differ[0]} unlike vLLM's reload" if differ else None


def recomputes(plan, writers: Writers, model: torch.nn.Module, module: str,
               staged: Iterable[str], received: Mapping[str, torch.Tensor],
               dtype: torch.dtype, load_weights: Callable[[list], object]) -> str | None:
    """Whether ``recompute`` of ``module`` after an update through ``plan``
    leaves what vLLM's reload of the same weights left (the layer's live
    tensors now, after an update that reloaded it): it writes the names of
    ``received`` (that update's tensors) as the plan's direct writes do into
    the layer, whose bytes the plan does not cover keeping what the
    processing left there, loads the names of its ``staged`` tensors into
    them (``Staged``, ``load_weights``), runs ``recompute`` and compares.
    None if it does; else why not. The layer is left as it was either way."""
    layer = model.get_submodule(module)
    params, buffers = get_layer_params_buffers(layer)
    non_persistent = set(layer._non_persistent_buffers_set)
    names = writers.into(module, params | buffers)
    loaded = [n for r in staged_reasons({module: staged}).values()
              for n in writers.by_reason.get(r, ())]
    missing = [n for n in names + loaded if n not in received]
    if missing:
        return f"the update did not carry {missing[0]!r} whole"
    after = _snapshot(layer)
    try:
        copy_with_torch(plan, [(n, received[n]) for n in names])
        with Staged({module: layer}, {module: staged}) as staging:
            if loaded:
                load_weights([(n, received[n]) for n in loaded])
            recompute([layer], dtype, staging)
        return _unlike(layer, after)
    except Exception as e:  # noqa: BLE001 - any failure means: reload it
        return f"it fails in place: {type(e).__name__}: {e}"
    finally:
        for n, t in (params | buffers).items():
            t.data.copy_(after[n])
        _place(layer, params, buffers, non_persistent)


def rearranges(plan, writers: Writers, model: torch.nn.Module, module: str,
               what: rearrange.Rearranged, received: Mapping[str, torch.Tensor],
               load_weights: Callable[[list], object]) -> str | None:
    """Whether ``plan``'s direct writes of ``received`` (an update's
    tensors) into the rearranged ``module``, then its epilogues and
    ``load_weights`` of the names loaded into it that the plan makes
    fallbacks (as an update loads them: a W4A16 weight's int64 shape into
    the layer's bfloat16 one, which the processing leaves as it is), leave
    what vLLM's reload of the same weights left (the layer's tensors now).
    None if they do; else why not. The layer is left as it was either
    way."""
    layer = model.get_submodule(module)
    names = writers.into(module, get_layer_tensors(layer))
    if not names:
        return "no name is written into it directly"
    capture = plan.capture
    loaded = [n for n in (capture.redirect_names.get(module, ()) if capture is not None else ())
              if plan.entries[n].kind == "fallback"]
    if missing := [n for n in names + loaded if n not in received]:
        return f"the update did not carry {missing[0]!r} whole"
    after = _snapshot(layer)
    try:
        for n, t in get_layer_tensors(layer).items():
            if n in what.sources and t.is_contiguous():
                t.data.view(-1).view(torch.uint8).fill_(0xA5)  # what the writes miss shows
        copy_with_torch(plan, [(n, received[n]) for n in names])
        # The constants the loader filled its checkpoint tensors with, which
        # the targets hold from planning on (no name writes them).
        mine = {storage_key(t) for t in get_layer_tensors(layer).values()}
        for fill in plan.capture.fills if plan.capture is not None else ():
            if storage_key(fill.target.real) in mine:
                fill.write()
        what.run_epilogues(layer)
        if loaded:
            load_weights([(n, received[n]) for n in loaded])
        # The padding the processing zeroed stays zero (no name writes it).
        for live, offset, shape, stride in what.zero_places:
            t = getattr(layer, live).data
            torch.as_strided(t.view(-1).view(torch.uint8), shape, stride, offset).zero_()
        return _unlike(layer, after)
    except Exception as e:  # noqa: BLE001 - any failure means: reload it
        return f"its writes fail: {type(e).__name__}: {e}"
    finally:
        for n, t in get_layer_tensors(layer).items():
            if n in after:
                t.data.copy_(after[n])


class Reload:
    """One update's reload of the processed layers ``layers`` (qualified
    name -> module), whose names ``layer_names`` says (the fallbacks that
    write into each, from the plan's capture).

    ``begin`` before the fallbacks arrive; ``load`` with them; ``finish``
    after. Layers in ``fresh`` (and any that vLLM's reload turns out not to
    load, which join it) are loaded as a fresh load does: into their
    checkpoint format, processed, copied into the live tensors; the others
    through vLLM's layerwise reload. ``load_weights`` is the model's, in the
    caller's vLLM context."""

    def __init__(self, model: torch.nn.Module, layers: Mapping[str, torch.nn.Module],
                 layer_names: Mapping[str, Iterable[str]], fresh: set[str],
                 load_weights: Callable[[list], object], dtype: torch.dtype):
        self.model = model
        self.layers = dict(layers)
        self.layer_names = {n: list(layer_names.get(n, ())) for n in self.layers}
        self.fresh = fresh  # shared with the caller: what joins it stays
        # vLLM's reload fails on these: loaded as a first load processes them.
        self.first_load = {n for n, layer in self.layers.items() if needs_first_load(layer)}
        fresh |= self.first_load
        self.load_weights = load_weights
        self.dtype = dtype
        self._begun: list[str] = []
        self._pending: list[tuple[torch.nn.Module, LayerReloadingInfo]] = []

    def begin(self) -> None:
        """vLLM's ``initialize_layerwise_reload`` for the layers it reloads:
        each is restored to its checkpoint format on meta, its live tensors
        kept, and its weight loaders wrapped so that it is processed and
        copied back once all its weights arrived (``finalize_layerwise_reload``
        does the rest)."""
        model = self.model
        model._original_do_torchao_reload = getattr(model, "_do_torchao_reload", False)
        model._do_torchao_reload = False
        for name, layer in self.layers.items():
            if name in self.fresh:
                continue
            info = layerwise.get_layerwise_info(layer)
            if info.can_load():
                continue
            info.kernel_tensors = get_layer_params_buffers(layer)
            info.kernel_non_persistent_buffers = set(layer._non_persistent_buffers_set)
            restore_layer_on_meta(layer, info)
            layerwise.initialize_online_processing(layer)
            self._begun.append(name)

    def load(self, fallbacks: Mapping[str, torch.Tensor]) -> None:
        """Loads the fallback names: those of fresh layers into those
        layers, the others through ``load_weights`` (vLLM's reload takes
        its layers' share). Then every layer vLLM's reload did not load
        although names arrived for it is loaded afresh."""
        by_fresh = {n for layer in self.fresh for n in self.layer_names.get(layer, ())}
        rest = [(n, t) for n, t in fallbacks.items() if n not in by_fresh]
        if rest:
            self.load_weights(rest)
        failed = [name for name in self._begun if self._missed(name)]
        for name in failed:
            logger.warning(
                "load plan: vLLM's layerwise reload did not load %s: its loader writes it "
                "around the weight loaders vLLM watches, so vLLM's own reload keeps its old "
                "weights (and logs 'Failed to load weights'); loadplan loads it as a fresh load "
                "does, on every update that reloads it", name)
            layer = self.layers[name]
            info = layerwise.get_layerwise_info(layer)
            params, buffers = info.kernel_tensors
            _place(layer, params, buffers, info.kernel_non_persistent_buffers)
            info.reset()
            self.fresh.add(name)
        todo = [name for name in self.layers if name in self.fresh and self.layer_names[name]]
        for group in _connected(todo, self.layer_names):
            self._load_fresh(group, fallbacks)

    def _missed(self, name: str) -> bool:
        """Whether vLLM's reload got nothing of a layer names arrived for
        (it would put the old weights back)."""
        info = layerwise.get_layerwise_info(self.layers[name])
        return bool(self.layer_names[name]) and info.can_load() and info.load_numel == 0

    def _load_fresh(self, group: list[str], fallbacks: Mapping[str, torch.Tensor]) -> None:
        """Layers that share names, loaded together: each in its checkpoint
        format on the device, the names loaded into them, then processed
        (attention layers after vLLM's other layers, in ``finish``) and
        copied into the live tensors."""
        made = []
        for name in group:
            layer = self.layers[name]
            own = _checkpoint_info(layer)
            own.kernel_tensors = get_layer_params_buffers(layer)
            own.kernel_non_persistent_buffers = set(layer._non_persistent_buffers_set)
            restore_layer_on_meta(layer, own)
            materialize_layer(layer, own)
            made.append((layer, own))
        names = dict.fromkeys(n for name in group for n in self.layer_names[name])
        self.load_weights([(n, fallbacks[n]) for n in names if n in fallbacks])
        for name, (layer, own) in zip(group, made):
            if is_deferred_attention_layer(layer):
                self._pending.append((layer, own))
            elif name in self.first_load:
                with _first_load(layer):
                    _finish_fresh(layer, own, self.dtype)
            else:
                _finish_fresh(layer, own, self.dtype)

    def finish(self, model_config) -> None:
        """vLLM's ``finalize_layerwise_reload``, then the fresh attention
        layers (also when vLLM's raised: none is left in its checkpoint
        format)."""
        try:
            layerwise.finalize_layerwise_reload(self.model, model_config)
        finally:
            pending, self._pending = self._pending, []
            for layer, own in pending:
                _finish_fresh(layer, own, self.dtype)


def _finish_fresh(layer: torch.nn.Module, own: LayerReloadingInfo, dtype: torch.dtype) -> None:
    _process(layer, dtype)
    # vLLM's copy into the live tensors; non-persistent buffers (none is
    # loaded) keep theirs.
    layerwise._copy_and_restore_kernel_tensors(layer, own)


def _connected(layers: list[str], layer_names: Mapping[str, list[str]]) -> list[list[str]]:
    """``layers`` grouped so that layers sharing a name are in one group."""
    groups: list[tuple[set[str], list[str]]] = []
    for layer in layers:
        names = set(layer_names[layer])
        joined = [g for g in groups if g[0] & names]
        for g in joined:
            groups.remove(g)
            names |= g[0]
        members = [m for g in joined for m in g[1]] + [layer]
        groups.append((names, members))
    return [members for _, members in groups]


def _snapshot(layer: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in get_layer_tensors(layer).items()
            if not t.is_meta}


def _unchanged(before: dict[str, torch.Tensor], layer: torch.nn.Module) -> bool:
    after = {name: t for name, t in get_layer_tensors(layer).items()}
    if set(after) != set(before):
        return False
    return not any(t.is_meta or t.stride() != before[name].stride()
                   or not _same_bytes(t, before[name]) for name, t in after.items())


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and (
        not a.numel() or torch.equal(a.detach().reshape(-1).view(torch.uint8),
                                     b.reshape(-1).view(torch.uint8)))


class Observer:
    """Watches vLLM's processing of ``layers`` during one update and records,
    per layer, whether it left every tensor of the layer as it found it.

    Each layer's processing function (its quantization method's
    ``process_weights_after_loading(layer)``, or an attention layer's own)
    is wrapped on the instance for the observation and unwrapped after."""

    def __init__(self, layers: dict[str, torch.nn.Module]):
        self.layers = layers
        self.changed: dict[str, bool] = {}
        self._names = {id(layer): name for name, layer in layers.items()}
        self._undo: list = []

    def __enter__(self) -> Observer:
        self.changed = {}  # each watched update starts afresh
        wrapped: set[int] = set()
        for layer in self.layers.values():
            quant_method = getattr(layer, "quant_method", None)
            owners = []
            if isinstance(quant_method, QuantizeMethodBase):
                owners.append((quant_method, None))
            if is_deferred_attention_layer(layer):
                owners.append((layer, layer))
            for owner, fixed in owners:
                if id(owner) not in wrapped:  # a method object may serve several layers
                    wrapped.add(id(owner))
                    self._wrap(owner, fixed)
        return self

    def _wrap(self, owner: object, fixed: torch.nn.Module | None) -> None:
        """Wraps ``owner.process_weights_after_loading``: on the layer itself
        (``fixed``) for an attention layer, on the layer it is given for a
        quantization method."""
        original = owner.process_weights_after_loading
        observer = self

        def process_weights_after_loading(*args, **kwargs):
            layer = fixed if fixed is not None else (args[0] if args else kwargs.get("layer"))
            name = observer._names.get(id(layer))
            if name is None:
                return original(*args, **kwargs)
            before = _snapshot(layer)
            out = original(*args, **kwargs)
            changed = not _unchanged(before, layer)
            observer.changed[name] = observer.changed.get(name, False) or changed
            return out

        had = "process_weights_after_loading" in vars(owner)
        previous = vars(owner).get("process_weights_after_loading")
        object.__setattr__(owner, "process_weights_after_loading", process_weights_after_loading)
        self._undo.append((owner, had, previous))

    def __exit__(self, *exc: object) -> None:
        for owner, had, previous in reversed(self._undo):
            if had:
                object.__setattr__(owner, "process_weights_after_loading", previous)
            else:
                object.__delattr__(owner, "process_weights_after_loading")
        self._undo.clear()

    def processed(self) -> list[str]:
        """The layers whose processing changed a tensor (in module order)."""
        return [name for name in self.layers if self.changed.get(name, False)]
