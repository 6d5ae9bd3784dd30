"""nbval must pass whatever the machine: no output it compares may record the machine itself.

A cell whose output names this machine's device, backend or GPUs (a set-up check) starts with
``# NBVAL_IGNORE_OUTPUT``; everything nbval compares is a result that any machine reproduces.
This scans the committed outputs for the phrases ppdit prints when it describes a machine, and
for float residues: a difference such as ``7.2e-07`` is this CPU's rounding (another CPU's
kernels sum in another order and print ``6.0e-07``), so a compared cell prints the verdict
against a named tolerance instead (``ppdit.teaching.quote.agreement``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
MACHINE = re.compile(r"backend (gloo|nccl)|device (cpu|cuda)|cuda:\d|CUDA GPU present|"
                     r"CUDA available|would use: (gloo|nccl)|\d+ CPU cores|staged through",
                     re.IGNORECASE)
# Python's exponent format ("7.2e-07", "1.0e+00"): how a residue prints. Stated tolerances are
# written as literals ("1e-4", "rtol 1e-04" has no mantissa digits) and do not match.
RESIDUE = re.compile(r"\b\d\.\d+e[-+]\d{2,}\b")


def compared_outputs(path: Path) -> list[tuple[int, str]]:
    """(cell index, text) of every output nbval compares."""
    out = []
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        source = "".join(cell.get("source", ""))
        if cell["cell_type"] != "code" or "NBVAL_IGNORE_OUTPUT" in source or \
                "NBVAL_SKIP" in source:
            continue
        for o in cell.get("outputs", []):
            out.append((i, "".join(o.get("text", "")) +
                        "".join(o.get("data", {}).get("text/plain", ""))))
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_compared_outputs_record_no_machine_facts(path):
    hits = [(i, m.group(0)) for i, text in compared_outputs(path) for m in MACHINE.finditer(text)]
    assert hits == [], f"{path.name}: mark these cells NBVAL_IGNORE_OUTPUT: {hits}"


def test_the_scan_finds_a_machine_fact(tmp_path):
    nb = {"cells": [{"cell_type": "code", "source": ["print(placement)"],
                     "outputs": [{"text": "rank 0: device cuda, backend nccl"}]}]}
    (tmp_path / "x.ipynb").write_text(json.dumps(nb))
    assert compared_outputs(tmp_path / "x.ipynb") and \
        MACHINE.search(compared_outputs(tmp_path / "x.ipynb")[0][1])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_compared_outputs_print_no_float_residue(path):
    hits = [(i, m.group(0)) for i, text in compared_outputs(path) for m in RESIDUE.finditer(text)]
    assert hits == [], (f"{path.name}: print a verdict against a named tolerance "
                        f"(ppdit.teaching.quote.agreement), the residue in an ignored cell: {hits}")


def test_the_scan_finds_a_residue_and_spares_a_tolerance():
    assert RESIDUE.findall("cached vs full: max |diff| 7.2e-07; within 1e-4; rtol 1e-04") == \
        ["7.2e-07"]
    assert RESIDUE.findall("identical: True, max |diff| = 0.0e+00") == ["0.0e+00"]


def test_notebooks_name_the_kernel_as_ipykernel_does():
    """JupyterLab rewrites a differing kernel spec on open, and the notebook opens modified."""
    specs = {p.stem: json.loads(p.read_text())["metadata"]["kernelspec"]["display_name"]
             for p in NOTEBOOKS}
    assert set(specs.values()) == {"Python 3 (ipykernel)"}, specs


# A comparison in a lesson: of a rank's result with a reference computed in the kernel, or of
# two values computed in one place. On a GPU box the ranks may compute on CUDA (the learner's
# choice) while the kernel stays on the CPU, so the first kind computes its reference with
# ``ppdit.teaching.placement.on_ranks_device`` (on the ranks' kind of device; it refuses a result
# from another, as ``same_placement`` does; tests/book/test_lessons_on_gpu_ranks.py runs each)
# and the second says why both sides share a placement (``# one placement: ...``).
GATES = ("on_ranks_device(", "same_placement(", "# one placement:")
COMPARES = re.compile(r"torch\.equal\(|allclose\(|agreement\(|residue\(|\.abs\(\)\.max\(\)|"
                      r"max_abs_diff")


def unguarded_comparisons(path: Path) -> list[int]:
    """Indices of code cells that compare without the guard or the stated reason."""
    cells = json.loads(path.read_text())["cells"]
    return [i for i, c in enumerate(cells) if c["cell_type"] == "code"
            and COMPARES.search(src := "".join(c["source"]))
            and not any(gate in src for gate in GATES)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_comparison_is_within_one_placement(path):
    assert unguarded_comparisons(path) == [], (
        f"{path.name}: compute the kernel's reference with on_ranks_device(), or say "
        "`# one placement: <why>` where both sides were computed in one place")


def test_the_comparison_scan_finds_an_unguarded_check(tmp_path):
    nb = {"cells": [{"cell_type": "code", "source": ["torch.equal(res.latents[0], generate(m))"]},
                    {"cell_type": "code", "source": ["torch.equal(a, same_placement(b))"]},
                    {"cell_type": "code", "source": ["torch.equal(a, on_ranks_device(f))"]}]}
    (tmp_path / "x.ipynb").write_text(json.dumps(nb))
    assert unguarded_comparisons(tmp_path / "x.ipynb") == [0]


# How a number measured on a GPU is quoted: with its run's label (ppdit.analysis.gpu_runs).
GPU_QUOTE = re.compile(r"(NVIDIA H\d00|H\d00 80GB), torch ")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_first_output_says_where_the_ranks_compute(path):
    """...and where the lesson's numbers come from: a lesson that quotes GPU runs (05, 08, 09,
    10) must not open by giving every number to the CPU (issue 52)."""
    texts = ["".join(o.get("text", "")) for c in json.loads(path.read_text())["cells"]
             if c["cell_type"] == "code" for o in c.get("outputs", [])]
    assert texts and texts[0].startswith("Ranks compute on the CPU")
    if any(GPU_QUOTE.search(t) for t in texts[1:]):
        assert "live timing" in texts[0] and "gpu_runs/" in texts[0], texts[0]
