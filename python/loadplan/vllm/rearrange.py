"""Rearranging processing, captured data-free and composed with the plan.

Some of vLLM's post-load processing only moves elements: FlashInfer's
TRT-LLM fp8 experts swap w13's gate and up halves, shuffle each expert's
rows in groups of 16 and regroup its weights into BlockMajorK order
``(E, K/128, M, 128)``, in new tensors. Such a layer need not be reloaded:
each element of its checkpoint format has one place in the live tensors,
and the plan can write each name's boxes straight there.

``trace(layer, checkpoint, live, process)`` runs the layer's own
processing on its checkpoint format as meta tensors (no data), under a
dispatch mode that follows where every byte goes. A storage the processing
writes is held as *pieces* of bytes, each described by mixed-radix *modes*
``(size, stride)``: byte ``i`` of the piece is byte ``base + sum(digit *
stride)`` of one checkpoint-format tensor (its *source*). A tensor's
``Layout`` is read from its storage's pieces: per dim, modes in bytes of
the source. Views need nothing, whatever their dtype, as long as each
element's bytes stay together. Copies (``clone``, ``contiguous``,
``copy_``, also into part of a tensor, ``stack``, ``cat``), ``flip`` and gathers by a constant
index (``t[:, rows]``, ``index_select``) make new pieces; a gather's index
must fold into modes (every row map vLLM's layouts use does: they permute
the digits of a row number), and its values are followed from where they
are computed on the host. Zeros written into the checkpoint format
(padding) are kept as boxes of it. A conversion of a whole
checkpoint-format tensor, before anything moves it (gpt-oss's expert
biases, bf16 to fp32), makes a converted source: its elements then move as
any others, and the plan's writes into it convert, as writes from a
trainer's dtype do. Idempotent elementwise ops in place (``clamp_``, a
scale clamp) become *epilogues*, run on the live tensor after each
update's writes: they commute with moves. Anything else (arithmetic, a
conversion of part of a tensor or of moved elements, a read of a value)
means the layer is not a rearrangement; ``trace`` says which op.

Zero padding with ``F.pad`` (``constant_pad_nd``) of a tensor that holds
each element of a checkpoint-format tensor once makes the padded tensor a
source of its own (``Padded``): the checkpoint-format tensor's places lead
into it, its places into the live tensors, and its padding is zeroed boxes
of it. A Marlin repack of 4-bit values (vLLM's ``gptq_marlin_repack``, the
GPU build's ``torch.ops._C`` op, called per expert) moves nibbles, not
bytes: its output is a *tiled* piece, the repack of a GPTQ-packed block of
a source, and a live tensor made of such pieces takes its source's
elements through the plan's ``marlin_w4`` transform (``TiledPlace``).
Indexing by a Python list (Marlin's scale permutations) is made a gather by
a CPU index, whose values the trace can read.

``Rearranged.remap`` then composes: a loader's copy into a region of a
checkpoint-format tensor becomes copies into regions of the live tensors,
each a strided region whose dims split the box's (``Sink`` in the capture
records them as ordinary direct writes); where the region does not fold
whole, parts of it cut at block edges, each with its box; through a
repack, transforming writes of whole atoms.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._python_dispatch import _disable_current_modes as no_dispatch
from torch.utils._pytree import tree_leaves, tree_map

from ..capture.targets import storage_key
from . import kernel_refs

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
    """Where each element of a tensor comes from: element ``c`` starts at
    byte ``base + sum over dims j of evaluate(dims[j], c[j])`` of
    ``source`` (a checkpoint-format tensor, row-major), and its bytes
    follow one another there."""

    source: str
    base: int
    dims: tuple[tuple[Mode, ...], ...]


def _int_digits(modes: Sequence[Mode], x: int) -> list[int]:
    """``_digits`` of one int, in Python ints."""
    out = []
    for size, _ in reversed(modes[1:]):
        x, d = divmod(x, size)
        out.append(d)
    out.append(x)
    return out[::-1]


@functools.lru_cache(maxsize=1 << 14)
def _walk(modes: tuple[Mode, ...], n: int, s: int) -> tuple[tuple[int, ...], tuple[Mode, ...] | None]:
    """The largest digit each mode takes along ``n`` steps of ``s`` (from
    0), and the modes of that walk; cached: every expert's box takes the
    same walks, only its offset differs."""
    walk = torch.arange(n, dtype=torch.int64) * s
    digits = _digits(modes, walk)
    values = sum(d * st for d, (_, st) in zip(digits, modes)) if modes else walk * 0
    return tuple(int(d.max()) for d in digits), fit(values)


def compose(modes: Sequence[Mode], base: int, offset: int, shape: Sequence[int],
            stride: Sequence[int]) -> tuple[int, tuple[tuple[Mode, ...], ...]] | None:
    """A strided region (``as_strided`` arguments) of a 1-d index space
    laid out by ``modes`` from ``base``, as a base and per-dim modes; None
    where a dim's walk does not fold into modes, or where the dims' digits
    could carry into each other (then the region is no sum of per-dim
    parts)."""
    modes = tuple(modes)
    radices = [s for s, _ in modes]
    total = prod(radices)
    if offset < 0 or (modes and offset >= total):
        return None
    high = _int_digits(modes, offset)
    base += sum(d * st for d, (_, st) in zip(high, modes))
    dims = []
    for n, s in zip(shape, stride):
        if n == 1:
            dims.append(())
            continue
        if s < 0 or (n - 1) * s >= total:
            return None
        maxima, fitted = _walk(modes, n, s)
        if fitted is None:
            return None
        for i, m in enumerate(maxima):
            high[i] += m
        dims.append(fitted)
    if any(h >= r for h, r in zip(high, radices)):
        return None
    return base, tuple(dims)


@dataclass(frozen=True)
class Tiled:
    """What a Marlin repack (vLLM's ``gptq_marlin_repack``, 4-bit, the plan
    format's ``marlin_w4`` transform) made of a GPTQ-packed int32 matrix X
    ``[size_k / 8, size_n]`` of ``source``: X's element ``(kw, n)`` is at
    byte ``base + evaluate(rows, kw) + evaluate(cols, n)`` of the source,
    and the piece's bytes are X's repacked words, ``[size_k / 16, 2 *
    size_n]``."""

    transform: str
    base: int
    rows: tuple[Mode, ...]
    cols: tuple[Mode, ...]
    size_k: int
    size_n: int


@dataclass(frozen=True)
class Piece:
    """Bytes ``[start, stop)`` of a traced storage: byte ``start + i`` is
    byte ``base + evaluate(modes, i)`` of ``source``; None: bytes no
    checkpoint tensor gave (scratch not yet written). With ``tiled``, the
    bytes are a Marlin repack of part of ``source`` instead (no modes)."""

    start: int
    stop: int
    source: str | None
    base: int = 0
    modes: tuple[Mode, ...] = ()
    tiled: Tiled | None = None


@dataclass
class Storage:
    """What a traced storage holds, byte by byte (``pieces``, in order), and
    the epilogue applied to all of it. ``own``: the checkpoint-format
    tensor it was, if any."""

    pieces: list[Piece]
    epilogue: tuple = ()
    own: str | None = None


def _runs(pieces: list[Piece]) -> list[Piece]:
    """``pieces`` with each run of neighbours that differ only by a constant
    step of their bases merged into one (a mode more)."""
    out: list[Piece] = []
    i = 0
    while i < len(pieces):
        p, j, step = pieces[i], i + 1, None
        length = p.stop - p.start
        while p.source is not None and p.tiled is None and j < len(pieces):
            q, prev = pieces[j], pieces[j - 1]
            if (q.tiled is not None or q.source != p.source or q.modes != p.modes
                    or q.start != prev.stop
                    or q.stop - q.start != length
                    or (step is not None and q.base - prev.base != step)):
                break
            step = q.base - prev.base
            j += 1
        if j - i > 1:
            p = Piece(p.start, pieces[j - 1].stop, p.source, p.base, ((j - i, step), *p.modes))
        out.append(p)
        i = j
    return out


def _byte_region(t: torch.Tensor) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """``t`` in bytes of its storage: offset, shape and strides, an
    innermost dim for the bytes of an element."""
    size = t.element_size()
    return (t.storage_offset() * size, (*t.shape, size),
            (*(st * size for st in t.stride()), 1))


# -- the trace ----------------------------------------------------------------

# Views of a traced tensor share its storage: nothing to follow.
_ALIASES = {aten._unsafe_view, aten.alias, aten.detach, aten.lift_fresh}
# Copies of a tensor's values into a new one.
_COPIES = {aten.clone, aten._to_copy}
# In-place elementwise ops that give the same result when run twice: run on
# the live tensor after each update's writes.
_IDEMPOTENT = {aten.clamp_, aten.clamp_min_, aten.clamp_max_}
# Writes of zeros.
_ZEROS = {aten.zero_, aten.fill_}


@dataclass(frozen=True)
class Padded:
    """A zero-padded tensor (``F.pad``), a source of its own: the padded
    tensor's elements at ``lo`` (per dim) onwards, over ``shape``, are those
    of ``layout`` (of a checkpoint-format tensor); the rest are zeros. It is
    contiguous: ``out_shape``, ``out_stride``."""

    layout: Layout
    shape: tuple[int, ...]
    lo: tuple[int, ...]
    out_shape: tuple[int, ...]
    out_stride: tuple[int, ...]
    dtype: torch.dtype

    def boxes(self) -> list[tuple[tuple[int, int], ...]]:
        """The padding: boxes of the padded tensor no element of the
        tensor is in, disjoint."""
        out = []
        inner = [(a, a + n) for a, n in zip(self.lo, self.shape)]
        for d, ((a, b), full) in enumerate(zip(inner, self.out_shape)):
            outer = [(0, f) for f in self.out_shape[d + 1:]]
            for lo, hi in ((0, a), (b, full)):
                if lo < hi:
                    out.append((*inner[:d], (lo, hi), *outer))
        return out


class _Follow(TorchDispatchMode):
    """Follows the bytes of the traced storages through the ops that run
    on them (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self.storages: dict[int, Storage] = {}
        # Meta tensors made from real ones (a gather's index moved to the
        # layer's device): their values.
        self.values: dict[int, torch.Tensor] = {}
        # Per checkpoint-format tensor, its bytes the processing zeroes
        # before moving them (padding): layouts of those regions.
        self.zeroed: dict[str, list[Layout]] = {}
        # A converted checkpoint-format tensor's own source name -> (the
        # tensor, the dtype): its layouts are in bytes of the conversion.
        self.converted: dict[str, tuple[str, torch.dtype]] = {}
        # A padded tensor's source name -> what it pads.
        self.padded: dict[str, Padded] = {}
        # The sources, by name: shape and dtype (``trace`` sets it to the
        # checkpoint-format tensors, and adds the padded ones after).
        self.formats: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
        # The traced storages, alive while tracing so that their keys stay
        # unique: the storages, not the tensors (a processing that sets a
        # parameter's ``.data`` frees the storage it had, whose key a new
        # tensor, such as a gather's index, may then take).
        self.keep: list[torch.UntypedStorage] = []

    def track(self, t: torch.Tensor, source: str) -> None:
        if not t.is_contiguous():
            raise NotRearrangement(f"{source} is not contiguous in its checkpoint format")
        n = t.numel() * t.element_size()
        modes = ((n, 1),) if n > 1 else ()
        self.storages[storage_key(t)] = Storage([Piece(0, n, source, 0, modes)], own=source)
        self.keep.append(t.untyped_storage())

    def layout_of(self, t: torch.Tensor) -> Layout | None:
        """``t``'s layout (strides in bytes of its source), None where its
        storage is not traced."""
        entry = self.storages.get(storage_key(t))
        if entry is None:
            return None
        piece, found = self._read(entry, t)
        base, dims = found
        size = t.element_size()
        if dims[-1] != (((size, 1),) if size > 1 else ()):
            raise NotRearrangement(f"a view of {piece.source} as {t.dtype} splits its elements")
        return Layout(piece.source, base, dims[:-1])

    def _read(self, entry: Storage, t: torch.Tensor):
        offset, shape, stride = _byte_region(t)
        stop = offset + 1 + sum((n - 1) * st for n, st in zip(shape, stride))
        for attempt in (0, 1):
            inside = [p for p in entry.pieces if p.start <= offset and stop <= p.stop]
            if inside or attempt:
                break
            entry.pieces = _runs(entry.pieces)
        if not inside:
            raise NotRearrangement("a view across parts of a tensor written apart")
        piece = inside[0]
        if piece.source is None:
            raise NotRearrangement("a read of bytes no checkpoint tensor gave")
        if piece.tiled is not None:
            raise NotRearrangement(f"a view of Marlin's repack of {piece.source}")
        found = compose(piece.modes, piece.base, offset - piece.start, shape, stride)
        if found is None:
            raise NotRearrangement(f"a view of {piece.source} with strides "
                                   f"{list(t.stride())} that no modes hold")
        return piece, found

    def _write(self, dst: torch.Tensor, layout: Layout | None, epilogue: tuple,
               tiled: tuple[str, Tiled] | None = None) -> None:
        """``dst`` (a view of any storage) now holds ``layout``'s elements,
        or (``tiled``: source and repack) a Marlin repack's words."""
        size = dst.element_size()
        byte = ((size, 1),) if size > 1 else ()
        nbytes = dst.untyped_storage().nbytes()
        if tiled is not None:
            if not dst.is_contiguous():
                raise NotRearrangement("a copy of Marlin's repack into a tensor out of order")
            start = dst.storage_offset() * size
            layout = Layout(tiled[0], 0, ())
            modes = ()
        elif dst.is_contiguous():
            start = dst.storage_offset() * size
            modes = tuple(m for d in layout.dims for m in d) + byte
        else:
            # Dense over its whole storage in another order (clone keeps
            # strides): the storage's order of dims.
            order = sorted(range(dst.dim()), key=lambda d: -dst.stride()[d])
            expect = 1
            for d in reversed(order):
                if dst.shape[d] != 1 and dst.stride()[d] != expect:
                    raise NotRearrangement("a copy into a tensor that is not dense")
                expect *= dst.shape[d]
            if expect * size != nbytes or dst.storage_offset():
                raise NotRearrangement("a copy into part of a tensor, out of order")
            start = 0
            modes = tuple(m for d in order for m in layout.dims[d]) + byte
        stop = start + dst.numel() * size
        new = Piece(start, stop, layout.source, layout.base, modes,
                    tiled[1] if tiled is not None else None)
        entry = self.storages.get(storage_key(dst))
        if entry is None:
            entry = self.storages[storage_key(dst)] = Storage([Piece(0, nbytes, None)])
            self.keep.append(dst.untyped_storage())
        whole = start == 0 and stop == nbytes
        if not whole and entry.epilogue != epilogue:
            raise NotRearrangement("a copy into part of a tensor with another epilogue")
        entry.epilogue = epilogue
        pieces = []
        for p in entry.pieces:
            if p.stop <= start or p.start >= stop:
                pieces.append(p)
                continue
            for lo, hi in ((p.start, start), (stop, p.stop)):
                if lo < hi:  # the part of p the write leaves
                    pieces.append(self._cut(p, lo, hi))
        pieces.append(new)
        entry.pieces = sorted(pieces, key=lambda p: p.start)
        if entry.own is not None and new.source != entry.own:
            entry.own = None

    @staticmethod
    def _cut(p: Piece, lo: int, hi: int) -> Piece:
        if p.source is None:
            return Piece(lo, hi, None)
        if p.tiled is not None:
            raise NotRearrangement(f"a copy into part of Marlin's repack of {p.source}")
        found = compose(p.modes, p.base, lo - p.start, (hi - lo,), (1,))
        if found is None:
            raise NotRearrangement("a copy into part of a rearranged tensor")
        return Piece(lo, hi, p.source, found[0], found[1][0])

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
            if isinstance(out, torch.Tensor) and out.is_meta:
                self._shadow(func, args, kwargs, out)
            return out
        if func.is_view or packet in _ALIASES:
            return func(*args, **kwargs)
        if func._schema.name.split("::")[-1] == "gptq_marlin_repack":
            return self._repack(func, args, kwargs)
        src = args[0]
        if packet is aten.constant_pad_nd:
            return self._pad(func, args, kwargs)
        if packet in _COPIES:
            out = func(*args, **kwargs)
            if out.dtype != src.dtype:
                self._convert(src, out)
            else:
                self._write(out, self._need(src), self._epilogue(src))
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
            self._write(out, Layout(layout.source, base, tuple(dims)), self._epilogue(src))
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
            self._write(out, Layout(layout.source, layout.base + int(picked[0]), tuple(dims)),
                        self._epilogue(src))
            return out
        if packet in (aten.stack, aten.cat):
            # Each input into its slab of a new tensor.
            inputs, dim = list(args[0]), (args[1] if len(args) > 1 else kwargs.get("dim", 0))
            out = func(*args, **kwargs)
            dim %= out.dim()
            at = 0
            for x in inputs:
                if packet is aten.stack:
                    slab, at = out.select(dim, at), at + 1
                else:
                    slab, at = out.narrow(dim, at, x.shape[dim]), at + x.shape[dim]
                self._write(slab, self._need(x), self._epilogue(x))
            return out
        if packet is aten.copy_:
            dst, value = args[0], args[1]
            if storage_key(value) not in self.storages:
                raise NotRearrangement("a traced tensor overwritten with untraced values")
            if (tiled := self._tiled(value)) is not None:
                if dst.dtype != value.dtype or tuple(dst.shape) != tuple(value.shape):
                    raise NotRearrangement("a copy of Marlin's repack that converts or broadcasts")
                self._write(dst, None, self._epilogue(value), tiled)
                return dst
            if dst.dtype != value.dtype:
                raise NotRearrangement(f"a copy_ converts {self._source(value)} from "
                                       f"{value.dtype} to {dst.dtype}")
            layout = self._need(value)
            if storage_key(dst) == storage_key(value) and self.layout_of(dst) == layout:
                return dst  # a copy onto itself
            if tuple(dst.shape) != tuple(value.shape):
                raise NotRearrangement("a copy that broadcasts")
            self._write(dst, layout, self._epilogue(value))
            return dst
        if packet in _IDEMPOTENT:
            entry = self.storages[storage_key(src)]
            if src.numel() * src.element_size() != src.untyped_storage().nbytes():
                raise NotRearrangement(f"{packet.__name__} on part of a tensor")
            entry.epilogue += ((packet.__name__, tuple(args[1:]), dict(kwargs)),)
            return src
        if packet in _ZEROS and (packet is aten.zero_ or (
                len(args) > 1 and isinstance(args[1], (int, float)) and args[1] == 0)):
            # Padding zeroed before it moves: bytes of the checkpoint format
            # no name writes; where they go stays zero.
            entry = self.storages[storage_key(src)]
            layout = self.layout_of(src)
            if entry.own is None or layout.source != entry.own:
                raise NotRearrangement("zeros written into a rearranged tensor")
            self.zeroed.setdefault(layout.source, []).append(layout)
            return src
        raise NotRearrangement(f"it computes {packet.__name__} on "
                               f"{self._source(traced[0])}")

    def _repack(self, func, args, kwargs) -> torch.Tensor:
        """vLLM's Marlin repack of a traced GPTQ-packed matrix: a new
        tensor whose bytes are its repacked words (a tiled piece)."""
        names = ("b_q_weight", "size_k", "size_n", "num_bits", "is_a_8bit")
        bound = dict(zip(names, args)) | dict(kwargs)
        x, num_bits = bound["b_q_weight"], int(bound["num_bits"])
        if num_bits != 4 or bound.get("is_a_8bit", False):
            raise NotRearrangement(f"Marlin repacks {num_bits}-bit values"
                                   f"{' for 8-bit activations' if bound.get('is_a_8bit') else ''}"
                                   f", which no transform of the plan does")
        if x.dtype != torch.int32 or x.dim() != 2:
            raise NotRearrangement(f"Marlin repacks a {x.dim()}-d {x.dtype} tensor")
        layout = self._need(x)
        if self._epilogue(x):
            raise NotRearrangement("Marlin repacks a tensor with an epilogue")
        out = func(*args, **kwargs)
        n = out.numel() * out.element_size()
        tiled = Tiled("marlin_w4", layout.base, layout.dims[0], layout.dims[1],
                      int(bound["size_k"]), int(bound["size_n"]))
        self.storages[storage_key(out)] = Storage([Piece(0, n, layout.source, tiled=tiled)])
        self.keep.append(out.untyped_storage())
        return out

    def _tiled(self, t: torch.Tensor) -> tuple[str, Tiled] | None:
        """The source and repack ``t`` holds whole, None where it views no
        repack's bytes."""
        entry = self.storages[storage_key(t)]
        size = t.element_size()
        start, stop = t.storage_offset() * size, (t.storage_offset() + t.numel()) * size
        tiled = [p for p in entry.pieces if p.tiled is not None and p.start < stop
                 and start < p.stop]
        if not tiled:
            return None
        if len(tiled) > 1 or not t.is_contiguous() or (tiled[0].start, tiled[0].stop) != (
                start, stop):
            raise NotRearrangement(f"a view of part of Marlin's repack of {tiled[0].source}")
        return tiled[0].source, tiled[0].tiled

    def tiled_place(self, t: torch.Tensor, name: str) -> tuple[str, TiledPlace] | None:
        """Where ``t`` (the live tensor ``name``), if it holds Marlin
        repacks, takes its source's elements from: the source and a
        ``TiledPlace``; None if it holds none."""
        entry = self.storages.get(storage_key(t))
        if entry is None or not any(p.tiled is not None for p in entry.pieces):
            return None
        size = t.element_size()
        if (not t.is_contiguous() or t.storage_offset()
                or t.numel() * size != t.untyped_storage().nbytes()
                or any(p.tiled is None for p in entry.pieces)):
            raise NotRearrangement(f"{name} holds Marlin's repack and other bytes")
        first = entry.pieces[0].tiled
        sources = {p.source for p in entry.pieces}
        if len(sources) != 1 or len({(p.tiled.size_k, p.tiled.size_n, p.tiled.transform)
                                     for p in entry.pieces}) != 1:
            raise NotRearrangement(f"{name} holds Marlin repacks of several shapes or sources")
        source = sources.pop()
        shape, dtype = self.formats[source]
        rows, cols = first.size_k // 8, first.size_n
        span = rows * cols
        blocks, steps = [], set()
        for p in entry.pieces:
            # Each repack's input: a dense block of its source, row-major
            # or transposed.
            rm, cm = p.tiled.rows, p.tiled.cols
            if rows < 2 or cols < 2 or len(rm) != 1 or len(cm) != 1 or p.start % 4 \
                    or p.tiled.base % (4 * span):
                raise NotRearrangement(f"Marlin's input in {name} is no dense block of {source}")
            step = (rm[0][1] // 4, cm[0][1] // 4)
            if step not in ((cols, 1), (1, rows)) or rm[0][1] % 4 or cm[0][1] % 4:
                raise NotRearrangement(f"Marlin's input in {name} is no dense block of {source}")
            steps.add(step)
            blocks.append((p.start // 4, p.tiled.base // 4))
        if len(steps) != 1 or sorted(b for _, b in blocks) != list(range(0, prod(shape), span)):
            raise NotRearrangement(f"{name} does not hold each element of {source} once")
        (kstride, nstride), = steps
        return source, TiledPlace(name, first.transform, first.size_k, first.size_n, kstride,
                                  nstride, tuple(blocks))

    def _pad(self, func, args, kwargs) -> torch.Tensor:
        """Zero padding (``F.pad``) of a traced tensor: a new source, the
        padded tensor, whose part the tensor was (``Padded``)."""
        x, pad = args[0], [int(p) for p in args[1]]
        value = args[2] if len(args) > 2 else kwargs.get("value", 0)
        if value not in (0, 0.0, None):
            raise NotRearrangement(f"it pads {self._source(x)} with {value}, not zeros")
        if any(p < 0 for p in pad):
            raise NotRearrangement(f"a pad that cuts {self._source(x)}")
        layout = self._need(x)
        if self._epilogue(x):
            raise NotRearrangement("a pad of a tensor with an epilogue")
        if layout.source not in self.formats:
            raise NotRearrangement(f"a pad of {layout.source}, padded or converted before")
        out = func(*args, **kwargs)
        lo = [0] * x.dim()
        for i in range(len(pad) // 2):
            lo[x.dim() - 1 - i] = pad[2 * i]
        name = f"{layout.source}@pad{len(self.padded)}"
        self.padded[name] = Padded(layout, tuple(x.shape), tuple(lo), tuple(out.shape),
                                   tuple(out.stride()), out.dtype)
        self.track(out, name)
        return out

    def _convert(self, src: torch.Tensor, out: torch.Tensor) -> None:
        """``out`` is ``src`` converted to another dtype: where ``src`` is a
        whole checkpoint-format tensor as it came, ``out`` is a source of
        its own (its bytes those of the conversion); else no
        rearrangement."""
        entry = self.storages[storage_key(src)]
        layout = self._need(src)
        n = src.numel() * src.element_size()
        whole = [Piece(0, n, layout.source, 0, ((n, 1),) if n > 1 else ())]
        if (layout.source in self.converted or entry.own != layout.source or entry.epilogue
                or src.storage_offset() or not src.is_contiguous()
                or n != src.untyped_storage().nbytes() or _runs(entry.pieces) != whole):
            raise NotRearrangement(f"it converts {layout.source} to {out.dtype} after moving "
                                   f"or changing its elements, or part of it")
        name = f"{layout.source}@{str(out.dtype).removeprefix('torch.')}"
        self.converted[name] = (layout.source, out.dtype)
        self.track(out, name)

    def _shadow(self, func, args, kwargs, out: torch.Tensor) -> None:
        """Values of ``out``, an untraced meta tensor, where its inputs'
        values are known (an index made on the host, moved to the meta
        device, then shifted): the op run again on them, on the host."""
        if not out.is_contiguous() or out.storage_offset() or out.numel() > (1 << 22):
            return
        unknown = []

        def host(a):
            if isinstance(a, torch.Tensor) and a.is_meta:
                known = self.values.get(storage_key(a))
                if known is None:
                    unknown.append(a)
                    return a
                return torch.as_strided(known, a.shape, a.stride(), a.storage_offset())
            if isinstance(a, torch.device) and a.type == "meta":
                return torch.device("cpu")
            return a

        real_args, real_kwargs = tree_map(host, (args, kwargs))
        if unknown:
            return
        with no_dispatch():
            value = func(*real_args, **real_kwargs)
        if isinstance(value, torch.Tensor) and tuple(value.shape) == tuple(out.shape):
            self.values[storage_key(out)] = value.contiguous().view(-1)
            self.keep.append(out.untyped_storage())

    def _source(self, t: torch.Tensor) -> str:
        sources = [p.source for p in self.storages[storage_key(t)].pieces if p.source]
        return sources[0] if sources else "a traced tensor"

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
    """Where a checkpoint-format tensor's bytes go in one live tensor: its
    byte ``x`` (row-major) to the live tensor's byte ``base +
    evaluate(modes, x)`` (from the live tensor's first byte)."""

    live: str  # the live tensor's name in the layer
    base: int
    modes: tuple[Mode, ...]


Box = tuple[tuple[int, int], ...]  # per dim of a checkpoint-format tensor, [start, stop)


@dataclass(frozen=True)
class TiledPlace:
    """Where a source's elements go in a live tensor that holds Marlin
    repacks of blocks of it (a MoE layer's experts, one after another):
    block ``b`` is the GPTQ-packed int32 matrix X ``[size_k / 8, size_n]``
    whose element ``(kw, n)`` is element ``blocks[b][1] + kw * kstride + n
    * nstride`` of the source, dense (row-major, or its transpose: the
    checkpoint's ``[N, K/8]`` as it is), and its repacked words start at
    element ``blocks[b][0]`` of the live tensor."""

    live: str
    transform: str
    size_k: int
    size_n: int
    kstride: int
    nstride: int
    blocks: tuple[tuple[int, int], ...]  # (live element, source element)

    def _block(self, offset: int) -> tuple[int, int] | None:
        span = self.size_k // 8 * self.size_n
        for live, base in self.blocks:
            if base <= offset < base + span:
                return live, offset - base
        return None

    def remap(self, source: str, offset: int, shape: Sequence[int], stride: Sequence[int]
              ) -> list | str:
        """A copy into the region ``(offset, shape, stride)`` (elements) of
        ``source`` as transforming writes: ``(live, offset, shape, stride,
        (transform, box))`` each, ``box`` the part of the region (per dim)
        it writes, its region splitting the transform's output of that
        box; or why it cannot be. The region's rows must run along the
        matrix's N and its columns along K's words, both forwards and whole
        atoms (16 rows by 2 words)."""
        dims = [(d, n, st) for d, (n, st) in enumerate(zip(shape, stride)) if n != 1]
        found = self._block(offset)
        if len(dims) != 2 or found is None:
            return f"a write into {source} is no 2-d block of one of Marlin's matrices"
        (dr, rows, sr), (dc, cols, sc) = dims
        if (sr, sc) != (self.nstride, self.kstride):
            return (f"a write into {source} whose rows are not Marlin's N, its columns "
                    f"K's words")
        live, rel = found
        if self.nstride == 1:
            kw0, n0 = divmod(rel, self.kstride)
        else:
            n0, kw0 = divmod(rel, self.nstride)
        if n0 + rows > self.size_n or (kw0 + cols) * 8 > self.size_k:
            return f"a write into {source} across Marlin's matrices"
        if n0 % 16 or rows % 16 or kw0 % 2 or cols % 2:
            return (f"a write into {source} that cuts Marlin's atoms (16 rows of N by 2 words "
                    f"of K)")
        out = []
        for r in kernel_refs.marlin_w4_regions(self.size_n, self.size_k, n0, kw0, rows, cols):
            box = [(0, n) for n in shape]
            box[dr] = (r.row0 - n0, r.row0 - n0 + r.rows)
            out.append((self.live, live + r.offset, r.size, r.stride,
                        (self.transform, tuple(box))))
        return out

    def zeros(self, box: Box, full: Sequence[int], limit: int = 1 << 16) -> list:
        """Where the elements of ``box`` (of the source, of shape ``full``,
        its last dim along N) are in the live tensor: byte regions
        ``(live, offset, shape, strides)``, whole atoms."""
        if self.nstride != 1:
            raise NotRearrangement(f"padding of Marlin's input {self.live} along K's words")
        strides = [prod(full[d + 1:]) for d in range(len(full))]
        outer = [range(a, b) for a, b in box[:-1]]
        if prod(len(r) for r in outer) > limit:
            raise NotRearrangement(f"padding of Marlin's input {self.live} in too many parts")
        a, b = box[-1]
        runs: dict[tuple[int, int, int], list[int]] = {}
        for index in itertools.product(*outer):
            at = sum(i * st for i, st in zip(index, strides)) + a
            found = self._block(at)
            if found is None:
                raise NotRearrangement(f"padding outside Marlin's matrices of {self.live}")
            live, rel = found
            kw, n = divmod(rel, self.size_n)
            if n + b - a > self.size_n:
                raise NotRearrangement(f"padding across rows of Marlin's matrices of {self.live}")
            runs.setdefault((live, n, n + b - a), []).append(kw)
        out = []
        for (live, n0, n1), kws in runs.items():
            kws.sort()
            start = 0
            for i in range(1, len(kws) + 1):
                if i < len(kws) and kws[i] == kws[i - 1] + 1:
                    continue
                kw0, kw1 = kws[start], kws[i - 1] + 1
                start = i
                if n0 % 16 or (n1 - n0) % 16 or kw0 % 2 or (kw1 - kw0) % 2:
                    raise NotRearrangement(f"padding inside Marlin's atoms of {self.live}")
                for r in kernel_refs.marlin_w4_regions(self.size_n, self.size_k, n0, kw0,
                                                       n1 - n0, kw1 - kw0):
                    out.append((self.live, 4 * (live + r.offset), (*r.size, 4),
                                (*(4 * st for st in r.stride), 1)))
        return out


def _box(offset: int, shape: Sequence[int], stride: Sequence[int], full: Sequence[int]
         ) -> Box | None:
    """The region ``(offset, shape, stride)`` (elements) of a contiguous
    tensor of shape ``full`` as a box of it, None if it is none."""
    strides = [prod(full[d + 1:]) for d in range(len(full))]
    start = []
    for st in strides:
        start.append(offset // st if st else 0)
        offset -= start[-1] * st
    stop = [a + 1 for a in start]
    for n, st in zip(shape, stride):
        if n == 1:
            continue
        dims = [d for d in range(len(full)) if strides[d] == st and full[d] > 1]
        if len(dims) != 1 or stop[dims[0]] - start[dims[0]] != 1:
            return None
        stop[dims[0]] = start[dims[0]] + n
    if any(b > f for b, f in zip(stop, full)):
        return None
    return tuple(zip(start, stop))


def _meet(a: Box, b: Box) -> bool:
    return all(max(x0, y0) < min(x1, y1) for (x0, x1), (y0, y1) in zip(a, b))


@dataclass
class Rearranged:
    """A layer whose processing only moves elements: per checkpoint-format
    tensor, the places its bytes go, and the boxes of it the processing
    zeroes before moving them (padding: no name may write there, and where
    they go stays zero); per live tensor, the epilogue run on it after each
    update's writes (ops in place, as ``(aten op name, args, kwargs)``)."""

    places: dict[str, list[Place]]
    shapes: dict[str, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    zeroed: dict[str, list[Box]] = field(default_factory=dict)
    # Where the zeroed boxes are in the live tensors (``zero_regions``).
    zero_places: list[tuple[str, int, tuple[int, ...], tuple[int, ...]]] = field(
        default_factory=list)
    epilogues: dict[str, tuple] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # live tensor -> source
    # A padded tensor (a source whose places other sources' places lead
    # into): its name -> the source it pads.
    padded: dict[str, str] = field(default_factory=dict)
    # A checkpoint-format tensor the processing converts, whole, before
    # moving it: the dtype its places hold (writes into it convert).
    converted: dict[str, torch.dtype] = field(default_factory=dict)

    def remap(self, source: str, offset: int, shape: Sequence[int], stride: Sequence[int]
              ) -> list[tuple[str, int, tuple[int, ...], tuple[int, ...]]] | str:
        """A copy into the region ``(offset, shape, stride)`` (elements) of
        ``source`` as copies into the live tensors: ``(live tensor, offset,
        shape, stride)`` each, in elements, the shape splitting the
        region's dims in order (a negative stride: that dim runs backwards
        through the live tensor, as where the processing flips pairs of
        rows); or why it cannot be."""
        full, size = self.shapes[source]
        zeroed = self.zeroed.get(source, ())
        if zeroed:
            box = _box(offset, shape, stride, full)
            if box is None or any(_meet(box, z) for z in zeroed):
                return f"a write into {source} may reach bytes vLLM's processing zeroes"
        out = []
        for place in self.places.get(source, ()):
            if isinstance(place, TiledPlace):
                found = place.remap(source, offset, shape, stride)
                if isinstance(found, str):
                    return found
                out += found
                continue
            parts = self._folded(place, offset, tuple(shape), tuple(stride), size)
            if parts is None:
                return (f"a write into {source} at offset {offset}, shape {list(shape)}, "
                        f"strides {list(stride)} does not fold into {place.live}")
            for box, base, sizes, strides in parts:
                if place.live not in self.padded:
                    out.append((place.live, base, sizes, strides) if box is None
                               else (place.live, base, sizes, strides, (None, box)))
                    continue
                # Into a padded tensor: on to where its elements go. A part
                # of the region keeps its dims (its box is in them).
                found = self.remap(place.live, base, sizes, strides)
                if isinstance(found, str):
                    return found
                for item in found:
                    if len(item) == 5 and (box is not None or len(sizes) != len(shape)):
                        return (f"a write into {source} at offset {offset}, shape "
                                f"{list(shape)}, strides {list(stride)} does not fold into "
                                f"{place.live}")
                    out.append(item if box is None else (*item[:4], (None, box)))
        if not out:
            return f"vLLM's processing puts nothing of {source} into the layer"
        return out

    def _folded(self, place: Place, offset: int, shape: tuple, stride: tuple, size: int,
                limit: int = 64) -> list | None:
        """The region ``(offset, shape, stride)`` (elements) of a source in
        ``place``: ``(box, offset, shape, stride)`` parts in elements of the
        live tensor, each shape splitting the region's dims in order; one
        part (box None) where the region folds whole, else parts of it
        (boxes per region dim), cut along a dim at a power of two (a block
        edge of a permutation) until each folds; None past ``limit``
        parts."""
        todo = [tuple((0, n) for n in shape)]
        out = []
        while todo:
            box = todo.pop(0)
            at = offset + sum(a * st for (a, _), st in zip(box, stride))
            sub = tuple(b - a for a, b in box)
            region = self._bytes(place, at * size, (*sub, size),
                                 (*(st * size for st in stride), 1))
            if region is None:
                wide = [d for d, n in enumerate(sub) if n > 1]
                if not wide or len(out) + len(todo) + 2 > limit:
                    return None
                d = wide[0]
                a, b = box[d]
                cut = a + (1 << ((b - a - 1).bit_length() - 1))
                todo[:0] = [box[:d] + ((a, cut),) + box[d + 1:],
                            box[:d] + ((cut, b),) + box[d + 1:]]
                continue
            base, dims = region
            sizes, strides = [], []
            for n, modes in zip(sub, dims):
                for m, st in modes or ((n, 0),):
                    sizes.append(m)
                    strides.append(st // size)
            whole = all(x == (0, n) for x, n in zip(box, shape))
            out.append((None if whole else box, base // size, tuple(sizes), tuple(strides)))
        return out

    @staticmethod
    def _bytes(place: Place, offset: int, shape: tuple, stride: tuple):
        """A byte region of the source in the live tensor: base and per-dim
        modes in its bytes, whole elements only; None if it does not fold."""
        found = compose(place.modes, place.base, offset, shape, stride)
        if found is None:
            return None
        base, dims = found
        size = shape[-1]
        if dims[-1] != (((size, 1),) if size > 1 else ()) or base % size or any(
                st % size for modes in dims[:-1] for _, st in modes):
            return None
        return base, dims[:-1]

    def zero_regions(self, source: str, limit: int = 1 << 16):
        """Where the zeroed boxes of ``source`` are in the live tensors:
        ``(live tensor, byte offset, shape, strides)`` in bytes, a box cut
        along its outer dims where it does not fold whole."""
        full, size = self.shapes[source]
        strides = [prod(full[d + 1:]) for d in range(len(full))]
        out = []
        for place in self.places[source]:
            if isinstance(place, TiledPlace):
                for box in self.zeroed.get(source, ()):
                    out += place.zeros(box, full)
        todo = list(self.zeroed.get(source, ()))
        while todo:
            box = todo.pop()
            offset = sum(a * st for (a, _), st in zip(box, strides))
            shape = tuple(b - a for a, b in box)
            for place in self._plain(source):
                region = self._bytes(place, offset * size, (*shape, size),
                                     (*(st * size for st in strides), 1))
                if region is None:
                    break
                base, dims = region
                sizes = [m for n, modes in zip(shape, dims) for m, _ in modes or ((n, 0),)]
                steps = [st for n, modes in zip(shape, dims) for _, st in modes or ((n, 0),)]
                out.append((place.live, base, (*sizes, size), (*steps, 1)))
            else:
                continue
            if len(out) + len(todo) > limit:
                raise NotRearrangement(f"zeroed bytes of {source} that fold nowhere")
            todo += self._halves(source, box)
        return out

    def _halves(self, source: str, box: Box) -> list[Box]:
        """``box`` cut in two along the innermost dim that does not fold on
        its own, at its largest power-of-two boundary (a block edge), or
        along its outermost dim of more than one."""
        full, size = self.shapes[source]
        strides = [prod(full[d + 1:]) for d in range(len(full))]
        wide = [d for d, (a, b) in enumerate(box) if b - a > 1]
        if not wide:
            raise NotRearrangement(f"zeroed bytes of {source} that fold nowhere")
        cut = wide[0]
        for d in reversed(wide):
            (a, b), offset = box[d], sum(lo * st for (lo, _), st in zip(box, strides))
            if any(self._bytes(p, offset * size, (b - a, size), (strides[d] * size, 1)) is None
                   for p in self._plain(source)):
                cut = d
                break
        a, b = box[cut]
        step = 1 << (b - a).bit_length()
        while step > 1 and (a // step + 1) * step >= b:
            step //= 2
        mid = (a // step + 1) * step if step > 1 else a + 1
        return [box[:cut] + ((a, mid),) + box[cut + 1:], box[:cut] + ((mid, b),) + box[cut + 1:]]

    def _plain(self, source: str) -> list[Place]:
        return [p for p in self.places[source] if isinstance(p, Place)]

    def run_epilogues(self, layer: torch.nn.Module) -> None:
        """The epilogues, on the layer's live tensors."""
        for name, ops in self.epilogues.items():
            t = getattr(layer, name)
            for op, args, kwargs in ops:
                getattr(aten, op)(t.data, *args, **kwargs)


def _places(layout: Layout, live: torch.Tensor, name: str, nbytes: int) -> Place:
    """The inverse of ``layout`` (of the live tensor ``name``): where each
    byte of its source goes. The live tensor must hold every byte of the
    source once."""
    size = live.element_size()
    modes = [(size, 1, 1)] if size > 1 else []  # (size, source stride, live stride)
    base_live, base_src = 0, layout.base
    for d, dim_modes in enumerate(layout.dims):
        step = live.stride()[d] * size
        for n, src in reversed(dim_modes):
            if n > 1:
                if src < 0:  # count this digit down instead
                    base_src += (n - 1) * src
                    base_live += (n - 1) * step
                    modes.append((n, -src, -step))
                else:
                    modes.append((n, src, step))
            step *= n
    modes.sort(key=lambda m: -m[1])
    expect = 1
    for n, src, _ in reversed(modes):
        if src != expect:
            raise NotRearrangement(f"{name} does not hold each element of "
                                   f"{layout.source} once")
        expect *= n
    if base_src != 0 or expect != nbytes:
        raise NotRearrangement(f"{name} does not hold each element of {layout.source} once")
    return Place(name, base_live, tuple((n, lst) for n, _, lst in modes))


class _HostIndex(TorchFunctionMode):
    """Indexing by a Python list of ints as by the same list in a CPU
    tensor: torch makes a list into an index on the indexed tensor's device
    without dispatching (on the meta device its values are then lost to
    ``_Follow``; vLLM permutes Marlin's scales by such lists). The same
    gather either way."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.__getitem__ and len(args) == 2:
            def host(i):
                if isinstance(i, list) and i and all(type(v) is int for v in i):
                    return torch.tensor(i, dtype=torch.int64)
                return i

            index = args[1]
            index = tuple(host(i) for i in index) if isinstance(index, tuple) else host(index)
            args = (args[0], index)
        return func(*args, **kwargs)


@contextlib.contextmanager
def _kept(layer: torch.nn.Module) -> Iterator[None]:
    """The layer's and its quantization method's attributes (not its
    tensors), as they were, afterwards: a traced processing may set state
    (a kernel, a config) from meta tensors, or fill a cache (a dict: its
    entries are restored too, e.g. FlashInfer's permutation indices)."""
    method = getattr(layer, "quant_method", None)
    skip = {"_parameters", "_buffers", "_modules"}
    saved = [(obj, {k: v for k, v in vars(obj).items() if k not in skip})
             for obj in (layer, method) if obj is not None]
    caches = [(v, dict(v)) for _, attrs in saved for v in attrs.values()
              if type(v) is dict]
    try:
        yield
    finally:
        for obj, attrs in saved:
            for k in [k for k in vars(obj) if k not in skip and k not in attrs]:
                delattr(obj, k)
            for k, v in attrs.items():
                setattr(obj, k, v)
        for cache, entries in caches:
            cache.clear()
            cache.update(entries)


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
    # As they are now: the processing may replace a parameter's data (its
    # dtype too) in place.
    formats = follow.formats = {name: (tuple(t.shape), t.dtype)
                                   for name, t in checkpoint.items()}
    with _kept(layer), _HostIndex(), follow:
        try:
            process()
        except NotRearrangement:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the processing raised on meta
            raise NotRearrangement(f"it fails on meta tensors: {type(e).__name__}: {e}") from e
    places: dict[str, list[Place]] = {}
    out = Rearranged(places)
    if zeroed := [n for n in follow.zeroed if n in follow.converted]:
        raise NotRearrangement(f"zeros written into {follow.converted[zeroed[0]][0]} "
                               f"converted")
    # A padded tensor is a source too: the tensor it pads goes there
    # (``Place``s into it), and it goes on into the live tensors.
    for name, pad in follow.padded.items():
        formats[name] = (pad.out_shape, pad.dtype)
        out.padded[name] = pad.layout.source
        inner = torch.empty_strided(pad.out_shape, pad.out_stride, dtype=pad.dtype,
                                    device="meta")
        inner = inner[tuple(slice(a, a + n) for a, n in zip(pad.lo, pad.shape))]
        shape, dtype = formats[pad.layout.source]
        place = _places(pad.layout, inner, name, prod(shape) * dtype.itemsize)
        places.setdefault(pad.layout.source, []).append(
            Place(name, place.base + inner.storage_offset() * pad.dtype.itemsize, place.modes))
        if boxes := pad.boxes():
            out.zeroed[name] = boxes
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
        tiled = follow.tiled_place(t, name) if t.is_meta else None
        if tiled is not None:
            origin, place = tiled
            if formats[origin][1] != real.dtype:
                raise NotRearrangement(f"{name} is {real.dtype}, its source {origin} "
                                       f"{formats[origin][1]}")
            places.setdefault(origin, []).append(place)
            out.sources[name] = origin
            continue
        layout = follow.layout_of(t) if t.is_meta else None
        if layout is None:
            if name in checkpoint:
                raise NotRearrangement(f"{name} does not come from the checkpoint format")
            continue  # not of the checkpoint format (an expert map): left as it is
        origin, dtype = follow.converted.get(layout.source, (layout.source, None))
        shape, want = formats[origin]
        want = dtype or want
        # Without a conversion, the live tensor may view the same bytes as
        # another dtype of their size (mxfp4 scales, uint8 as fp8).
        if want != real.dtype and (dtype is not None or want.itemsize != real.itemsize):
            raise NotRearrangement(f"{name} is {real.dtype}, its source {origin} {want}")
        if origin in places and out.converted.get(origin) != dtype:
            raise NotRearrangement(f"{origin} goes into the layer both as it is and converted")
        if dtype is not None:
            out.converted[origin] = dtype
        places.setdefault(origin, []).append(
            _places(layout, real, name, prod(shape) * want.itemsize))
        out.sources[name] = origin
        epilogue = follow.storages[storage_key(t)].epilogue
        if epilogue:
            out.epilogues[name] = epilogue
    missing = [n for n, (shape, _) in formats.items() if n not in places and prod(shape)]
    if missing:
        raise NotRearrangement(f"vLLM's processing puts nothing of {missing[0]} into the layer")
    for name, (shape, dtype) in formats.items():
        # Places are in bytes of what the layer holds: a conversion's.
        out.shapes[name] = (shape, out.converted.get(name, dtype).itemsize)
        size = dtype.itemsize
        for layout in follow.zeroed.get(name, ()):
            dims = []
            for modes in layout.dims:
                if len(modes) > 1 or any(st % size for _, st in modes):
                    raise NotRearrangement(f"zeros written into {name} in no box of it")
                dims.append(modes[0] if modes else (1, 0))
            box = _box(layout.base // size, [n for n, _ in dims],
                       [st // size for _, st in dims], shape)
            if box is None or layout.base % size:
                raise NotRearrangement(f"zeros written into {name} in no box of it")
            out.zeroed.setdefault(name, []).append(box)
        if name in out.zeroed:
            out.zero_places += out.zero_regions(name)  # each zeroed box has its place
    return out
