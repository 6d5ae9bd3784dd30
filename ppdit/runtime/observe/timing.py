"""One rule for timing work on a rank: every timed region goes through ``timed``.

On a GPU, a Python clock around a model call measures the *launch* of asynchronous kernels,
not their work: the call returns long before the GPU is done. ``timed`` therefore synchronises
through the rank's ``Placement`` and, on CUDA, reads CUDA events recorded on the current
stream around the region (the kernels' own start and end). On the CPU the work is done when
the call returns, and ``perf_counter`` is the truth. ``repeat`` adds the rest of the rule: at
least ``MIN_ROUNDS`` timed rounds after untimed warm-up, reported as the median and spread.

Warm-up of communication is the caller's (``warm_up_pairs``): NCCL makes a communicator lazily
at the first operation on each pair and on each group, so an unwarmed first round pays its set-up.
``tests/unit/test_timing_rule.py`` walks the package for clocks read outside this module.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ppdit.runtime.comm.wire import Wire
from ppdit.runtime.device import Placement

MIN_ROUNDS = 3  # with two, the median is a mean; three make one outlier visible


@dataclass
class Timing:
    """What ``timed`` measured: ``seconds`` is set when the region ends."""

    seconds: float = float("nan")
    how: str = "cpu clock"  # or "cuda events"
    # The calling thread's CPU time over the region: the host work it costs, which a busy
    # machine stretches far less than wall time and a GPU does not shrink. (The process's
    # would add gloo's I/O threads, which spin longer when the peer is descheduled: +-200 us.)
    cpu_seconds: float = float("nan")
    _since_start: Callable[[], float] | None = field(default=None, repr=False)

    def lap(self) -> float:
        """Seconds from the region's start to now, the work queued so far included (on a GPU
        it synchronises): a time to first result inside a longer region."""
        if self._since_start is None:
            raise RuntimeError("lap() is for the body of a `timed` region")
        return self._since_start()


@contextmanager
def timed(placement: Placement | None = None) -> Iterator[Timing]:
    """Time the body's work on ``placement``'s device (None: the CPU; see the module)."""
    out = Timing()
    if placement is not None:  # earlier work is not ours (this stream's: never device-wide)
        placement.synchronize()
    cpu = time.thread_time()
    if placement is not None and placement.is_cuda:
        start = torch.cuda.Event(enable_timing=True)
        out.how, out._since_start = "cuda events", lambda: _event_seconds(start)
        start.record()
    else:
        begin = time.perf_counter()
        out._since_start = lambda: time.perf_counter() - begin
    yield out
    out.cpu_seconds = time.thread_time() - cpu  # before waiting for the device: host work
    out.seconds = out._since_start()


def _event_seconds(start: torch.cuda.Event) -> float:
    """Seconds from ``start`` to an event recorded now, once the device has reached it."""
    end = torch.cuda.Event(enable_timing=True)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


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


def warm_up_pairs(wire: Wire, pairs: Sequence[tuple[int, int]], rank: int,
                  group=None) -> None:
    """One tiny all-reduce on ``group``'s collective communicator, then an exchange on every
    P2P pair that holds ``rank``: the untimed warm-up a timed round of communication needs
    (see the module).

    Every rank of ``group`` (None: the world) calls it with the same ``pairs`` (global ranks),
    in the same order. The collective comes first: NCCL asks that a group's first operation
    include all of its ranks. Each pair's exchange goes through ``wire`` (``ctx.wire``; a bare
    ``Wire`` for the transport's own baselines), in host memory when staged.
    """
    dist.all_reduce(torch.zeros(1, device=wire.buffers), group=group)  # a barrier on its device
    for a, b in pairs:
        if rank not in (a, b) or a == b:
            continue
        exchange(b if rank == a else a, wire, group)


def exchange(peer: int, wire: Wire, group=None) -> None:
    """Send one element to ``peer`` and receive one from it, un-batched, as the timed traffic
    goes: the warm-up of one P2P pair. (A batch would run on the group's collective
    communicator and leave the pair's own, which NCCL builds at its first un-batched
    operation, to the first timed round.) The lower rank sends first, the higher receives
    first, so the two cannot wait for each other; ranks that exchange with several peers do it
    in one global order of pairs (sorted by (lower rank, higher rank)), so no cycle forms."""
    out, back = torch.zeros(1, device=wire.buffers), torch.empty(1, device=wire.buffers)
    first = dist.get_rank() < peer
    works = ([wire.send(out, peer, group), wire.recv(back, peer, group)] if first else
             [wire.recv(back, peer, group), wire.send(out, peer, group)])
    for work in works:
        work.wait()


def now_ns() -> int:
    """A wall-clock timestamp for events and logs (boot phases, spans' placement on a
    timeline): never a measurement of device work on its own (use ``timed``)."""
    return time.perf_counter_ns()
