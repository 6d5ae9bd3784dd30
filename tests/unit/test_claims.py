"""The claims ledger is generated from what notebooks recorded, never typed by hand."""

from __future__ import annotations

import json

import pytest

from ppdit.teaching import claims


def test_record_and_ledger(tmp_path, monkeypatch):
    monkeypatch.setenv("PPDIT_CLAIMS_DIR", str(tmp_path / "claims"))
    claims.record("bubble-gpipe", "simulated bubble equals (P-1)/(M+P-1) exactly",
                  checks=[claims.Check("gap", 0.0, 0.0, "simulation")], values={"max_gap": 0.0})
    path = tmp_path / "claims" / "bubble-gpipe.json"
    assert json.loads(path.read_text())["values"] == {"max_gap": 0.0}
    claims.record("report-cold-step", "first step 30 ms vs 10 ms", reproducible_here=False,
                  why_not="there is no CUDA kernel selection on a CPU")
    page = claims.ledger_markdown()
    rows = [line for line in page.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == len(claims.CLAIMS) + 1  # header + one row per claim
    assert "simulated bubble equals" in page
    assert "**not reproducible here, because there is no CUDA kernel selection" in page
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


def test_verdicts_are_computed_from_the_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("PPDIT_CLAIMS_DIR", str(tmp_path))
    sim = claims.Check("simulated bubble vs formula", 0.2, 0.2, "simulation", abs_tol=1e-9)
    live = claims.Check("live bubble vs formula", 0.12, 0.11, "live", abs_tol=0.05)
    assert claims.record("bubble-gpipe", "x", checks=[sim, live]) == "reproduced live"
    # the same claim with the live value moved past its tolerance: the verdict follows
    worse = claims.Check("live bubble vs formula", 0.29, 0.11, "live", abs_tol=0.05)
    assert claims.record("bubble-gpipe", "x", checks=[sim, worse]) == "reproduced in simulation"
    off = claims.Check("simulated bubble vs formula", 0.3, 0.2, "simulation", abs_tol=1e-9)
    assert claims.record("bubble-gpipe", "x", checks=[off, worse]) == "not reproduced"
    assert "**reproduced live**" not in claims.ledger_markdown()
    assert "**not reproduced**" in claims.ledger_markdown()


def test_a_stored_verdict_is_recomputed_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv("PPDIT_CLAIMS_DIR", str(tmp_path))
    live = claims.Check("speedup", 1.2, 1.5, "live", at_least=True, abs_tol=0.1)
    path = tmp_path / "filling.json"
    claims.record("filling", "x", checks=[live])
    rec = json.loads(path.read_text())
    rec["verdict"] = "reproduced live"  # edited by hand
    path.write_text(json.dumps(rec))
    assert "**not reproduced**" in claims.ledger_markdown()


def test_checks_state_their_rule():
    assert claims.Check("a", 1.05, 1.0, "live", rel_tol=0.1).holds()
    assert not claims.Check("a", 1.2, 1.0, "live", rel_tol=0.1).holds()
    assert claims.Check("speedup", 1.7, 1.5, "live", at_least=True).holds()
    assert not claims.Check("overhead", 1.7, 1.5, "live", at_most=True).holds()
    with pytest.raises(ValueError, match="where='gpu'"):
        claims.Check("a", 1, 1, "gpu")
    assert claims.verdict([]).startswith("unchecked")


def test_quotes_carry_median_and_spread():
    from ppdit.teaching.quote import ratio_spread, spread

    assert spread([0.010, 0.012, 0.011]) == "11.0 ms (10.0-12.0, 3 rounds)"
    assert spread([0.5], "s", 2) == "0.50 s (1 round)"
    assert ratio_spread([2.0, 3.0], [1.0, 1.0]) == "2.50x (2.00-3.00, 2 rounds)"
    with pytest.raises(ValueError, match="equal count"):
        ratio_spread([1.0], [1.0, 2.0])


def test_a_direction_judged_on_its_interval_can_be_inconclusive(tmp_path, monkeypatch):
    """A live direction decided by one run's median flipped between executions; with the
    median's interval it holds, fails or is undecided, and the ledger says which."""
    monkeypatch.setenv("PPDIT_CLAIMS_DIR", str(tmp_path))

    def faster(lo, hi):
        return claims.Check("compiled / eager", (lo + hi) / 2, 1.0, "live", at_least=True,
                            interval=(lo, hi))
    assert faster(1.1, 1.4).holds() and not faster(1.1, 1.4).undecided()
    assert not faster(0.9, 1.4).holds() and faster(0.9, 1.4).undecided()
    assert not faster(0.7, 0.9).holds() and not faster(0.7, 0.9).undecided()
    assert claims.record("funcol-compile", "x", checks=[faster(1.1, 1.4)]) == "reproduced live"
    assert claims.record("funcol-compile", "x", checks=[faster(0.9, 1.4)]) == (
        "inconclusive live here")
    assert claims.record("funcol-compile", "x", checks=[faster(0.7, 0.9)]) == "not reproduced"
    assert "undecided" in faster(0.9, 1.4).describe()
    rounds = claims.Check.over_rounds("x", [1.5, 1.1, 1.3, 1.2, 1.4], 1.0, "live", at_least=True)
    assert (rounds.measured, rounds.interval) == (1.3, (1.1, 1.5)) and rounds.holds()
    two_sided = claims.Check("bubble", 0.11, 0.11, "live", abs_tol=0.01, interval=(0.05, 0.2))
    assert two_sided.undecided()
    assert claims.recorded_verdict(json.loads((tmp_path / "funcol-compile.json").read_text())) \
        == "not reproduced"
