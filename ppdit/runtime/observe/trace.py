"""Per-rank spans on a common clock, merged into one timeline and exported for Perfetto.

Each rank owns a ``Tracer`` and wraps its work in ``with tracer.span(kind, name, **meta)``.
Kinds: ``compute``, ``send``/``recv`` (P2P), ``wait`` (blocked on a peer or a queue), ``decode``
(VAE), ``collective`` (a TP all-reduce inside a compute span, where ``collectives_into`` names
the tracer). The clock is ``time.perf_counter_ns`` (CLOCK_MONOTONIC on Linux, one clock for every
process on a host, so ranks on one machine line up exactly); ranks on different hosts are
aligned by a barrier (``Tracer.align``), within its release skew.

On a GPU a span's wall time measures only the *launch* of asynchronous kernels; with ``gpu=True``
it also records CUDA events, resolved once in ``finish``: no synchronisation on the hot path.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from ppdit.runtime.device import Placement

ASYNC_KINDS = ("send",)  # drawn on a second lane: an isend overlaps what follows it
_COLLECTIVES: list[Tracer] = []  # the tracer a rank's collectives report to (innermost last)


@dataclass
class Span:
    """One interval of one rank's time."""

    rank: int
    kind: str
    name: str
    start_ns: int
    end_ns: int
    meta: dict = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


@dataclass
class Counter:
    """A sampled value over time (queue depth, bytes in flight)."""

    rank: int
    name: str
    t_ns: int
    value: float


class Tracer:
    """Records one rank's spans; cheap enough to leave on (two clock reads per span)."""

    def __init__(self, rank: int = 0, placement: Placement | None = None, enabled: bool = True):
        self.rank, self.enabled, self._placement = rank, enabled, placement
        self.host = socket.gethostname()
        self.epoch_ns = time.perf_counter_ns()
        self._spans: list[Span] = []
        self._counters: list[Counter] = []
        self._gpu_pending: list[tuple[Span, object, object]] = []
        self._gpu_ref: tuple[int, object] | None = None

    def align(self, group=None) -> None:
        """Set this rank's epoch at a barrier so hosts without a shared clock line up."""
        dist.barrier(group=group)
        self.epoch_ns = time.perf_counter_ns()

    @contextmanager
    def span(self, kind: str, name: str = "", gpu: bool = False, **meta) -> Iterator[Span]:
        """Time the body; ``gpu=True`` also times it with CUDA events on a CUDA placement."""
        if not self.enabled:
            yield Span(self.rank, kind, name, 0, 0, meta)
            return
        events = self._start_events() if gpu else None
        s = Span(self.rank, kind, name, time.perf_counter_ns(), 0, meta)
        try:
            yield s
        finally:
            s.end_ns = time.perf_counter_ns()
            self._spans.append(s)
            if events is not None:
                events[1].record()
                self._gpu_pending.append((s, *events))

    def record(self, kind: str, name: str, start_ns: int, end_ns: int, **meta) -> None:
        """A span timed elsewhere: by hooks that open it in one call and close it in another."""
        if self.enabled:
            self._spans.append(Span(self.rank, kind, name, start_ns, end_ns, meta))

    def counter(self, name: str, value: float) -> None:
        """Sample a counter now (drawn as a step plot in Perfetto)."""
        if self.enabled:
            self._counters.append(Counter(self.rank, name, time.perf_counter_ns(), float(value)))

    def _start_events(self):
        if self._placement is None:
            return None
        if self._gpu_ref is None:  # once a round: the device's clock against the host's
            self._placement.synchronize()  # this stream's work only (Placement says why)
            ref = torch.cuda.Event(enable_timing=True) if self._placement.is_cuda else None
            if ref is not None:
                ref.record()
                ref.synchronize()
            self._gpu_ref = (time.perf_counter_ns(), ref)
        if not self._placement.is_cuda:
            return None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        return start, end

    def finish(self) -> RankTrace:
        """Resolve GPU timings and hand back everything recorded (picklable, CPU only)."""
        if self._gpu_pending and self._placement is not None:
            self._gpu_pending[-1][2].synchronize()  # the last span's end event
            ref_ns, ref = self._gpu_ref
            for span, start, end in self._gpu_pending:
                span.meta["wall_start_ns"], span.meta["wall_end_ns"] = span.start_ns, span.end_ns
                span.start_ns = ref_ns + int(ref.elapsed_time(start) * 1e6)
                span.end_ns = ref_ns + int(ref.elapsed_time(end) * 1e6)
            self._gpu_pending.clear()
        return RankTrace(self.rank, self.host, self.epoch_ns, list(self._spans),
                         list(self._counters))


@dataclass
class RankTrace:
    """One rank's finished recording."""

    rank: int
    host: str
    epoch_ns: int
    spans: list[Span]
    counters: list[Counter] = field(default_factory=list)


@dataclass
class Trace:
    """All ranks' spans on one clock, times in ns from the earliest event."""

    spans: list[Span]
    counters: list[Counter] = field(default_factory=list)

    @property
    def ranks(self) -> list[int]:
        return sorted({s.rank for s in self.spans} | {c.rank for c in self.counters})

    @property
    def makespan_s(self) -> float:
        """From the first span's start to the last span's end, in seconds."""
        if not self.spans:
            return 0.0
        return (max(s.end_ns for s in self.spans) - min(s.start_ns for s in self.spans)) / 1e9

    def select(self, kind: str | None = None, rank: int | None = None) -> list[Span]:
        """Spans of one kind and/or one rank, in start order."""
        return [s for s in self.spans
                if (kind is None or s.kind == kind) and (rank is None or s.rank == rank)]

    def to_chrome(self) -> dict:
        """Chrome trace-event JSON (open in https://ui.perfetto.dev or chrome://tracing)."""
        events = [{"ph": "M", "name": "process_name", "pid": r, "tid": 0,
                   "args": {"name": f"rank {r}"}} for r in self.ranks]
        events += [{"ph": "X", "name": s.name or s.kind, "cat": s.kind, "pid": s.rank,
                    "tid": 1 if s.kind in ASYNC_KINDS else 0, "ts": s.start_ns / 1e3,
                    "dur": (s.end_ns - s.start_ns) / 1e3, "args": _jsonable(s.meta)}
                   for s in self.spans]
        events += [{"ph": "C", "name": c.name, "pid": c.rank, "ts": c.t_ns / 1e3,
                    "args": {c.name: c.value}} for c in self.counters]
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def save_chrome(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_chrome()))
        return path


PEAK_MEMORY = "peak memory (bytes)"  # a counter: one sample per rank per round


def peak_memory(trace: Trace) -> dict[int, int]:
    """Each rank's peak tensor memory in a round above what it held before (its weights), from
    the ``PEAK_MEMORY`` counter (``runtime.rounds``): the allocator's peak on a GPU, live
    tensor bytes on the CPU. Empty when the round did not measure it."""
    peaks: dict[int, int] = {}
    for c in trace.counters:
        if c.name == PEAK_MEMORY:
            peaks[c.rank] = max(peaks.get(c.rank, 0), int(c.value))
    return dict(sorted(peaks.items()))


class Rounds:
    """For results that hold one merged ``Trace`` per round in ``self.traces``."""

    traces: list[Trace]

    @property
    def trace(self) -> Trace:
        return self.traces[-1]

    @property
    def makespans_s(self) -> list[float]:
        """Wall time of each round, first span to last, in seconds."""
        return [t.makespan_s for t in self.traces]


def merge(rank_traces: Sequence[RankTrace]) -> Trace:
    """Put every rank on one clock (shifting hosts by their barrier epochs) starting at 0."""
    rank_traces = [t for t in rank_traces if t is not None]
    same_host = len({t.host for t in rank_traces}) <= 1
    shifts = [(t, 0 if same_host else -t.epoch_ns) for t in rank_traces]
    origin = min([s.start_ns + d for t, d in shifts for s in t.spans]
                 + [c.t_ns + d for t, d in shifts for c in t.counters], default=0)
    spans = [Span(s.rank, s.kind, s.name, s.start_ns + d - origin, s.end_ns + d - origin,
                  dict(s.meta)) for t, d in shifts for s in t.spans]
    counters = [Counter(c.rank, c.name, c.t_ns + d - origin, c.value)
                for t, d in shifts for c in t.counters]
    spans.sort(key=lambda s: (s.start_ns, s.rank))
    counters.sort(key=lambda c: (c.t_ns, c.rank))
    return Trace(spans, counters)


BOOT_PHASES = {  # boot_ns key -> what happened between the previous stamp and this one
    "entry": "start python, import torch + ppdit",
    "setup": "build the model (a fresh rank imports diffusers first)",
    "group": "init_process_group",
    "warm-up": "warm-up forward",
    "dispatch": "job handed to a live rank",
}


def _jsonable(meta: dict) -> dict:
    return {k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v))
            for k, v in meta.items()}


@contextmanager
def collectives_into(tracer: Tracer) -> Iterator[Tracer]:
    """Inside the block, eager collectives that ask ``collective_tracer()`` record spans into
    ``tracer``: a timeline shows the all-reduces a compute span contains (see the module)."""
    _COLLECTIVES.append(tracer)
    try:
        yield tracer
    finally:
        _COLLECTIVES.pop()


def collective_tracer() -> Tracer | None:
    """The tracer named by the innermost ``collectives_into``, if any (and enabled)."""
    return _COLLECTIVES[-1] if _COLLECTIVES and _COLLECTIVES[-1].enabled else None
