"""Lab 03 gone wrong: a right clock, but the makespan is lesson 03's latency-free formula
(max(M, P) + (min(M, P) - 1) / V), which the simulation contradicts once hops cost time."""

from __future__ import annotations

from pathlib import Path

from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab03_bubble_solution.py")
schedule, bubble = _solution.schedule, _solution.bubble
fewest_micro_batches = _solution.fewest_micro_batches


def makespan(num_stages: int, num_micro: int, virtual: int = 1, latency: float = 0.0) -> float:
    m, p = num_micro, num_stages
    return max(m, p) + (min(m, p) - 1) / virtual
