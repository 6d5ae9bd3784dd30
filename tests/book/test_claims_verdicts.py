"""A verdict in the claims ledger follows its measurement: move a measured value past its
tolerance and the verdict changes; and every committed record carries the checks its verdict
is computed from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ppdit.teaching import claims
from tests.conftest import ROOT

COMMITTED = ROOT / "notebooks" / "claims"

# One rule per row: keyword arguments, expected value, a measurement just inside the tolerance
# (on its boundary, where the rule says "holds"), and one just past it. Binary fractions, so the
# boundary is exact in floating point.
RULES = {
    "abs_tol above": (dict(abs_tol=0.25), 1.0, 1.25, 1.375),
    "abs_tol below": (dict(abs_tol=0.25), 1.0, 0.75, 0.625),
    "rel_tol above": (dict(rel_tol=0.125), 2.0, 2.25, 2.5),
    "rel_tol below": (dict(rel_tol=0.125), 2.0, 1.75, 1.5),
    "at_least": (dict(at_least=True, abs_tol=0.25), 1.5, 1.25, 1.0),
    "at_most": (dict(at_most=True, abs_tol=0.25), 1.5, 1.75, 2.0),
}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("where,held", [("live", "reproduced live"),
                                        ("simulation", "reproduced in simulation")])
def test_moving_a_measurement_past_its_tolerance_changes_the_verdict(rule, where, held,
                                                                     tmp_path, monkeypatch):
    monkeypatch.setenv("PPDIT_CLAIMS_DIR", str(tmp_path))
    kwargs, expected, inside, past = RULES[rule]
    ok = claims.Check(rule, inside, expected, where, **kwargs)
    assert ok.holds() and "holds" in ok.describe()
    assert claims.record("bubble-gpipe", "x", checks=[ok]) == held
    bad = claims.Check(rule, past, expected, where, **kwargs)
    assert not bad.holds() and "outside" in bad.describe()
    assert claims.record("bubble-gpipe", "x", checks=[bad]) == "not reproduced"


@pytest.mark.parametrize("rule", RULES)
def test_a_stored_measurement_edited_past_its_tolerance_loses_its_verdict(rule, tmp_path,
                                                                          monkeypatch):
    """The ledger recomputes from the stored numbers: changing one in the file is enough."""
    monkeypatch.setenv("PPDIT_CLAIMS_DIR", str(tmp_path))
    kwargs, expected, inside, past = RULES[rule]
    sim = claims.Check("simulated", 0.5, 0.5, "simulation")
    live = claims.Check(rule, inside, expected, "live", **kwargs)
    assert claims.record("filling", "x", checks=[sim, live]) == "reproduced live"
    path = tmp_path / "filling.json"
    rec = json.loads(path.read_text())
    assert claims.recorded_verdict(rec) == rec["verdict"] == "reproduced live"
    rec["checks"][1]["measured"] = past  # the live value moves; nothing else does
    path.write_text(json.dumps(rec))
    assert claims.recorded_verdict(rec) == "reproduced in simulation"
    assert "**reproduced in simulation**" in claims.ledger_markdown()
    rec["checks"][0]["measured"] = 0.75  # and now the simulation disagrees too
    assert claims.recorded_verdict(rec) == "not reproduced"


def _committed() -> list[Path]:
    return sorted(COMMITTED.glob("*.json"))


def test_every_ledger_claim_is_committed():
    names = {p.stem for p in _committed()}
    missing = sorted(c.claim_id for c in claims.CLAIMS if c.claim_id not in names)
    assert not missing, f"claims never recorded by their notebook: {missing}"


@pytest.mark.parametrize("path", _committed(), ids=lambda p: p.stem)
def test_every_committed_record_carries_checks_and_its_computed_verdict(path):
    rec = json.loads(path.read_text())
    assert rec["claim_id"] == path.stem
    if rec.get("reproducible_here", True):
        assert rec.get("checks"), (f"{path.name} has no checks: record it with "
                                   "checks=[Check(...)] so its verdict is computed")
    else:
        assert rec.get("why_not"), f"{path.name} is not reproducible here but says not why"
    assert "verdict" in rec, f"{path.name} stores no verdict: re-record it with record()"
    assert rec["verdict"] == claims.recorded_verdict(rec), (
        f"{path.name} says {rec['verdict']!r} but its checks give "
        f"{claims.recorded_verdict(rec)!r}")


def _printed_by_recording_cells(claim: claims.Claim) -> str:
    """What the committed notebook printed in the cells that record ``claim``."""
    book = json.loads((ROOT / "notebooks" / f"{claim.notebook}.ipynb").read_text())
    cells = [c for c in book["cells"] if c["cell_type"] == "code"
             and f'"{claim.claim_id}"' in "".join(c["source"])]
    assert cells, f"{claim.notebook} has no cell that records {claim.claim_id!r}"
    return "".join("".join(o.get("text", "")) for c in cells for o in c.get("outputs", []))


@pytest.mark.parametrize("claim", claims.CLAIMS, ids=lambda c: c.claim_id)
def test_a_committed_verdict_is_the_one_its_notebook_printed(claim):
    """The ledger file and the lesson's outputs come from the same run: a lesson re-executed
    without its record re-committed (or the other way round) would tell a learner one direction
    on the page and another in the ledger. The recording cell prints the verdict."""
    rec = json.loads((COMMITTED / f"{claim.claim_id}.json").read_text())
    printed = _printed_by_recording_cells(claim)
    assert rec["verdict"] in printed, (
        f"notebooks/claims/{claim.claim_id}.json says {rec['verdict']!r}, but the cell of "
        f"{claim.notebook} that records it printed: {printed.strip()[-300:]!r}. Re-execute the "
        "lesson and commit both, or print the verdict in the recording cell")
