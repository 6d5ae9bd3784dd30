"""Lab 07 gone wrong: the answers read off the checker's own replay, loaded from its file.
Every comparison would hold by construction; the checker must refuse where they come from."""

from __future__ import annotations

from pathlib import Path

from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab07_filling_solution.py")
steady_throughput, requests_for = _solution.steady_throughput, _solution.requests_for
in_flight = _solution.in_flight
simulate = load_module(Path(__file__).resolve().parents[3] / "labs" / "lab07_filling"
                       / "check_lab07.py").simulate


def makespan(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    return simulate(num_requests, num_stages, stage_s, hop_s)[-1][-1][1]


def throughput(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    return num_requests / makespan(num_requests, num_stages, stage_s, hop_s)
