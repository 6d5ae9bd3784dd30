"""Checker for lab 03: run it with ``pytest labs/lab03_bubble``.

It holds no formula: every expected value comes from ppdit's simulated clock
(``ppdit.parallel.layer_split.schedule.simulate``), which runs the task orders and message
rules of the real layer-split ranks.

Since the expected values come from ppdit, the checker also makes sure that the learner's come
from the learner (``check_own_work``, ``_derived``): the file may not use ppdit's code, and the
makespan and the fewest micro-batches must be derived, not read off the learner's own clock.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import sys
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from unittest import mock

import pytest

HERE = Path(__file__).parent
EPS = 1e-9  # float sums of 1/V costs: equal up to rounding, not bit for bit
LATENCIES = (0.0, 0.25, 1.0)
# A closed form runs a handful of Python lines whatever M is (a loop over V's rounds or P's
# ranks included); a clock for P=3, M=10 000, V=2 places 60 000 tasks, several lines each.
CLOSED_FORM_CASE, CLOSED_FORM_LINES = (3, 10_000, 2, 0.25), 1_000


def _is_ppdit(name: str) -> bool:
    """Whether a dotted name lies in ppdit, bar ``ppdit.teaching`` (the labs' own toolkit)."""
    return (name == "ppdit" or name.startswith("ppdit.")) and not (
        name == "ppdit.teaching" or name.startswith("ppdit.teaching."))


def check_own_work(impl) -> None:
    """The file may not use ppdit's code. Not only ``ppdit.parallel.layer_split.schedule`` and
    ``ppdit.analysis.bubbles``: the simulator is reachable through several other modules (the
    plots in ``ppdit.viz.schedules``, for one), and lab 03 needs nothing from ppdit at all.
    Two looks: every import statement in the source, wherever it sits (inside a function too),
    and every global of the loaded module (what an import under another spelling left there)."""
    for node in ast.walk(ast.parse(inspect.getsource(impl))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in filter(_is_ppdit, names):
            raise AssertionError(
                f"line {node.lineno} of your lab file imports {name}: lab 03 asks for your own "
                "clock and your own derivation, so it may not use ppdit's own code (its "
                "simulator is what the checker compares you with)")
    for name, value in vars(impl).items():
        origin = value.__name__ if isinstance(value, ModuleType) else getattr(
            value, "__module__", None)
        if isinstance(origin, str) and _is_ppdit(origin):
            raise AssertionError(
                f"your lab file's global {name!r} comes from {origin}: lab 03 asks for your "
                "own clock and your own derivation, so it may not use ppdit's own code")


class _ScheduleCalled(BaseException):
    """Raised by the stand-in for the learner's ``schedule``: a BaseException, so that an
    ``except Exception`` in the learner's code cannot swallow it (a flag backs it up)."""


class _TooManyLines(BaseException):
    """Raised by the line counter once a call passes its budget."""


def _derived(impl, name: str, *args, budget: int | None = None):
    """``impl.<name>(*args)`` with ``impl.schedule`` replaced by a function that refuses to run:
    a closed form has no use for the clock. A copy of the clock under another name escapes
    that, so ``budget`` (if given) caps the Python lines the call may run (``_counting``)."""
    called = []

    def refuse(*_, **__):
        called.append(True)
        raise _ScheduleCalled

    call = f"{name}({', '.join(map(repr, args))})"
    lines = [0]
    with mock.patch.object(impl, "schedule", refuse):
        try:
            with _counting(lines, budget):
                value = getattr(impl, name)(*args)
        except _ScheduleCalled:
            value = None
        except _TooManyLines:
            raise AssertionError(
                f"{call} ran more than {budget} lines of Python: its cost grows with M, so it "
                "simulates the clock instead of deriving it. The makespan must be a closed "
                "form in P, M, V and latency") from None
    if called:
        what = ("the makespan must be a closed form in P, M, V and latency, derived, not read "
                "off your clock" if name == "makespan" else "the fewest micro-batches must "
                "follow from your derivation, not from runs of your clock")
        raise AssertionError(f"{call} calls schedule(): {what}")
    return value


@contextmanager
def _counting(lines: list[int], budget: int | None):
    """Count into ``lines[0]`` the Python lines (and calls) run in the block, in every frame it
    opens, with ``sys.settrace``; raise ``_TooManyLines`` past ``budget``. The tracer in place
    before (a coverage tool's, say) is restored after. No budget: nothing is traced."""
    if budget is None:
        yield
        return

    def tracer(frame, event, arg):
        if event in ("call", "line"):
            lines[0] += 1
            if lines[0] > budget:
                raise _TooManyLines
        return tracer

    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(before)


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


def check(impl) -> None:
    """Every part, against the simulated clock, and all of it the learner's own work."""
    check_own_work(impl)
    check_clock(impl)
    check_closed_form(impl)
    check_fewest(impl)


def test_lab03():
    from ppdit.teaching.labkit import lab_implementation

    check(lab_implementation(HERE / "lab03_bubble.py"))
