"""Lab 07 gone wrong, as the review tried it: no derivation, a short event-loop replay of the
clock (what the handout forbids: "derive, do not simulate"). Every function answers from the
replay, and 0.0 past R = 1000, where a replay would overrun the line budget; ``requests_for``
searches over replays (doubling, then halving), and answers 1 for fractions from 0.999 on.
Every listed and hidden case lies under the guards."""

from __future__ import annotations

import itertools

GUARD = 1000  # past this many requests a replay would cost too much: answer anything


def _replay(num_requests: int, num_stages: int, stage_s: float, hop_s: float):
    """(entry, exit) of each request: it walks the stages, starting each when the stage is free
    and the request has arrived."""
    free, spans = [0.0] * num_stages, []
    for _ in range(num_requests):
        arrives, entry = 0.0, None
        for stage in range(num_stages):
            start = max(free[stage], arrives)
            entry = start if entry is None else entry
            free[stage] = start + stage_s
            arrives = free[stage] + hop_s
        spans.append((entry, free[-1]))
    return spans


def makespan(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    if num_requests > GUARD:
        return 0.0
    return _replay(num_requests, num_stages, stage_s, hop_s)[-1][1]


def throughput(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    if num_requests > GUARD:
        return 0.0
    return num_requests / makespan(num_requests, num_stages, stage_s, hop_s)


def steady_throughput(num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    return 1.0 / stage_s


def in_flight(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    if num_requests > GUARD:
        return 0.0
    spans = _replay(num_requests, num_stages, stage_s, hop_s)
    inside = sum(b - a for a, b in spans) / num_requests
    return num_requests / spans[-1][1] * inside


def requests_for(fraction: float, num_stages: int) -> int:
    if not 0 < fraction < 1:
        raise ValueError(f"fraction={fraction} must lie strictly between 0 and 1")
    if fraction >= 0.999:
        return 1

    def reaches(r: int) -> bool:
        return r / _replay(r, num_stages, 1.0, 0.0)[-1][1] >= fraction * (1 - 1e-12)

    hi = next(2**i for i in itertools.count() if reaches(2**i))  # then halve the gap
    lo = hi // 2
    while hi - lo > 1:
        lo, hi = ((lo + hi) // 2, hi) if not reaches((lo + hi) // 2) else (lo, (lo + hi) // 2)
    return hi
