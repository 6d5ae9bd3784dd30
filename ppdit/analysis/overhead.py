"""Launch overhead, measured: what one operator costs before any arithmetic, how many operators a
DiT step issues, and which of them would stop a CUDA graph from capturing the step.

The model (Horace He, "Making Deep Learning Go Brrrr From First Principles"): a step's time is
roughly ``max(ops x per-op overhead, arithmetic time)`` on a GPU, where the host queues kernels
while the device runs earlier ones, and ``ops x overhead + arithmetic`` on a CPU, which does
both on the same core. A step is *overhead-bound* when the first term wins: then a faster GPU
does not help, and a CUDA graph (one launch for the whole step) or fusion (fewer ops) does.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

from ppdit.runtime.device import Placement


def per_op_overhead_us(placement: Placement | None = None, calls: int = 2000,
                       repeats: int = 5) -> dict[str, float]:
    """Microseconds per call of operators whose arithmetic is negligible (1-element tensors).

    ``add(out=)`` is the dispatch path alone; ``a + b`` adds an allocation; ``view`` is an op
    that launches no kernel at all (metadata only). On a GPU the calls only *queue* kernels, so
    ``calls`` of them are timed up to one synchronize: the host's issue rate, which is what
    bounds a step made of many small kernels. Best of ``repeats``.
    """
    placement = placement or Placement(torch.device("cpu"), "gloo")
    dev = placement.device
    a, b, out = torch.ones(1, device=dev), torch.ones(1, device=dev), torch.empty(1, device=dev)
    cases = {
        "torch.add(a, b, out=c)": lambda: torch.add(a, b, out=out),
        "a + b (allocates)": lambda: a + b,
        "a.view(1) (no kernel)": lambda: a.view(1),
    }
    result = {}
    for name, fn in cases.items():
        best = float("inf")
        for _ in range(repeats + 1):  # the first round is a warm-up
            placement.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            placement.synchronize()
            best = min(best, (time.perf_counter() - start) / calls)
        result[name] = best * 1e6
    return result


def pointwise_chain(x: torch.Tensor, n: int = 20) -> torch.Tensor:
    """``n`` rounds of ``sin(x) * 1.01 + 0.1``: 3n tiny elementwise ops, the textbook
    overhead-bound workload (and one a compiler fuses into a single kernel)."""
    for _ in range(n):
        x = torch.sin(x) * 1.01 + 0.1
    return x


@dataclass(frozen=True)
class OpCount:
    """Operators one call issued, as the profiler saw them."""

    top_level: int  # aten ops called from Python (each pays the Python -> dispatcher trip)
    total: int  # including ops that other ops call internally (linear -> addmm, ...)
    by_name: dict[str, int]  # top-level ops by name, most frequent first


@contextlib.contextmanager
def _quiet_native_output() -> Iterator[None]:
    """Silence what native code writes to fds 1 and 2 while profiling (some profiler builds log
    start/stop lines with timestamps there), so notebook outputs stay deterministic."""
    if not sys.platform.startswith("linux"):
        yield
        return
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    sys.stderr.flush()
    libc.fflush(None)
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        libc.fflush(None)
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(devnull)


def count_ops(fn: Callable[[], object]) -> OpCount:
    """Profile one call of ``fn`` (after a warm-up call) and count its aten operators."""
    fn()
    with _quiet_native_output(), profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    aten = [e for e in prof.events() if e.name.startswith("aten::")]
    top = [e for e in aten if not _has_aten_parent(e)]
    by_name = dict(Counter(e.name for e in top).most_common())
    return OpCount(len(top), len(aten), by_name)


def _has_aten_parent(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


# ----------------------------------------------------------------------------------------------
# what breaks capture
# ----------------------------------------------------------------------------------------------

HAZARDS = {
    "host sync": "the host waits for the GPU to read a value (.item(), bool(t), int(t), "
                 "`if t:`) — illegal while capturing, and the value would be frozen anyway",
    "host data": "a tensor made from Python data (torch.tensor([...])) — a host-to-device "
                 "copy whose value the graph would replay forever",
    "dynamic shape": "an output whose size depends on tensor *values* (boolean masks, "
                     "nonzero, repeat_interleave with tensor repeats): sizing it needs a host "
                     "sync",
}
_SYNC_OPS = {"aten._local_scalar_dense"}
_HOST_DATA_OPS = {"aten.lift_fresh", "aten.lift_fresh_copy"}
_DYNAMIC_OPS = {"aten.nonzero", "aten.masked_select", "aten.unique", "aten._unique2",
                "aten.unique_consecutive", "aten.repeat_interleave"}


class _HazardScan(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.found: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        kind = ("host sync" if name in _SYNC_OPS else "host data" if name in _HOST_DATA_OPS
                else "dynamic shape" if name in _DYNAMIC_OPS or _bool_index(name, args)
                else None)
        if kind is not None:
            self.found.append((kind, str(func)))
        return func(*args, **(kwargs or {}))


def _bool_index(name: str, args) -> bool:
    if name not in ("aten.index", "aten.index_put", "aten.index_put_"):
        return False
    indices = args[1] if len(args) > 1 else []
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)


def capture_hazards(fn: Callable[[], object]) -> Counter:
    """Run ``fn`` once on any device and count the operators that would break (or silently
    freeze) a CUDA-graph capture of it, as ``{(hazard, op): count}``. Empty: capturable as far
    as operators can tell (Python-side decisions on non-tensor values are not visible here)."""
    with _HazardScan() as scan:
        fn()
    return Counter(scan.found)


__all__ = ["HAZARDS", "OpCount", "capture_hazards", "count_ops", "per_op_overhead_us",
           "pointwise_chain"]
