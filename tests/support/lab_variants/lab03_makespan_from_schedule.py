"""Lab 03 gone wrong: the clock is built by hand, but the "derived" makespan is no derivation —
it runs that clock and reads off the last end, so its numbers are right and no formula exists."""

from __future__ import annotations

import math

Task = tuple[int, int, int, float, float]  # (rank, micro, chunk, start, end)


def schedule(num_stages: int, num_micro: int, virtual: int = 1,
             latency: float = 0.0) -> list[Task]:
    """As in the solution: one pass over the virtual stages, each rank breadth first."""
    p, cost = num_stages, 1.0 / virtual
    free = [0.0] * p
    ready = [0.0] * num_micro
    prev_rank = [None] * num_micro
    tasks = []
    for chunk in range(virtual):
        for rank in range(p):
            for m in range(num_micro):
                hop = latency if prev_rank[m] not in (None, rank) else 0.0
                start = max(free[rank], ready[m] + hop)
                free[rank] = ready[m] = start + cost
                prev_rank[m] = rank
                tasks.append((rank, m, chunk, start, start + cost))
    return tasks


def bubble(tasks: list[Task], num_stages: int) -> float:
    """1 - busy / (P x makespan)."""
    span = max(t[4] for t in tasks) - min(t[3] for t in tasks)
    return 1 - sum(t[4] - t[3] for t in tasks) / (num_stages * span)


def makespan(num_stages: int, num_micro: int, virtual: int = 1, latency: float = 0.0) -> float:
    """The shortcut: run the schedule and take its last end."""
    return max(t[4] for t in schedule(num_stages, num_micro, virtual, latency))


def fewest_micro_batches(num_stages: int, virtual: int, latency: float) -> int:
    """As in the solution: M >= P (1 + V·ℓ), or 1 when nothing comes back to rank 0."""
    if virtual == 1 or num_stages == 1:
        return 1
    return math.ceil(num_stages * (1 + virtual * latency))
