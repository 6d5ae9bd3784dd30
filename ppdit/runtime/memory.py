"""Peak tensor memory of a piece of code, on the GPU and on the CPU, measured the same way.

On a GPU the caching allocator keeps the answer: ``torch.cuda.max_memory_allocated`` after
``reset_peak_memory_stats``. The CPU has no such counter, and the usual stand-ins mislead:
``tracemalloc`` sees only Python's own allocator (torch tensors are invisible to it), and the
process's peak RSS cannot be reset and includes whatever malloc keeps cached. So on the CPU
ppdit counts *live tensor bytes* itself: a ``TorchDispatchMode`` sees every tensor an operator
returns, adds its storage's size, and a ``weakref.finalize`` on the storage subtracts it when
the storage is freed. The peak of that running sum is the CPU analogue of
``max_memory_allocated`` (minus kernel-internal workspaces, which no operator returns).

Both count only what is allocated *inside* the block: weights and inputs made before it are
the baseline, not part of the peak.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ppdit.runtime.device import Placement


@dataclass
class PeakMemory:
    """Filled in when the ``track_peak_memory`` block exits."""

    peak_bytes: int = 0  # most bytes allocated at once inside the block, above the baseline
    how: str = ""  # "cuda max_memory_allocated" or "cpu live tensor bytes"

    @property
    def peak_mib(self) -> float:
        """The peak in MiB."""
        return self.peak_bytes / 2**20


class _LiveTensorBytes(TorchDispatchMode):
    """Running sum of the storages that operators return, while they are alive."""

    def __init__(self):
        super().__init__()
        self.current = 0
        self.peak = 0
        self._live: dict[int, weakref.finalize] = {}  # storages allocated inside the block
        self._outside: dict[int, weakref.ref] = {}  # storages that existed before it

    def _freed(self, key: int, nbytes: int) -> None:
        self._live.pop(key, None)
        self.current -= nbytes

    def _known_outside(self, storage) -> bool:
        ref = self._outside.get(storage.data_ptr())
        return ref is not None and ref() is storage

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                if storage.data_ptr() not in self._live:  # an input the block did not allocate
                    self._outside[storage.data_ptr()] = weakref.ref(storage)
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            # Views, in-place results and out= results reuse a storage: count each one once,
            # and never one that existed before the block (weights, inputs).
            if nbytes == 0 or key in self._live or self._known_outside(storage):
                continue
            self._outside.pop(key, None)
            self._live[key] = weakref.finalize(storage, self._freed, key, nbytes)
            self.current += nbytes
            self.peak = max(self.peak, self.current)
        return out

    def detach(self) -> None:
        """Stop counting frees that happen after the block (the result is already taken)."""
        for fin in self._live.values():
            fin.detach()
        self._live.clear()
        self._outside.clear()


@contextmanager
def track_peak_memory(placement: Placement | None = None) -> Iterator[PeakMemory]:
    """``with track_peak_memory(placement) as mem: ...`` -> ``mem.peak_bytes`` afterwards.

    On a CUDA placement: the allocator's peak, relative to what was allocated at entry. On the
    CPU: the live-tensor count described in the module docstring (it slows dispatch a little,
    so time code in a separate run).
    """
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
        with mode:
            yield result
    finally:
        result.peak_bytes, result.how = mode.peak, "cpu live tensor bytes"
        mode.detach()


__all__ = ["PeakMemory", "track_peak_memory"]
