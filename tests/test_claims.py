"""The claims ledger is generated from what notebooks recorded, never typed by hand."""

from __future__ import annotations

import json

import pytest

from ppdit import claims


def test_record_and_ledger(tmp_path, monkeypatch):
    monkeypatch.setenv("PPDIT_CLAIMS_DIR", str(tmp_path / "claims"))
    path = claims.record("bubble-gpipe", "simulated bubble equals (P-1)/(M+P-1) exactly",
                         values={"max_gap": 0.0})
    assert json.loads(path.read_text())["values"] == {"max_gap": 0.0}
    claims.record("report-cold-step", "first step 30 ms vs 10 ms", reproducible_here=False,
                  why_not="there is no CUDA kernel selection on a CPU")
    page = claims.ledger_markdown()
    rows = [line for line in page.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == len(claims.CLAIMS) + 1  # header + one row per claim
    assert "simulated bubble equals" in page
    assert "*Not reproducible here:* there is no CUDA kernel selection" in page
    assert page.count("*pending: no notebook has recorded it yet*") == len(claims.CLAIMS) - 2


def test_unknown_claims_and_missing_reasons_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("PPDIT_CLAIMS_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="unknown claim 'made-up'"):
        claims.record("made-up", "x")
    with pytest.raises(ValueError, match="needs why_not"):
        claims.record("filling", "x", reproducible_here=False)


def test_every_claim_points_at_a_numbered_notebook():
    ids = [c.claim_id for c in claims.CLAIMS]
    assert len(ids) == len(set(ids))
    assert all(c.notebook[:2].isdigit() for c in claims.CLAIMS)
