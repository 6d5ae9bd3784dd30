"""Several plans side by side in one launch, interleaved round by round: the one harness every
layout's comparisons use.

Why interleave: a shared machine's speed drifts by tens of percent within a minute, so plan A now
and plan B a minute later compare the machine's moods. Running every plan in the same processes,
round k starting at plan k mod n (A B, B A, ...), makes a slow minute slow all of them: per-round
ratios mean something, and the spread over rounds says how much.

A ``Runner`` subclass says what one layout does on one rank; ``rounds_worker`` is every rank's
loop (a barrier, then plan i where the rank takes part); ``run_side_by_side`` the caller's side.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ppdit._spawn_entry import in_torchrun
from ppdit.runtime.comm.wire import DEFAULT_TIMEOUT_S, work_bound
from ppdit.runtime.device import PlacementDecision, decide_placement, local_world_size
from ppdit.runtime.observe.memory import held_bytes, track_peak_memory
from ppdit.runtime.observe.timing import now_ns
from ppdit.runtime.observe.trace import PEAK_MEMORY, RankTrace, Rounds, Trace, Tracer, merge
from ppdit.runtime.processes.launch import launch
from ppdit.runtime.processes.rank import RankContext


def ratios(num: Sequence[float], den: Sequence[float]) -> list[float]:
    """Per-round ratios num_k / den_k: rounds share the machine's mood, so ratios of the same
    round are what an interleaved measurement compares."""
    if len(num) != len(den) or not num:
        raise ValueError(f"ratios need rounds of equal count, got {len(num)} and {len(den)}")
    return [a / b for a, b in zip(num, den, strict=True)]


def median_ratio(num: Sequence[float], den: Sequence[float]) -> float:
    """The median of per-round ratios ``num_k / den_k``: how every comparison of interleaved
    rounds is quoted (a ratio of medians would pair a fast round of one plan with a slow round
    of the other)."""
    return statistics.median(ratios(num, den))


def interleaved(rounds: int, num_plans: int) -> list[tuple[int, int]]:
    """(round, plan) in execution order: round k runs plans k, k+1, ... (mod n). Zero rounds
    is allowed: warm-up and results only (a check that times nothing)."""
    if rounds < 0:
        raise ValueError(f"rounds={rounds} must be >= 0")
    return [(k, (k + j) % num_plans) for k in range(rounds) for j in range(num_plans)]


class Runner:
    """What one layout does on one rank for each of its plans (override what you need)."""

    @staticmethod
    def check(plans: Mapping[str, Any], world_size: int, launch_kwargs: dict) -> None:
        """Runs in the caller before any rank starts: refuse plans that cannot run together or
        fit (``parallel.share.check_plans`` for a layout's runners)."""

    @staticmethod
    def prepare(rank: int, world_size: int, plans: tuple) -> Any:
        """Runs before ``init_process_group``: build models here. Becomes ``ctx.prepared``."""
        return None

    def __init__(self, ctx: RankContext, plans: tuple):
        self.ctx, self.plans = ctx, plans

    def takes_part(self, i: int) -> bool:
        """Whether this rank runs plan ``i`` (the others wait at the round's barrier)."""
        return True

    def warm_up(self, i: int) -> None:
        """Untimed work before the first round (allocator, kernel choice, compiles)."""

    def round_s(self, i: int) -> float:
        """At most how long one round of plan ``i`` takes, from what warm-up measured (0:
        unknown): the job's bounds follow it (``RankContext.expect``)."""
        return 0.0

    def run(self, i: int, tracer: Tracer) -> Any:
        """One round of plan ``i``; the return value is kept per round."""
        raise NotImplementedError

    def result(self, i: int) -> Any:
        """Reported once per plan after the last round (default: nothing)."""
        return None

    def model_of(self, i: int) -> Any:
        """The model this rank holds for plan ``i`` (its bytes are reported: ``held``)."""
        return None

    def close(self) -> None:
        """Release what must go before the process group does (CUDA graphs, groups)."""


@dataclass(frozen=True)
class Job:
    """What every rank runs: a ``Runner`` class, its plans, and how many rounds (picklable)."""

    runner: type[Runner]
    plans: tuple
    rounds: int = 1
    memory: bool = False  # track each round's peak tensor memory on the CPU too (slower)


@dataclass
class RankRounds:
    """One rank's record of a job: per plan, its outputs and traces round by round."""

    rank: int
    took_part: list[bool]
    outputs: list[list[Any]]
    traces: list[list[RankTrace]]
    results: list[Any]
    boot_ns: dict[str, int] = field(default_factory=dict)
    held: list[int] = field(default_factory=list)  # bytes of each plan's model on this rank


def prepare_job(rank: int, world_size: int, job: Job) -> Any:
    """The launcher's ``setup`` hook: the runner's ``prepare``."""
    return job.runner.prepare(rank, world_size, job.plans)


def rounds_worker(ctx: RankContext, job: Job) -> RankRounds:
    """Every rank: warm up each plan it takes part in, then run the interleaved rounds."""
    runner = job.runner(ctx, job.plans)
    n = len(job.plans)
    try:
        took_part = [runner.takes_part(i) for i in range(n)]
        for i in range(n):
            if took_part[i]:
                runner.warm_up(i)
        work = [runner.round_s(i) for i in range(n) if took_part[i]]
        if work and min(work) > 0:  # every round measured: what the rest of the job needs
            ctx.expect(work_bound(DEFAULT_TIMEOUT_S, job.rounds, sum(work)))
        out = RankRounds(ctx.rank, took_part, [[] for _ in range(n)], [[] for _ in range(n)],
                         [None] * n, {**ctx.boot_ns, "warm-up": now_ns()})
        for _, i in interleaved(job.rounds, n):
            tracer = Tracer(ctx.rank, ctx.placement)
            tracer.align()  # a barrier: every plan starts with every rank ready
            if took_part[i]:
                out.outputs[i].append(_run_round(runner, i, tracer, ctx, job.memory))
                out.traces[i].append(tracer.finish())
        out.results = [runner.result(i) if took_part[i] else None for i in range(n)]
        out.held = [held_bytes(runner.model_of(i)) if took_part[i] else 0 for i in range(n)]
    finally:
        runner.close()
    return out


def _run_round(runner: Runner, i: int, tracer: Tracer, ctx: RankContext, memory: bool) -> Any:
    """One round of plan ``i``; its peak memory becomes the trace's ``PEAK_MEMORY`` counter:
    on a GPU always (free to read), on the CPU when asked (a count that slows every operator)."""
    if not (memory or ctx.placement.is_cuda):
        return runner.run(i, tracer)
    with track_peak_memory(ctx.placement) as peak:
        out = runner.run(i, tracer)
    tracer.counter(PEAK_MEMORY, peak.peak_bytes)
    return out


@dataclass
class PlanRuns(Rounds):
    """One plan's side of a side-by-side run."""

    traces: list[Trace]  # one merged timeline per round
    outputs: dict[int, list[Any]]  # rank -> its outputs, round by round (ranks that took part)
    results: dict[int, Any]  # rank -> its ``Runner.result``
    boot_ns: dict[int, dict[str, int]]  # rank -> start-up stamps (observe.trace.BOOT_PHASES)
    held: dict[int, int] = field(default_factory=dict)  # rank -> bytes of its model

    def last(self) -> dict[int, Any]:
        return {r: outs[-1] for r, outs in self.outputs.items()}


def run_side_by_side(plans: Mapping[str, Any], *, runner: type[Runner], world_size: int,
                     rounds: int = 1, memory: bool = False,
                     **launch_kwargs) -> dict[str, PlanRuns] | None:
    """Run every plan ``rounds`` times in one launch of ``world_size`` ranks, interleaved; the
    plans' runs by name (``None`` on a torchrun rank other than 0). ``launch_kwargs`` go to
    ``launch``; ranks get one thread each unless ``threads_per_rank`` says otherwise (more threads
    than cores measures the OS scheduler). Every round's trace holds each rank's peak memory
    (``trace.peak_memory``) on GPUs, and on the CPU with ``memory=True``."""
    if not plans:
        raise ValueError("run_side_by_side needs at least one plan")
    interleaved(rounds, len(plans))  # validates rounds
    runner.check(plans, world_size, launch_kwargs)
    launch_kwargs.setdefault("threads_per_rank", 1)
    job = Job(runner, tuple(plans.values()), rounds, memory)
    per_rank = launch(rounds_worker, world_size, args=(job,), setup=prepare_job, **launch_kwargs)
    return None if per_rank is None else collect(list(plans), per_rank, rounds)


def launch_placement(world_size: int, launch_kwargs: dict) -> tuple[int, PlacementDecision]:
    """The ranks this host runs and where they will compute, as ``launch`` will decide it."""
    pool = launch_kwargs.get("pool")
    local = local_world_size() if in_torchrun() else world_size
    return local, pool.placement if pool is not None else decide_placement(
        local, backend=launch_kwargs.get("backend", "auto"), device=launch_kwargs.get("device"),
        stage=launch_kwargs.get("stage"))


def collect(names: list[str], per_rank: list[RankRounds], rounds: int) -> dict[str, PlanRuns]:
    """Every rank's ``RankRounds`` -> each plan's runs, traces merged round by round."""
    out = {}
    for i, name in enumerate(names):
        mine = [r for r in per_rank if r.took_part[i]]
        traces = [merge([r.traces[i][k] for r in mine]) for k in range(rounds)]
        out[name] = PlanRuns(traces, {r.rank: r.outputs[i] for r in mine},
                             {r.rank: r.results[i] for r in mine},
                             {r.rank: r.boot_ns for r in mine}, {r.rank: r.held[i] for r in mine})
    return out
