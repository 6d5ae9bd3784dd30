"""The error-bar rule shared by every figure that prints a spread."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from ppdit.viz.spread import count_label, min_max_err
from ppdit.viz.tensor import plot_forward_times


def test_bars_reach_the_fastest_and_slowest_run_and_never_go_negative():
    assert min_max_err([10.0, 5.0, 7.0], [[8.0, 10.0, 13.0], [], [7.5]]) == [
        [2.0, 0.0, 0.0], [3.0, 0.0, 0.5]]  # no runs: no bar; a median below all runs: 0


def test_the_count_says_a_range_when_rows_differ():
    assert count_label([[1, 2, 3], [1, 2, 3]], "round") == "3 rounds"
    assert count_label([[1, 2], [1, 2, 3], []], "repeat") == "2–3 repeats"
    assert count_label([[1]], "round") == "1 round"
    assert count_label([[], []], "round") == "0 rounds"


def test_forward_times_draw_the_spread_they_are_given():
    ax = plot_forward_times({"a": 10.0, "b compiled": 5.0},
                            runs_ms={"a": [8.0, 10.0, 13.0], "b compiled": [5.0, 6.0, 4.0]})
    assert "min–max of 3 rounds" in ax.get_xlabel()
    assert ax.get_xlim()[1] >= 13.0  # room for the slowest round
    plain = plot_forward_times({"a": 10.0})
    assert "min–max" not in plain.get_xlabel()
