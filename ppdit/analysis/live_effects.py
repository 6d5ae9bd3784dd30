"""What live ranks add to a schedule's arithmetic: contention between busy ranks, and the
makespan a pipeline of unequal stages should have.

On a 2-core CPU two ranks that compute at the same time slow each other (shared caches, memory
bandwidth, the OS): a step measured alone is not the step a busy pipeline runs;
``overlap_slowdown`` measures that from a timeline. ``flow_makespan`` is the ideal a live run is
compared with: identical requests through stages of fixed times."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ppdit.analysis.trace_stats import union_ns
from ppdit.runtime.observe.trace import Trace


def flow_makespan(stage_times_s: Sequence[float], num_requests: int) -> float:
    """Makespan of ``num_requests`` identical requests through stages of the given times.
    A request enters stage s when it left stage s - 1 and stage s is free; with identical
    requests and unbounded queues this is exactly sum(t) + (R - 1) * max(t): the first request
    pays every stage, each further one waits only for the slowest."""
    if num_requests < 1 or not stage_times_s:
        raise ValueError(f"need at least one request and one stage, got {num_requests} requests "
                         f"and {len(stage_times_s)} stages")
    return sum(stage_times_s) + (num_requests - 1) * max(stage_times_s)


@dataclass(frozen=True)
class Slowdown:
    """One rank's compute spans, split by whether another rank computed at the same time."""
    rank: int
    alone_s: list[float]  # durations of spans overlapped less than half by others' compute
    overlapped_s: list[float]  # durations of spans overlapped at least half

    @property
    def factor(self) -> float | None:
        """median(overlapped) / median(alone), or ``None`` if either set is empty."""
        return (statistics.median(self.overlapped_s) / statistics.median(self.alone_s)
                if self.alone_s and self.overlapped_s else None)

    def describe(self) -> str:
        """"rank 1: alone 14.5 ms (13.9-15.2, 12 tasks), beside another rank 23.1 ms (...)
        -> 1.59x"; a side with no spans says so."""
        parts = [f"{label} {_ms(vals)}" for label, vals in
                 (("alone", self.alone_s), ("beside another rank", self.overlapped_s))]
        tail = f" -> {self.factor:.2f}x" if self.factor is not None else ""
        return f"rank {self.rank}: " + ", ".join(parts) + tail


def _ms(values_s: Sequence[float]) -> str:
    if not values_s:
        return "no tasks"
    k = 1e3
    return (f"{statistics.median(values_s) * k:.1f} ms ({min(values_s) * k:.1f}-"
            f"{max(values_s) * k:.1f}, {len(values_s)} tasks)")


def overlap_slowdown(trace: Trace, names: Sequence[str] | None = None) -> dict[int, Slowdown]:
    """Per rank: compute spans that ran mostly alone vs mostly beside another rank's compute.
    Compare like with like: pass ``names`` to keep only spans whose name is listed (e.g. the
    same kind of step), else every compute span counts."""
    compute = [s for s in trace.select("compute") if names is None or s.name in names]
    out = {}
    for rank in trace.ranks:
        others = [(o.start_ns, o.end_ns) for o in compute if o.rank != rank]
        alone, overlapped = [], []
        for s in (s for s in compute if s.rank == rank):
            length = s.end_ns - s.start_ns
            share = union_ns(others, (s.start_ns, s.end_ns)) / length if length else 0.0
            (overlapped if share >= 0.5 else alone).append(s.duration_s)
        out[rank] = Slowdown(rank, alone, overlapped)
    return out


def step_slowdown(trace: Trace, alone_s: Sequence[float]) -> dict[int, float]:
    """Per rank, the median of (live step time / the same step measured alone).
    ``alone_s[i]`` is step i's cost measured in one process with nothing else running (e.g.
    ``ppdit.sampler.measure_step_costs``); compute spans must carry their ``step`` in ``meta``.
    A factor above 1 is what running beside other ranks (and the launch's own overheads) cost."""
    out: dict[int, float] = {}
    for rank in trace.ranks:
        r = [s.duration_s / alone_s[s.meta["step"]] for s in trace.select("compute", rank)
             if s.meta.get("step") is not None]
        if r:
            out[rank] = statistics.median(r)
    return out
