"""Lab 07 gone wrong: the bound R >= f (P - 1) / (1 - f) rounded up with a plain ceil. In
floating point 0.9 / (1 - 0.9) is 9.000000000000002, so a bound that is a whole number in exact
arithmetic often comes out one request too many."""

from __future__ import annotations

import math
from pathlib import Path

from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab07_filling_solution.py")
makespan, throughput = _solution.makespan, _solution.throughput
steady_throughput, in_flight = _solution.steady_throughput, _solution.in_flight


def requests_for(fraction: float, num_stages: int) -> int:
    if not 0 < fraction < 1:
        raise ValueError(f"fraction={fraction} must lie in (0, 1)")
    return max(1, math.ceil(fraction * (num_stages - 1) / (1 - fraction)))
