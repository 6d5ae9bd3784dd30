"""One rule for timing work on a rank: every timed region goes through ``timed``.

On a GPU, a Python clock around a model call measures the *launch* of asynchronous kernels,
not their work: the call returns long before the GPU is done. ``timed`` therefore synchronises
through the rank's ``Placement`` and, on CUDA, reads CUDA events recorded on the current
stream around the region (the kernels' own start and end). On the CPU the work is done when
the call returns, and ``perf_counter`` is the truth. ``repeat`` adds the rest of the rule: at
least ``MIN_ROUNDS`` timed rounds after untimed warm-up, reported as the median and spread.

Warm-up of communication is the caller's (``warm_pairs`` for P2P): NCCL makes a communicator
lazily at the first operation on each pair, so an unwarmed first round pays its set-up.
``tests/test_timing_rule.py`` walks the package for clocks read outside this module.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from ppdit.runtime.device import Placement

MIN_ROUNDS = 3  # with two, the median is a mean; three make one outlier visible


@dataclass
class Timing:
    """What ``timed`` measured: ``seconds`` is set when the region ends."""

    seconds: float = float("nan")
    how: str = "cpu clock"  # or "cuda events"


@contextmanager
def timed(placement: Placement | None = None) -> Iterator[Timing]:
    """Time the body's work on ``placement``'s device (None: the CPU).

    CUDA: synchronise (earlier work is not ours), record an event, run the body, record an
    event, synchronise, read the events. CPU: the clock around the body.
    """
    out = Timing()
    if placement is not None and placement.is_cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        placement.synchronize()
        start.record()
        yield out
        end.record()
        placement.synchronize()
        out.seconds, out.how = start.elapsed_time(end) / 1e3, "cuda events"
        return
    begin = time.perf_counter()
    yield out
    out.seconds = time.perf_counter() - begin


@dataclass
class Rounds:
    """Seconds of each timed round, and their summary."""

    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def spread(self) -> tuple[float, float]:
        """(fastest, slowest) round."""
        return min(self.seconds), max(self.seconds)


def repeat(fn: Callable[[], object], placement: Placement | None = None, rounds: int = 5,
           warmup: int = 1) -> Rounds:
    """``fn()`` ``warmup`` times untimed, then ``rounds`` (>= ``MIN_ROUNDS``) times timed."""
    if rounds < MIN_ROUNDS:
        raise ValueError(f"rounds={rounds}: at least {MIN_ROUNDS} timed rounds (the median of "
                         "two is their mean; three show an outlier)")
    for _ in range(warmup):
        fn()
    out = Rounds()
    for _ in range(rounds):
        with timed(placement) as t:
            fn()
        out.seconds.append(t.seconds)
    return out


def now_ns() -> int:
    """A wall-clock timestamp for events and logs (boot phases, spans' placement on a
    timeline): never a measurement of device work on its own (use ``timed``)."""
    return time.perf_counter_ns()


__all__ = ["MIN_ROUNDS", "Rounds", "Timing", "now_ns", "repeat", "timed"]
