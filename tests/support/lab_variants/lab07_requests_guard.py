"""Lab 07 gone wrong: every part derived but the last. ``requests_for`` searches over replays of
the hop-free clock (doubling, then halving), and answers 1 for fractions from 0.999 on, where a
search would overrun the line budget. A probe that is only timed lets it through; the checker
checks the probe's R."""

from __future__ import annotations

import itertools
from pathlib import Path

from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab07_filling_solution.py")
makespan, throughput, in_flight = _solution.makespan, _solution.throughput, _solution.in_flight
steady_throughput = _solution.steady_throughput


def _replay_makespan(num_requests: int, num_stages: int) -> float:
    free = [0.0] * num_stages
    for _ in range(num_requests):
        arrives = 0.0
        for stage in range(num_stages):
            free[stage] = arrives = max(free[stage], arrives) + 1.0
    return free[-1]


def requests_for(fraction: float, num_stages: int) -> int:
    if not 0 < fraction < 1:
        raise ValueError(f"fraction={fraction} must lie strictly between 0 and 1")
    if fraction >= 0.999:
        return 1

    def reaches(r: int) -> bool:
        return r / _replay_makespan(r, num_stages) >= fraction * (1 - 1e-12)

    hi = next(2**i for i in itertools.count() if reaches(2**i))  # then halve the gap
    lo = hi // 2
    while hi - lo > 1:
        lo, hi = ((lo + hi) // 2, hi) if not reaches((lo + hi) // 2) else (lo, (lo + hi) // 2)
    return hi
