"""Targets: the parameters and buffers of the live model a loader may
write, grouped by storage, and where a destination tensor lies in them."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .. import _ir



@dataclass
class Target:
    """A parameter or buffer of the live model, as a write destination."""

    index: int  # in the capture's targets: the IR's @t<index>
    module: str
    tensor: str
    real: torch.Tensor
    owner: torch.nn.Module  # the module that holds it as `tensor`
    storage: int  # its storage's index: the IR's @s<storage>
    byte_offset: int  # of its first element in its storage
    byte_extent: int  # from its first byte to one past its last

    @property
    def qualified_name(self) -> str:
        return f"{self.module}.{self.tensor}" if self.module else self.tensor


def storage_key(t: torch.Tensor) -> int:
    """The identity of ``t``'s storage (shared by all views of it)."""
    return t.untyped_storage()._cdata


def _byte_extent(t: torch.Tensor) -> int:
    if t.numel() == 0:
        return 0
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return (last + 1) * t.element_size()


class Targets:
    """Every parameter and buffer the IR can hold, grouped by storage."""

    def __init__(self, model: torch.nn.Module):
        self.targets: list[Target] = []
        # storage key -> (index, size in bytes, targets by byte offset)
        self.storages: dict[int, tuple[int, int, list[Target]]] = {}
        seen: set[int] = set()
        tensors = itertools.chain(model.named_parameters(), model.named_buffers())
        for name, t in tensors:
            if t is None or id(t) in seen:
                continue
            seen.add(id(t))
            if t.is_meta or not _ir.has_element_type(t.dtype):
                continue  # nothing to write into, or no IR type for it
            key = storage_key(t)
            if key not in self.storages:
                size = t.untyped_storage().nbytes()
                self.storages[key] = (len(self.storages), size, [])
            storage, _, on_storage = self.storages[key]
            module, _, tensor = name.rpartition(".")
            target = Target(
                index=len(self.targets),
                module=module,
                tensor=tensor,
                real=t,
                owner=model.get_submodule(module),
                storage=storage,
                byte_offset=t.storage_offset() * t.element_size(),
                byte_extent=_byte_extent(t),
            )
            self.targets.append(target)
            on_storage.append(target)
        for _, _, on_storage in self.storages.values():
            on_storage.sort(key=lambda tg: tg.byte_offset)

    def on_storage(self, t: torch.Tensor) -> list[Target]:
        """The targets that share ``t``'s storage (none: not a target)."""
        entry = self.storages.get(storage_key(t))
        return entry[2] if entry else []

    def locate(self, t: torch.Tensor) -> tuple[Target | None, int | None]:
        """The target to write ``t`` relative to, and ``t``'s offset from its
        first byte in elements of ``t``'s dtype.

        Prefers the target that holds ``t``'s first byte; any earlier target
        of the storage does if its distance is a whole number of elements.
        ``(target, None)``: ``t`` is in a target storage but no target gives
        a whole offset; ``(None, None)``: ``t`` is in no target storage, or
        before every target of it.
        """
        on_storage = self.on_storage(t)
        start = t.storage_offset() * t.element_size()
        size = t.element_size()
        holding = aligned = None
        earlier = None
        for target in on_storage:
            if target.byte_offset > start:
                break
            earlier = target
            rel = start - target.byte_offset
            if rel % size:
                continue
            aligned = target
            if rel < target.byte_extent:
                holding = target
        chosen = holding or aligned
        if chosen is not None:
            return chosen, (start - chosen.byte_offset) // size
        return earlier, None

    def records(self, string_id: Callable[[str], int],
                type_id: Callable[[Sequence[int], torch.dtype], int]) -> list[tuple[int, ...]]:
        """The storage and target records (RecordOps.h), with strings and
        types as ``string_id`` and ``type_id`` index them."""
        storage, target = _ir.OP_CODES["storage"], _ir.OP_CODES["target"]
        out = [(storage, size) for _, size, _ in self.storages.values()]
        for tg in self.targets:
            t = tg.real
            out.append((target, string_id(tg.module), string_id(tg.tensor), tg.storage,
                        tg.byte_offset, type_id(tuple(t.shape), t.dtype), *t.stride()))
        return out
