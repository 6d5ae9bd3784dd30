"""nbval must pass whatever the machine: no output it compares may record the machine itself.

A cell whose output names this machine's device, backend or GPUs (a set-up check) starts with
``# NBVAL_IGNORE_OUTPUT``; everything nbval compares is a result that any machine reproduces.
This scans the committed outputs for the phrases ppdit prints when it describes a machine.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("[0-9]*.ipynb"))
MACHINE = re.compile(r"backend (gloo|nccl)|device (cpu|cuda)|cuda:\d|CUDA GPU present|"
                     r"CUDA available|would use: (gloo|nccl)|\d+ CPU cores|staged through",
                     re.IGNORECASE)


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
