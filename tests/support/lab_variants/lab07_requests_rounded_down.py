"""Lab 07 gone wrong: the bound R >= f (P - 1) / (1 - f) rounded down (int() truncates) instead
of up. Right whenever the bound is a whole number, one request short whenever it is not."""

from __future__ import annotations

from pathlib import Path

from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab07_filling_solution.py")
makespan, throughput = _solution.makespan, _solution.throughput
steady_throughput, in_flight = _solution.steady_throughput, _solution.in_flight


def requests_for(fraction: float, num_stages: int) -> int:
    if not 0 < fraction < 1:
        raise ValueError(f"fraction={fraction} must lie in (0, 1)")
    return max(1, int(fraction * (num_stages - 1) / (1 - fraction)))
