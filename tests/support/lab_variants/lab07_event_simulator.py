"""Lab 07 gone wrong: no derivation at all, a hand-written event replay of the pipeline. Each
request walks the stages, starting each one when the stage is free and the request has arrived.
It agrees with the checker's clock on every visible case (hops no longer than a stage), so only
the cost of a call can tell it from a closed form: it runs R x P steps."""

from __future__ import annotations

from pathlib import Path

from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab07_filling_solution.py")
steady_throughput, requests_for = _solution.steady_throughput, _solution.requests_for


def makespan(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    free = [0.0] * num_stages  # when each stage is next free
    for _ in range(num_requests):
        arrives = 0.0
        for stage in range(num_stages):
            free[stage] = max(free[stage], arrives) + stage_s
            arrives = free[stage] + hop_s
    return free[-1]


def throughput(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    return num_requests / makespan(num_requests, num_stages, stage_s, hop_s)


def in_flight(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    latency = num_stages * stage_s + (num_stages - 1) * hop_s
    return throughput(num_requests, num_stages, stage_s, hop_s) * latency
