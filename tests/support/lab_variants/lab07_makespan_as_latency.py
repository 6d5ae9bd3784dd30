"""Lab 07 gone wrong: Little's law with the makespan standing in for a request's time inside.
Then L = (R / makespan) x makespan = R: every request counted inside for the whole run, though
each one spends only P stage-times and P - 1 hops there."""

from __future__ import annotations

from pathlib import Path

from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab07_filling_solution.py")
makespan, throughput = _solution.makespan, _solution.throughput
steady_throughput, requests_for = _solution.steady_throughput, _solution.requests_for


def in_flight(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    return (throughput(num_requests, num_stages, stage_s, hop_s)
            * makespan(num_requests, num_stages, stage_s, hop_s))
