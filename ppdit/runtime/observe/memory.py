"""Peak tensor memory of a piece of code, on the GPU and on the CPU, measured the same way.

On a GPU, ``max_memory_allocated`` after ``reset_peak_memory_stats``. The CPU has no such
counter, and the stand-ins mislead (``tracemalloc`` cannot see torch tensors; peak RSS cannot be
reset and includes malloc's cache), so ppdit counts *live tensor bytes*: a ``TorchDispatchMode``
adds the storage size of every tensor an operator returns, and a ``weakref.finalize`` subtracts
it when the storage is freed; a storage resized in place (``UntypedStorage.resize_``, as FSDP2
frees and regrows gathered weights) counts its change. The running sum's peak is the CPU analogue
of ``max_memory_allocated`` (minus kernel workspaces). Wrapper subclasses (``DTensor``,
``AsyncCollectiveTensor``) own no storage: their inner tensors count.

Both count only what is allocated *inside* the block; ``held_bytes`` counts the weights.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten

from ppdit.runtime.device import Placement


@dataclass
class PeakMemory:
    """Filled in when the ``track_peak_memory`` block exits."""

    peak_bytes: int = 0  # most bytes allocated at once inside the block, above the baseline
    how: str = ""  # "cuda max_memory_allocated" or "cpu live tensor bytes"


def held_bytes(module: torch.nn.Module | None) -> int:
    """Bytes of a module's parameters and buffers held by this rank (each storage once; of a
    sharded parameter, its local shard): the baseline a run's peak comes on top of."""
    total, seen = 0, set()
    for t in [] if module is None else [*module.parameters(), *module.buffers()]:
        if hasattr(t, "to_local"):  # a DTensor (FSDP, TP): only the local shard is here
            local = t.to_local()
            total += local.numel() * local.element_size()
            continue
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


def _storage(t) -> torch.UntypedStorage | None:
    """The storage whose bytes ``t`` occupies, or None where it has none of its own to count
    (a meta tensor, a wrapper subclass: see the module)."""
    if (not isinstance(t, torch.Tensor) or t.device.type == "meta"
            or is_traceable_wrapper_subclass(t)):
        return None
    return t.untyped_storage()


class _LiveTensorBytes(TorchDispatchMode):
    """Running sum of the storages that operators return, while they are alive.

    Storages are keyed by their C++ object (``_cdata``): every view of a storage shares it, and
    it survives a resize (a data pointer does neither: a resized storage moves, an empty one
    has none)."""

    def __init__(self):
        super().__init__()
        self.current = 0
        self.peak = 0
        self._live: dict[int, weakref.finalize] = {}  # storages allocated inside the block
        self._nbytes: dict[int, int] = {}  # what each of them counts for now
        self._outside: dict[int, weakref.ref] = {}  # storages that existed before it

    def _count(self, key: int, storage, nbytes: int) -> None:
        self._live[key] = weakref.finalize(storage, self._freed, key)
        self._nbytes[key] = nbytes
        self._add(nbytes)

    def _add(self, nbytes: int) -> None:
        self.current += nbytes
        self.peak = max(self.peak, self.current)

    def _freed(self, key: int) -> None:
        self._live.pop(key, None)
        self.current -= self._nbytes.pop(key, 0)

    def resized(self, storage, before: int) -> None:
        """A storage changed size in place (see the module): the change counts, whoever
        allocated the storage."""
        key, delta = storage._cdata, storage.nbytes() - before
        if key in self._live:
            self._nbytes[key] += delta
            self._add(delta)
        elif delta:
            self._count(key, storage, delta)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in tree_flatten((args, kwargs))[0]:
            storage = _storage(t)
            if storage is not None and storage._cdata not in self._live:
                self._outside[storage._cdata] = weakref.ref(storage)  # not the block's
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            storage = _storage(t)
            if storage is None:
                continue
            key, nbytes = storage._cdata, storage.nbytes()
            older = self._outside.get(key)
            # Views, in-place results and out= results reuse a storage: count each one once,
            # and never one that existed before the block (weights, inputs).
            if nbytes == 0 or key in self._live or (older is not None and older() is storage):
                continue
            self._outside.pop(key, None)
            self._count(key, storage, nbytes)
        return out

    def detach(self) -> None:
        """Stop counting frees that happen after the block (the result is already taken)."""
        for fin in self._live.values():
            fin.detach()
        self._live.clear()
        self._nbytes.clear()
        self._outside.clear()


_TRACKERS: list[_LiveTensorBytes] = []  # the blocks being tracked now (they may nest)
_RESIZE = torch.UntypedStorage.resize_


def _tracked_resize(storage, size):
    """``UntypedStorage.resize_`` that tells every active tracker (resizes bypass dispatch)."""
    before = storage.nbytes()
    out = _RESIZE(storage, size)
    for tracker in _TRACKERS:
        tracker.resized(storage, before)
    return out


@contextmanager
def _counting(mode: _LiveTensorBytes) -> Iterator[None]:
    """The dispatch mode on, and storage resizes reported to it, for the block."""
    _TRACKERS.append(mode)
    torch.UntypedStorage.resize_ = _tracked_resize
    try:
        with mode:
            yield
    finally:
        _TRACKERS.remove(mode)
        if not _TRACKERS:
            torch.UntypedStorage.resize_ = _RESIZE


@contextmanager
def track_peak_memory(placement: Placement | None = None) -> Iterator[PeakMemory]:
    """``with track_peak_memory(placement) as mem: ...`` -> ``mem.peak_bytes`` afterwards
    (see the module). On the CPU the count slows dispatch a little: time code in another run."""
    result = PeakMemory()
    if placement is not None and placement.is_cuda:
        placement.synchronize()
        torch.cuda.reset_peak_memory_stats(placement.device)
        base = torch.cuda.memory_allocated(placement.device)
        try:
            yield result
        finally:
            placement.synchronize()
            result.peak_bytes = torch.cuda.max_memory_allocated(placement.device) - base
            result.how = "cuda max_memory_allocated"
        return
    mode = _LiveTensorBytes()
    try:
        with _counting(mode):
            yield result
    finally:
        result.peak_bytes, result.how = mode.peak, "cpu live tensor bytes"
        mode.detach()
