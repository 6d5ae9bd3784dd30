"""Checker for lab 03: run it with ``pytest labs/lab03_bubble``.

It holds no formula: every expected value comes from ppdit's simulated clock
(``ppdit.parallel.layer_split.schedule.simulate``), which runs the task orders and message
rules of the real layer-split ranks.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

HERE = Path(__file__).parent
EPS = 1e-9  # float sums of 1/V costs: equal up to rounding, not bit for bit
LATENCIES = (0.0, 0.25, 1.0)


def simulated(p: int, m: int, v: int, latency: float):
    """ppdit's clock for one denoising step: P ranks, M micro-batches, V chunks per rank,
    every chunk 1/V stage-time, ``latency`` per hop between ranks."""
    from ppdit.checkpoint.source import ModelSource
    from ppdit.parallel.layer_split.schedule import LayerSplitPlan, simulate
    from ppdit.sampler import Request, SamplingConfig

    plan = LayerSplitPlan(tuple(Request(i, i) for i in range(m)), p, m, virtual=v,
                          sampling=SamplingConfig(num_steps=1), source=ModelSource("wan2.1-14b"))
    return simulate(plan, lambda rank, task: 1.0 / v, latency=latency)


def _rank0_waits(spans) -> bool:
    mine = sorted((s.start, s.end) for s in spans if s.rank == 0)
    return any(b[0] - a[1] > EPS for a, b in itertools.pairwise(mine))


def check_clock(impl) -> None:
    """Parts 1-3: schedule task by task, bubble and makespan against the simulation."""
    from ppdit.parallel.layer_split.schedule import sim_bubble

    for p, m, v, lat in itertools.product(range(1, 6), range(1, 9), range(1, 5), LATENCIES):
        case = f"P={p}, M={m}, V={v}, latency={lat}"
        spans = simulated(p, m, v, lat)
        expected = sorted((s.rank, s.task.micro, s.task.chunk, s.start, s.end) for s in spans)
        mine = sorted(tuple(t) for t in impl.schedule(p, m, v, lat))
        assert [t[:3] for t in mine] == [t[:3] for t in expected], (
            f"{case}: your schedule's (rank, micro, chunk) tasks are not the simulator's")
        for a, b in zip(mine, expected, strict=True):
            assert a[3:] == pytest.approx(b[3:], abs=EPS), (
                f"{case}: task (rank, micro, chunk)={a[:3]} runs {a[3:]} on your clock, "
                f"{b[3:]} on ppdit's")
        assert impl.bubble(mine, p) == pytest.approx(sim_bubble(spans, p), abs=EPS), case
        end = max(s.end for s in spans)
        assert impl.makespan(p, m, v, lat) == pytest.approx(end, abs=EPS), (
            f"{case}: your makespan {impl.makespan(p, m, v, lat)}, simulated {end}")


def check_fewest(impl) -> None:
    """Part 4: at your M rank 0 never waits; at one micro-batch fewer it does."""
    for p, v, lat in itertools.product((2, 3, 5), range(1, 5), LATENCIES):
        case = f"P={p}, V={v}, latency={lat}"
        k = impl.fewest_micro_batches(p, v, lat)
        assert isinstance(k, int) and k >= 1, f"{case}: {k!r} is not a number of micro-batches"
        assert not _rank0_waits(simulated(p, k, v, lat)), f"{case}: with M={k} rank 0 waits"
        assert k == 1 or _rank0_waits(simulated(p, k - 1, v, lat)), (
            f"{case}: M={k - 1} already keeps rank 0 busy: {k} is not the fewest")


def check(impl) -> None:
    """Every part, against the simulated clock."""
    check_clock(impl)
    check_fewest(impl)


def test_lab03():
    from ppdit.teaching.labkit import lab_implementation

    check(lab_implementation(HERE / "lab03_bubble.py"))
