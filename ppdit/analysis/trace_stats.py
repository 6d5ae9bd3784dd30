"""Statistics of a merged trace: where each rank's time went.

All functions take a ``ppdit.runtime.observe.trace.Trace`` (times in ns from the first event)."""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict

from ppdit.runtime.observe.trace import BOOT_PHASES, Trace


def busy_fractions(trace: Trace, kinds: tuple[str, ...] = ("compute",)) -> dict[int, float]:
    """Per rank, the share of the whole run (first span to last, all ranks) spent in ``kinds``.
    This is utilisation as a pipeline sees it: a rank waiting for its first request is idle,
    even though it has nothing to do yet — that wait is the pipeline's fill bubble."""
    window = trace.makespan_s
    return {r: union_ns([(s.start_ns, s.end_ns) for s in trace.select(rank=r) if s.kind in kinds])
            / 1e9 / window if window > 0 else 0.0 for r in trace.ranks}


def union_ns(intervals: list[tuple[int, int]], within: tuple[int, int] | None = None) -> int:
    """Time covered by possibly overlapping (start, end) intervals, clipped to ``within``."""
    lo, hi = within or (-math.inf, math.inf)
    total, end = 0, lo
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in intervals):
        if b > max(a, end):
            total, end = total + b - max(a, end), b
    return total


def kind_totals(trace: Trace) -> dict[int, dict[str, float]]:
    """Per rank, seconds spent in each span kind."""
    out: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for s in trace.spans:
        out[s.rank][s.kind] += s.duration_s
    return {r: dict(v) for r, v in sorted(out.items())}


def handoff_latencies(trace: Trace) -> list[float]:
    """Seconds from "both sides ready" to "data delivered", for every matched send/recv pair.
    A send span on rank s and a recv span on another rank with the same ``request`` and
    ``step`` metadata form a pair. Latency = recv end - max(send start, recv start): if the
    receiver was already waiting, that is the transfer; if the data arrived first, only the
    receive call's own cost counts. Either way, time spent waiting for the *producer's compute*
    is excluded, which is what the earlier report's "per-handoff overhead" mixed in."""
    sends = {(s.meta.get("request"), s.meta.get("step")): s for s in trace.select("send")}
    pairs = [(sends.get((r.meta.get("request"), r.meta.get("step"))), r)
             for r in trace.select("recv")]
    return [(r.end_ns - max(s.start_ns, r.start_ns)) / 1e9 for s, r in pairs
            if s is not None and s.rank != r.rank]


def compute_durations(trace: Trace, rank: int | None = None) -> list[float]:
    """Durations (s) of compute spans in time order, for one rank or all."""
    return [s.duration_s for s in trace.select("compute", rank)]


def summary(trace: Trace, num_requests: int) -> dict:
    """The headline numbers of a run, as plain data (what ``summary.json`` holds)."""
    lat = handoff_latencies(trace)
    return {"makespan_s": trace.makespan_s, "requests": num_requests,
            "requests_per_s": num_requests / trace.makespan_s if trace.makespan_s else 0.0,
            "busy_fraction": {str(r): round(v, 4) for r, v in busy_fractions(trace).items()},
            "handoffs": len(lat),
            "handoff_ms_median": statistics.median(lat) * 1e3 if lat else None,
            "seconds_by_kind": {str(r): {k: round(v, 6) for k, v in d.items()}
                                for r, d in kind_totals(trace).items()}}


def startup_phases(boot_ns_by_rank: dict[int, dict[str, int]]) -> dict[str, float]:
    """Seconds spent in each start-up phase by the rank that was ready last (the critical path).
    ``boot_ns_by_rank`` holds the ``RankContext.boot_ns`` stamps of each rank (see
    ``ppdit.runtime.observe.trace.BOOT_PHASES`` for the phases)."""
    last = max(boot_ns_by_rank.values(), key=lambda stamps: max(stamps.values()))
    order = sorted(last.items(), key=lambda kv: kv[1])
    return {BOOT_PHASES.get(key, key): (t1 - t0) / 1e9
            for (_, t0), (key, t1) in itertools.pairwise(order)}


def request_intervals(trace: Trace) -> dict[int, tuple[int, int]]:
    """Per request id: (first compute start, last compute end) in ns — its time in the system."""
    out: dict[int, tuple[int, int]] = {}
    for s in trace.select("compute"):
        rid = s.meta.get("request")
        if rid is None:
            continue
        lo, hi = out.get(rid, (s.start_ns, s.end_ns))
        out[rid] = (min(lo, s.start_ns), max(hi, s.end_ns))
    return out


def littles_law(trace: Trace) -> dict[str, float]:
    """The three quantities of Little's law, L = lambda W, from a trace.
    L: time-averaged number of requests in the system (between their first and last compute);
    lambda: requests completed per second; W: mean time a request spends in the system. Over a
    run that starts and ends empty, L = lambda W holds exactly (both sides are the total
    request-seconds over the window). Its use is *predictive*: cap L (requests in flight), know
    W (a request's latency), and the throughput lambda = L / W follows."""
    spans = list(request_intervals(trace).values())
    if not spans:
        raise ValueError("the trace has no compute spans with a 'request' id")
    t0, t1 = min(a for a, _ in spans), max(b for _, b in spans)
    window = (t1 - t0) / 1e9
    occupancy = sum(b - a for a, b in spans) / 1e9  # integral of "requests inside" over time
    return {"L": occupancy / window, "lambda": len(spans) / window,
            "W": occupancy / len(spans), "window_s": window}
