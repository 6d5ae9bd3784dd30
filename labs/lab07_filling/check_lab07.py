"""Checker for lab 07: run it with ``pytest labs/lab07_filling``.

It holds no closed form. Every expected value comes from ``simulate`` below, an event-by-event
replay of ``_Stage.run_filled`` (``ppdit.parallel.step_split.ranks``) on a clock, and from
ppdit's own Little's-law statistics (``ppdit.analysis.trace_stats.littles_law``) applied to the
simulated compute spans, as they would be to a real run's trace. No rank is started.

With hop_s <= stage_s the replay agrees span by span with ppdit's layer-split clock run with one
chunk per rank and one denoising step (``ppdit.parallel.layer_split.schedule.simulate``): the
same pipeline seen from lesson 03. The checker keeps its own replay because that clock has no
send window, which matters once a hop outlasts a stage (the handout's Going further).

A replay that matches the checker's could pass every comparison without deriving anything, so
the learner's answers must also be their own (``labkit.check_own_work``: no ppdit code, not this
checker's ``simulate``) and closed forms (``check_closed_form``: probes drawn at each run, R in
the thousands to 100 000 and fractions from 0.999 to 0.9999, each within a budget of Python lines
that a clock or a search overruns and each equal to the replay's value, so that a size guard
answering nonsense past the visible cases fails too). Beside the cases listed below, each run
draws hidden ones (``check_hidden``), so that fitting the visible cases is not enough.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from pathlib import Path
from types import SimpleNamespace

import pytest

from ppdit.teaching.labkit import check_own_work, counting_lines, hidden_cases

HERE = Path(__file__).parent
REL = 1e-9  # float sums of stage and hop times: equal up to rounding
NS_REL = 1e-6  # a trace counts whole nanoseconds
# A ratio this close below its target reaches it: 9 / 10 and 0.9 differ by one rounding, while
# at a fraction of 0.9999 the ratios of R and R - 1 requests differ by about 1e-9.
REACH_REL = 1e-12
STAGES = range(1, 7)
REQUESTS = (*range(1, 10), 16, 33)
STAGE_TIMES = (1.0, 2.5, 0.3)
# hop_s as a share of stage_s: none, a GPU's latent (milliseconds against seconds), a slow
# link, and as long as the stage itself (the longest this lab's rules allow)
HOP_SHARES = (0.0, 0.004, 0.25, 1.0)
FRACTIONS = (0.05, 0.3, 0.5, 0.6, 2 / 3, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99)
# A closed form runs a handful of lines whatever R is; a clock at the probes' R (1 000 to
# 100 000) places thousands of tasks or more, and a search for the fewest requests at 0.999 to
# 0.9999 of the rate tries thousands of them.
CLOSED_FORM_LINES = 1_000
HIDDEN = 40  # cases drawn at check time, beside the visible ones

Spans = list[list[tuple[float, float]]]  # spans[stage][request] = (start, end)


def _send_window() -> int:
    """How many sends a stage keeps outstanding: the default of ``FrameSender``, which
    ``_Stage`` builds its outbox with."""
    from ppdit.runtime.comm.wire import FrameSender

    return inspect.signature(FrameSender).parameters["max_in_flight"].default


def simulate(num_requests: int, num_stages: int, stage_s: float, hop_s: float) -> Spans:
    """Each stage's compute of each request on a clock, by the rules of ``run_filled``.

    A stage takes its requests in order. Request r's compute starts once (1) the stage has
    finished request r - 1, (2) r's frame has arrived (stage 0 makes its own noise: at once),
    and (3) ``outbox.claim()`` has a free slot, i.e. the send of request r - window has
    completed. ``give`` posts the send and returns; the frame arrives ``hop_s`` after it was
    posted, and the send completes then at the latest. Every message goes from a stage to the
    next, so the stages can be played one after another, each from its upstream's arrivals
    (as ``labkit.run_ranks_in_order`` plays real ranks).
    """
    window, spans = _send_window(), []
    arrival = [0.0] * num_requests
    for stage in range(num_stages):
        sends = stage < num_stages - 1
        row: list[tuple[float, float]] = []
        sent: list[float] = []  # when each of this stage's sends completes
        free = 0.0
        for r in range(num_requests):
            start = max(free, arrival[r])
            if sends and r >= window:
                start = max(start, sent[r - window])
            free = start + stage_s
            row.append((start, free))
            if sends:
                sent.append(free + hop_s)
        arrival = [end + hop_s for _, end in row]
        spans.append(row)
    return spans


def _sim_makespan(*case) -> float:
    return simulate(*case)[-1][-1][1]


def _sim_steady(num_stages: int, stage_s: float, hop_s: float) -> float:
    """Extra requests per extra second between two long runs: the fill cancels out."""
    short = 4 * num_stages + 8
    long = short + 12  # a multiple of any short period the send window could impose
    return (long - short) / (_sim_makespan(long, num_stages, stage_s, hop_s)
                             - _sim_makespan(short, num_stages, stage_s, hop_s))


def _little(spans: Spans) -> dict[str, float]:
    """ppdit's Little's-law statistics of the simulated run, read like a real trace."""
    from ppdit.analysis.trace_stats import littles_law
    from ppdit.runtime.observe.trace import Span, Trace

    return littles_law(Trace([
        Span(stage, "compute", f"r{r}", round(a * 1e9), round(b * 1e9), {"request": r})
        for stage, row in enumerate(spans) for r, (a, b) in enumerate(row)]))


def _cases(hops: bool):
    shares = HOP_SHARES[:0:-1] if hops else HOP_SHARES[:1]  # longest hop first: plainest failure
    for r, p, stage_s, share in itertools.product(REQUESTS, STAGES, STAGE_TIMES, shares):
        yield (r, p, stage_s, share * stage_s), (f"R={r}, P={p}, stage_s={stage_s}, "
                                                 f"hop_s={share * stage_s:g}")


def check_fill(impl) -> None:
    """Part 1 without hops: fill, stream, drain."""
    for case, name in _cases(hops=False):
        mine, sim = impl.makespan(*case), _sim_makespan(*case)
        assert mine == pytest.approx(sim, rel=REL), (
            f"{name}: your makespan is {mine:.6g} s, the simulated clock's {sim:.6g} s "
            "(fill, stream, drain)")


def check_steady(impl, cases=None) -> None:
    """Part 2's limit: a full pipeline's rate, hops included (``cases``: (P, stage_s, hop_s))."""
    # many stages and long hops first: a wrong answer shows plainest there
    for p, stage_s, hop_s in cases or (
            (p, stage_s, share * stage_s) for share, p, stage_s
            in itertools.product(HOP_SHARES[::-1], STAGES[::-1], STAGE_TIMES)):
        mine, sim = impl.steady_throughput(p, stage_s, hop_s), _sim_steady(p, stage_s, hop_s)
        assert mine == pytest.approx(sim, rel=REL), (
            f"P={p}, stage_s={stage_s}, hop_s={hop_s:g}: your steady throughput is "
            f"{mine:.6g}/s, the simulated pipeline delivers {sim:.6g}/s once full. Does a stage "
            "wait for its own send before it starts the next request? Read _Stage.give")


def check_hops(impl, cases=None) -> None:
    """Part 1 with hops (``cases``: (case, name) pairs, by default the listed ones)."""
    for case, name in cases or _cases(hops=True):
        mine, sim = impl.makespan(*case), _sim_makespan(*case)
        assert mine == pytest.approx(sim, rel=REL), (
            f"{name}: with hops your makespan is {mine:.6g} s, the simulated clock's "
            f"{sim:.6g} s")


def check_throughput(impl, cases=None) -> None:
    """Part 2: requests per second over the whole run."""
    for case, name in cases or itertools.chain(_cases(hops=False), _cases(hops=True)):
        mine, sim = impl.throughput(*case), case[0] / _sim_makespan(*case)
        assert mine == pytest.approx(sim, rel=REL), (
            f"{name}: your throughput is {mine:.6g}/s, the simulated run's {sim:.6g}/s "
            "(its requests over its makespan)")


def check_in_flight(impl, cases=None) -> None:
    """Part 3: L from your numbers against L from the simulated trace."""
    for case, name in cases or itertools.chain(_cases(hops=False), _cases(hops=True)):
        mine, law = impl.in_flight(*case), _little(simulate(*case))
        assert mine == pytest.approx(law["L"], rel=NS_REL), (
            f"{name}: your in_flight is {mine:.6g}, but Little's law on the simulated trace "
            f"gives L = {law['L']:.6g} (throughput {law['lambda']:.6g}/s x a request's mean "
            f"time inside, from its entry to its exit, W = {law['W']:.6g} s)")


def _reaches(num_requests: int, num_stages: int, fraction: float) -> tuple[bool, float]:
    """Whether R requests without hops reach ``fraction`` of the steady rate, on the clock
    (a ratio within REACH_REL of the target counts: 9 / 10 must reach 0.9)."""
    ratio = (num_requests / _sim_makespan(num_requests, num_stages, 1.0, 0.0)
             / _sim_steady(num_stages, 1.0, 0.0))
    return ratio >= fraction * (1 - REACH_REL), ratio


def check_requests_for(impl, cases=None) -> None:
    """Part 4: at your R the pipeline reaches the fraction; at one request fewer it does not
    (``cases``: (fraction, P) pairs, by default the listed ones)."""
    for fraction, p in cases or itertools.product(FRACTIONS, (1, 2, 3, 4, 5, 8)):
        name = f"fraction={fraction:g}, P={p}"
        k = impl.requests_for(fraction, p)
        assert isinstance(k, int) and k >= 1, f"{name}: {k!r} is not a number of requests"
        ok, ratio = _reaches(k, p, fraction)
        assert ok, (f"{name}: with R={k} the filled pipeline reaches only {ratio:.6g} of its "
                    "steady throughput")
        if k > 1:
            ok, ratio = _reaches(k - 1, p, fraction)
            assert not ok, (f"{name}: R={k - 1} already reaches {ratio:.6g} of the steady "
                            f"throughput, so {k} is not the fewest")
    for bad in (0.0, 1.0, -0.25, 1.5):
        try:
            got = impl.requests_for(bad, 3)
        except ValueError as err:
            text = str(err)
        else:
            raise AssertionError(f"requests_for({bad}, 3) returned {got!r}: a fraction outside "
                                 "(0, 1) must raise ValueError")
        assert "fraction" in text and str(bad) in text, (
            f"requests_for({bad}, 3) raised ValueError({text!r}): say that the fraction must "
            f"lie in (0, 1), and which value ({bad}) it got")


def _closed(impl, name: str, *args):
    """``impl.<name>(*args)``, refused if it runs more than ``CLOSED_FORM_LINES`` lines."""
    with counting_lines(CLOSED_FORM_LINES, (
            f"{name}{args} ran more than {CLOSED_FORM_LINES} lines of Python: its cost grows "
            "with the number of requests, so it replays a clock (or searches) instead of "
            "deriving the answer. Each part asks for a closed form in R, P, stage_s and "
            "hop_s")):
        return getattr(impl, name)(*args)


def check_closed_form(impl) -> None:
    """Every part's cost must not grow with R (or with how close ``fraction`` is to 1), and
    its value must be the replay's: on a probe drawn at this run, R log-uniform in [1 000,
    100 000] and the fraction in [0.999, 0.9999], so that no guard on the size can single the
    probe out."""
    budgeted = SimpleNamespace(**{name: functools.partial(_closed, impl, name) for name in (
        "makespan", "throughput", "in_flight", "steady_throughput", "requests_for")})
    with hidden_cases() as rng:
        stage_s = round(rng.uniform(0.05, 5.0), 3)
        big = (round(10 ** rng.uniform(3, 5)), rng.randint(2, 6), stage_s,
               round(rng.random() * stage_s, 3))
        probe = [(big, "probe R={}, P={}, stage_s={}, hop_s={}".format(*big))]
        check_hops(budgeted, probe)  # each check calls yours first: an overrun costs no replay
        check_throughput(budgeted, probe)
        check_in_flight(budgeted, probe)
        check_steady(budgeted, [big[1:]])
        check_requests_for(budgeted, [(round(1 - 10 ** -rng.uniform(3, 4), 6),
                                       rng.randint(2, 8))])


def check_hidden(impl) -> None:
    """Parts 1, 3 and 4 on cases drawn now, none of them in this file."""
    with hidden_cases() as rng:
        cases, fractions = [], []
        for _ in range(HIDDEN):
            r, p, stage_s = rng.randint(1, 400), rng.randint(1, 12), rng.uniform(0.05, 5.0)
            case = (r, p, round(stage_s, 3), round(rng.uniform(0.0, 1.0) * stage_s, 3))
            cases.append((case, "hidden case R={}, P={}, stage_s={}, hop_s={}".format(*case)))
            fractions.append((round(rng.uniform(0.01, 0.995), 4), p))
        check_hops(impl, cases)
        check_in_flight(impl, cases)
        check_requests_for(impl, fractions)


def check(impl, pool=None) -> None:
    """Raise (AssertionError / NotImplementedError) unless every part agrees with the clock,
    on the visible cases and on hidden ones, and is the learner's own closed form. ``pool`` is
    unused: this lab starts no ranks."""
    check_own_work(impl, "lab 07", banned=("check_lab07",))
    check_fill(impl)
    check_steady(impl)
    check_hops(impl)
    check_throughput(impl)
    check_in_flight(impl)
    check_requests_for(impl)
    check_closed_form(impl)
    check_hidden(impl)


def test_lab07():
    from ppdit.teaching.labkit import lab_implementation

    check(lab_implementation(HERE / "lab07_filling.py"))
