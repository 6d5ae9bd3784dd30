"""The verdict rule (``ppdit.teaching.verdict``): OK or MISSED only when the median's interval
lies wholly on one side of the target, and a comparison of two codes by the same rule."""

from __future__ import annotations

import pytest

from ppdit.teaching.verdict import change, median_interval, verdict


def test_the_interval_needs_five_rounds_and_narrows_with_more():
    assert median_interval([1.0, 2.0, 3.0, 4.0]) is None  # at most 87.5% coverage
    assert median_interval([5.0, 1.0, 3.0, 2.0, 4.0]) == (1.0, 5.0)  # 93.8%: min to max
    assert median_interval(list(range(1, 10))) == (2, 8)  # 9 rounds: the 2nd and 8th


def test_one_runs_noise_gives_no_verdict_and_says_what_would():
    """The issue's handoff: one code measured 1.07-1.46x against a 1.2x target."""
    v = verdict([1.46, 1.07, 1.27, 1.20, 1.34], 1.2, "lower")
    assert v.word == "inconclusive here" and v.settle is not None and v.settle > 5
    assert "rounds would settle it" in v.says()
    assert verdict([1.05, 1.07, 1.10, 1.02, 1.12], 1.2).word == "OK"
    assert verdict([1.25, 1.31, 1.22, 1.40, 1.29], 1.2).word == "MISSED"
    assert verdict([0.96, 0.97, 0.99, 0.95, 0.98], 0.95, "higher").word == "OK"
    assert verdict([1.3, 1.4], 1.2).word == "inconclusive here"  # too few rounds
    on_it = verdict([0.9, 1.0, 1.1, 0.98, 1.02], 1.0)
    assert on_it.settle is None and "more rounds will not settle it" in on_it.says()


def test_two_codes_compared_round_by_round():
    assert change([0.80, 0.85, 0.78, 0.90, 0.82]).word == "faster"
    assert change([1.10, 1.20, 1.15, 1.30, 1.12]).word == "slower"
    assert change([0.9, 1.1, 1.0, 0.95, 1.05]).word == "no change this machine can see"
    assert change([1.2, 1.3, 1.25, 1.4, 1.22], better="higher").word == "faster"


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="better='up'"):
        verdict([1.0] * 5, 1.0, "up")
    with pytest.raises(ValueError, match="at least one round"):
        verdict([], 1.0)
