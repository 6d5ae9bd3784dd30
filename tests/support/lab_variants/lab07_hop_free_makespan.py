"""Lab 07 gone wrong: the makespan is lesson 02's (R + P - 1) stage-times, which forgets that
each of the P - 1 hops of the fill delays the first request on its way to the last stage."""

from __future__ import annotations

from pathlib import Path

from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab07_filling_solution.py")
steady_throughput, requests_for = _solution.steady_throughput, _solution.requests_for


def makespan(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    return (num_requests + num_stages - 1) * stage_s


def throughput(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    return num_requests / makespan(num_requests, num_stages, stage_s, hop_s)


def in_flight(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    return throughput(num_requests, num_stages, stage_s, hop_s) * num_stages * stage_s
