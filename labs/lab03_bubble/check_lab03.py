"""Checker for lab 03: run it with ``pytest labs/lab03_bubble``.

It holds no formula: every expected value comes from ppdit's simulated clock
(``ppdit.parallel.layer_split.schedule.simulate``), which runs the task orders and message
rules of the real layer-split ranks.

Since the expected values come from ppdit, the checker also makes sure that the learner's come
from the learner (``labkit.check_own_work``, ``_derived``): the file may not use ppdit's code,
and the makespan and the fewest micro-batches must be derived, not read off the learner's own
clock: each call of either runs under a budget of Python lines that a clock overruns, and
probes drawn at each run, where a clock would cost thousands of tasks, must agree with ppdit's.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from unittest import mock

import pytest

from ppdit.teaching.labkit import check_own_work, counting_lines, hidden_cases

HERE = Path(__file__).parent
EPS = 1e-9  # float sums of 1/V costs: equal up to rounding, not bit for bit
LATENCIES = (0.0, 0.25, 1.0)
# A closed form runs a handful of Python lines whatever M is (a loop over V's rounds or P's
# ranks included); a clock for the probes below places 500 to 12 000 tasks, a line or more each.
CLOSED_FORM_LINES = 1_000


class _ScheduleCalled(BaseException):
    """Raised by the stand-in for the learner's ``schedule``: a BaseException, so that an
    ``except Exception`` in the learner's code cannot swallow it (a flag backs it up)."""


def _derived(impl, name: str, *args):
    """``impl.<name>(*args)`` with ``impl.schedule`` replaced by a function that refuses to run:
    a closed form has no use for the clock. A copy of the clock under another name escapes
    that, so the call may also run no more than ``CLOSED_FORM_LINES`` lines of Python."""
    called = []

    def refuse(*_, **__):
        called.append(True)
        raise _ScheduleCalled

    call = f"{name}({', '.join(map(repr, args))})"
    what = ("the makespan must be a closed form in P, M, V and latency, derived, not read off "
            "your clock" if name == "makespan" else "the fewest micro-batches must follow from "
            "your derivation, not from runs of your clock")
    refusal = (f"{call} ran more than {CLOSED_FORM_LINES} lines of Python: its cost grows with "
               f"the sizes, as a clock's (or a search over runs of one) does: {what}")
    with mock.patch.object(impl, "schedule", refuse):
        try:
            with counting_lines(CLOSED_FORM_LINES, refusal):
                value = getattr(impl, name)(*args)
        except _ScheduleCalled:
            value = None
    if called:
        raise AssertionError(f"{call} calls schedule(): {what}")
    return value


def check_closed_form(impl) -> None:
    """Probes drawn at this run, each within the line budget and equal to ppdit's clock: one
    where micro-batch 0 comes back before rank 0 is free (a long ring, M in [2P, 4P]), one
    where rank 0 is still busy then (M in [150, 300]). A copy of the clock overruns the budget
    at either; a size guard (``if M > 100``) or a formula for one regime gets a value wrong."""
    with hidden_cases() as rng:
        p = rng.randint(8, 10)  # V x P <= 40, the blocks of the model the clock plans for
        for m, v, lat in ((rng.randint(2 * p, 4 * p), 4, round(rng.uniform(1.0, 1.5), 3)),
                          (rng.randint(150, 300), rng.randint(1, 4), round(rng.random(), 3))):
            got = _derived(impl, "makespan", p, m, v, lat)
            end = max(s.end for s in simulated(p, m, v, lat))
            assert got == pytest.approx(end, abs=EPS), (
                f"probe P={p}, M={m}, V={v}, latency={lat}: your makespan {got}, simulated {end}")


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
        got = _derived(impl, "makespan", p, m, v, lat)
        assert got == pytest.approx(end, abs=EPS), (
            f"{case}: your makespan {got}, simulated {end}")


def _check_fewest_case(impl, p: int, v: int, lat: float) -> None:
    """At your M rank 0 never waits; at one micro-batch fewer it does."""
    case = f"P={p}, V={v}, latency={lat}"
    k = _derived(impl, "fewest_micro_batches", p, v, lat)
    assert isinstance(k, int) and k >= 1, f"{case}: {k!r} is not a number of micro-batches"
    assert not _rank0_waits(simulated(p, k, v, lat)), f"{case}: with M={k} rank 0 waits"
    assert k == 1 or _rank0_waits(simulated(p, k - 1, v, lat)), (
        f"{case}: M={k - 1} already keeps rank 0 busy: {k} is not the fewest")


def check_fewest(impl) -> None:
    """Part 4, each call within the line budget (a search over runs of a clock overruns it):
    on the grid, then on a probe drawn at this run, whose answer lies in the tens or hundreds."""
    for p, v, lat in itertools.product((2, 3, 5), range(1, 5), LATENCIES):
        _check_fewest_case(impl, p, v, lat)
    with hidden_cases() as rng:
        p = rng.randint(4, 10)
        _check_fewest_case(impl, p, rng.randint(2, 40 // p), round(rng.uniform(1.0, 3.0), 3))


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
            got = _derived(impl, "makespan", p, m, v, lat)
            assert got == pytest.approx(end, abs=EPS), (
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
