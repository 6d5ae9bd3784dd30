"""Launch overhead, measured: what one operator costs before any arithmetic, how many operators a
DiT step issues, and which of them would stop a CUDA graph from capturing the step.

The model (Horace He, "Making Deep Learning Go Brrrr From First Principles"): a step's time is
roughly ``max(ops x per-op overhead, arithmetic time)`` on a GPU, where the host queues kernels
while the device runs earlier ones, and ``ops x overhead + arithmetic`` on a CPU, which does
both on the same core. A step is *overhead-bound* when the first term wins: then a faster GPU
does not help, and a CUDA graph (one launch for the whole step) or fusion (fewer ops) does."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

from ppdit.analysis.measure import best_of, best_time
from ppdit.cuda_graph import StepGraph
from ppdit.model import build_model
from ppdit.presets import get_preset
from ppdit.runtime.device import Placement
from ppdit.runtime.observe.timing import MIN_ROUNDS, repeat
from ppdit.sampler import Denoiser, Request, SamplingConfig


def per_op_overhead_us(placement: Placement | None = None, calls: int = 2000,
                       repeats: int = 5) -> dict[str, float]:
    """Microseconds per call of operators whose arithmetic is negligible (1-element tensors).
    ``add(out=)`` is the dispatch path alone; ``a + b`` adds an allocation; ``view`` is an op
    that launches no kernel at all (metadata only). On a GPU the calls only *queue* kernels, so
    ``calls`` of them are timed together, to the last one's end: the host's issue rate, which
    is what bounds a step made of many small kernels. Best of ``repeats``."""
    placement = placement or Placement(torch.device("cpu"), "gloo")
    dev = placement.device
    a, b, out = torch.ones(1, device=dev), torch.ones(1, device=dev), torch.empty(1, device=dev)
    cases = {
        "torch.add(a, b, out=c)": lambda: torch.add(a, b, out=out),
        "a + b (allocates)": lambda: a + b,
        "a.view(1) (no kernel)": lambda: a.view(1),
    }
    # the first of the repeats + 1 runs is a warm-up
    return {name: best_of(fn, placement, calls=calls, repeats=repeats + 1) * 1e6
            for name, fn in cases.items()}


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


def is_aten(event) -> bool:
    """Whether a profiler event is an aten operator (not a marker or another annotation)."""
    return event.name.startswith("aten::")


def has_aten_ancestor(event) -> bool:
    """Whether an aten operator encloses ``event``: then another op called it, not Python."""
    parent = event.cpu_parent
    while parent is not None:
        if is_aten(parent):
            return True
        parent = parent.cpu_parent
    return False


def count_ops(fn: Callable[[], object]) -> OpCount:
    """Profile one call of ``fn`` (after a warm-up call) and count its aten operators."""
    fn()
    with _quiet_native_output(), profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    aten = [e for e in prof.events() if is_aten(e)]
    top = [e for e in aten if not has_aten_ancestor(e)]
    by_name = dict(Counter(e.name for e in top).most_common())
    return OpCount(len(top), len(aten), by_name)


# what breaks capture

HAZARDS = {
    "host sync": "the host waits for the GPU to read a value (.item(), bool(t), int(t), "
                 "`if t:`) — illegal while capturing, and the value would be frozen anyway",
    "host data": "a tensor made from Python data (torch.tensor([...])) — a host-to-device "
                 "copy whose value the graph would replay forever",
    "dynamic shape": "an output whose size depends on tensor *values* (boolean masks, nonzero, "
                     "repeat_interleave with tensor repeats): sizing it needs a host sync",
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


# A step of StepGraph: what it costs, and what replaying it saves


@dataclass(frozen=True)
class StepCost:
    """One denoising step of one model size and batch, measured on this machine."""
    preset: str
    batch: int
    tokens: int  # tokens per sample
    step_s: float  # best time of one step (model forward + Euler update)
    ops: int  # top-level operators per step (profiler)
    per_op_s: float  # measured cost of one trivial operator

    @property
    def overhead_s(self) -> float:
        """The step's launch/dispatch share, estimated as ops x per-op cost."""
        return self.ops * self.per_op_s

    @property
    def overhead_share(self) -> float:
        """Estimated fraction of the step spent issuing operators rather than computing."""
        return min(1.0, self.overhead_s / self.step_s)


def step_costs(presets: tuple[str, ...] = ("tiny", "small"), batches: tuple[int, ...] = (1, 4),
               *, per_op_s: float, num_steps: int = 4, min_time_s: float = 0.05
               ) -> list[StepCost]:
    """Time one step (the ``StepGraph`` body, eager here) for each preset and batch size."""
    rows, sampling = [], SamplingConfig(num_steps=num_steps)
    for name in presets:
        preset = get_preset(name)
        model = build_model(preset, seed=0)
        for b in batches:
            shape = (b, *preset.latent_shape[1:])
            runner = StepGraph(model, latent_shape=shape, sampling=sampling, preset=preset)
            latent = torch.randn(shape, generator=torch.Generator().manual_seed(b))
            ops = count_ops(lambda r=runner, x=latent: r.step(x, 0)).top_level
            t = best_time(lambda r=runner, x=latent: r.step(x, 0), min_time_s, repeats=3)
            rows.append(StepCost(name, b, preset.num_tokens(shape), t, ops, per_op_s))
    return rows


def eager_vs_graph_ms(model: torch.nn.Module, *, preset: str, latent_shape: tuple[int, ...],
                      placement, steps: int = 20, rounds: int = MIN_ROUNDS) -> dict[str, float]:
    """GPU only: ms per step of the eager ``Denoiser.step`` vs a replayed ``StepGraph``, the
    median of ``rounds`` runs of ``steps`` steps each after one warm-up run."""
    if not placement.is_cuda:
        raise ValueError("eager_vs_graph_ms needs a CUDA placement: on CPU there is no graph "
                         "to replay (StepGraph runs eagerly there)")
    sampling, request = SamplingConfig(num_steps=steps), Request(0, 0)
    den = Denoiser(model, preset, sampling)
    state0 = den.initial_state(request, latent_shape)

    def eager():
        state = state0
        for _ in range(steps):
            state = den.step(state, request)

    with StepGraph(model, latent_shape=latent_shape, sampling=sampling, preset=preset,
                   placement=placement) as graph:
        graph.load_request(request)
        out = {}
        for name, fn in [("eager", eager), ("graph", lambda: graph.run(state0.latent,
                                                                         range(steps)))]:
            runs = repeat(fn, placement, rounds=rounds, warmup=1)
            out[f"{name}_ms"] = runs.median / steps * 1e3
    out["speedup"] = out["eager_ms"] / out["graph_ms"]
    return out
