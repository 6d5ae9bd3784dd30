"""The per-rank memory model (``analysis.memory_model``) against the live-tensor peaks of every
layout on real CPU ranks (``analysis.memory_measure``); its formulas are checked without ranks
in tests/unit/test_memory_model.py."""

from __future__ import annotations

import pytest

from ppdit.analysis.memory_model import rank_memory_model
from tests.conftest import MODEL_TOL


@pytest.fixture(scope="module")
def measured(pools):
    """Every layout on the small preset, on the shared pool of 2 ranks (five jobs)."""
    from ppdit.analysis.memory_measure import measure_layouts

    return measure_layouts("small", pool=pools(2))


def test_model_within_15_percent_of_every_layouts_measured_peak(measured):
    assert len(measured) == 8
    for name, got in measured.items():
        model = rank_memory_model("small", got.layout, dtype="fp32")
        peak = max(m.peak_bytes for m in got.ranks.values())
        assert abs(model.run_peak / peak - 1) < MODEL_TOL, (name, model.run_peak, peak)
        weights = max(m.weight_bytes for m in got.ranks.values())
        assert abs(model.weights / weights - 1) < MODEL_TOL, (name, model.weights, weights)
