"""Contention and flow-shop arithmetic used by lessons 01-03 to compare live runs with ideals."""

from __future__ import annotations

import itertools

import pytest

from ppdit.analysis.live_effects import flow_makespan, overlap_slowdown, step_slowdown
from ppdit.runtime.observe.trace import Span, Trace

MS = 1_000_000  # ns


def _brute_force_makespan(stage_times: list[float], n: int) -> float:
    """Event-by-event flow shop: request r enters stage s when both are free."""
    finish = [[0.0] * len(stage_times) for _ in range(n)]
    for r, s in itertools.product(range(n), range(len(stage_times))):
        ready = max(finish[r][s - 1] if s else 0.0, finish[r - 1][s] if r else 0.0)
        finish[r][s] = ready + stage_times[s]
    return finish[-1][-1]


@pytest.mark.parametrize("times", [[1.0, 1.0], [0.4, 0.2], [0.2, 0.5, 0.3], [3.0]])
@pytest.mark.parametrize("n", [1, 2, 6])
def test_flow_makespan_matches_an_event_simulation(times, n):
    assert flow_makespan(times, n) == pytest.approx(_brute_force_makespan(times, n))


def test_flow_makespan_refuses_an_empty_pipeline():
    with pytest.raises(ValueError, match="at least one request and one stage"):
        flow_makespan([], 3)


def test_overlap_slowdown_separates_alone_from_beside():
    # rank 0: a 10 ms task alone, then a 20 ms task while rank 1 computes (overlapped fully)
    spans = [Span(0, "compute", "a", 0, 10 * MS), Span(0, "compute", "b", 10 * MS, 30 * MS),
             Span(1, "compute", "c", 10 * MS, 30 * MS), Span(1, "recv", "x", 0, 10 * MS)]
    out = overlap_slowdown(Trace(spans))
    assert out[0].alone_s == [0.01] and out[0].overlapped_s == [0.02]
    assert out[0].factor == pytest.approx(2.0)
    assert out[1].alone_s == [] and out[1].factor is None  # the recv is not compute
    assert "no tasks" in out[1].describe() and "2.00x" in out[0].describe()


def test_step_slowdown_divides_by_the_step_measured_alone():
    spans = [Span(0, "compute", "r0", 0, 30 * MS, {"step": 0}),
             Span(1, "compute", "r0", 30 * MS, 40 * MS, {"step": 1})]
    assert step_slowdown(Trace(spans), [0.02, 0.01]) == {0: pytest.approx(1.5),
                                                         1: pytest.approx(1.0)}
