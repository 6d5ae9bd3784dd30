"""Checker for lab 03: run it with ``pytest labs/lab03_bubble``."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def check(impl) -> None:
    """Compare the student's schedule, bubble and formula with the reference clock."""
    from ppdit.parallel.layer_split.schedule import LayerSplitPlan, sim_bubble, simulate
    from ppdit.sampler import Request, SamplingConfig

    for p in range(1, 7):
        for m in range(1, 11):
            mine = sorted(impl.gpipe_schedule(p, m))
            expected = sorted((s, k, float(k + s), float(k + s + 1))
                              for s in range(p) for k in range(m))
            assert [tuple(map(float, x)) for x in mine] == expected, f"schedule P={p}, M={m}"
            b = impl.bubble(mine, p)
            assert b == pytest.approx(1 - m * p / (p * (m + p - 1)))
            assert impl.bubble_formula(p, m) == pytest.approx(b)
            plan = LayerSplitPlan(tuple(Request(i, i) for i in range(m)), p, m,
                                  sampling=SamplingConfig(num_steps=1), preset="wan2.1-14b")
            simulated = sim_bubble(simulate(plan, lambda rank, task: 1.0), p)
            assert b == pytest.approx(simulated), f"P={p}, M={m}: ppdit's clock says {simulated}"


def test_lab03():
    from ppdit.teaching.labkit import lab_implementation

    check(lab_implementation(HERE / "lab03_bubble.py"))
