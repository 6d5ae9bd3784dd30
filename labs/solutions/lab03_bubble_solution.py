"""Reference solution of lab 03."""

from __future__ import annotations


def gpipe_schedule(num_stages: int, num_micro: int) -> list[tuple[int, int, float, float]]:
    """(stage, micro, start, end) for every micro-batch on every stage, earliest start."""
    free = [0.0] * num_stages  # when each stage is next idle
    out = []
    for m in range(num_micro):
        ready = 0.0  # when micro-batch m leaves the previous stage
        for s in range(num_stages):
            start = max(free[s], ready)
            free[s] = ready = start + 1.0
            out.append((s, m, start, start + 1.0))
    return out


def bubble(schedule: list[tuple[int, int, float, float]], num_stages: int) -> float:
    """1 - busy / (P x makespan)."""
    makespan = max(e for *_, e in schedule) - min(s for _, _, s, _ in schedule)
    busy = sum(e - s for _, _, s, e in schedule)
    return 1 - busy / (num_stages * makespan)


def bubble_formula(num_stages: int, num_micro: int) -> float:
    """(P - 1) / (M + P - 1)."""
    return (num_stages - 1) / (num_micro + num_stages - 1)
