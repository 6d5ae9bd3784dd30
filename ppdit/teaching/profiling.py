"""Reading a real ``torch.profiler`` trace of one denoising step, next to ppdit's own spans.

Why: lesson 08 counts a step's operators with ``count_ops``, a profiler run reduced to two
numbers. A learner who will read a GPU trace needs the raw material: every aten call as a timed
event with its parent, the ``key_averages`` table (self vs total time), the Chrome trace that
Perfetto opens. The events are reduced as the lesson counts them, so the table, the count and
the figure can be checked against each other.

Two clocks meet here. The profiler stamps its events on its own clock; ppdit's ``Tracer`` uses
the host's monotonic clock (``now_ns``). They are not the same clock, so they are aligned on a
shared marker: the step runs inside a ``record_function`` marker (a profiler event) *and*, just
inside it, a ``Tracer`` span, and each lane is drawn from its own start of that step. The error
is at most the difference of the two lengths (``StepProfile.alignment_us``, microseconds)."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile, record_function

from ppdit.analysis.overhead import _quiet_native_output, has_aten_ancestor, is_aten
from ppdit.runtime.observe.timing import now_ns
from ppdit.runtime.observe.trace import Trace, Tracer, merge
from ppdit.teaching.claims import _checkout

MARKER = "ppdit step"  # the record_function that brackets the profiled step

# The families of ``op_family``, in the order it tests them (``ppdit.viz.profiling`` colours them)
FAMILIES = ("linear / matmul", "attention", "norm", "elementwise", "other (views, casts, copies)")
_MATMUL = {"linear", "addmm", "mm", "bmm", "matmul", "baddbmm", "einsum", "conv1d", "conv2d",
           "conv3d", "convolution", "_convolution"}
_ELEMENTWISE = {"add", "sub", "mul", "div", "neg", "exp", "log", "sin", "cos", "pow", "sqrt",
                "rsqrt", "tanh", "sigmoid", "gelu", "silu", "relu", "clamp", "where", "lerp",
                "addcmul", "addcdiv", "reciprocal", "fill", "copy", "zero", "rsub", "square"}


def op_family(name: str) -> str:
    """The colour family of an aten operator name (``aten::linear`` -> "linear / matmul").
    Why families and not names: a step has dozens of distinct operators, too many colours to
    read; what a trace reader asks first is *which kind* of work fills the time."""
    base = name.removeprefix("aten::").rstrip("_")
    tests = (base in _MATMUL, "attention" in base, "norm" in base, base in _ELEMENTWISE, True)
    return FAMILIES[tests.index(True)]


@dataclass(frozen=True)
class OpSpan:
    """One top-level operator of the step, in µs from the step's start on the profiler clock."""
    name: str
    start_us: float
    end_us: float

    @property
    def family(self) -> str:
        return op_family(self.name)

    @property
    def duration_us(self) -> float:
        """Its total time, the operators it calls included."""
        return self.end_us - self.start_us


def top_level_events(events: list[FunctionEvent]) -> list[FunctionEvent]:
    """The aten events no other aten event encloses (``count_ops``'s top level, so the two counts
    can be compared), in start order: the calls Python made. Without a marker these are exactly
    the events with ``cpu_parent is None``; with one, they are the marker's children."""
    top = [e for e in events if is_aten(e) and not has_aten_ancestor(e)]
    return sorted(top, key=lambda e: e.time_range.start)


def call_tree(event: FunctionEvent, depth: int = 0, max_depth: int = 3) -> str:
    """``event`` and the aten calls it makes, one per line, indented: what the profiler's
    "# of Calls" counts beyond the top-level call (``aten::linear`` -> ``aten::addmm`` ...)."""
    lines = ["  " * depth + event.name]
    if depth < max_depth:
        lines += [call_tree(c, depth + 1, max_depth) for c in event.cpu_children]
    return "\n".join(lines)


@dataclass
class StepProfile:
    """One step as the profiler saw it, and as ppdit's ``Tracer`` saw it."""
    prof: profile  # the profiler itself: key_averages(), export_chrome_trace()
    top: list[FunctionEvent]  # top-level aten events, in start order
    aten_calls: int  # every aten event, nested calls included
    marker: FunctionEvent  # the record_function around the step
    trace: Trace  # ppdit's spans (kind "step" and "module"), ns from the step's start
    ops: list[OpSpan] = field(init=False)

    def __post_init__(self) -> None:
        t0 = self.marker.time_range.start
        self.ops = [OpSpan(e.name, e.time_range.start - t0, e.time_range.end - t0)
                    for e in self.top]

    @property
    def step_us(self) -> float:
        """The step's length on the profiler clock (the marker's span)."""
        return self.marker.time_range.end - self.marker.time_range.start

    @property
    def tracer_step_us(self) -> float:
        """The same step's length on ppdit's clock (the ``Tracer`` span)."""
        span = self.trace.select(kind="step")[0]
        return (span.end_ns - span.start_ns) / 1e3

    @property
    def alignment_us(self) -> float:
        """How much longer the marker is than the Tracer span inside it: an upper bound on the
        error of aligning the two lanes by their starts."""
        return self.step_us - self.tracer_step_us

    @property
    def ops_us(self) -> float:
        """Time inside top-level operators; the rest of the step is Python between them."""
        return sum(op.duration_us for op in self.ops)

    def by_family_us(self) -> dict[str, float]:
        """Time inside top-level operators of each family, µs (every family, 0 if absent)."""
        out = dict.fromkeys(FAMILIES, 0.0)
        for op in self.ops:
            out[op.family] += op.duration_us
        return out

    def by_name(self) -> dict[str, int]:
        """Top-level calls by operator name, most frequent first (``OpCount.by_name``'s form)."""
        return dict(Counter(op.name for op in self.ops).most_common())


@contextlib.contextmanager
def module_spans(model: torch.nn.Module, tracer: Tracer) -> Iterator[None]:
    """Record a ``module`` span on ``tracer`` for each direct child of ``model`` and for each
    block, with forward hooks (removed on exit): ppdit's own view of where the step is.
    Why hooks: they are pure Python, so they add no aten event and leave the profiler's counts
    as they were; and they name the model's parts, which the flat list of aten calls does not."""
    parts: list[tuple[str, torch.nn.Module]] = []
    for name, child in model.named_children():
        if isinstance(child, torch.nn.ModuleList):
            parts += [(f"{name[:-1] if name.endswith('s') else name} {i}", m)
                      for i, m in enumerate(child)]
        else:
            parts.append((name, child))
    names = {id(module): name for name, module in parts}
    opened: dict[int, int] = {}

    def before(module, args) -> None:
        opened[id(module)] = now_ns()

    def after(module, args, output) -> None:
        tracer.record("module", names[id(module)], opened.pop(id(module)), now_ns())

    handles = [h for _, module in parts for h in (module.register_forward_pre_hook(before),
                                                  module.register_forward_hook(after))]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def profile_step(fn: Callable[[], object], model: torch.nn.Module | None = None,
                 record_shapes: bool = True, warmup: int = 1) -> StepProfile:
    """Run ``fn`` (one denoising step) ``warmup`` times, then once under the CPU profiler,
    inside a ``record_function`` marker and a ``Tracer`` span; with ``model``, its parts get
    ppdit spans too (``module_spans``). Why the warm-up: the first call allocates and picks
    kernels, which a steady step does not. Native profiler log lines are silenced, so a
    notebook's output stays deterministic."""
    for _ in range(warmup):  # the marker too: its first use looks its operator up (~1 ms)
        with record_function(MARKER):
            fn()
    tracer = Tracer(rank=0)
    hooks = module_spans(model, tracer) if model is not None else contextlib.nullcontext()
    with (_quiet_native_output(),
          profile(activities=[ProfilerActivity.CPU], record_shapes=record_shapes) as prof,
          hooks, record_function(MARKER), tracer.span("step", "step")):
        fn()
    events = list(prof.events())
    marker = next(e for e in events if e.name == MARKER)
    return StepProfile(prof, top_level_events(events), sum(map(is_aten, events)), marker,
                       merge([tracer.finish()]))


def export_trace(step: StepProfile, path: str | Path) -> Path:
    """Write the profiler's Chrome trace (open it at https://ui.perfetto.dev or in
    chrome://tracing) and return its path. Generated: keep it out of the repository."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _quiet_native_output():
        step.prof.export_chrome_trace(str(path))
    return path


def default_trace_dir() -> Path:
    """``out/profiles`` of the checkout (git ignores ``out/``), else ``./out/profiles``."""
    return (_checkout() or Path()) / "out" / "profiles"
