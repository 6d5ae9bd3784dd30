"""Reference solution of lab 03."""

from __future__ import annotations

import math

Task = tuple[int, int, int, float, float]  # (rank, micro, chunk, start, end)


def schedule(num_stages: int, num_micro: int, virtual: int = 1,
             latency: float = 0.0) -> list[Task]:
    """Every task of one denoising step, each started as early as the rules allow.

    Ranks are visited in virtual-stage order, so a micro-batch's previous stage is always
    placed before the stage that needs it: one pass over the virtual stages is enough.
    """
    p, cost = num_stages, 1.0 / virtual
    free = [0.0] * p  # when each rank finishes its previous task
    ready = [0.0] * num_micro  # when each micro-batch left its previous virtual stage
    prev_rank = [None] * num_micro
    tasks = []
    for chunk in range(virtual):
        for rank in range(p):
            for m in range(num_micro):  # breadth first: the rank's own order
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
    """Rank 0 runs V rounds of M tasks. Micro-batch 0 comes back for its next chunk P/V + P·ℓ
    after it started the previous one, so a round lasts max(M/V, P/V + P·ℓ); the last round
    lasts M/V, and the last task then crosses the other P - 1 ranks: (P - 1)(1/V + ℓ)."""
    p, m, v = num_stages, num_micro, virtual
    hop = latency if p > 1 else 0.0  # one rank never hops
    round_time = max(m / v, p / v + p * hop)
    return (v - 1) * round_time + m / v + (p - 1) * (1 / v + hop)


def fewest_micro_batches(num_stages: int, virtual: int, latency: float) -> int:
    """Rank 0 never waits when M/V >= P/V + P·ℓ, i.e. M >= P (1 + V·ℓ); with one chunk per rank
    (or one rank) nothing ever comes back to rank 0, so one micro-batch is enough."""
    if virtual == 1 or num_stages == 1:
        return 1
    return math.ceil(num_stages * (1 + virtual * latency))
