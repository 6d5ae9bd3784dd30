"""Lab 01: split denoising steps over pipeline stages (see README.md)."""

from __future__ import annotations

from collections.abc import Sequence


def split_steps(num_steps: int, num_stages: int,
                weights: Sequence[float] | None = None) -> list[range]:
    """Contiguous step ranges, one per stage, at least one step each; balanced by count, or
    by ``weights`` (minimise the most expensive stage)."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 01: write split_steps")
    # END YOUR SOLUTION
