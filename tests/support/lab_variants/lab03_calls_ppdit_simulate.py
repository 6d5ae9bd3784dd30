"""Lab 03 gone wrong: nothing simulated by hand — ``schedule`` runs ppdit's own simulator
(``ppdit.parallel.layer_split.schedule.simulate``, the very clock the checker compares with)
and ``bubble`` is ppdit's ``sim_bubble``: every number right, nothing built."""

from __future__ import annotations

import math

from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.layer_split.schedule import LayerSplitPlan, SimSpan, Task, sim_bubble, simulate
from ppdit.sampler import Request, SamplingConfig

Span = tuple[int, int, int, float, float]  # (rank, micro, chunk, start, end)


def schedule(num_stages: int, num_micro: int, virtual: int = 1,
             latency: float = 0.0) -> list[Span]:
    """The shortcut: ppdit's clock, reshaped into the lab's tuples."""
    plan = LayerSplitPlan(tuple(Request(i, i) for i in range(num_micro)), num_stages,
                          num_micro, virtual=virtual, sampling=SamplingConfig(num_steps=1),
                          source=ModelSource("wan2.1-14b"))
    spans = simulate(plan, lambda rank, task: 1.0 / virtual, latency=latency)
    return [(s.rank, s.task.micro, s.task.chunk, s.start, s.end) for s in spans]


def bubble(tasks: list[Span], num_stages: int) -> float:
    """The shortcut again: ppdit's ``sim_bubble`` on the tuples turned back into spans."""
    spans = [SimSpan(r, Task(0, m, c), start, end) for r, m, c, start, end in tasks]
    return sim_bubble(spans, num_stages)


def makespan(num_stages: int, num_micro: int, virtual: int = 1, latency: float = 0.0) -> float:
    """As in the solution: V rounds of max(M/V, P/V + P·ℓ), the last only M/V, then the last
    task crosses the other P - 1 ranks."""
    p, m, v = num_stages, num_micro, virtual
    hop = latency if p > 1 else 0.0
    round_time = max(m / v, p / v + p * hop)
    return (v - 1) * round_time + m / v + (p - 1) * (1 / v + hop)


def fewest_micro_batches(num_stages: int, virtual: int, latency: float) -> int:
    """As in the solution: M >= P (1 + V·ℓ), or 1 when nothing comes back to rank 0."""
    if virtual == 1 or num_stages == 1:
        return 1
    return math.ceil(num_stages * (1 + virtual * latency))
