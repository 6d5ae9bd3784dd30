"""Lab 07 gone wrong: throughput taken from lesson 02's ideal speedup R P / (R + P - 1) times
one device's rate, 1 / (P stage_s). Right without hops, and in the limit; with hops it
promises more than the clock delivers, since the speedup formula has no hop in it."""

from __future__ import annotations

from pathlib import Path

from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab07_filling_solution.py")
makespan, steady_throughput = _solution.makespan, _solution.steady_throughput
in_flight, requests_for = _solution.in_flight, _solution.requests_for


def throughput(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    speedup = num_requests * num_stages / (num_requests + num_stages - 1)  # bubbles.ideal_speedup
    return speedup / (num_stages * stage_s)
