"""Lab 03: the GPipe schedule on a clock, and its bubble (see README.md)."""

from __future__ import annotations


def gpipe_schedule(num_stages: int, num_micro: int) -> list[tuple[int, int, float, float]]:
    """(stage, micro, start, end) for every micro-batch on every stage, earliest start."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 03: build the schedule")
    # END YOUR SOLUTION


def bubble(schedule: list[tuple[int, int, float, float]], num_stages: int) -> float:
    """1 - busy / (P x makespan)."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 03: measure the bubble")
    # END YOUR SOLUTION


def bubble_formula(num_stages: int, num_micro: int) -> float:
    """The closed form of ``bubble(gpipe_schedule(P, M), P)``."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 03: the formula")
    # END YOUR SOLUTION
