"""Lab 07 gone wrong: a stage is taken to wait until its send has arrived before it starts the
next request, as if the hop occupied it. That holds at hop_s = 0, but a full pipeline then runs
at 1 / (stage_s + hop_s), while ppdit's stages post the send and move on."""

from __future__ import annotations

from pathlib import Path

from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab07_filling_solution.py")
requests_for = _solution.requests_for


def makespan(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    return (num_requests + num_stages - 1) * (stage_s + hop_s) - hop_s


def throughput(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    return num_requests / makespan(num_requests, num_stages, stage_s, hop_s)


def steady_throughput(num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    return 1.0 / (stage_s + hop_s)


def in_flight(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    latency = num_stages * stage_s + (num_stages - 1) * hop_s
    return throughput(num_requests, num_stages, stage_s, hop_s) * latency
