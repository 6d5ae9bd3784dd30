"""Checker for lab 03: run it with ``pytest labs/lab03_bubble``.

It holds no formula: every expected value comes from ppdit's simulated clock
(``ppdit.parallel.layer_split.schedule.simulate``), which runs the task orders and message
rules of the real layer-split ranks.

Since the expected values come from ppdit, the checker also makes sure that the learner's come
from the learner (``labkit.check_own_work``, ``_derived``): the file may not use ppdit's code,
and the makespan and the fewest micro-batches must be derived, not read off the learner's own
clock.
"""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path
from unittest import mock

import pytest

from ppdit.teaching.labkit import check_own_work, counting_lines, hidden_cases

HERE = Path(__file__).parent
EPS = 1e-9  # float sums of 1/V costs: equal up to rounding, not bit for bit
LATENCIES = (0.0, 0.25, 1.0)
# A closed form runs a handful of Python lines whatever M is (a loop over V's rounds or P's
# ranks included); a clock for P=3, M=10 000, V=2 places 60 000 tasks, several lines each.
CLOSED_FORM_CASE, CLOSED_FORM_LINES = (3, 10_000, 2, 0.25), 1_000


class _ScheduleCalled(BaseException):
    """Raised by the stand-in for the learner's ``schedule``: a BaseException, so that an
    ``except Exception`` in the learner's code cannot swallow it (a flag backs it up)."""


def _derived(impl, name: str, *args, budget: int | None = None):
    """``impl.<name>(*args)`` with ``impl.schedule`` replaced by a function that refuses to run:
    a closed form has no use for the clock. A copy of the clock under another name escapes
    that, so ``budget`` (if given) caps the Python lines the call may run."""
    called = []

    def refuse(*_, **__):
        called.append(True)
        raise _ScheduleCalled

    call = f"{name}({', '.join(map(repr, args))})"
    refusal = (f"{call} ran more than {budget} lines of Python: its cost grows with M, so it "
               "simulates the clock instead of deriving it. The makespan must be a closed form "
               "in P, M, V and latency")
    with mock.patch.object(impl, "schedule", refuse):
        try:
            with counting_lines(budget, refusal) if budget else contextlib.nullcontext():
                value = getattr(impl, name)(*args)
        except _ScheduleCalled:
            value = None
    if called:
        what = ("the makespan must be a closed form in P, M, V and latency, derived, not read "
                "off your clock" if name == "makespan" else "the fewest micro-batches must "
                "follow from your derivation, not from runs of your clock")
        raise AssertionError(f"{call} calls schedule(): {what}")
    return value


def check_closed_form(impl) -> None:
    """The makespan's cost must not grow with M: a clock in disguise (a copy of ``schedule``
    inside ``makespan``, say) runs a line or more per task, a closed form a handful in all."""
    _derived(impl, "makespan", *CLOSED_FORM_CASE, budget=CLOSED_FORM_LINES)


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
        end, got = max(s.end for s in spans), _derived(impl, "makespan", p, m, v, lat)
        assert got == pytest.approx(end, abs=EPS), (
            f"{case}: your makespan {got}, simulated {end}")


def check_fewest(impl) -> None:
    """Part 4: at your M rank 0 never waits; at one micro-batch fewer it does."""
    for p, v, lat in itertools.product((2, 3, 5), range(1, 5), LATENCIES):
        case = f"P={p}, V={v}, latency={lat}"
        k = _derived(impl, "fewest_micro_batches", p, v, lat)
        assert isinstance(k, int) and k >= 1, f"{case}: {k!r} is not a number of micro-batches"
        assert not _rank0_waits(simulated(p, k, v, lat)), f"{case}: with M={k} rank 0 waits"
        assert k == 1 or _rank0_waits(simulated(p, k - 1, v, lat)), (
            f"{case}: M={k - 1} already keeps rank 0 busy: {k} is not the fewest")


def check_hidden(impl) -> None:
    """Cases drawn at this run, outside the grid above (hidden: no list of them to fit)."""
    with hidden_cases() as rng:
        for _ in range(12):
            p, m, v = rng.randint(1, 7), rng.randint(1, 12), rng.randint(1, 5)
            lat = round(rng.uniform(0.0, 1.5), 3)
            case = f"hidden case P={p}, M={m}, V={v}, latency={lat}"
            spans = simulated(p, m, v, lat)
            mine = sorted(tuple(t) for t in impl.schedule(p, m, v, lat))
            expected = sorted((s.rank, s.task.micro, s.task.chunk, s.start, s.end)
                              for s in spans)
            assert len(mine) == len(expected) and all(
                a[:3] == b[:3] and a[3:] == pytest.approx(b[3:], abs=EPS)
                for a, b in zip(mine, expected, strict=True)), f"{case}: your schedule differs"
            end = max(s.end for s in spans)
            assert _derived(impl, "makespan", p, m, v, lat) == pytest.approx(end, abs=EPS), (
                f"{case}: your makespan differs from the simulated {end}")


def check(impl) -> None:
    """Every part, against the simulated clock, and all of it the learner's own work."""
    check_own_work(impl, "lab 03")
    check_clock(impl)
    check_hidden(impl)
    check_closed_form(impl)
    check_fewest(impl)


def test_lab03():
    from ppdit.teaching.labkit import lab_implementation

    check(lab_implementation(HERE / "lab03_bubble.py"))
