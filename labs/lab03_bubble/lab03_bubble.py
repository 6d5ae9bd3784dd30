"""Lab 03: the interleaved layer-split schedule on a clock, its bubble and its makespan
(see README.md)."""

from __future__ import annotations

Task = tuple[int, int, int, float, float]  # (rank, micro, chunk, start, end)


def schedule(num_stages: int, num_micro: int, virtual: int = 1,
             latency: float = 0.0) -> list[Task]:
    """Every task of one denoising step, each started as early as the rules allow."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 03: simulate the schedule")
    # END YOUR SOLUTION


def bubble(tasks: list[Task], num_stages: int) -> float:
    """1 - busy / (P x makespan)."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 03: measure the bubble")
    # END YOUR SOLUTION


def makespan(num_stages: int, num_micro: int, virtual: int = 1, latency: float = 0.0) -> float:
    """The end of the last task of ``schedule(...)``, in closed form."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 03: derive the makespan")
    # END YOUR SOLUTION


def fewest_micro_batches(num_stages: int, virtual: int, latency: float) -> int:
    """The smallest M for which rank 0 never waits between its first task and its last."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 03: how many micro-batches keep rank 0 busy?")
    # END YOUR SOLUTION
