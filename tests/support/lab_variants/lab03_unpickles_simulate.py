"""Lab 03 gone wrong, hidden from a reading of the file: ``schedule`` is ppdit's own simulator,
fetched by unpickling references to it (``pickle`` imports what it names), so that no import
statement, no global and no name like ``importlib`` or ``sys.modules`` shows. The checker runs
the file's functions guarded: any call into ppdit's code from them is refused."""

from __future__ import annotations

import math
import pickle

Span = tuple[int, int, int, float, float]  # (rank, micro, chunk, start, end)


def _ppdit(module: str, name: str):
    """ppdit's ``module.name``, from a pickled reference: unpickling imports what it names."""
    return pickle.loads(f"cppdit.{module}\n{name}\n.".encode())


def schedule(num_stages: int, num_micro: int, virtual: int = 1,
             latency: float = 0.0) -> list[Span]:
    """The shortcut: ppdit's clock, reshaped into the lab's tuples."""
    request, sampling = _ppdit("sampler", "Request"), _ppdit("sampler", "SamplingConfig")
    plan = _ppdit("parallel.layer_split.schedule", "LayerSplitPlan")(
        tuple(request(i, i) for i in range(num_micro)), num_stages, num_micro, virtual=virtual,
        sampling=sampling(num_steps=1),
        source=_ppdit("checkpoint.source", "ModelSource")("wan2.1-14b"))
    simulate = _ppdit("parallel.layer_split.schedule", "simulate")
    spans = simulate(plan, lambda rank, task: 1.0 / virtual, latency=latency)
    return [(s.rank, s.task.micro, s.task.chunk, s.start, s.end) for s in spans]


def bubble(tasks: list[Span], num_stages: int) -> float:
    """1 - busy / (P x makespan)."""
    span = max(t[4] for t in tasks) - min(t[3] for t in tasks)
    return 1 - sum(t[4] - t[3] for t in tasks) / (num_stages * span)


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
