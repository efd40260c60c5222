"""vLLM's post-load processing, as the ``loadplan`` backend meets it.

After loading, vLLM runs each layer's ``process_weights_after_loading``
(quantization methods, and attention layers last): it may repack, requantize
or derive tensors (MLA's ``W_UK_T``/``W_UV`` from ``kv_b_proj``). vLLM's own
reload path restores each layer to its checkpoint format on the meta device,
loads into it, runs the processing and copies the result into the live
(kernel-format) tensors.

A layer whose processing leaves every tensor as loaded gains nothing from
that round trip: its names are written in place. Every other layer goes
through vLLM's reload machinery, for that layer only, on every update: its
names are fallbacks and its processing runs as vLLM runs it. Which layers
are which is observed on the first update, when every layer that has a
processing step goes through vLLM's path (``Observer``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from vllm.model_executor.layers.attention import is_deferred_attention_layer
from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase
from vllm.model_executor.model_loader.reload import layerwise
from vllm.model_executor.model_loader.reload.meta import restore_layer_on_meta
from vllm.model_executor.model_loader.reload.utils import (
    get_layer_params_buffers,
    get_layer_tensors,
)

REASON = "vLLM processes {module} after loading (process_weights_after_loading); it is reloaded as vLLM reloads it"


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


def reasons(names: list[str]) -> dict[str, str]:
    """The fallback reason of each processed module's names."""
    return {name: REASON.format(module=name or "the model") for name in names}


@contextlib.contextmanager
def checkpoint_format(layers: list[torch.nn.Module]) -> Iterator[None]:
    """The layers in their checkpoint format on the meta device (as vLLM's
    reload restores them), and back to their live tensors afterwards. For
    tracing the loader: processed layers then are no targets, and the
    loader sees the shapes it was written for."""
    saved = []
    try:
        for layer in layers:
            info = layerwise.get_layerwise_info(layer)
            saved.append((layer, get_layer_params_buffers(layer),
                          set(layer._non_persistent_buffers_set)))
            restore_layer_on_meta(layer, info)
        yield
    finally:
        for layer, (params, buffers), non_persistent in saved:
            for name in list(get_layer_tensors(layer)):
                delattr(layer, name)
            for name, param in params.items():
                layer.register_parameter(name, param)
            for name, buffer in buffers.items():
                layer.register_buffer(name, buffer, persistent=name not in non_persistent)


def begin_reload(model: torch.nn.Module, layers: list[torch.nn.Module]) -> None:
    """vLLM's ``initialize_layerwise_reload`` for ``layers`` only: each is
    restored to its checkpoint format on meta, its live tensors kept, and
    its weight loaders wrapped so that it is processed and copied back once
    all its weights arrived (``finalize_layerwise_reload`` does the rest)."""
    model._original_do_torchao_reload = getattr(model, "_do_torchao_reload", False)
    model._do_torchao_reload = False
    for layer in layers:
        info = layerwise.get_layerwise_info(layer)
        if info.can_load():
            continue
        info.kernel_tensors = get_layer_params_buffers(layer)
        info.kernel_non_persistent_buffers = set(layer._non_persistent_buffers_set)
        restore_layer_on_meta(layer, info)
        layerwise.initialize_online_processing(layer)


def _snapshot(layer: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in get_layer_tensors(layer).items()
            if not t.is_meta}


def _unchanged(before: dict[str, torch.Tensor], layer: torch.nn.Module) -> bool:
    after = {name: t for name, t in get_layer_tensors(layer).items()}
    if set(after) != set(before):
        return False
    for name, t in after.items():
        b = before[name]
        if t.is_meta or t.shape != b.shape or t.dtype != b.dtype or t.stride() != b.stride():
            return False
        if t.numel() and not torch.equal(t.detach().reshape(-1).view(torch.uint8),
                                         b.reshape(-1).view(torch.uint8)):
            return False
    return True


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
