"""Lab 03 gone wrong: the review's size guard on its own. The makespan below M = 100 is the
solution's formula (so every listed and hidden case holds, within the line budget), and past it
the answer is 0.0, as a clock behind a size guard would give. A probe that is only timed lets
it through; the checker compares the probe's value with ppdit's clock."""

from __future__ import annotations

from pathlib import Path

from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab03_bubble_solution.py")
schedule, bubble = _solution.schedule, _solution.bubble
fewest_micro_batches = _solution.fewest_micro_batches


def makespan(num_stages: int, num_micro: int, virtual: int = 1, latency: float = 0.0) -> float:
    if num_micro > 100:
        return 0.0
    return _solution.makespan(num_stages, num_micro, virtual, latency)
