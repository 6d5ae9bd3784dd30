"""Lab 07 gone wrong: the makespan read off the checker's own replay, imported inside the
function with ``__import__`` (no import statement names the checker, no global comes from it)."""

from __future__ import annotations

from pathlib import Path

from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab07_filling_solution.py")
steady_throughput, requests_for = _solution.steady_throughput, _solution.requests_for
throughput, in_flight = _solution.throughput, _solution.in_flight


def makespan(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    simulate = __import__("check_" + "lab07").simulate
    return simulate(num_requests, num_stages, stage_s, hop_s)[-1][-1][1]
