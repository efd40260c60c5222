"""Rearranging processing, captured data-free and composed with the plan.

Some of vLLM's post-load processing only moves elements: FlashInfer's
TRT-LLM fp8 experts swap w13's gate and up halves, shuffle each expert's
rows in groups of 16 and regroup its weights into BlockMajorK order
``(E, K/128, M, 128)``, in new tensors. Such a layer need not be reloaded:
each element of its checkpoint format has one place in the live tensors,
and the plan can write each name's boxes straight there.

``trace(layer, dtype)`` runs the layer's own ``process_weights_after_loading``
on its checkpoint format as meta tensors (no data), under a dispatch mode
that follows where every element goes. Each tensor the processing makes is
described by a ``Layout``: per dim, mixed-radix *modes* ``(size, stride)``,
so that element ``c`` of the tensor is element ``base + sum(digit * stride)``
of one checkpoint-format tensor (its *source*). Views need nothing: a view
is read through its storage's layout. Copies (``clone``, ``contiguous``,
``copy_`` into a whole new tensor), ``flip`` and gathers by a constant
index (``t[:, rows]``, ``index_select``) make a new storage whose layout is
computed; a gather's index must fold into modes (every row map vLLM's
layouts use does: they permute the digits of a row number). Idempotent
elementwise ops in place (``clamp_``, a scale clamp) become *epilogues*,
run on the live tensor after each update's writes: they commute with moves.
Anything else (arithmetic, a read of a value) means the layer is not a
rearrangement; ``trace`` says which op.

``Rearranged.remap`` then composes: a loader's copy into a region of a
checkpoint-format tensor becomes copies into regions of the live tensors,
each a strided region whose dims split the box's (``Sink`` in the capture
records them as ordinary direct writes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ..capture.targets import storage_key

aten = torch.ops.aten

Mode = tuple[int, int]  # (size, stride): one digit of a coordinate, and what it steps


class NotRearrangement(Exception):
    """The processing does something other than moving elements (the
    message says what), or moves them in a way ``Layout`` cannot hold."""


# -- mixed-radix layouts -----------------------------------------------------

def _digits(modes: Sequence[Mode], x: torch.Tensor) -> list[torch.Tensor]:
    """The digits of each value of ``x`` in the radices of ``modes``
    (major to minor); the most major digit keeps what is left."""
    out = []
    for size, _ in reversed(modes[1:]):
        out.append(x % size)
        x = x // size
    out.append(x)
    return out[::-1]


def evaluate(modes: Sequence[Mode], x: torch.Tensor) -> torch.Tensor:
    """Where each coordinate of ``x`` goes: the sum of its digits times the
    modes' strides."""
    if not modes:
        return torch.zeros_like(x)
    return sum(d * stride for d, (_, stride) in zip(_digits(modes, x), modes))


def fit(values: torch.Tensor) -> tuple[Mode, ...] | None:
    """Modes (major to minor) whose evaluation over ``range(len(values))``
    is ``values`` (which starts at 0), or None where none do. Greedy from
    the minor end: the longest run of one step that divides what is left,
    then the same over the runs' first values."""
    g = values.to(torch.int64)
    n = g.numel()
    if n == 0 or int(g[0]) != 0:
        return None
    modes: list[Mode] = []
    while n > 1:
        step = int(g[1] - g[0])
        bad = ((g[1:] - g[:-1]) != step).nonzero()
        run = n if bad.numel() == 0 else int(bad[0]) + 1
        size = max(d for d in range(1, run + 1) if n % d == 0)
        if size == 1:
            return None
        blocks = g.view(n // size, size)
        expect = blocks[:, :1] + torch.arange(size, dtype=torch.int64) * step
        if not torch.equal(blocks, expect):
            return None
        modes.append((size, step))
        g, n = blocks[:, 0].contiguous(), n // size
    return tuple(reversed(modes))


@dataclass(frozen=True)
class Layout:
    """Where each element of a tensor comes from: element ``c`` is element
    ``base + sum over dims j of evaluate(dims[j], c[j])`` of ``source``
    (a checkpoint-format tensor, in its elements, row-major)."""

    source: str
    base: int
    dims: tuple[tuple[Mode, ...], ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(prod(s for s, _ in modes) for modes in self.dims)


def compose(modes: Sequence[Mode], base: int, offset: int, shape: Sequence[int],
            stride: Sequence[int]) -> tuple[int, tuple[tuple[Mode, ...], ...]] | None:
    """A strided region (``as_strided`` arguments) of a 1-d index space
    laid out by ``modes`` from ``base``, as a base and per-dim modes; None
    where a dim's walk does not fold into modes, or where the dims' digits
    could carry into each other (then the region is no sum of per-dim
    parts)."""
    radices = [s for s, _ in modes]
    total = prod(radices)
    if offset < 0:
        return None
    off = [int(d) for d in _digits(modes, torch.tensor([offset]))]
    if off and off[0] >= radices[0]:
        return None
    high = list(off)
    dims = []
    for n, s in zip(shape, stride):
        if n == 1:
            dims.append(())
            continue
        walk = torch.arange(n, dtype=torch.int64) * s
        if s < 0 or int(walk[-1]) >= total:
            return None
        digits = _digits(modes, walk)
        for i, d in enumerate(digits):
            high[i] += int(d.max())
        values = sum(d * st for d, (_, st) in zip(digits, modes)) if modes else walk * 0
        fitted = fit(values)
        if fitted is None:
            return None
        dims.append(fitted)
    if any(h >= r for h, r in zip(high, radices)):
        return None
    return base + sum(d * st for d, (_, st) in zip(off, modes)), tuple(dims)


def _flat(layout: Layout) -> list[Mode]:
    return [m for modes in layout.dims for m in modes]


@dataclass
class Storage:
    """What a traced storage holds: element ``i`` (in elements of
    ``itemsize`` bytes) is ``layout``'s element ``i`` (a 1-d layout), with
    ``epilogue`` applied."""

    layout: Layout
    itemsize: int
    epilogue: tuple = ()


# -- the trace ----------------------------------------------------------------

# Views of a traced tensor share its storage: nothing to follow.
_ALIASES = {aten._unsafe_view, aten.alias, aten.detach, aten.lift_fresh}
# Copies of a tensor's values into a new one.
_COPIES = {aten.clone, aten._to_copy}
# In-place elementwise ops that give the same result when run twice: run on
# the live tensor after each update's writes.
_IDEMPOTENT = {aten.clamp_, aten.clamp_min_, aten.clamp_max_}


class _Follow(TorchDispatchMode):
    """Follows the elements of the traced storages through the ops that
    run on them (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self.storages: dict[int, Storage] = {}
        # Meta tensors made from real ones (a gather's index moved to the
        # layer's device): their values.
        self.values: dict[int, torch.Tensor] = {}
        self.keep: list[torch.Tensor] = []  # so that storage keys stay unique

    def track(self, t: torch.Tensor, source: str) -> None:
        if not t.is_contiguous():
            raise NotRearrangement(f"{source} is not contiguous in its checkpoint format")
        modes = tuple((n, 1) for n in [t.numel()] if n > 1)
        self.storages[storage_key(t)] = Storage(Layout(source, 0, (modes,)), t.element_size())
        self.keep.append(t)

    def layout_of(self, t: torch.Tensor) -> Layout | None:
        """``t``'s layout, None where its storage is not traced."""
        entry = self.storages.get(storage_key(t))
        if entry is None:
            return None
        if t.element_size() != entry.itemsize:
            raise NotRearrangement(f"a view of {entry.layout.source} as {t.dtype}")
        (modes,) = entry.layout.dims
        found = compose(modes, entry.layout.base, t.storage_offset(), t.shape, t.stride())
        if found is None:
            raise NotRearrangement(f"a view of {entry.layout.source} with strides "
                                   f"{list(t.stride())} that no modes hold")
        return Layout(entry.layout.source, found[0], found[1])

    def _store(self, out: torch.Tensor, layout: Layout, epilogue: tuple) -> None:
        """``out`` (a whole new storage) holds ``layout``'s elements."""
        if out.untyped_storage().nbytes() != out.numel() * out.element_size():
            raise NotRearrangement("a copy into part of a new tensor")
        order = sorted(range(out.dim()), key=lambda d: -out.stride()[d])
        expect = 1
        for d in reversed(order):
            if out.shape[d] != 1 and out.stride()[d] != expect:
                raise NotRearrangement("a copy into a tensor that is not dense")
            expect *= out.shape[d]
        modes = tuple(m for d in order for m in layout.dims[d])
        self.storages[storage_key(out)] = Storage(Layout(layout.source, layout.base, (modes,)),
                                                  out.element_size(), epilogue)
        self.keep.append(out)

    def _epilogue(self, t: torch.Tensor) -> tuple:
        entry = self.storages.get(storage_key(t))
        return entry.epilogue if entry is not None else ()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        traced = [a for a in tensors if storage_key(a) in self.storages]
        packet = func.overloadpacket
        if not traced:
            out = func(*args, **kwargs)
            if (packet in _COPIES and isinstance(out, torch.Tensor) and out.is_meta
                    and tensors and not tensors[0].is_meta):
                self.values[storage_key(out)] = tensors[0].clone()
                self.keep.append(out)
            return out
        if func.is_view or packet in _ALIASES:
            return func(*args, **kwargs)
        src = args[0]
        if packet in _COPIES:
            if packet is aten._to_copy and kwargs.get("dtype", src.dtype) != src.dtype:
                raise NotRearrangement(f"{packet.__name__} converts to {kwargs['dtype']}")
            out = func(*args, **kwargs)
            self._store(out, self._need(src), self._epilogue(src))
            return out
        if packet is aten.flip:
            layout = self._need(src)
            dims = list(layout.dims)
            base = layout.base
            for d in args[1]:
                d %= src.dim()
                n = src.shape[d]
                values = evaluate(dims[d], torch.arange(n - 1, -1, -1))
                base += int(values[0])
                dims[d] = self._fit(values - values[0], layout.source)
            out = func(*args, **kwargs)
            self._store(out, Layout(layout.source, base, tuple(dims)), self._epilogue(src))
            return out
        if packet in (aten.index, aten.index_select):
            if packet is aten.index:
                indices = list(args[1])
                used = [i for i, x in enumerate(indices) if x is not None]
                if len(used) != 1:
                    raise NotRearrangement("a gather by more than one index")
                dim, index = used[0], indices[used[0]]
            else:
                dim, index = args[1] % src.dim(), args[2]
            if storage_key(index) in self.storages:
                raise NotRearrangement("a gather by a traced index")
            values = self._index_values(index)
            layout = self._need(src)
            n = src.shape[dim]
            picked = evaluate(layout.dims[dim], values % n)
            dims = list(layout.dims)
            dims[dim] = self._fit(picked - picked[0], layout.source)
            out = func(*args, **kwargs)
            self._store(out, Layout(layout.source, layout.base + int(picked[0]), tuple(dims)),
                        self._epilogue(src))
            return out
        if packet is aten.copy_:
            dst, value = args[0], args[1]
            if storage_key(value) not in self.storages:
                raise NotRearrangement("a traced tensor overwritten with untraced values")
            layout, mine = self._need(value), self.layout_of(dst)
            if storage_key(dst) == storage_key(value) and mine == layout:
                return dst  # a copy onto itself
            if tuple(dst.shape) != tuple(value.shape):
                raise NotRearrangement("a copy that broadcasts")
            self._store(dst, layout, self._epilogue(value))
            return dst
        if packet in _IDEMPOTENT:
            entry = self.storages[storage_key(src)]
            if src.numel() * src.element_size() != src.untyped_storage().nbytes():
                raise NotRearrangement(f"{packet.__name__} on part of a tensor")
            entry.epilogue += ((packet.__name__, tuple(args[1:]), dict(kwargs)),)
            return src
        raise NotRearrangement(f"it computes {packet.__name__} on "
                               f"{self.storages[storage_key(traced[0])].layout.source}")

    def _need(self, t: torch.Tensor) -> Layout:
        layout = self.layout_of(t)
        if layout is None:
            raise NotRearrangement("an op on a traced and an untraced tensor")
        return layout

    def _fit(self, values: torch.Tensor, source: str) -> tuple[Mode, ...]:
        fitted = fit(values)
        if fitted is None:
            raise NotRearrangement(f"a gather of {source} whose index folds into no modes")
        return fitted

    def _index_values(self, index: torch.Tensor) -> torch.Tensor:
        if index.dtype not in (torch.int64, torch.int32) or index.dim() != 1:
            raise NotRearrangement("a gather by an index that is not 1-d integers")
        if not index.is_meta:
            return index.to(torch.int64)
        known = self.values.get(storage_key(index))
        if known is None:
            raise NotRearrangement("a gather by an index of unknown values")
        return torch.as_strided(known, index.shape, index.stride(),
                                index.storage_offset()).to(torch.int64)


# -- what a trace gives -------------------------------------------------------

@dataclass(frozen=True)
class Place:
    """Where a checkpoint-format tensor's elements go in one live tensor:
    its element ``x`` (row-major) to the live tensor's element
    ``base + evaluate(modes, x)`` (``as_strided`` terms from the live
    tensor's first element)."""

    live: str  # the live tensor's name in the layer
    base: int
    modes: tuple[Mode, ...]


@dataclass
class Rearranged:
    """A layer whose processing only moves elements: per checkpoint-format
    tensor, the places its elements go; per live tensor, the epilogue run
    on it after each update's writes (ops in place, as ``(aten op name,
    args, kwargs)``)."""

    places: dict[str, list[Place]]
    epilogues: dict[str, tuple] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # live tensor -> source

    def remap(self, source: str, offset: int, shape: Sequence[int], stride: Sequence[int]
              ) -> list[tuple[str, int, tuple[int, ...], tuple[int, ...]]] | str:
        """A copy into the region ``(offset, shape, stride)`` of ``source``
        as copies into the live tensors: ``(live tensor, offset, shape,
        stride)`` each, the shape splitting the region's dims in order; or
        why it cannot be."""
        out = []
        for place in self.places.get(source, ()):
            found = compose(place.modes, place.base, offset, shape, stride)
            if found is None:
                return (f"a write into {source} at offset {offset}, shape {list(shape)}, "
                        f"strides {list(stride)} does not fold into {place.live}")
            base, dims = found
            sizes, strides = [], []
            for n, modes in zip(shape, dims):
                if not modes:
                    sizes.append(n)
                    strides.append(1)
                    continue
                for size, st in modes:
                    if st < 0:
                        return f"a write into {source} runs backwards through {place.live}"
                    sizes.append(size)
                    strides.append(st)
            out.append((place.live, base, tuple(sizes), tuple(strides)))
        if not out:
            return f"vLLM's processing puts nothing of {source} into the layer"
        return out

    def run_epilogues(self, layer: torch.nn.Module) -> None:
        """The epilogues, on the layer's live tensors."""
        for name, ops in self.epilogues.items():
            t = getattr(layer, name)
            for op, args, kwargs in ops:
                getattr(aten, op)(t.data, *args, **kwargs)


def _places(layout: Layout, live: torch.Tensor, name: str, numel: int) -> Place:
    """The inverse of ``layout`` (of the live tensor ``name``): where each
    element of its source goes. The live tensor must hold every element of
    the source once."""
    modes = []  # (size, source stride, live stride)
    base_live, base_src = 0, layout.base
    for d, dim_modes in enumerate(layout.dims):
        step = live.stride()[d]
        for size, src in reversed(dim_modes):
            if size > 1:
                if src < 0:  # count this digit down instead
                    base_src += (size - 1) * src
                    base_live += (size - 1) * step
                    modes.append((size, -src, -step))
                else:
                    modes.append((size, src, step))
            step *= size
    modes.sort(key=lambda m: -m[1])
    expect = 1
    for size, src, _ in reversed(modes):
        if src != expect:
            raise NotRearrangement(f"{name} does not hold each element of "
                                   f"{layout.source} once")
        expect *= size
    if base_src != 0 or expect != numel:
        raise NotRearrangement(f"{name} does not hold each element of {layout.source} once")
    return Place(name, base_live, tuple((size, lst) for size, _, lst in modes))


@contextlib.contextmanager
def _kept(layer: torch.nn.Module) -> Iterator[None]:
    """The layer's and its quantization method's attributes (not its
    tensors), as they were, afterwards: a traced processing may set state
    (a kernel, a config) from meta tensors."""
    method = getattr(layer, "quant_method", None)
    skip = {"_parameters", "_buffers", "_modules"}
    saved = [(obj, {k: v for k, v in vars(obj).items() if k not in skip})
             for obj in (layer, method) if obj is not None]
    try:
        yield
    finally:
        for obj, attrs in saved:
            for k in [k for k in vars(obj) if k not in skip and k not in attrs]:
                delattr(obj, k)
            for k, v in attrs.items():
                setattr(obj, k, v)


def trace(layer: torch.nn.Module, checkpoint: Mapping[str, torch.Tensor],
          live: Mapping[str, torch.Tensor], process) -> Rearranged:
    """Runs ``process()`` (the layer's processing) while the layer holds
    ``checkpoint`` (its checkpoint-format tensors on the meta device, by
    name), and says where each element goes in the tensors the layer holds
    after, which must have the layouts of ``live`` (the layer's tensors in
    the engine). The caller restores the layer's tensors.

    Raises:
        NotRearrangement: the processing is not a rearrangement ``Layout``s
            hold, or gives other layouts than ``live``'s.
    """
    follow = _Follow()
    # A tensor the layer shares with another (a router's correction bias)
    # stays real in its checkpoint format: not the layer's to load.
    checkpoint = {name: t for name, t in checkpoint.items() if t.is_meta}
    for name, t in checkpoint.items():
        follow.track(t, name)
    with _kept(layer), follow:
        try:
            process()
        except NotRearrangement:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the processing raised on meta
            raise NotRearrangement(f"it fails on meta tensors: {type(e).__name__}: {e}") from e
    places: dict[str, list[Place]] = {}
    out = Rearranged(places)
    now = dict(layer.named_parameters(recurse=False)) | dict(layer.named_buffers(recurse=False))
    for name, real in live.items():
        t = now.get(name)
        if t is None:
            if name in checkpoint:
                raise NotRearrangement(f"its processing removes {name}")
            continue
        if (tuple(t.shape), tuple(t.stride()), t.dtype) != (tuple(real.shape),
                                                             tuple(real.stride()), real.dtype):
            raise NotRearrangement(
                f"traced, {name} is {t.dtype} {list(t.shape)} (strides {list(t.stride())}); "
                f"the engine's is {real.dtype} {list(real.shape)} (strides {list(real.stride())})")
        layout = follow.layout_of(t) if t.is_meta else None
        if layout is None:
            if name in checkpoint:
                raise NotRearrangement(f"{name} does not come from the checkpoint format")
            continue  # not of the checkpoint format (an expert map): left as it is
        source = checkpoint[layout.source]
        if source.dtype != real.dtype:
            raise NotRearrangement(f"{name} is {real.dtype}, its source {layout.source} "
                                   f"{source.dtype}")
        places.setdefault(layout.source, []).append(
            _places(layout, real, name, source.numel()))
        out.sources[name] = layout.source
        epilogue = follow.storages[storage_key(t)].epilogue
        if epilogue:
            out.epilogues[name] = epilogue
    missing = [n for n in checkpoint if n not in places and checkpoint[n].numel()]
    if missing:
        raise NotRearrangement(f"vLLM's processing puts nothing of {missing[0]} into the layer")
    return out
